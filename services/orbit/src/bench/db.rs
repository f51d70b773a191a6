//! What the database did, from PostgreSQL's own counters (`--database-url`): transactions per
//! completed task during the run, and committed transactions per second while the cluster is
//! idle afterwards (`--idle-seconds`).
//!
//! The observer reads the counters with one query at each end of a window
//! ([`orbit_store::PgStore::database_stats`]); that query is itself one transaction (it takes
//! a transaction id), so one is subtracted from each delta. Transaction ids are cluster-wide
//! (other databases' writes on the same server count too); `pg_stat_database.xact_commit` is
//! this database's own.

use orbit_store::{DbStats, PgStore};
use std::time::Duration;
use tokio::time::Instant;

/// PostgreSQL publishes backends' commit counts with a delay of up to a second.
const PUBLISH_DELAY: Duration = Duration::from_millis(1500);

/// A backend that flushed its counters less than a second before it went idle holds the
/// rest back for `PGSTAT_IDLE_INTERVAL` (10 s): the idle window starts after that, so the
/// run's last commits are not counted as idle ones.
const IDLE_SETTLE: Duration = Duration::from_millis(11_000);

/// Transactions counted over the run.
#[derive(Debug, Clone, Copy)]
pub struct RunCounts {
    /// Transactions that took a transaction id (wrote).
    pub writes: u64,
    /// Transactions committed in the database, reads included.
    pub commits: u64,
    /// Statements run, where the database has `pg_stat_statements` (see [`Idle::statements`]).
    pub statements: Option<u64>,
}

impl RunCounts {
    /// Committed transactions that wrote nothing.
    pub fn reads(&self) -> u64 {
        self.commits.saturating_sub(self.writes)
    }
}

/// The cluster's idle cost.
#[derive(Debug, Clone, Copy)]
pub struct Idle {
    pub seconds: f64,
    /// Transactions committed in the window, the observer's own excluded.
    pub commits: u64,
    /// Statements run in the window, the observer's own excluded, where the database has
    /// `pg_stat_statements` (counted at once: the figure to trust for a window).
    pub statements: Option<u64>,
}

/// Statements one [`PgStore::database_stats`] reading runs itself (counted by the next).
const OBSERVER_STATEMENTS: u64 = 3;

/// Statements between two readings, the observer's own left out.
fn statements_between(before: Option<u64>, after: Option<u64>) -> Option<u64> {
    Some(after?.saturating_sub(before? + OBSERVER_STATEMENTS))
}

impl Idle {
    pub fn per_second(&self) -> f64 {
        self.commits as f64 / self.seconds.max(1e-9)
    }

    pub fn statements_per_second(&self) -> Option<f64> {
        self.statements.map(|s| s as f64 / self.seconds.max(1e-9))
    }
}

/// A connection to the cluster's database and the counters at the start of the run.
pub struct Observer {
    store: PgStore,
    before: DbStats,
}

impl Observer {
    /// Connects (one pooled connection) and reads the counters.
    pub async fn start(url: &str) -> anyhow::Result<Observer> {
        let opts = orbit_store::PgOptions { pool_size: 1, ..orbit_store::PgOptions::default() };
        let store = PgStore::connect(url, opts).await?;
        let before = store.database_stats().await?;
        Ok(Observer { store, before })
    }

    /// The transactions since [`Observer::start`], once the last ones are published.
    pub async fn run_counts(&self) -> anyhow::Result<RunCounts> {
        tokio::time::sleep(PUBLISH_DELAY).await;
        let after = self.store.database_stats().await?;
        Ok(RunCounts {
            writes: after.write_transactions.saturating_sub(self.before.write_transactions + 1),
            commits: after.commits.saturating_sub(self.before.commits + 1),
            statements: statements_between(self.before.statements, after.statements),
        })
    }

    /// Commits over `seconds` of idleness. Called after [`Observer::run_counts`]; waits
    /// [`IDLE_SETTLE`] first, so the window starts on a settled count.
    pub async fn idle(&self, seconds: u64) -> anyhow::Result<Idle> {
        tokio::time::sleep(IDLE_SETTLE).await;
        let before = self.store.database_stats().await?;
        let began = Instant::now();
        tokio::time::sleep(Duration::from_secs(seconds)).await;
        let after = self.store.database_stats().await?;
        Ok(Idle {
            seconds: began.elapsed().as_secs_f64(),
            commits: after.commits.saturating_sub(before.commits + 1),
            statements: statements_between(before.statements, after.statements),
        })
    }
}
