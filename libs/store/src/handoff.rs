//! Task hand-off (issue 14): the owner queues a new task already claimed for a live worker
//! session it knows of, in the SAME commit that queues it, and then hands the task to that
//! session directly — no claim transaction and no "tasks ready" wake-up on a step's
//! critical path.
//!
//! The commit records what `claim_tasks` would have: the row `claimed` for the session's
//! worker under a fresh token, and the `dispatched` inbox entry the owner applies like any
//! claim's. So everything downstream (`StepDispatched`, results, supervision, lost
//! sessions, the claim sweep) is unchanged. A hand-off that cannot be delivered (the
//! session ended, the commit failed) is a lost claim: the frontend reports the attempt
//! uncertain at once and the engine redelivers it with the same idempotency key, which
//! at-least-once allows.

use crate::model::{NewTask, TaskRow};
use std::time::Duration;

/// How long a claim's `dispatched` entry may wait to be applied: a step's result that comes
/// back sooner is applied together with it, in one commit. Applying it at once put a second
/// pass and commit between a fast worker's result and its step's commit. The attempt's
/// deadline in `StepDispatched` is taken when the entry is applied, so it may be this much
/// later than the worker's. The owner waits this long for the tasks it handed off
/// (`orbit_owner::handoff`); the frontend of `orbit dev` before waking the owner for the
/// tasks its sessions claimed (`worker::session::deliver`).
pub const DISPATCHED_APPLY_DELAY: Duration = Duration::from_millis(50);

/// A claim to record with the commit that queues its task: the row is inserted `claimed`
/// for `worker_id` under `token`, with a `dispatched` inbox entry, as `claim_tasks` does.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TaskClaim {
    /// The offer claimed: its unit key, attempt and offer number in the same batch's
    /// `tasks_to_insert` (an offer already queued before is not claimed).
    pub unit: String,
    /// Attempt number of the offer.
    pub attempt: u32,
    /// Offer number of the offer.
    pub offer: u32,
    /// The frontend node holding the session (the row's `claimed_by`).
    pub claimer: String,
    /// The worker session the task is handed to.
    pub session: String,
    /// The session's worker id: only it may report a result for the token.
    pub worker_id: String,
    /// The claim's token (a fresh [`new_task_token`](crate::new_task_token)).
    pub token: String,
}

/// Where an owner hands tasks straight to worker sessions: the frontend of the same process
/// in `orbit dev`. Called by the owner's pass; both methods must be quick and must not
/// block (no IO: delivery happens on a task of the implementation's own).
pub trait Handoff: Send + Sync {
    /// A live session of this process that serves `task` and has a free credit, with the
    /// credit taken for it; `None` when there is none (the task is queued as usual).
    fn reserve(&self, execution_id: &str, task: &NewTask) -> Option<TaskClaim>;

    /// The run of an execution `reserve` just reserved a task of: its workflow, version
    /// and definition hash, which a hand-off across processes sends with each task so the
    /// frontend needs no read of the execution to describe it. Ignored by default (in one
    /// process the frontend reads its own caches).
    fn describe(&self, _execution_id: &str, _workflow: &str, _version: &str, _hash: &str) {}

    /// After the commit: `claimed` are the rows it recorded claimed (to deliver to their
    /// sessions); `unused` the reservations it did not record (the commit failed, or the
    /// offer was queued before), whose credits are given back.
    fn settle(&self, claimed: Vec<TaskRow>, unused: Vec<TaskClaim>);
}
