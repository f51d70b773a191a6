//! Store metrics on the hot path: `orbit_store_transactions_total{kind,backend}` for the
//! transactions every step goes through (and the reads of readers waiting on executions,
//! which issue 14 made read only when their own thing changed), and
//! `orbit_store_commit_seconds{backend}` for the owner's group commits. The labelled series are resolved once (no map lookup per call):
//! counting is one atomic add, timing one histogram observation.

use prometheus::{Histogram, IntCounter};
use std::future::Future;
use std::sync::LazyLock;

/// A backend, as a label value.
#[derive(Clone, Copy)]
pub(crate) enum Backend {
    Sqlite = 0,
    Postgres = 1,
}

/// A hot-path transaction kind, as a label value.
#[derive(Clone, Copy)]
pub(crate) enum Tx {
    /// An owner commit (one group of batches).
    Commit = 0,
    /// A claim of queued tasks for a worker session.
    Claim = 1,
    /// A worker result recorded on its task row.
    Complete = 2,
    /// An inbox entry (signal, cancel, operator command).
    Enqueue = 3,
    /// Due timers fired into the inbox.
    FireTimers = 4,
    /// A read of an inbox entry's reply (a reply wait).
    InboxResult = 5,
    /// A read of a task row by token (a task's supervisor, a restricted worker's result).
    TaskByToken = 6,
    /// A read of an execution's owners row (routing to its owner).
    GetOwner = 7,
    /// A read of a run's events, all or after a seq (watches, update waits).
    HistoryAfter = 8,
    /// A read of an execution's projection row.
    GetExecution = 9,
    /// An owner commit done again in two round trips after its one-round-trip attempt
    /// was rolled back (PostgreSQL: the rows differed from the batch's expectation).
    CommitRedone = 10,
    /// A flow claim of limited tasks (issue 27).
    ClaimLimited = 11,
}

const BACKENDS: [&str; 2] = ["sqlite", "postgres"];
const KINDS: [&str; 12] = [
    "commit",
    "claim",
    "complete",
    "enqueue",
    "fire_timers",
    "inbox_result",
    "task_by_token",
    "get_owner",
    "history_after",
    "get_execution",
    "commit_redone",
    "claim_limited",
];

struct Series {
    transactions: [[IntCounter; 2]; 12],
    commit: [Histogram; 2],
}

static SERIES: LazyLock<Series> = LazyLock::new(|| {
    let m = orbit_metrics::get();
    Series {
        transactions: KINDS.map(|kind| {
            BACKENDS.map(|backend| m.store_transactions.with_label_values(&[kind, backend]))
        }),
        commit: BACKENDS.map(|backend| m.store_commit.with_label_values(&[backend])),
    }
});

/// Counts one transaction of `kind`.
pub(crate) fn count(kind: Tx, backend: Backend) {
    SERIES.transactions[kind as usize][backend as usize].inc();
}

/// Runs an owner commit, counting it and timing it.
pub(crate) async fn commit<T>(backend: Backend, work: impl Future<Output = T>) -> T {
    let series = &*SERIES;
    series.transactions[Tx::Commit as usize][backend as usize].inc();
    let timer = series.commit[backend as usize].start_timer();
    let out = work.await;
    timer.observe_duration();
    out
}

/// Counts requests for a workflow-level concurrency slot that a commit queued.
pub(crate) fn slots_queued(n: u64) {
    if n > 0 {
        orbit_metrics::get().executions_waiting_for_slot.inc_by(n);
    }
}
