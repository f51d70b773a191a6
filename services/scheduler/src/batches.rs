//! The batch runner: leases one `RUNNING` batch at a time and walks its executions
//! (`orbit_store::batch_job` has the tables and their transactions).
//!
//! A run of a batch:
//! 1. the items left `PENDING` by an earlier run (a crash, a lost lease) are sent again —
//!    their commands carry the batch's request id, so the inbox answers with the first
//!    entry's reply and nothing is applied twice;
//! 2. then the selected executions after the cursor, in execution-id order, a page at a
//!    time: each is *begun* (a `PENDING` item and the cursor moved to it, one transaction),
//!    its command sent and its reply awaited (`batch_item`), and its outcome *recorded*
//!    (the item and the counters, one transaction);
//! 3. when the selection is exhausted and nothing is in flight, the batch is `COMPLETED`.
//!
//! At most `rate_per_second` executions are sent per second, with up to [`window`] in
//! flight. Every write is conditional on the lease ([`LEASE_MS`], renewed every third of
//! it), so a runner that lost its batch changes nothing, and the one that took it over
//! goes on from the cursor. A cancel is seen at the next begin, record or renewal: no
//! further execution is sent, those in flight are recorded, the lease is dropped. A refusal
//! (`MIGRATION_UNSAFE`, `EXECUTION_FINISHED`) is an item's outcome, never the batch's; a
//! reply that does not come in time is waited for again (the entry stays queued).

use crate::batch_item::Sender;
use orbit_api::internal::v1::owner_service_server::OwnerService;
use orbit_clock::Clock;
use orbit_store::{BatchRow, BatchSpec, BatchState, ChangeHub, ItemOutcome, SchedulerStore};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;
use tokio::task::JoinSet;
use tokio_util::sync::CancellationToken;

/// How long a batch's lease lasts: a runner that dies delays its batch by at most this
/// much before another scheduler (or the same one, restarted) takes it over.
pub const LEASE_MS: u64 = 10_000;

/// How often an idle runner looks for a batch to run (a read; nothing is written).
pub const BATCH_POLL: Duration = Duration::from_secs(1);

/// Executions read per page of the selection (and of pending items).
const PAGE: u32 = 100;

/// The most executions of one batch in flight at once, whatever its rate: a cancel stops a
/// batch after at most these. Each waits for its owner's reply (a few hundred ms on the
/// split, whose scheduler re-reads the inbox), so this bounds a batch to a few hundred
/// executions a second there.
pub const MAX_IN_FLIGHT: u32 = 64;

/// The most executions in flight at once for `rate` per second: a tenth of a second's
/// worth, at least one, at most [`MAX_IN_FLIGHT`].
#[must_use]
pub fn window(rate: u32) -> usize {
    (rate / 10).clamp(1, MAX_IN_FLIGHT) as usize
}

/// How a runner behaves.
#[derive(Clone)]
pub struct BatchRunnerConfig {
    /// The process's change hub (`orbit dev`): replies are seen at once. Without one the
    /// runner re-reads each entry until applied.
    pub changes: Option<Arc<ChangeHub>>,
    /// How long to wait for a reply before sending the command again.
    pub reply_timeout: Duration,
}

impl Default for BatchRunnerConfig {
    fn default() -> Self {
        BatchRunnerConfig { changes: None, reply_timeout: Duration::from_secs(10) }
    }
}

/// Runs batches; one per scheduler (any number of schedulers may run one each).
#[derive(Clone)]
pub struct BatchRunner {
    node_id: String,
    store: Arc<dyn SchedulerStore>,
    clock: Clock,
    sender: Sender,
}

/// One leased batch being run.
struct Run {
    runner: BatchRunner,
    batch_id: String,
    spec: Arc<BatchSpec>,
    /// Set when the run must send nothing more (cancelled, lease lost, shutting down).
    stop: Arc<AtomicBool>,
    /// Set when the items in flight must stop waiting too (lease lost, shutting down); a
    /// cancel alone lets them finish and be recorded.
    abandon: Arc<AtomicBool>,
    shutdown: CancellationToken,
}

impl BatchRunner {
    /// A runner leasing batches as `node_id`, sending their commands to `owner`.
    #[must_use]
    pub fn new(
        node_id: &str,
        store: Arc<dyn SchedulerStore>,
        owner: Arc<dyn OwnerService>,
        clock: Clock,
        config: BatchRunnerConfig,
    ) -> BatchRunner {
        let sender = Sender {
            store: store.clone(),
            owner,
            changes: config.changes,
            reply_timeout: config.reply_timeout,
        };
        BatchRunner { node_id: node_id.to_string(), store, clock, sender }
    }

    /// Runs batches until `shutdown`.
    pub async fn run(&self, shutdown: CancellationToken) {
        while !shutdown.is_cancelled() {
            let leased = self.store.lease_batch(&self.node_id, self.clock.now(), LEASE_MS).await;
            match leased {
                Ok(Some(row)) => {
                    self.run_batch(row, &shutdown).await;
                    continue;
                }
                Ok(None) => {}
                Err(e) => tracing::warn!(error = %e, "cannot look for a batch to run"),
            }
            tokio::select! {
                () = shutdown.cancelled() => break,
                () = tokio::time::sleep(BATCH_POLL) => {}
            }
        }
    }

    async fn run_batch(&self, row: BatchRow, shutdown: &CancellationToken) {
        let id = row.batch_id.clone();
        let spec = match BatchSpec::from_json(&row.spec) {
            Ok(spec) => spec,
            Err(e) => {
                tracing::error!(batch_id = %id, error = %e, "a batch's spec is unreadable; it fails");
                self.finish(&id, Some(BatchState::Failed)).await;
                return;
            }
        };
        tracing::info!(batch_id = %id, cursor = row.cursor.as_deref().unwrap_or(""), done = row.done, "running a batch");
        let run = Run {
            runner: self.clone(),
            batch_id: id.clone(),
            spec: Arc::new(spec),
            stop: Arc::new(AtomicBool::new(false)),
            abandon: Arc::new(AtomicBool::new(false)),
            shutdown: shutdown.clone(),
        };
        let renewing = {
            let run = run.clone_handle();
            tokio::spawn(async move { run.renew().await })
        };
        let completed = run.walk(row.cursor).await;
        renewing.abort();
        if shutdown.is_cancelled() {
            return; // the lease runs out; a restart with this node id takes it back at once
        }
        let state = completed.then_some(BatchState::Completed);
        if let Some(BatchState::Completed) = state {
            tracing::info!(batch_id = %id, "completed a batch");
        }
        self.finish(&id, state).await;
    }

    async fn finish(&self, id: &str, state: Option<BatchState>) {
        let now = self.clock.now();
        if let Err(e) = self.store.finish_batch(id, &self.node_id, state, now).await {
            tracing::warn!(batch_id = %id, error = %e, "cannot end a batch's run; its lease runs out");
        }
    }
}

impl Run {
    fn clone_handle(&self) -> Run {
        Run {
            runner: self.runner.clone(),
            batch_id: self.batch_id.clone(),
            spec: self.spec.clone(),
            stop: self.stop.clone(),
            abandon: self.abandon.clone(),
            shutdown: self.shutdown.clone(),
        }
    }

    fn stopped(&self) -> bool {
        self.stop.load(Ordering::Relaxed)
    }

    /// Notes a batch row read back from the store under the lease (`None`: the lease is
    /// gone): a run that is no longer `RUNNING` sends nothing more.
    fn seen(&self, row: Option<&BatchRow>) {
        match row {
            Some(r) if r.state == BatchState::Running => {}
            Some(_) => self.stop.store(true, Ordering::Relaxed),
            None => self.give_up(),
        }
    }

    /// Stops sending and waiting.
    fn give_up(&self) {
        self.stop.store(true, Ordering::Relaxed);
        self.abandon.store(true, Ordering::Relaxed);
    }

    /// Renews the lease every third of it until the run ends; a lost lease or a cancel
    /// stops the run.
    async fn renew(&self) {
        let every = Duration::from_millis(LEASE_MS / 3);
        loop {
            tokio::select! {
                () = self.shutdown.cancelled() => {
                    self.give_up();
                    return;
                }
                () = tokio::time::sleep(every) => {}
            }
            let r = &self.runner;
            let renewed = r
                .store
                .renew_batch_lease(&self.batch_id, &r.node_id, r.clock.now(), LEASE_MS)
                .await;
            match renewed {
                Ok(row) => self.seen(row.as_ref()),
                Err(e) => {
                    tracing::warn!(batch_id = %self.batch_id, error = %e, "cannot renew a batch's lease")
                }
            }
        }
    }

    /// Sends the pending items, then the executions after `cursor`; true when every
    /// selected execution has an outcome (nothing stopped the run).
    async fn walk(&self, cursor: Option<String>) -> bool {
        let r = &self.runner;
        let rate = self.spec.rate_per_second.max(1);
        let mut ticks = tokio::time::interval(Duration::from_secs(1) / rate);
        ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        let mut flight = JoinSet::new();
        let width = window(rate);
        let mut failed_reads = false;
        // 1. Items an earlier run began (their entries may be applied already).
        let mut after: Option<String> = None;
        loop {
            let pending = r
                .store
                .list_batch_items(
                    &self.batch_id,
                    after.as_deref(),
                    Some(ItemOutcome::Pending),
                    PAGE,
                )
                .await;
            let Ok(pending) = pending.inspect_err(|e| tracing::warn!(batch_id = %self.batch_id, error = %e, "cannot read a batch's pending items")) else {
                failed_reads = true;
                break;
            };
            let last = pending.last().map(|i| i.execution_id.clone());
            for item in pending {
                if self.stopped() {
                    break;
                }
                ticks.tick().await;
                self.send(&mut flight, width, item.execution_id).await;
            }
            if last.is_none() || self.stopped() {
                break;
            }
            after = last;
        }
        // 2. The selection after the cursor.
        let mut cursor = cursor;
        while !self.stopped() && !failed_reads {
            let ids = r.store.batch_targets(&self.spec.selector, cursor.as_deref(), PAGE).await;
            let Ok(ids) = ids.inspect_err(|e| tracing::warn!(batch_id = %self.batch_id, error = %e, "cannot read a batch's next executions")) else {
                failed_reads = true;
                break;
            };
            if ids.is_empty() {
                break;
            }
            for id in ids {
                if self.stopped() {
                    break;
                }
                ticks.tick().await;
                let begun =
                    r.store.begin_batch_item(&self.batch_id, &r.node_id, &id, r.clock.now()).await;
                match begun {
                    Ok(true) => {}
                    Ok(false) => {
                        // Cancelled, or taken over (then the new holder finishes the items).
                        let row = r
                            .store
                            .renew_batch_lease(&self.batch_id, &r.node_id, r.clock.now(), LEASE_MS)
                            .await;
                        match row {
                            Ok(row) => self.seen(row.as_ref()),
                            Err(_) => self.give_up(),
                        }
                        self.stop.store(true, Ordering::Relaxed);
                        break;
                    }
                    Err(e) => {
                        tracing::warn!(batch_id = %self.batch_id, error = %e, "cannot begin a batch's item");
                        failed_reads = true;
                        break;
                    }
                }
                cursor = Some(id.clone());
                self.send(&mut flight, width, id).await;
            }
        }
        let drain = async { while flight.join_next().await.is_some() {} };
        tokio::select! {
            () = drain => {}
            () = self.shutdown.cancelled() => return false,
        }
        !self.stopped() && !failed_reads
    }

    /// Sends one execution's command on a task of its own, once fewer than `width` are
    /// in flight.
    async fn send(&self, flight: &mut JoinSet<()>, width: usize, execution_id: String) {
        while flight.len() >= width {
            flight.join_next().await;
        }
        let run = self.clone_handle();
        flight.spawn(async move { run.item(&execution_id).await });
    }

    /// Sends, waits and records one execution.
    async fn item(&self, execution_id: &str) {
        let r = &self.runner;
        let abandon = self.abandon.clone();
        let Some(item) = r
            .sender
            .run(&self.batch_id, &self.spec, execution_id, move || abandon.load(Ordering::Relaxed))
            .await
        else {
            return;
        };
        match r.store.record_batch_item(&r.node_id, &item, r.clock.now()).await {
            Ok(row) => {
                self.seen(row.as_ref());
                let outcome = item.outcome.as_str().to_ascii_lowercase();
                orbit_metrics::get()
                    .batch_items
                    .with_label_values(&[self.spec.action.name(), outcome.as_str()])
                    .inc();
                if item.outcome == ItemOutcome::Failed {
                    tracing::info!(batch_id = %self.batch_id, execution_id, code = %item.code, message = %item.message, "a batch's command was refused");
                }
            }
            Err(e) => {
                tracing::warn!(batch_id = %self.batch_id, execution_id, error = %e, "cannot record a batch's item; the next run sends it again");
                self.stop.store(true, Ordering::Relaxed);
            }
        }
    }
}
