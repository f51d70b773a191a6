//! [`CommitBatch`]: everything an owner writes for one decision, applied in ONE transaction.
//!
//! Invariants every backend enforces (a violation rolls the whole batch back):
//! * fencing first: with `expected_epoch = Some(e)` the owners row must exist with epoch `e`,
//!   else [`StoreError::Fenced`](crate::StoreError::Fenced);
//! * `new_execution` inserts the projection; a taken id is
//!   [`StoreError::ExecutionExists`](crate::StoreError::ExecutionExists);
//! * with `versions_seen = Some(n)` (a start that took its workflow's latest version from a
//!   list of `n` registered versions) the workflow of `new_execution` must have `n`
//!   versions, else [`StoreError::DefinitionChanged`](crate::StoreError::DefinitionChanged),
//!   checked before the id;
//! * events are contiguous: the first has seq `last_seq + 1` of the run (1 for a new run),
//!   each next one +1, else [`StoreError::Conflict`](crate::StoreError::Conflict);
//! * every inbox seq in `inbox_done` must be a pending entry of this execution, so an entry is
//!   applied at most once.

use crate::error::{Result, StoreError};
use crate::handoff::TaskClaim;
use crate::model::{ExecutionRow, NewTask, NewTimer, TaskRow};
use orbit_definition::OnLimit;
use orbit_engine::HistoryEvent;

/// Projection fields a commit changes. `last_seq` follows the appended events by itself.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProjectionUpdate {
    /// New status.
    pub status: orbit_engine::Status,
    /// Update time, epoch milliseconds.
    pub updated_at_ms: u64,
    /// Set when the execution becomes terminal.
    pub closed_at_ms: Option<u64>,
    /// When a terminal execution may be deleted (its retention after closing); `None` while
    /// it is open. Written with every projection change.
    pub delete_after_ms: Option<u64>,
    /// The step whose failure failed the run (status `FAILED` or `TIMED_OUT` only; the
    /// column is cleared by a projection of any other status, kept when a later commit of
    /// the closed run passes `None`).
    pub failed_step: Option<String>,
    /// The code of the error the run ended with; as `failed_step`.
    pub error_code: Option<String>,
}

/// The definition an execution runs from this commit on (a migration, see
/// `orbit_engine::migrate`): the projection's `version` and `definition_hash` move with the
/// `DefinitionMigrated` event the batch carries.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DefinitionChange {
    /// The workflow version migrated to.
    pub version: String,
    /// Its definition hash.
    pub definition_hash: String,
}

/// An owners row to create with the commit (the start of a root or child execution).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NewOwner {
    /// Root of the execution's tree.
    pub root_id: String,
    /// The node that will own it, at epoch 1.
    pub node_id: String,
}

/// One inbox entry consumed by the commit.
#[derive(Debug, Clone, PartialEq)]
pub struct InboxDone {
    /// The entry's seq.
    pub seq: u64,
    /// The reply for a caller that waits, if any.
    pub result: Option<crate::InboxReply>,
}

/// One atomic write for one execution run. See the module docs for the invariants.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct CommitBatch {
    /// The execution written.
    pub execution_id: String,
    /// The run the events belong to. A run greater than the projection's starts a new run
    /// (continue-as-new): its events start at seq 1 and the projection moves to it.
    pub run: u32,
    /// The fence: the epoch this writer holds, checked against the owners row. `None` skips
    /// the check: for the commit that creates the execution (its `new_owner` row starts at
    /// epoch 1) and for an execution the owner loaded without an owners row (released by
    /// retention after it closed). `orbit dev` fences like the split (its node id is `dev`).
    pub expected_epoch: Option<u64>,
    /// Create the projection row (first commit of an execution).
    pub new_execution: Option<ExecutionRow>,
    /// Create the owners row at epoch 1 (first commit of an execution that is owned).
    pub new_owner: Option<NewOwner>,
    /// Events to append to the run's history.
    pub events: Vec<HistoryEvent>,
    /// Projection changes.
    pub projection: Option<ProjectionUpdate>,
    /// Task offers to queue.
    pub tasks_to_insert: Vec<NewTask>,
    /// Offers of `tasks_to_insert` queued already claimed for a worker session (task
    /// hand-off, see [`handoff`](crate::handoff)): each row is inserted `claimed`, as
    /// `claim_tasks` would record it; `events` carry the claim's `StepDispatched` (no
    /// `dispatched` entry is written). A claimed offer already queued fails the commit.
    pub task_claims: Vec<TaskClaim>,
    /// Units of this execution whose task rows (queued or claimed) are cancelled.
    pub units_to_cancel: Vec<String>,
    /// Inbox entries to write for other executions (a child's end for its parent).
    pub inbox_to_insert: Vec<NewInbox>,
    /// Timers to create or move.
    pub timers_to_upsert: Vec<NewTimer>,
    /// Timer keys to delete (missing keys are ignored: the timer may have fired).
    pub timers_to_delete: Vec<String>,
    /// Inbox entries this commit applied.
    pub inbox_done: Vec<InboxDone>,
    /// Tokens of task results this commit applied without an inbox entry (handed to the
    /// owner directly by the frontend, issue 14): their rows of this execution go from
    /// `claimed` to `done` in the same transaction as the events. A row no longer claimed
    /// (a result that also took the inbox route, released claims) is left as it is; the
    /// owner's state decides whether a result counts, not the row.
    pub tasks_done: Vec<String>,
    /// The execution's definition changes (a migration): its projection row names the new
    /// version and hash. `None` for every other commit.
    pub definition: Option<DefinitionChange>,
    /// Workflow-level concurrency slots to take or give up (issue 27, [`crate::slots`]);
    /// empty for every workflow that declares none, which then reads and writes nothing
    /// more.
    pub slots: Vec<SlotOp>,
    /// With `new_execution`: its version is the latest of this many registered versions of
    /// its workflow (a frontend's cached list, issue 25), so the commit checks that none was
    /// registered since and fails with
    /// [`StoreError::DefinitionChanged`](crate::StoreError::DefinitionChanged) otherwise.
    /// Versions are never deleted, so the count tells. `None`: no check (a named version,
    /// or one read by the writer itself).
    pub versions_seen: Option<u32>,
    /// The owner sends what this batch changes to the frontends itself, right after the
    /// commit ([`Handoff::changed`](crate::Handoff::changed)): the commit sends no
    /// `orbit_changes` notification for it. Only an owner whose hand-off reaches every live
    /// frontend sets it ([`Handoff::carries_changes`](crate::Handoff::carries_changes)).
    pub changes_sent: bool,
}

/// What a successful commit produced.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct CommitOutcome {
    /// Seq of the last event of the run after the commit.
    pub last_seq: u64,
    /// Ids of the task rows inserted (offers already present are skipped).
    pub task_ids: Vec<u64>,
    /// The rows `task_claims` recorded claimed, as `claim_tasks` returns them.
    pub claimed: Vec<TaskRow>,
}

/// An inbox entry written by a commit, for any execution.
#[derive(Debug, Clone, PartialEq)]
pub struct NewInbox {
    /// The execution whose owner consumes it.
    pub execution_id: String,
    /// The message.
    pub message: crate::InboxMessage,
}

impl CommitBatch {
    /// Whether readers hear of this batch (`orbit_changes`, or the owner's own
    /// [`Handoff::changed`](crate::Handoff::changed)): it appends events, applies inbox
    /// entries or cancels task units.
    #[must_use]
    pub fn notifies_change(&self) -> bool {
        !self.events.is_empty() || !self.inbox_done.is_empty() || !self.units_to_cancel.is_empty()
    }

    /// Whether every kind of reader may need to hear of this batch, not only one that
    /// follows the whole history: it closes its run or begins a later one (result watches,
    /// supervisors), applies inbox entries (reply waiters) or cancels a unit for another
    /// reason than an attempt's outcome recorded with it (a cancelled or migrated step:
    /// supervisors). A batch that appends a step's progress concerns whole-history watches
    /// and update waits; the unit it withdraws with a recorded outcome has no other row
    /// unless an attempt was redelivered, whose supervisor then finds its row cancelled at
    /// its next look.
    #[must_use]
    pub fn concerns_every_reader(&self) -> bool {
        use orbit_engine::Event;
        let closes = self.events.iter().any(|e| e.event.is_terminal())
            || self.projection.as_ref().is_some_and(|p| p.status.is_closed());
        let later_run = self.run > 1 && self.events.first().is_some_and(|e| e.seq == 1);
        let outcome_of = |unit: &str| {
            self.events.iter().any(|e| match &e.event {
                Event::StepSucceeded { step, .. }
                | Event::StepFailed { step, .. }
                | Event::StepFailureCaught { step, .. }
                | Event::StepFailureBranched { step, .. }
                | Event::StepAttemptFailed { step, .. }
                | Event::StepAttemptUncertain { step, .. } => step == unit,
                _ => false,
            })
        };
        let cancels = self.units_to_cancel.iter().any(|u| !outcome_of(u));
        closes || later_run || cancels || !self.inbox_done.is_empty()
    }

    /// Whether it queues a limited row (flow control, `crate::flow`), handed off or not.
    pub(crate) fn inserts_limited(&self) -> bool {
        self.tasks_to_insert
            .iter()
            .any(|t| t.flow.as_ref().is_some_and(orbit_engine::Flow::is_limited))
    }

    /// Checks that the batch's events continue the run's history, given the projection's
    /// run and last seq now; every backend applies this rule. Returns `(base, last)`: the
    /// seq before the first event (0 for a new run) and the run's last seq afterwards.
    ///
    /// # Errors
    /// [`StoreError::Conflict`] for an older run or a seq that does not follow.
    pub(crate) fn continuation(&self, current_run: u32, current_seq: u64) -> Result<(u64, u64)> {
        let id = self.execution_id.as_str();
        let base = match self.run.cmp(&current_run) {
            std::cmp::Ordering::Equal => current_seq,
            std::cmp::Ordering::Greater => 0,
            std::cmp::Ordering::Less => {
                return Err(StoreError::Conflict(format!(
                    "execution {id} is at run {current_run}; run {} is over",
                    self.run
                )))
            }
        };
        let mut last = base;
        for ev in &self.events {
            if ev.seq != last + 1 {
                return Err(StoreError::Conflict(format!(
                    "execution {id} run {}: event seq {} does not follow {last}",
                    self.run, ev.seq
                )));
            }
            last = ev.seq;
        }
        Ok((base, last))
    }
}

/// What one batch asks of the slot table for its execution.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SlotOp {
    /// Take a slot of `key`, or wait for one, or cancel, as `on_limit` says.
    Acquire {
        /// The scoped key.
        key: String,
        /// Most holders at once.
        limit: u32,
        /// What to do when the key is full.
        on_limit: OnLimit,
    },
    /// The execution closed: leave these keys (held or waited for).
    Release {
        /// The scoped keys.
        keys: Vec<String>,
    },
}
