//! What the [`Retention`](crate::Retention) and [`Deletion`](crate::Deletion) methods report.
//!
//! Retention is three sweeps, each in bounded batches so none holds the writer (SQLite) or
//! many row locks (PostgreSQL) for long:
//! * applied rows: `done` inbox entries and `done` task rows older than a grace period (the
//!   longest a caller waits for an owner's reply, with margin) are deleted;
//! * owners of closed trees: once a root execution and all its children are closed, have no
//!   pending inbox entry and closed longer than the grace ago, their `owners` rows are
//!   deleted, so the takeover scan only sees live work. An entry that still arrives for such
//!   an execution (a late worker result, a signal) has no owner to apply it: the sweep answers
//!   it `EXECUTION_FINISHED` (not applied), as the owner would have;
//! * expired trees: a root execution whose `delete_after` passed, with every execution of its
//!   tree closed, is deleted with its children and every row of theirs (history of every run,
//!   inbox, task, timer and owners rows).
//! * idle flow-control rows: a rate bucket whose window ended counts nothing (the next
//!   claim starts it over) and a fair key with no queued or running task has no tie to
//!   break (a key without a row counts as served longest ago), so both rows go.

/// Rows deleted by [`Retention::delete_done_rows`](crate::Retention::delete_done_rows).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct DoneRowsDeleted {
    /// Applied inbox entries deleted.
    pub inbox: u64,
    /// `done` task rows deleted.
    pub tasks: u64,
}

/// Rows deleted by [`Retention::delete_idle_flow_rows`](crate::Retention::delete_idle_flow_rows).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct FlowRowsDeleted {
    /// `rate_buckets` rows whose window ended.
    pub buckets: u64,
    /// `fair_served` rows of fair keys with no queued or running task.
    pub fair_keys: u64,
}

/// Rows deleted by
/// [`Retention::delete_finished_batches`](crate::Retention::delete_finished_batches).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct BatchesDeleted {
    /// `batches` rows of finished jobs past their retention.
    pub batches: u64,
    /// Their `batch_items` rows.
    pub items: u64,
}

/// What [`Retention::release_closed_owners`](crate::Retention::release_closed_owners) did.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct OwnersReleased {
    /// Root trees whose owners rows were deleted.
    pub trees: u64,
    /// Owners rows deleted.
    pub owners: u64,
    /// Pending entries of released executions answered `EXECUTION_FINISHED`.
    pub answered: u64,
}

/// Rows deleted with executions, per table.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ExecutionsDeleted {
    /// `executions` rows (roots and children).
    pub executions: u64,
    /// `history_events` rows, every run.
    pub events: u64,
    /// `inbox` rows.
    pub inbox: u64,
    /// `task_queue` rows.
    pub tasks: u64,
    /// `timers` rows.
    pub timers: u64,
    /// `owners` rows.
    pub owners: u64,
}

impl ExecutionsDeleted {
    /// Adds another batch's counts.
    pub fn add(&mut self, other: ExecutionsDeleted) {
        self.executions += other.executions;
        self.events += other.events;
        self.inbox += other.inbox;
        self.tasks += other.tasks;
        self.timers += other.timers;
        self.owners += other.owners;
    }
}

/// The outcome of [`Deletion::delete_execution`](crate::Deletion::delete_execution).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum DeleteOutcome {
    /// The execution and its children are gone.
    Deleted(ExecutionsDeleted),
    /// No such execution (never existed, or already deleted).
    NotFound,
    /// Nothing was deleted: these executions of the tree (the execution or a descendant)
    /// are still open.
    NotFinished(Vec<String>),
}

/// The reply recorded on an entry that arrived for an execution whose owner released it:
/// the owner's own answer to a command for a finished execution.
#[must_use]
pub fn finished_reply() -> crate::InboxReply {
    crate::InboxReply::Refused {
        code: orbit_codes::ErrorCode::ExecutionFinished,
        message: "the execution has finished".into(),
    }
}
