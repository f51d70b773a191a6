//! Building a pass's commit: the engine's runs of one execution as store batches
//! ([`batches_for`]), and what they say about lost attempts (for the metrics).

use crate::effects::{self, ChildStart};
use crate::work::Work;
use orbit_engine::event::Event;
use orbit_engine::run::Run;
use orbit_store::{CommitBatch, NewOwner, ProjectionUpdate};

/// The commit batches of one execution (one per run touched, oldest first), the children
/// to start after the commit, and whether tasks or timers changed. A closing run records
/// when retention deletes it (`retention_ms` unless the workflow sets its own).
pub(crate) fn batches_for(
    node_id: &str,
    retention_ms: u64,
    id: &str,
    w: &mut Work,
    runs: Vec<Run>,
    now: u64,
) -> (Vec<CommitBatch>, Vec<ChildStart>, bool, bool) {
    let mut batches = Vec::new();
    let mut children = Vec::new();
    let (mut tasks, mut timers) = (false, false);
    for (i, run) in runs.into_iter().enumerate() {
        let mut rows = effects::rows(run.effects, &w.hot.root_id);
        if i == 0 {
            rows.cancel_units.retain(|u| !w.settled_units.contains(u));
        }
        tasks |= !rows.tasks.is_empty();
        timers |= !rows.timers_to_upsert.is_empty() || !rows.timers_to_delete.is_empty();
        children.append(&mut rows.children);
        let closed = run.status.is_closed();
        let (failed_step, error_code) = failure(run.status, &run.events, &w.hot.state);
        batches.push(CommitBatch {
            execution_id: id.to_string(),
            run: run.run,
            expected_epoch: if w.new_execution.is_some() { None } else { w.hot.epoch },
            new_execution: if i == 0 { w.new_execution.clone() } else { None },
            new_owner: (i == 0 && w.new_execution.is_some())
                .then(|| NewOwner { root_id: w.hot.root_id.clone(), node_id: node_id.to_string() }),
            events: run.events,
            projection: Some(ProjectionUpdate {
                status: run.status,
                updated_at_ms: now,
                closed_at_ms: closed.then_some(now),
                delete_after_ms: effects::delete_after(&w.hot.def, run.status, now, retention_ms),
                failed_step,
                error_code,
            }),
            tasks_to_insert: rows.tasks,
            task_claims: Vec::new(),
            units_to_cancel: rows.cancel_units,
            inbox_to_insert: rows.inbox,
            timers_to_upsert: rows.timers_to_upsert,
            timers_to_delete: rows.timers_to_delete,
            inbox_done: if i == 0 { std::mem::take(&mut w.inbox_done) } else { Vec::new() },
            tasks_done: if i == 0 { std::mem::take(&mut w.tasks_done) } else { Vec::new() },
            definition: None,
            slots: rows.slots,
            versions_seen: if i == 0 { w.versions_seen } else { None },
            // Set before the commit when the hand-off carries the changes (`handoff`).
            changes_sent: false,
        });
    }
    (batches, children, tasks, timers)
}

/// The projection's `failed_step` and `error_code` of a run that ends FAILED or TIMED_OUT
/// (`None` for any other status, which clears them): the step whose failure began the
/// wind-down (`state.winding`, the pass's state: a failed run is the pass's last), and the
/// code of the error it ended with — its `WorkflowFailed` in this pass, else the winding's.
fn failure(
    status: orbit_engine::Status,
    events: &[orbit_engine::HistoryEvent],
    state: &orbit_engine::State,
) -> (Option<String>, Option<String>) {
    use orbit_engine::Status;
    if !matches!(status, Status::Failed | Status::TimedOut) {
        return (None, None);
    }
    let ended = events.iter().rev().find_map(|e| match &e.event {
        Event::WorkflowFailed { error, .. } => Some(error.code.clone()),
        _ => None,
    });
    let winding = state.winding.as_ref();
    (winding.and_then(|w| w.step.clone()), ended.or_else(|| winding.map(|w| w.error.code.clone())))
}

/// The attempts whose worker went silent in these batches, by execution and reason (for
/// `orbit_attempts_lost_total`).
pub(crate) fn lost_attempts(batches: &[CommitBatch]) -> Vec<(String, &'static str)> {
    use orbit_engine::command::HEARTBEAT_TIMEOUT;
    use orbit_engine::decide::WORKER_LOST;
    let mut lost = Vec::new();
    for b in batches {
        for he in &b.events {
            let reason = match &he.event {
                Event::StepAttemptUncertain { .. } => "SESSION_LOST",
                Event::StepAttemptFailed { error, .. } if error.code == HEARTBEAT_TIMEOUT => {
                    HEARTBEAT_TIMEOUT
                }
                Event::StepAttemptFailed { error, .. } if error.code == WORKER_LOST => WORKER_LOST,
                _ => continue,
            };
            lost.push((b.execution_id.clone(), reason));
        }
    }
    lost
}
