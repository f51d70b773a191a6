//! A folded run → `orbit.v1.ExecutionDescription`: units, pending work and result.
//!
//! Only what the history says is reported: a dispatched attempt's `worker_id` is the one
//! its `StepDispatched` recorded (the worker's `Hello.worker_id`); the state does not know
//! when a worker last heartbeated, so `last_heartbeat_at` stays empty. A pending task's
//! priority and keys are those recorded with its attempt (issue 27).
//! Units are listed in the order they were (last) scheduled, units never scheduled (sleep,
//! await, child, skipped) by key after them; the state keeps no first-scheduled order.

use crate::info::run_error;
use crate::status::unit_status;
use crate::task::{opt_value, task_error, task_name, task_timeouts};
use orbit_api::v1 as wire;
use orbit_definition::{Definition, StepKind};
use orbit_engine::flow::{Flow, DEFAULT_PRIORITY};
use orbit_engine::state::Wait;
use orbit_engine::unit::UnitKey;
use orbit_engine::{State, Status, UnitStatus};
use orbit_server_kit::payload::{ms_to_timestamp, opt_ms_to_timestamp};
use std::collections::HashMap;

/// Describes one run. `info` is its summary (see [`crate::execution_info`] and
/// [`crate::info_from_state`]).
#[must_use]
pub fn describe(
    def: &Definition,
    state: &State,
    info: wire::ExecutionInfo,
) -> wire::ExecutionDescription {
    let pending = pending_work(def, state);
    let mut description = wire::ExecutionDescription {
        info: Some(info),
        units: unit_summaries(def, state),
        pending_tasks: pending.tasks,
        pending_timers: pending.timers,
        pending_awaits: pending.awaits,
        pending_children: pending.children,
        buffered_signals: buffered_signals(state),
        output: if state.status() == Status::Completed {
            opt_value(state.output.as_ref())
        } else {
            None
        },
        error: run_error(state).as_ref().map(task_error),
        // Parking is projection-level: the caller that read the fault row fills it in.
        suspension: None,
        waiting_for_slot: waiting_for_slot(state),
    };
    fit_message(&mut description);
    description
}

/// The workflow-level concurrency key an open run that has not started (or a restored run
/// that has not its slots again) waits for (the one it asked for last without its grant);
/// empty otherwise.
fn waiting_for_slot(state: &State) -> String {
    if (state.started_at.is_some() && !state.slots_again) || state.status().is_closed() {
        return String::new();
    }
    state.slots.iter().find(|(_, held)| !**held).map(|(k, _)| k.clone()).unwrap_or_default()
}

/// Leaves room for the response around the description and its status trailers.
const MAX_DESCRIPTION_BYTES: usize =
    orbit_server_kit::server::DEFAULT_MAX_MESSAGE_BYTES - 64 * 1024;

/// Each payload is within the read limit, but many failed units with large details can
/// still add up past a message: then the units' error details (the run's own error and
/// output stay) are replaced by truncation markers, largest first, until it fits.
fn fit_message(description: &mut wire::ExecutionDescription) {
    use prost::Message as _;
    let mut size = description.encoded_len();
    if size <= MAX_DESCRIPTION_BYTES {
        return;
    }
    let mut by_size: Vec<(usize, usize)> = description
        .units
        .iter()
        .enumerate()
        .filter_map(|(i, u)| Some((u.last_error.as_ref()?.details.as_ref()?.encoded_len(), i)))
        .collect();
    by_size.sort_unstable_by(|a, b| b.cmp(a));
    for (len, i) in by_size {
        if size <= MAX_DESCRIPTION_BYTES {
            break;
        }
        if let Some(error) = description.units[i].last_error.as_mut() {
            let marker = orbit_server_kit::payload::json_to_proto(serde_json::json!({
                orbit_server_kit::payload::TRUNCATED_KEY: { "bytes": len, "depth": null }
            }));
            size = size.saturating_sub(len).saturating_add(marker.encoded_len());
            error.details = Some(marker);
        }
    }
}

/// Every unit of the run, scheduled ones first in scheduling order.
#[must_use]
pub fn unit_summaries(def: &Definition, state: &State) -> Vec<wire::UnitSummary> {
    let mut units: Vec<_> = state.units.iter().collect();
    // Stable: equal keys (unscheduled units) keep the map's key order.
    units.sort_by_key(|(_, u)| u.scheduled_at.unwrap_or(u64::MAX));
    units
        .into_iter()
        .map(|(key, u)| wire::UnitSummary {
            key: key.clone(),
            step: UnitKey::parse(key).map(|k| k.step).unwrap_or_default(),
            status: unit_status(u.status).into(),
            attempt: u.attempt,
            redelivery: u.redelivery,
            idempotency_key: u.idempotency_key.clone().unwrap_or_default(),
            task: task_name(def, key).unwrap_or_default(),
            last_error: u.error.as_ref().map(task_error),
            updated_at: opt_ms_to_timestamp(u.scheduled_at),
        })
        .collect()
}

/// The run's pending work, by kind.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct PendingWork {
    /// Queued or dispatched task attempts.
    pub tasks: Vec<wire::PendingTask>,
    /// Timers not yet fired.
    pub timers: Vec<wire::PendingTimer>,
    /// `await` units waiting for a signal.
    pub awaits: Vec<wire::PendingAwait>,
    /// Unfinished child executions.
    pub children: Vec<wire::PendingChild>,
}

/// Collects the pending work of an open run (nothing for a closed one).
#[must_use]
pub fn pending_work(def: &Definition, state: &State) -> PendingWork {
    let mut out = PendingWork::default();
    if state.status.is_none() || state.status().is_closed() {
        return out;
    }
    for (key, u) in &state.units {
        let timeouts = task_timeouts(def, key);
        let timer = |kind: wire::TimerKind, at: u64| wire::PendingTimer {
            unit: key.clone(),
            kind: kind.into(),
            fire_at: Some(ms_to_timestamp(at)),
        };
        match u.status {
            UnitStatus::Scheduled | UnitStatus::Dispatched => {
                let queued = u.status == UnitStatus::Scheduled;
                let deadline = if queued {
                    u.scheduled_at.zip(timeouts.queue_ms).map(|(s, t)| s.saturating_add(t))
                } else {
                    u.deadline
                };
                if let Some(at) = deadline {
                    let kind = if queued {
                        wire::TimerKind::QueueTimeout
                    } else {
                        wire::TimerKind::AttemptTimeout
                    };
                    out.timers.push(timer(kind, at));
                }
                let name = task_name(def, key).unwrap_or_default();
                let version = def.tasks.get(&name).map(|t| t.version.clone()).unwrap_or_default();
                out.tasks.push(wire::PendingTask {
                    unit: key.clone(),
                    task: Some(wire::TaskRef { name, version }),
                    attempt: u.attempt,
                    state: if queued {
                        wire::PendingTaskState::Queued
                    } else {
                        wire::PendingTaskState::Dispatched
                    }
                    .into(),
                    token: u.token.clone().unwrap_or_default(),
                    // Set while dispatched only: a queued offer has no worker yet.
                    worker_id: if queued {
                        String::new()
                    } else {
                        u.worker_id.clone().unwrap_or_default()
                    },
                    scheduled_at: opt_ms_to_timestamp(u.scheduled_at),
                    deadline: deadline.map(ms_to_timestamp),
                    last_heartbeat_at: None,
                    // The flow recorded with the attempt's `StepScheduled` (issue 27);
                    // `waiting_on` is the queue's to say (the frontend fills it).
                    priority: u32::from(u.flow.as_ref().map_or(DEFAULT_PRIORITY, Flow::priority)),
                    concurrency_key: u
                        .flow
                        .as_ref()
                        .and_then(|f| f.concurrency.as_ref())
                        .map(|c| c.key.clone())
                        .unwrap_or_default(),
                    rate_limit_key: u
                        .flow
                        .as_ref()
                        .and_then(|f| f.rate.as_ref())
                        .map(|r| r.key.clone())
                        .unwrap_or_default(),
                    waiting_on: wire::FlowWait::Unspecified.into(),
                    labels: u
                        .flow
                        .as_ref()
                        .map(|f| f.labels.clone().into_iter().collect())
                        .unwrap_or_default(),
                    sticky_worker: u
                        .flow
                        .as_ref()
                        .and_then(|f| f.sticky.as_ref())
                        .map(|s| s.worker.clone())
                        .unwrap_or_default(),
                });
            }
            UnitStatus::RetryWait => {
                if let Some(at) = u.fire_at {
                    out.timers.push(timer(wire::TimerKind::Retry, at));
                }
            }
            UnitStatus::Waiting => match &u.wait {
                Some(Wait::Timer) => {
                    if let Some(at) = u.fire_at {
                        out.timers.push(timer(wire::TimerKind::Sleep, at));
                    }
                }
                Some(Wait::Signal { name, .. }) => {
                    if let Some(at) = u.fire_at {
                        out.timers.push(timer(wire::TimerKind::StepTimeout, at));
                    }
                    out.awaits.push(wire::PendingAwait {
                        unit: key.clone(),
                        signal: name.clone(),
                        timeout_at: opt_ms_to_timestamp(u.fire_at),
                    });
                }
                Some(Wait::Child(child)) => {
                    if let Some(at) = u.fire_at {
                        out.timers.push(timer(wire::TimerKind::StepTimeout, at));
                    }
                    let (workflow, version) = child_workflow(def, key);
                    out.children.push(wire::PendingChild {
                        unit: key.clone(),
                        child_execution_id: child.clone(),
                        workflow,
                        version,
                    });
                }
                Some(Wait::Elements | Wait::OnFailure) | None => {}
            },
            _ => {}
        }
    }
    if let (true, Some(timeout), Some(started)) =
        (state.winding.is_none(), def.timeout_ms, state.started_at)
    {
        out.timers.push(wire::PendingTimer {
            unit: String::new(),
            kind: wire::TimerKind::WorkflowTimeout.into(),
            fire_at: Some(ms_to_timestamp(started.saturating_add(timeout))),
        });
    }
    out.timers.sort_by_key(|t| t.fire_at.map(|f| (f.seconds, f.nanos)));
    out
}

fn child_workflow(def: &Definition, unit: &str) -> (String, String) {
    let step = UnitKey::parse(unit).and_then(|k| def.find_step(&k.scope.body(), &k.step).cloned());
    match step.map(|s| s.kind) {
        Some(StepKind::Workflow { workflow, version }) => (workflow, version.unwrap_or_default()),
        _ => (String::new(), String::new()),
    }
}

/// Signals received and not yet delivered, counted by name.
#[must_use]
pub fn buffered_signals(state: &State) -> HashMap<String, u32> {
    let mut counts = HashMap::new();
    for s in state.signals.iter().filter(|s| !s.delivered) {
        *counts.entry(s.name.clone()).or_insert(0u32) += 1;
    }
    counts
}

#[cfg(test)]
mod tests;
