//! The PostgreSQL backend: a bb8 pool of tokio-postgres connections (TLS via rustls), the
//! same schema and migrations as SQLite, row locks where SQLite relies on its single writer.
//!
//! This module only routes each role method (see [`crate::roles`]) to the per-area modules (`commit`, `queue`,
//! `cluster`, `reads`, `migrate`) through [`run!`], which checks a connection out of the pool
//! and runs the operation again when PostgreSQL reports a serialization failure or deadlock
//! (at most [`MAX_ATTEMPTS`](error::MAX_ATTEMPTS) times, with jittered backoff). Reads are
//! also retried once on a connection that turned out to be dead; writes are not (their
//! outcome is unknown), they fail with [`StoreError::Unavailable`].
//!
//! Bookkeeping times come from the database clock; wake-ups for other processes are sent
//! by the writes themselves (`NOTIFY`, see [`PgStore::listen`]).

mod cluster;
mod commit;
mod config;
mod conn;
mod error;
mod faults;
mod flow;
mod listen;
mod migrate;
mod plan;
#[cfg(test)]
mod plan_tests;
mod predict;
mod queue;
mod reads;
mod retention;
mod rows;
mod schedules;
mod search;
mod sql;
#[cfg(test)]
mod tests;
mod tls;

pub use listen::{Channel, Wakeup};

use crate::batch::{CommitBatch, CommitOutcome};
use crate::error::{Result, StoreError};
use crate::fault::{FaultNote, FaultRow};
use crate::flow::{FlowFlag, FlowWaiting, LimitedClaim, RateLimitRow, WaitReason};
use crate::inbox::InboxMessage;
use crate::measure::{self, Backend, Tx};
use crate::migrations::AppliedMigration;
use crate::model::{
    ClaimFilter, CompletedTask, DefinitionRow, ExecutionFilter, ExecutionPage, ExecutionRow,
    InboxEntry, InboxStatus, NodeInfo, NodeRow, OrphanRoot, OwnerRow, PutOutcome, QueueBacklog,
    ResumedExecution, TaskRow, TimerRow,
};
use crate::roles::{
    Definitions, ExecutionReads, Inbox, Migrations, Nodes, OwnerWrites, Ownership, RateLimits,
    TaskQueue, Timers,
};
use conn::{Connector, Pool};
use orbit_engine::HistoryEvent;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;
use tokio_util::sync::CancellationToken;

const PG: Backend = Backend::Postgres;

/// How a [`PgStore`] connects.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PgOptions {
    /// Most pooled connections open at once.
    pub pool_size: u32,
    /// PEM file of the CA certificates to trust for `sslmode=verify-ca|verify-full` (and
    /// `require`, which then verifies the chain as libpq does). Takes precedence over the
    /// URL's `sslrootcert`.
    pub ca_file: Option<PathBuf>,
    /// Reported to the server (`pg_stat_activity`) unless the URL names one.
    pub application_name: String,
    /// Limit for opening a connection, and for waiting for a free pooled one.
    pub connect_timeout: Duration,
    /// How long the server lets a session sit idle inside a transaction before it ends the
    /// session (rolling back, releasing its row locks). A process paused (SIGSTOP, a
    /// starved host) between two round trips of a commit holds `FOR SHARE` locks on its
    /// owners rows, which a takeover's epoch bump waits for: the split services set this
    /// to the node timeout, so the locks of a node others see dead go with it.
    pub idle_in_transaction_timeout: Duration,
}

impl Default for PgOptions {
    fn default() -> Self {
        PgOptions {
            pool_size: 16,
            ca_file: None,
            application_name: "orbit".into(),
            connect_timeout: Duration::from_secs(5),
            idle_in_transaction_timeout: Duration::from_secs(10),
        }
    }
}

/// A [`Store`](crate::Store) (every role) on a PostgreSQL database. Cheap to clone (clones share the pool).
#[derive(Clone)]
pub struct PgStore {
    inner: Arc<Inner>,
}

struct Inner {
    pool: Pool,
    connector: Connector,
    /// Commits whose one-round-trip attempt was rolled back and done again (`commit.rs`).
    redone: std::sync::atomic::AtomicU64,
    /// Whether limited rows may exist (`TaskQueue::limited_possible`): set by this store's
    /// commits and by its listeners.
    flow: Arc<FlowFlag>,
}

/// Whether a failed attempt may run again on another connection.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Kind {
    /// Read-only: also retried once after a lost connection.
    Read,
    /// Writes: retried only after serialization failures and deadlocks (rolled back).
    Write,
}

/// Runs `$body` (an expression over `$conn: &mut PgConn`) on a pooled connection with the
/// bounded retry described in the module docs; evaluates to `Result<_, StoreError>`.
macro_rules! run {
    ($store:expr, $kind:expr, |$conn:ident| $body:expr) => {{
        let mut attempt = 1u32;
        let mut reconnected = false;
        loop {
            let outcome: error::PgResult<_> = async {
                let mut pooled = $store.inner.pool.get().await?;
                let $conn: &mut conn::PgConn = &mut pooled;
                $body.await
            }
            .await;
            match outcome {
                Err(e) if e.is_conflict() && attempt < error::MAX_ATTEMPTS => {
                    error::backoff(attempt).await;
                    attempt += 1;
                }
                Err(e) if $kind == Kind::Read && !reconnected && e.is_connection_lost() => {
                    reconnected = true;
                }
                other => break other.map_err(error::PgErr::into_store),
            }
        }
    }};
}

// Declared after `run!`, which its role implementation uses.
mod batch_jobs;
mod dedupe;
mod scheduled;
mod upkeep;

impl PgStore {
    /// How many commits this store did again in two round trips because their
    /// one-round-trip attempt found other rows than the batches expected (a fenced or
    /// racing writer, a consumed inbox entry, a start of a taken id that the owner did not
    /// read first, a start of a cached latest version that a newer one replaced). Also
    /// counted in
    /// `orbit_store_transactions_total{kind="commit_redone"}`.
    #[must_use]
    pub fn commits_redone(&self) -> u64 {
        self.inner.redone.load(std::sync::atomic::Ordering::Relaxed)
    }

    /// Connects (one connection at once, so a bad URL, TLS setup or password fails here).
    /// Does not migrate: call [`Migrations::migrate`] or use [`PgStore::connect_and_migrate`].
    ///
    /// `url` is a libpq URL or keyword/value string; `sslmode` may be disable, prefer (the
    /// default), require, verify-ca or verify-full, `sslrootcert` a PEM file (or `system`).
    pub async fn connect(url: &str, opts: PgOptions) -> Result<PgStore> {
        let mut target = config::parse(url)?;
        if target.config.get_application_name().is_none() {
            target.config.application_name(&opts.application_name);
        }
        if target.config.get_connect_timeout().is_none() {
            target.config.connect_timeout(opts.connect_timeout);
        }
        target.config.keepalives_idle(Duration::from_secs(30));
        let tls = tls::connector(target.ssl, opts.ca_file.as_deref(), &target.root_cert)?;
        let connector = Connector::new(&target, tls, opts.idle_in_transaction_timeout);
        let pool = Pool::open(connector.clone(), opts.pool_size, opts.connect_timeout).await?;
        let inner = Inner { pool, connector, redone: Default::default(), flow: Arc::default() };
        Ok(PgStore { inner: Arc::new(inner) })
    }

    /// Connects and applies pending migrations.
    pub async fn connect_and_migrate(url: &str, opts: PgOptions) -> Result<PgStore> {
        let store = PgStore::connect(url, opts).await?;
        store.migrate().await?;
        Ok(store)
    }

    /// LISTENs on a dedicated (non-pooled) connection for `orbit_inbox`, `orbit_tasks`,
    /// `orbit_timers` and `orbit_changes`, and calls `handler` for each notification. On
    /// connection loss it reconnects with capped backoff (50 ms .. 2 s); after each
    /// (re)connect it calls `handler(Wakeup::Reconnected)` so callers re-check everything.
    /// Stops on `shutdown`.
    pub fn listen(
        &self,
        handler: Arc<dyn Fn(Wakeup) + Send + Sync>,
        shutdown: CancellationToken,
    ) -> tokio::task::JoinHandle<()> {
        self.listen_to(&Channel::ALL, handler, shutdown)
    }

    /// As [`PgStore::listen`], on `channels` only (and `Reconnected`): each notification
    /// wakes every backend listening on its channel and the process behind it. An
    /// `orbit_tasks` notification with the payload `limited` also tells this store that
    /// limited rows exist ([`TaskQueue::limited_possible`]).
    pub fn listen_to(
        &self,
        channels: &[Channel],
        handler: Arc<dyn Fn(Wakeup) + Send + Sync>,
        shutdown: CancellationToken,
    ) -> tokio::task::JoinHandle<()> {
        let connector = self.inner.connector.clone();
        let flow = Arc::clone(&self.inner.flow);
        tokio::spawn(listen::run(connector, channels.to_vec(), handler, shutdown, flow))
    }

    /// The database's transaction counters, for benchmarks: read twice and subtract.
    pub async fn database_stats(&self) -> Result<crate::DbStats> {
        run!(self, Kind::Read, |c| reads::stats(c))
    }
}

impl std::fmt::Debug for PgStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PgStore").finish_non_exhaustive()
    }
}

#[async_trait::async_trait]
impl Migrations for PgStore {
    async fn migrate(&self) -> Result<Vec<u32>> {
        run!(self, Kind::Write, |c| migrate::migrate(c))
    }

    async fn applied_migrations(&self) -> Result<Vec<AppliedMigration>> {
        run!(self, Kind::Read, |c| migrate::applied(c))
    }
}

#[async_trait::async_trait]
impl Definitions for PgStore {
    async fn put_definition(
        &self,
        name: &str,
        version: &str,
        hash: &str,
        document: &str,
    ) -> Result<PutOutcome> {
        run!(self, Kind::Write, |c| reads::put_definition(c, name, version, hash, document))
    }

    async fn get_definition(
        &self,
        name: &str,
        version: Option<&str>,
    ) -> Result<Option<DefinitionRow>> {
        run!(self, Kind::Read, |c| reads::get_definition(c, name, version))
    }

    async fn list_definitions(&self) -> Result<Vec<DefinitionRow>> {
        run!(self, Kind::Read, |c| reads::list_definitions(c))
    }

    async fn definition_versions(&self, name: &str) -> Result<Vec<crate::VersionRow>> {
        run!(self, Kind::Read, |c| reads::definition_versions(c, name))
    }

    async fn declare_search_attributes(
        &self,
        workflow: &str,
        declared: &[(String, orbit_definition::SearchType)],
    ) -> Result<Vec<crate::SearchAttributeRow>> {
        run!(self, Kind::Write, |c| search::declare(c, workflow, declared))
    }

    async fn search_attributes(&self) -> Result<Vec<crate::SearchAttributeRow>> {
        run!(self, Kind::Read, |c| search::list(c))
    }
}

#[async_trait::async_trait]
impl ExecutionReads for PgStore {
    async fn load_history(&self, execution_id: &str, run: u32) -> Result<Vec<HistoryEvent>> {
        measure::count(Tx::HistoryAfter, PG);
        run!(self, Kind::Read, |c| reads::history_after(c, execution_id, run, 0))
    }

    async fn history_after(
        &self,
        execution_id: &str,
        run: u32,
        after_seq: u64,
    ) -> Result<Vec<HistoryEvent>> {
        measure::count(Tx::HistoryAfter, PG);
        run!(self, Kind::Read, |c| reads::history_after(c, execution_id, run, after_seq))
    }

    async fn get_execution(&self, execution_id: &str) -> Result<Option<ExecutionRow>> {
        measure::count(Tx::GetExecution, PG);
        run!(self, Kind::Read, |c| reads::get_execution(c, execution_id))
    }

    async fn get_executions(&self, ids: &[String]) -> Result<Vec<ExecutionRow>> {
        measure::count(Tx::GetExecution, PG);
        run!(self, Kind::Read, |c| reads::get_executions(c, ids))
    }

    async fn list_executions(&self, filter: ExecutionFilter) -> Result<ExecutionPage> {
        run!(self, Kind::Read, |c| reads::list_executions(c, &filter))
    }

    async fn count_executions(&self, filter: crate::CountFilter) -> Result<crate::ExecutionCounts> {
        run!(self, Kind::Read, |c| reads::count_executions(c, &filter))
    }

    async fn faults(&self, ids: &[String]) -> Result<Vec<FaultRow>> {
        run!(self, Kind::Read, |c| faults::get_many(c, ids))
    }

    async fn count_active_executions(&self) -> Result<u64> {
        run!(self, Kind::Read, |c| reads::count_active(c))
    }
}

#[async_trait::async_trait]
impl Inbox for PgStore {
    async fn enqueue_inbox(&self, execution_id: &str, message: &InboxMessage) -> Result<u64> {
        measure::count(Tx::Enqueue, PG);
        run!(self, Kind::Write, |c| queue::enqueue_inbox(c, execution_id, message))
    }

    async fn inbox_result(&self, seq: u64) -> Result<InboxStatus> {
        measure::count(Tx::InboxResult, PG);
        run!(self, Kind::Read, |c| queue::inbox_result(c, seq))
    }
}

#[async_trait::async_trait]
impl OwnerWrites for PgStore {
    async fn commit(&self, batch: CommitBatch) -> Result<CommitOutcome> {
        let mut outcomes = self.commit_all(vec![batch]).await?;
        outcomes.pop().ok_or_else(|| StoreError::Storage("commit produced no outcome".into()))
    }

    async fn commit_all(&self, batches: Vec<CommitBatch>) -> Result<Vec<CommitOutcome>> {
        let outcomes = measure::commit(PG, async {
            run!(self, Kind::Write, |c| commit::commit_all(c, &batches, &self.inner.redone))
        })
        .await?;
        if batches.iter().any(CommitBatch::inserts_limited) {
            self.inner.flow.mark();
        }
        Ok(outcomes)
    }

    async fn pending_inbox(
        &self,
        execution_id: Option<&str>,
        limit: u32,
    ) -> Result<Vec<InboxEntry>> {
        run!(self, Kind::Read, |c| queue::pending_inbox(c, execution_id, limit))
    }

    async fn pending_inbox_owned(
        &self,
        node_id: &str,
        also: &[String],
        limit: u32,
    ) -> Result<Vec<InboxEntry>> {
        run!(self, Kind::Read, |c| cluster::pending_owned(c, node_id, also, limit))
    }

    async fn take_over_root(
        &self,
        root_id: &str,
        from_node: &str,
        to_node: &str,
    ) -> Result<Vec<(String, u64)>> {
        run!(self, Kind::Write, |c| cluster::take_over_root(c, root_id, from_node, to_node))
    }

    async fn resume_node(
        &self,
        node_id: &str,
        after: &str,
        limit: u32,
    ) -> Result<Vec<ResumedExecution>> {
        run!(self, Kind::Write, |c| cluster::resume_node(c, node_id, after, limit))
    }

    async fn note_faults(&self, notes: Vec<FaultNote>) -> Result<Vec<FaultRow>> {
        if notes.is_empty() {
            return Ok(Vec::new());
        }
        run!(self, Kind::Write, |c| faults::note(c, &notes))
    }

    async fn clear_faults(&self, ids: &[String]) -> Result<()> {
        if ids.is_empty() {
            return Ok(());
        }
        run!(self, Kind::Write, |c| faults::clear(c, ids))
    }

    async fn park_execution(
        &self,
        note: FaultNote,
        expected_epoch: Option<u64>,
        now_ms: u64,
    ) -> Result<FaultRow> {
        run!(self, Kind::Write, |c| faults::park(c, &note, expected_epoch, now_ms))
    }

    async fn unpark_execution(
        &self,
        execution_id: &str,
        expected_epoch: Option<u64>,
        now_ms: u64,
    ) -> Result<Option<FaultRow>> {
        run!(self, Kind::Write, |c| faults::unpark(c, execution_id, expected_epoch, now_ms))
    }
}

#[async_trait::async_trait]
impl TaskQueue for PgStore {
    async fn claim_matching(
        &self,
        filter: &ClaimFilter,
        limit: u32,
        claimer: &str,
        session: &str,
        worker_id: &str,
    ) -> Result<Vec<TaskRow>> {
        measure::count(Tx::Claim, PG);
        run!(self, Kind::Write, |c| queue::claim_tasks(
            c, filter, limit, claimer, session, worker_id
        ))
    }

    async fn claimed_tasks(&self, claimer: &str) -> Result<Vec<TaskRow>> {
        run!(self, Kind::Read, |c| queue::claimed_by(c, claimer))
    }

    async fn task_by_token(&self, token: &str) -> Result<Option<TaskRow>> {
        measure::count(Tx::TaskByToken, PG);
        run!(self, Kind::Read, |c| queue::task_by_token(c, token))
    }

    async fn complete_task_row(
        &self,
        token: &str,
        worker_id: &str,
        report: Option<InboxMessage>,
    ) -> Result<Option<CompletedTask>> {
        measure::count(Tx::Complete, PG);
        run!(self, Kind::Write, |c| queue::complete_task_row(c, token, worker_id, report.as_ref()))
    }

    async fn queue_backlog(&self) -> Result<Vec<QueueBacklog>> {
        run!(self, Kind::Read, |c| queue::queue_backlog(c))
    }

    async fn release_claims(&self, claimer: &str, reason: &str) -> Result<Vec<TaskRow>> {
        run!(self, Kind::Write, |c| cluster::release_claims(c, claimer, reason))
    }

    async fn hand_back_claims(
        &self,
        claimer: &str,
        tokens: &[String],
        reason: &str,
    ) -> Result<Vec<TaskRow>> {
        if tokens.is_empty() {
            return Ok(Vec::new());
        }
        run!(self, Kind::Write, |c| cluster::hand_back_claims(c, claimer, tokens, reason))
    }

    async fn adopt_claims(
        &self,
        worker_id: &str,
        tokens: &[String],
        claimer: &str,
        session: &str,
    ) -> Result<Vec<TaskRow>> {
        if tokens.is_empty() {
            return Ok(Vec::new());
        }
        run!(self, Kind::Write, |c| cluster::adopt_claims(c, worker_id, tokens, claimer, session))
    }

    async fn orphaned_claimers(&self, timeout_ms: u64) -> Result<Vec<String>> {
        run!(self, Kind::Read, |c| cluster::orphaned_claimers(c, timeout_ms))
    }

    async fn claim_limited(
        &self,
        filter: &ClaimFilter,
        limit: u32,
        claimer: &str,
        session: &str,
        worker_id: &str,
    ) -> Result<LimitedClaim> {
        measure::count(Tx::ClaimLimited, PG);
        run!(self, Kind::Write, |c| flow::claim_limited(
            c, filter, limit, claimer, session, worker_id
        ))
    }

    async fn limited_possible(&self) -> Result<bool> {
        if let Some(known) = self.inner.flow.known() {
            return Ok(known);
        }
        let exists = run!(self, Kind::Read, |c| flow::limited_exists(c))?;
        Ok(self.inner.flow.settle(exists))
    }

    fn flow_wakeups(&self) -> Option<Arc<tokio::sync::Notify>> {
        None
    }

    async fn flow_waiting(&self) -> Result<FlowWaiting> {
        run!(self, Kind::Read, |c| flow::flow_waiting(c))
    }

    async fn waiting_on(&self, execution_id: &str) -> Result<Vec<(String, WaitReason)>> {
        run!(self, Kind::Read, |c| flow::waiting_on(c, execution_id))
    }
}

#[async_trait::async_trait]
impl RateLimits for PgStore {
    async fn set_rate_limit(&self, name: &str, limit: u32, period_ms: u64) -> Result<RateLimitRow> {
        run!(self, Kind::Write, |c| flow::set_rate_limit(c, name, limit, period_ms))
    }

    async fn list_rate_limits(&self) -> Result<Vec<RateLimitRow>> {
        run!(self, Kind::Read, |c| flow::list_rate_limits(c))
    }

    async fn delete_rate_limit(&self, name: &str) -> Result<bool> {
        run!(self, Kind::Write, |c| flow::delete_rate_limit(c, name))
    }
}

#[async_trait::async_trait]
impl Timers for PgStore {
    async fn due_timers(&self, now_ms: u64, limit: u32) -> Result<Vec<TimerRow>> {
        run!(self, Kind::Read, |c| queue::due_timers(c, now_ms, limit))
    }

    async fn next_timer_at(&self) -> Result<Option<u64>> {
        run!(self, Kind::Read, |c| queue::next_timer_at(c))
    }

    async fn fire_due_timers(&self, now_ms: u64, limit: u32) -> Result<Vec<(TimerRow, u64)>> {
        measure::count(Tx::FireTimers, PG);
        run!(self, Kind::Write, |c| queue::fire_due_timers(c, now_ms, limit))
    }
}

#[async_trait::async_trait]
impl Nodes for PgStore {
    async fn heartbeat_node(&self, node: &NodeInfo) -> Result<u64> {
        run!(self, Kind::Write, |c| cluster::heartbeat(c, node))
    }

    async fn beat_and_list(&self, node: &NodeInfo, timeout_ms: u64) -> Result<Vec<NodeRow>> {
        run!(self, Kind::Write, |c| cluster::beat_live(c, node, timeout_ms))
    }

    async fn live_nodes(&self, service: Option<&str>, timeout_ms: u64) -> Result<Vec<NodeRow>> {
        run!(self, Kind::Read, |c| cluster::live(c, service, timeout_ms))
    }

    async fn list_nodes(&self) -> Result<Vec<NodeRow>> {
        run!(self, Kind::Read, |c| cluster::list(c))
    }

    async fn remove_node(&self, node_id: &str) -> Result<()> {
        run!(self, Kind::Write, |c| cluster::remove(c, node_id))
    }
}

#[async_trait::async_trait]
impl Ownership for PgStore {
    async fn get_owner(&self, execution_id: &str) -> Result<Option<OwnerRow>> {
        measure::count(Tx::GetOwner, PG);
        run!(self, Kind::Read, |c| queue::get_owner(c, execution_id))
    }

    async fn owned_executions(&self, node_id: &str) -> Result<Vec<String>> {
        run!(self, Kind::Read, |c| cluster::owned(c, node_id))
    }

    async fn orphaned_roots(&self, timeout_ms: u64, limit: u32) -> Result<Vec<OrphanRoot>> {
        run!(self, Kind::Read, |c| cluster::orphaned_roots(c, timeout_ms, limit))
    }
}
