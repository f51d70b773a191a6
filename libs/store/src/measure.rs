//! Store metrics on the hot path: `orbit_store_transactions_total{kind,backend}` for the
//! transactions every step goes through, and `orbit_store_commit_seconds{backend}` for the
//! owner's group commits. The labelled series are resolved once (no map lookup per call):
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
}

const BACKENDS: [&str; 2] = ["sqlite", "postgres"];
const KINDS: [&str; 5] = ["commit", "claim", "complete", "enqueue", "fire_timers"];

struct Series {
    transactions: [[IntCounter; 2]; 5],
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
