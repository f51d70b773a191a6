//! What a run's new events mean for the tables beside the history: task offers to queue or
//! cancel, the execution's timer, inbox entries for other executions (a child's end for its
//! parent, a cancel for a child), and children to start after the commit.

use orbit_definition::{Definition, StepKind};
use orbit_engine::event::{Event, HistoryEvent, ParentRef};
use orbit_engine::state::{State, Wait};
use orbit_engine::unit::UnitKey;
use orbit_store::inbox::{Cancel, ChildClosed};
use orbit_store::{InboxMessage, NewInbox, NewTask, NewTimer};
use serde_json::{json, Value};

/// The key of the one timer row an execution has: the next time its decider has work.
pub(crate) const TIMER_KEY: &str = "next";

/// Task name and version used for built-in HTTP steps (run by the server, off by default).
pub(crate) const HTTP_TASK: &str = "orbit.http";

/// The server's retention of finished executions unless configured: 7 days.
pub const DEFAULT_RETENTION_MS: u64 = 7 * 24 * 3_600_000;

/// When a run in `status`, written at `now`, may be deleted: the workflow's `retention`
/// (else the server's) after it closes; `None` while it is open (or continued as new: the
/// execution goes on in the next run).
pub(crate) fn delete_after(
    def: &Definition,
    status: orbit_engine::Status,
    now: u64,
    server_retention_ms: u64,
) -> Option<u64> {
    (status.is_closed() && status != orbit_engine::Status::ContinuedAsNew)
        // Stored as a signed 64-bit column: an absurd retention means "never", not an error.
        .then(|| {
            now.saturating_add(def.retention_ms.unwrap_or(server_retention_ms))
                .min(i64::MAX.unsigned_abs())
        })
}

/// A child execution to start once the parent's commit is durable.
#[derive(Debug, Clone)]
pub(crate) struct ChildStart {
    pub child_id: String,
    pub workflow: String,
    pub version: Option<String>,
    pub input: Value,
    pub parent: ParentRef,
    pub root_id: String,
}

/// Side tables for one run's batch.
#[derive(Debug, Default)]
pub(crate) struct Effects {
    pub tasks: Vec<NewTask>,
    pub cancel_units: Vec<String>,
    pub inbox: Vec<NewInbox>,
    pub children: Vec<ChildStart>,
}

/// The task name and version of a unit.
pub(crate) fn task_of(def: &Definition, unit: &str) -> Option<(String, String)> {
    let key = UnitKey::parse(unit)?;
    let step = def.body(&key.scope.body()).iter().find(|s| s.id == key.step)?;
    let name = if key.compensate {
        step.compensate.as_ref()?.task.clone()
    } else {
        match &step.kind {
            StepKind::Task { task } => task.clone(),
            StepKind::Http { .. } => return Some((HTTP_TASK.into(), "1".into())),
            _ => return None,
        }
    };
    let version = def.tasks.get(&name).map_or_else(|| "1".to_string(), |c| c.version.clone());
    Some((name, version))
}

/// Derives the effects of `events` (already applied to `state`).
pub(crate) fn derive(
    def: &Definition,
    state: &State,
    events: &[HistoryEvent],
    root_id: &str,
) -> Effects {
    let mut fx = Effects::default();
    for he in events {
        match &he.event {
            Event::StepScheduled { step, attempt, input, idempotency_key, .. } => {
                // HTTP offers never reach the queue: the owner refuses them at once.
                if let Some((task, task_version)) =
                    task_of(def, step).filter(|(t, _)| t != HTTP_TASK)
                {
                    let offer = state.unit(step).map_or(0, |u| u.tokens.len()) + 1;
                    fx.tasks.push(NewTask {
                        unit_key: step.clone(),
                        attempt: *attempt,
                        offer: u32::try_from(offer).unwrap_or(u32::MAX),
                        task,
                        task_version,
                        input: input.clone(),
                        idempotency_key: idempotency_key.clone(),
                    });
                }
            }
            Event::StepCancelled { step } => {
                fx.cancel_units.push(step.clone());
                if let Some(Wait::Child(child)) = state.unit(step).and_then(|u| u.wait.clone()) {
                    let reason = "the parent is winding down".into();
                    let message = InboxMessage::Cancel(Cancel { reason, request_id: None });
                    fx.inbox.push(NewInbox { execution_id: child, message });
                }
            }
            Event::StepSucceeded { step, .. }
            | Event::StepFailed { step, .. }
            | Event::StepAttemptFailed { step, .. }
            | Event::StepAttemptUncertain { step, .. } => fx.cancel_units.push(step.clone()),
            Event::ChildStarted { step, child_id, workflow, version, input } => {
                fx.children.push(ChildStart {
                    child_id: child_id.clone(),
                    workflow: workflow.clone(),
                    version: version.clone(),
                    input: input.clone(),
                    parent: ParentRef {
                        execution_id: state.execution_id.clone(),
                        step: step.clone(),
                    },
                    root_id: root_id.to_string(),
                })
            }
            _ => {}
        }
    }
    // Cancelling a unit's rows must not cancel the offer queued for it in the same batch: the
    // store cancels first, then queues; but a unit resolved in this batch keeps no offer.
    fx.cancel_units.sort();
    fx.cancel_units.dedup();
    let status = state.status();
    if status.is_closed() && status != orbit_engine::Status::ContinuedAsNew {
        if let Some(parent) = &state.parent {
            let message = InboxMessage::ChildClosed(ChildClosed {
                step: parent.step.clone(),
                child_id: state.execution_id.clone(),
                status,
                output: state.output.clone(),
                error: state.error.clone(),
            });
            fx.inbox.push(NewInbox { execution_id: parent.execution_id.clone(), message });
        }
    }
    fx
}

/// The timer row change for a run whose next wake-up moved from `before` to `after`
/// (`before = None` when unknown, e.g. after a rebuild).
pub(crate) fn timer_change(
    before: Option<Option<u64>>,
    after: Option<u64>,
) -> (Vec<NewTimer>, Vec<String>) {
    if before == Some(after) {
        return (Vec::new(), Vec::new());
    }
    match after {
        Some(at) => (
            vec![NewTimer { key: TIMER_KEY.into(), fire_at_ms: at, payload: json!({}) }],
            Vec::new(),
        ),
        None => (Vec::new(), vec![TIMER_KEY.into()]),
    }
}

#[cfg(test)]
mod tests {
    use super::{delete_after, DEFAULT_RETENTION_MS};
    use orbit_engine::Status;

    fn def(extra: &str) -> orbit_definition::Definition {
        let doc = format!(
            "name: r\nversion: \"1\"\n{extra}tasks: {{ t: {{}} }}\nsteps:\n  - {{ id: a, task: t }}\n"
        );
        orbit_definition::parse(&doc).expect("valid definition")
    }

    #[test]
    fn a_closed_run_is_deletable_after_the_workflows_retention_or_the_servers() {
        let (plain, own) = (def(""), def("retention: 30s\n"));
        assert_eq!(delete_after(&plain, Status::Completed, 1_000, 5_000), Some(6_000));
        assert_eq!(delete_after(&own, Status::Failed, 1_000, 5_000), Some(31_000));
        assert_eq!(
            delete_after(&own, Status::Cancelled, 1_000, DEFAULT_RETENTION_MS),
            Some(31_000)
        );
        for open in [Status::Running, Status::Compensating, Status::ContinuedAsNew] {
            assert_eq!(delete_after(&plain, open, 1_000, 5_000), None, "{open:?}");
        }
        let never = delete_after(&plain, Status::TimedOut, u64::MAX - 1, u64::MAX);
        assert_eq!(never, Some(i64::MAX.unsigned_abs()), "stored as a signed column");
    }
}
