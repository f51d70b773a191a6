//! The retention sweeper: keeps the tables bounded without touching the hot path.
//!
//! Every `interval` it runs six sweeps (the rules are in `orbit_store`'s retention
//! methods), each as a series of small transactions with a pause between them, until a
//! sweep finds less than a full batch:
//! 1. applied inbox entries and `done` task rows older than `done_grace` are deleted — the
//!    grace must exceed the frontends' reply timeout so a waiting caller always reads its
//!    reply;
//! 2. the `owners` rows of closed, quiet root trees (closed longer than `done_grace` ago) are
//!    deleted, so the owners' takeover scan only sees live work; entries that still arrive
//!    for them are answered `EXECUTION_FINISHED`;
//! 3. trees whose root's `delete_after` (recorded by the owner at close from the workflow's
//!    `retention` or the owner's `--retention`) has passed are deleted with every row;
//! 4. `dedupe: {keep: first}` windows that ended are deleted (`start_dedupe` rows; a
//!    debounce's row goes when it fires);
//! 5. idle flow-control rows: rate buckets whose window ended and the `fair_served` rows of
//!    fair keys with nothing queued or running (neither changes what a claim admits);
//! 6. batch jobs that finished (completed, cancelled, failed) longer than `batch_retention`
//!    ago, with their items (the items first, the job's row last).
//!
//! Any number of sweepers may run (one per scheduler): PostgreSQL hands them disjoint rows
//! (`SKIP LOCKED`); on SQLite each batch is one short job of the single writer. Errors are
//! logged and the round ends; the next round retries.

use orbit_clock::Clock;
use orbit_store::{ExecutionsDeleted, SchedulerStore};
use std::sync::Arc;
use std::time::Duration;
use tokio_util::sync::CancellationToken;

/// How the sweeper paces itself.
#[derive(Debug, Clone)]
pub struct SweeperConfig {
    /// Time between the starts of two rounds.
    pub interval: Duration,
    /// Applied rows are kept this long (store clock), and closed trees keep their owners
    /// rows this long after closing. Keep it above the frontends' reply timeout.
    pub done_grace: Duration,
    /// Rows (inbox entries, task rows, answered entries) per transaction.
    pub row_batch: u32,
    /// Root trees per transaction when releasing owners or deleting expired executions (a
    /// 3-step execution is about 30 rows).
    pub tree_batch: u32,
    /// Pause between two batches of one round, so the writer (and row locks) are free for
    /// the hot path between them.
    pub pause: Duration,
    /// How long a finished batch job (and its items) is kept after its last change.
    pub batch_retention: Duration,
}

/// The default `batch_retention`: as long as a finished execution's default retention.
pub const DEFAULT_BATCH_RETENTION: Duration = Duration::from_secs(7 * 24 * 3600);

impl Default for SweeperConfig {
    fn default() -> Self {
        SweeperConfig {
            interval: Duration::from_secs(60),
            done_grace: Duration::from_secs(60),
            row_batch: 500,
            tree_batch: 50,
            pause: Duration::from_millis(20),
            batch_retention: DEFAULT_BATCH_RETENTION,
        }
    }
}

/// What one round deleted.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Swept {
    /// Applied inbox entries deleted.
    pub done_inbox: u64,
    /// `done` task rows deleted.
    pub done_tasks: u64,
    /// Owners rows of closed trees deleted.
    pub owners: u64,
    /// Late entries answered `EXECUTION_FINISHED`.
    pub answered: u64,
    /// Rows of expired executions.
    pub expired: ExecutionsDeleted,
    /// Ended `dedupe: {keep: first}` windows.
    pub dedupe_windows: u64,
    /// Idle flow-control rows (ended rate windows, idle fair keys).
    pub flow: orbit_store::FlowRowsDeleted,
    /// Finished batch jobs past `batch_retention`, and their items.
    pub batches: orbit_store::BatchesDeleted,
}

/// The sweeper. Cheap to clone.
#[derive(Clone)]
pub struct Sweeper {
    store: Arc<dyn SchedulerStore>,
    cfg: SweeperConfig,
    clock: Clock,
}

fn millis(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}

impl Sweeper {
    /// A sweeper over `store`; `clock` is the domain clock `delete_after` was written with.
    #[must_use]
    pub fn new(store: Arc<dyn SchedulerStore>, cfg: SweeperConfig, clock: Clock) -> Sweeper {
        Sweeper { store, cfg, clock }
    }

    /// Sweeps every `interval` until `shutdown`.
    pub async fn run(&self, shutdown: CancellationToken) {
        loop {
            tokio::select! {
                () = shutdown.cancelled() => return,
                () = tokio::time::sleep(self.cfg.interval) => {}
            }
            match self.round(&shutdown).await {
                Ok(s) if s != Swept::default() => tracing::info!(
                    done_inbox = s.done_inbox,
                    done_tasks = s.done_tasks,
                    owners = s.owners,
                    answered = s.answered,
                    executions = s.expired.executions,
                    events = s.expired.events,
                    dedupe_windows = s.dedupe_windows,
                    rate_buckets = s.flow.buckets,
                    fair_keys = s.flow.fair_keys,
                    batches = s.batches.batches,
                    batch_items = s.batches.items,
                    "retention sweep"
                ),
                Ok(_) => {}
                Err(e) => tracing::warn!(error = %e, "retention sweep failed; retried next round"),
            }
        }
    }

    /// One round of the six sweeps (see the module docs).
    ///
    /// # Errors
    /// The store failed; what earlier batches deleted stays deleted.
    pub async fn round(
        &self,
        shutdown: &CancellationToken,
    ) -> Result<Swept, orbit_store::StoreError> {
        let (grace, rows, trees) =
            (millis(self.cfg.done_grace), self.cfg.row_batch.max(1), self.cfg.tree_batch.max(1));
        let mut s = Swept::default();
        loop {
            let d = self.store.delete_done_rows(grace, rows).await?;
            s.done_inbox += d.inbox;
            s.done_tasks += d.tasks;
            if !self.again(d.inbox.max(d.tasks), rows, shutdown).await {
                break;
            }
        }
        loop {
            let r = self.store.release_closed_owners(grace, trees).await?;
            s.owners += r.owners;
            s.answered += r.answered;
            if !self.again(r.trees.max(r.answered), trees, shutdown).await {
                break;
            }
        }
        loop {
            let e = self.store.delete_expired(self.clock.now(), trees).await?;
            let roots = e.executions;
            s.expired.add(e);
            if !self.again(roots, trees, shutdown).await {
                break;
            }
        }
        loop {
            let n = self.store.sweep_start_dedupe(self.clock.now(), rows).await?;
            s.dedupe_windows += n;
            if !self.again(n, rows, shutdown).await {
                break;
            }
        }
        loop {
            let f = self.store.delete_idle_flow_rows(rows).await?;
            s.flow.buckets += f.buckets;
            s.flow.fair_keys += f.fair_keys;
            if !self.again(f.buckets.max(f.fair_keys), rows, shutdown).await {
                break;
            }
        }
        let finished_before = self.clock.now().saturating_sub(millis(self.cfg.batch_retention));
        loop {
            let d = self.store.delete_finished_batches(finished_before, rows).await?;
            s.batches.batches += d.batches;
            s.batches.items += d.items;
            // Items deleted: once more, for the jobs they emptied (PostgreSQL's statement
            // deletes a job's row in the call after its last items).
            let more = if d.items > 0 { u64::from(rows) } else { d.batches };
            if !self.again(more, rows, shutdown).await {
                break;
            }
        }
        Ok(s)
    }

    /// After a batch of `done` items out of `limit`: whether to run another one (after the
    /// pause). A partial batch means the sweep caught up.
    async fn again(&self, done: u64, limit: u32, shutdown: &CancellationToken) -> bool {
        if done < u64::from(limit) || shutdown.is_cancelled() {
            return false;
        }
        tokio::select! {
            () = shutdown.cancelled() => false,
            () = tokio::time::sleep(self.cfg.pause) => true,
        }
    }
}
