//! The engine's [`Effect`]s of one run, mapped onto the tables beside the history: task
//! offers to queue or cancel, the execution's timer row, inbox entries for other executions
//! (a child's end for its parent, a cancel for a child), workflow-level concurrency slots
//! to take or give up, and children to start after the commit. What an event causes is
//! decided by `orbit_engine::effects`, not here.

use orbit_definition::Definition;
use orbit_definition::OnLimit;
use orbit_engine::effects::Effect;
use orbit_engine::event::ParentRef;
use orbit_engine::{Status, TaskError};
use orbit_store::inbox::{Cancel, ChildClosed};
use orbit_store::slots::SlotOp;
use orbit_store::{InboxMessage, NewInbox, NewTask, NewTimer};
use serde_json::{json, Value};

/// The key of the one timer row an execution has: the next time its decider has work.
pub(crate) const TIMER_KEY: &str = "next";

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

/// Side-table rows for one run's batch.
#[derive(Debug, Default)]
pub(crate) struct Rows {
    pub tasks: Vec<NewTask>,
    pub cancel_units: Vec<String>,
    pub inbox: Vec<NewInbox>,
    pub children: Vec<ChildStart>,
    pub timers_to_upsert: Vec<NewTimer>,
    pub timers_to_delete: Vec<String>,
    pub slots: Vec<SlotOp>,
}

/// Maps one run's effects onto rows; children inherit the execution's `root_id`.
pub(crate) fn rows(effects: Vec<Effect>, root_id: &str) -> Rows {
    let mut rows = Rows::default();
    for effect in effects {
        match effect {
            // A built-in adapter's attempt goes to the queue under its task name: whoever
            // serves it runs it (`orbit dev --enable-http-step` starts a built-in worker for http).
            Effect::OfferTask(offer) | Effect::RunAdapter { offer, .. } => {
                rows.tasks.push(offer);
            }
            Effect::CancelUnit { unit } => rows.cancel_units.push(unit),
            Effect::StartChild { child_id, workflow, version, input, parent } => {
                rows.children.push(ChildStart {
                    child_id,
                    workflow,
                    version,
                    input,
                    parent,
                    root_id: root_id.to_string(),
                });
            }
            Effect::CancelChild { child_id, reason } => rows.inbox.push(cancel(child_id, &reason)),
            Effect::NotifyParent { parent, child_id, status, output, error } => {
                rows.inbox.push(child_closed(parent, &child_id, status, output, error));
            }
            Effect::SetTimer { at } => rows.timers_to_upsert.push(NewTimer {
                key: TIMER_KEY.into(),
                fire_at_ms: at,
                payload: json!({}),
            }),
            Effect::ClearTimer => rows.timers_to_delete.push(TIMER_KEY.into()),
            Effect::AcquireSlot { key, limit, on_limit } => {
                // The decider records only names it knows; an unknown one queues.
                let on_limit = OnLimit::parse(&on_limit).unwrap_or_default();
                rows.slots.push(SlotOp::Acquire { key, limit, on_limit });
            }
            Effect::ReleaseSlots { keys } => rows.slots.push(SlotOp::Release { keys }),
            // Each run is its own batch already (see `apply::batches_for`).
            Effect::ContinueAsNew { .. } => {}
        }
    }
    rows
}

/// The inbox entry asking a child to cancel.
fn cancel(child_id: String, reason: &str) -> NewInbox {
    let message = InboxMessage::Cancel(Cancel { reason: reason.to_string(), request_id: None });
    NewInbox { execution_id: child_id, message }
}

/// The inbox entry telling a parent its child closed.
fn child_closed(
    parent: ParentRef,
    child_id: &str,
    status: Status,
    output: Option<Value>,
    error: Option<TaskError>,
) -> NewInbox {
    let message = InboxMessage::ChildClosed(ChildClosed {
        step: parent.step,
        child_id: child_id.to_string(),
        status,
        output,
        error,
    });
    NewInbox { execution_id: parent.execution_id, message }
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
