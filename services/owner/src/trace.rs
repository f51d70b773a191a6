//! The owner's spans of an execution's trace (see `orbit_telemetry`): emitted after a
//! commit from the events it stored, with times taken from the history, so a restarted or
//! new owner continues the same trace.
//!
//! Per execution and pass: `owner.pass`; `start` for a new execution; per step attempt
//! `attempt <task>` (scheduled → result, the parent of the worker's task span) and its
//! `dispatch <task>` child (scheduled → in a worker's hands); `timer <step>`, `signal
//! <name>`, `cancel`; the root `workflow <name>` when the execution closes.
//!
//! Nothing here runs while traces are off or the execution is not sampled: `apply_set`
//! checks `orbit_telemetry::traced` before taking a [`Before`] snapshot, and without one
//! [`emit`] is never called.

use crate::context::Hot;
use opentelemetry::KeyValue;
use orbit_engine::event::{Event, HistoryEvent};
use orbit_engine::State;
use orbit_telemetry::{emit as export, SpanRef, SpanSpec};
use std::collections::BTreeMap;

/// What a span needs from before the pass: per unit, when its offer was scheduled and
/// when its timer was due.
#[derive(Debug, Default)]
pub(crate) struct Before {
    units: BTreeMap<String, (Option<u64>, Option<u64>)>,
}

impl Before {
    pub(crate) fn of(state: &State) -> Before {
        let units = state
            .units
            .iter()
            .filter(|(_, u)| u.scheduled_at.is_some() || u.fire_at.is_some())
            .map(|(k, u)| (k.clone(), (u.scheduled_at, u.fire_at)))
            .collect();
        Before { units }
    }
}

fn kv(key: &'static str, value: impl Into<opentelemetry::Value>) -> KeyValue {
    KeyValue::new(key, value)
}

/// Emits the spans of one execution's committed pass: `events` as stored, the pass began
/// at `pass_ms`, the commit ended at `end_ms`.
pub(crate) fn emit(
    id: &str,
    node: &str,
    hot: &Hot,
    before: &Before,
    events: &[HistoryEvent],
    pass_ms: u64,
    end_ms: u64,
) {
    let workflow = hot.state.workflow.clone();
    let cx = Cx { id, workflow: &workflow, hot, pass_ms, end_ms };
    let base = |step: &str, attempt: u32| cx.base(step, attempt);
    let span = |name: String, own, parent| cx.span(name, own, parent);
    export(SpanSpec {
        attributes: vec![
            kv("orbit.execution_id", id.to_string()),
            kv("orbit.workflow", workflow.clone()),
            kv("orbit.node", node.to_string()),
            kv("orbit.events", events.len() as i64),
        ],
        ..span("owner.pass".into(), None, SpanRef::Root)
    });
    // When each step's current offer was scheduled: before the pass, then as this pass's
    // own events move it. (A step scheduled again later in the same pass no longer shows
    // its earlier time in the state, hence the walk.)
    let mut scheduled: BTreeMap<&str, u64> =
        before.units.iter().filter_map(|(k, v)| Some((k.as_str(), v.0?))).collect();
    let mut worker: BTreeMap<&str, &str> = BTreeMap::new();
    for e in events {
        let ts = e.timestamp_ms;
        match &e.event {
            Event::WorkflowCreated { .. } => {
                export(SpanSpec { start_ms: ts, ..span("start".into(), None, SpanRef::Root) });
            }
            Event::StepScheduled { step, .. } => {
                scheduled.insert(step, ts);
            }
            Event::StepDispatched { step, attempt, worker_id, session, .. } => {
                worker.insert(step, worker_id);
                let (task, mut attributes) = base(step, *attempt);
                attributes.push(kv("orbit.worker", worker_id.clone()));
                attributes.push(kv("orbit.session", session.clone()));
                let parent = SpanRef::Attempt { step, attempt: *attempt };
                export(SpanSpec {
                    start_ms: scheduled.get(step.as_str()).copied().unwrap_or(ts),
                    end_ms: ts,
                    attributes,
                    ..span(format!("dispatch {task}"), None, parent)
                });
            }
            Event::StepSucceeded { step, attempt: Some(attempt), .. } => {
                attempt_span(&cx, &scheduled, &worker, step, *attempt, ts, None);
            }
            Event::StepAttemptFailed { step, attempt, error } => {
                let why = format!("{}: {}", error.code, error.message);
                attempt_span(&cx, &scheduled, &worker, step, *attempt, ts, Some(why));
            }
            Event::StepAttemptUncertain { step, attempt, reason } => {
                let (_, mut attributes) = base(step, *attempt);
                attributes.push(kv("orbit.reason", reason.clone()));
                let parent = SpanRef::Attempt { step, attempt: *attempt };
                export(SpanSpec {
                    start_ms: ts,
                    end_ms: ts,
                    attributes,
                    ..span("attempt uncertain".into(), None, parent)
                });
            }
            Event::TimerFired { step } => {
                let due = before.units.get(step).and_then(|u| u.1).unwrap_or(ts);
                let mut attributes = span(String::new(), None, SpanRef::Root).attributes;
                attributes.push(kv("orbit.step", step.clone()));
                attributes.push(kv("orbit.timer_lag_ms", ts.saturating_sub(due) as i64));
                export(SpanSpec {
                    start_ms: due.min(ts),
                    end_ms: ts,
                    attributes,
                    ..span(format!("timer {step}"), None, SpanRef::Root)
                });
            }
            Event::SignalReceived { name, .. } => {
                let mut s = span(format!("signal {name}"), None, SpanRef::Root);
                s.attributes.push(kv("orbit.signal", name.clone()));
                export(SpanSpec { start_ms: ts, end_ms: ts, ..s });
            }
            Event::CancelRequested { reason } => {
                let mut s = span("cancel".into(), None, SpanRef::Root);
                s.attributes.push(kv("orbit.reason", reason.clone()));
                export(SpanSpec { start_ms: ts, end_ms: ts, ..s });
            }
            Event::WorkflowCompleted { .. }
            | Event::WorkflowFailed { .. }
            | Event::WorkflowCancelled { .. }
            | Event::WorkflowTimedOut { .. } => {
                let status = format!("{:?}", hot.state.status());
                let mut s =
                    span(format!("workflow {workflow}"), Some(SpanRef::Root), SpanRef::Root);
                // A child's run hangs under its parent's in the root's trace.
                s.parent = hot.state.parent.as_ref().map(|p| SpanRef::Execution(&p.execution_id));
                s.attributes.push(kv("orbit.status", status));
                let error = (!matches!(e.event, Event::WorkflowCompleted { .. }))
                    .then(|| e.event.type_name().to_string());
                export(SpanSpec { start_ms: hot.state.created_at.min(ts), end_ms: ts, error, ..s });
            }
            _ => {}
        }
    }
}

/// The span of one step attempt, scheduled → result, with the id the worker's task span
/// names as its parent.
#[allow(clippy::too_many_arguments)]
fn attempt_span<'a>(
    cx: &Cx<'a>,
    scheduled: &BTreeMap<&str, u64>,
    worker: &BTreeMap<&str, &str>,
    step: &'a str,
    attempt: u32,
    ts: u64,
    error: Option<String>,
) {
    let (task, mut attributes) = cx.base(step, attempt);
    if let Some(w) = worker.get(step) {
        attributes.push(kv("orbit.worker", w.to_string()));
    }
    let me = SpanRef::Attempt { step, attempt };
    export(SpanSpec {
        start_ms: scheduled.get(step).copied().unwrap_or(ts).min(ts),
        end_ms: ts,
        attributes,
        error,
        ..cx.span(format!("attempt {task}"), Some(me), SpanRef::Root)
    });
}

/// What every span of one execution's pass shares.
struct Cx<'a> {
    id: &'a str,
    workflow: &'a str,
    hot: &'a Hot,
    pass_ms: u64,
    end_ms: u64,
}

impl<'a> Cx<'a> {
    /// A span of the pass (its times, the execution's attributes).
    fn span(&self, name: String, own: Option<SpanRef<'a>>, parent: SpanRef<'a>) -> SpanSpec<'a> {
        SpanSpec {
            execution_id: self.id,
            name,
            id: own,
            parent: Some(parent),
            start_ms: self.pass_ms,
            end_ms: self.end_ms,
            attributes: vec![
                kv("orbit.execution_id", self.id.to_string()),
                kv("orbit.workflow", self.workflow.to_string()),
            ],
            events: Vec::new(),
            error: None,
        }
    }

    /// The task a step runs and a step attempt's attributes.
    fn base(&self, step: &str, attempt: u32) -> (String, Vec<KeyValue>) {
        let task =
            orbit_engine::effects::task_of(&self.hot.def, step).map(|t| t.0).unwrap_or_default();
        let mut attributes = self.span(String::new(), None, SpanRef::Root).attributes;
        attributes.push(kv("orbit.step", step.to_string()));
        attributes.push(kv("orbit.attempt", i64::from(attempt)));
        attributes.push(kv("orbit.task", task.clone()));
        (task, attributes)
    }
}
