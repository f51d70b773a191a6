//! Task hand-off (issue 14; issue 25): the owner queues a new task already claimed for a
//! live worker session it knows of, in the SAME commit that queues it, records the
//! attempt's `StepDispatched` in that commit too, and then hands the task to that session
//! directly — no claim transaction, no "tasks ready" wake-up and no `dispatched` inbox
//! entry on a step's critical path.
//!
//! The commit records the row `claimed` for the session's worker under a fresh token, as
//! `claim_tasks` would, and the batch's events carry the `StepDispatched` of that token, as
//! the owner would have recorded from a claim's `dispatched` entry. So everything
//! downstream (results, supervision, timeouts, lost sessions, the claim sweep) is
//! unchanged. A claim whose offer was queued before (another token or none on the row)
//! fails the commit: the history must never name a token no row carries. A hand-off that
//! cannot be delivered (the session ended) is a lost claim: the frontend reports the
//! attempt uncertain at once and the engine redelivers it with the same idempotency key,
//! which at-least-once allows.

use crate::error::StoreError;
use crate::model::{NewTask, TaskRow};
use std::time::Duration;

/// How long a claim's `dispatched` entry (tasks a frontend claimed from the queue, not
/// handed off) may wait to be applied: a step's result that comes back sooner is applied
/// together with it, in one commit. The attempt's deadline in `StepDispatched` is taken
/// when the entry is applied, so it may be this much later than the worker's. The frontend
/// waits this long before waking the owner for the tasks its sessions claimed
/// (`worker::deliver`).
pub const DISPATCHED_APPLY_DELAY: Duration = Duration::from_millis(50);

/// The refusal of a commit whose claim names an offer that was queued before: nothing of
/// the commit is written.
pub(crate) fn queued_before(execution_id: &str, c: &TaskClaim) -> StoreError {
    StoreError::Conflict(format!(
        "the offer {}/{}/{} of execution {execution_id} handed off under a claim was queued \
         before",
        c.unit, c.attempt, c.offer
    ))
}

/// A claim to record with the commit that queues its task: the row is inserted `claimed`
/// for `worker_id` under `token`, as `claim_tasks` does; the batch's events carry its
/// `StepDispatched`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TaskClaim {
    /// The offer claimed: its unit key, attempt and offer number in the same batch's
    /// `tasks_to_insert` (an offer already queued before fails the commit).
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

    /// Whether this hand-off reaches every live frontend, so the owner sends them what its
    /// commits change itself ([`Handoff::changed`]) and the commits send no
    /// `orbit_changes` notification (`CommitBatch::changes_sent`). Asked before each commit
    /// of a pass. `false` by default: in one process the owner publishes to the frontend's
    /// hub directly.
    fn carries_changes(&self) -> bool {
        false
    }

    /// After a commit whose batches had `changes_sent`: what they changed, to send to the
    /// frontends. Must not block.
    fn changed(&self, _changes: Vec<SentChange>) {}
}

/// What one batch changed, sent by the owner itself ([`Handoff::changed`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SentChange {
    /// The execution.
    pub execution_id: String,
    /// Every reader may need it ([`CommitBatch::concerns_every_reader`](crate::CommitBatch::concerns_every_reader));
    /// otherwise only a whole-history reader does.
    pub everyone: bool,
    /// The `orbit_changes` payload ([`Change::encode`](crate::Change::encode)).
    pub payload: String,
}
