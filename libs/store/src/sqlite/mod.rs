//! The SQLite backend: one file in WAL mode, `synchronous=FULL`.
//!
//! Writes go to a single writer connection on a dedicated thread (see `conn`), so writes are
//! serialised and never block the async runtime; reads use a few read-only connections on the
//! blocking pool. The per-area modules hold plain synchronous functions over a
//! `rusqlite::Connection`; this module only routes each trait method to the right side.

// The statement fragments the modules below use (macros): declared first.
#[macro_use]
mod routing;

mod batch_jobs;
mod cluster;
mod commit;
mod conn;
mod dedupe;
mod definitions;
mod faults;
mod flow;
mod migrate;
mod queue;
mod reads;
mod retention;
mod rows;
mod scheduled;
mod schedules;
mod search;
mod sql;
#[cfg(test)]
mod tests;

use crate::batch::{CommitBatch, CommitOutcome};
use crate::error::Result;
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
use crate::retention::{DeleteOutcome, DoneRowsDeleted, ExecutionsDeleted, OwnersReleased};
use crate::roles::{
    Definitions, Deletion, ExecutionReads, Inbox, Migrations, Nodes, OwnerWrites, Ownership,
    RateLimits, Retention, TaskQueue, Timers,
};
use conn::{Readers, Writer};

const SQLITE: Backend = Backend::Sqlite;
use orbit_engine::HistoryEvent;
use std::path::Path;
use std::sync::Arc;
use tokio::sync::Notify;

/// How many read-only connections a store opens.
const READERS: usize = 4;

/// A [`Store`](crate::Store) (every role) on a SQLite file.
pub struct SqliteStore {
    writer: Writer,
    readers: Readers,
    /// Whether limited rows may exist (`TaskQueue::limited_possible`).
    flow: FlowFlag,
    /// Fired after a write that may let a flow claim take more (`TaskQueue::flow_wakeups`).
    flow_wakeups: Arc<Notify>,
}

impl SqliteStore {
    /// Open (or create) the database file. Does not migrate: call [`Migrations::migrate`].
    pub async fn open(path: impl AsRef<Path>) -> Result<SqliteStore> {
        let path = path.as_ref().to_path_buf();
        // The writer creates the file and switches it to WAL before any reader opens it.
        let writer = Writer::start(path.clone()).await?;
        let readers = Readers::open(path, READERS).await?;
        Ok(SqliteStore {
            writer,
            readers,
            flow: FlowFlag::default(),
            flow_wakeups: Arc::new(Notify::new()),
        })
    }

    /// Open the file and apply pending migrations.
    pub async fn open_and_migrate(path: impl AsRef<Path>) -> Result<SqliteStore> {
        let store = SqliteStore::open(path).await?;
        store.migrate().await?;
        Ok(store)
    }

    /// After a committed write: limited rows were queued (`limited`), or a concurrency slot
    /// freed or a limit changed (`freed`): flow claims may take more now.
    fn flow_changed(&self, limited: bool, freed: bool) {
        if limited {
            self.flow.mark();
        }
        if limited || freed {
            self.flow_wakeups.notify_waiters();
        }
    }
}

/// Whether one of `rows` (moved out of `claimed`) held a concurrency key.
fn held_a_key(rows: &[TaskRow]) -> bool {
    rows.iter().any(|t| t.flow.as_ref().is_some_and(|f| f.concurrency.is_some()))
}

#[async_trait::async_trait]
impl Migrations for SqliteStore {
    async fn migrate(&self) -> Result<Vec<u32>> {
        self.writer.run_alone(migrate::migrate).await
    }

    async fn applied_migrations(&self) -> Result<Vec<AppliedMigration>> {
        self.readers.run(migrate::applied).await
    }
}

#[async_trait::async_trait]
impl Definitions for SqliteStore {
    async fn put_definition(
        &self,
        name: &str,
        version: &str,
        hash: &str,
        document: &str,
    ) -> Result<PutOutcome> {
        let (name, version) = (name.to_string(), version.to_string());
        let (hash, document) = (hash.to_string(), document.to_string());
        self.writer.run(move |c| definitions::put(c, &name, &version, &hash, &document)).await
    }

    async fn get_definition(
        &self,
        name: &str,
        version: Option<&str>,
    ) -> Result<Option<DefinitionRow>> {
        let (name, version) = (name.to_string(), version.map(str::to_string));
        self.readers.run(move |c| definitions::get(c, &name, version.as_deref())).await
    }

    async fn definition_versions(&self, name: &str) -> Result<Vec<crate::VersionRow>> {
        let name = name.to_string();
        self.readers.run(move |c| definitions::versions(c, &name)).await
    }

    async fn list_definitions(&self) -> Result<Vec<DefinitionRow>> {
        self.readers.run(definitions::list).await
    }

    async fn declare_search_attributes(
        &self,
        workflow: &str,
        declared: &[(String, orbit_definition::SearchType)],
    ) -> Result<Vec<crate::SearchAttributeRow>> {
        let (workflow, declared) = (workflow.to_string(), declared.to_vec());
        self.writer.run(move |c| search::declare(c, &workflow, &declared)).await
    }

    async fn search_attributes(&self) -> Result<Vec<crate::SearchAttributeRow>> {
        self.readers.run(search::list).await
    }
}

#[async_trait::async_trait]
impl ExecutionReads for SqliteStore {
    async fn load_history(&self, execution_id: &str, run: u32) -> Result<Vec<HistoryEvent>> {
        measure::count(Tx::HistoryAfter, SQLITE);
        let id = execution_id.to_string();
        self.readers.run(move |c| reads::load_history(c, &id, run)).await
    }

    async fn history_after(
        &self,
        execution_id: &str,
        run: u32,
        after_seq: u64,
    ) -> Result<Vec<HistoryEvent>> {
        measure::count(Tx::HistoryAfter, SQLITE);
        let id = execution_id.to_string();
        self.readers.run(move |c| reads::history_after(c, &id, run, after_seq)).await
    }

    async fn get_execution(&self, execution_id: &str) -> Result<Option<ExecutionRow>> {
        measure::count(Tx::GetExecution, SQLITE);
        let id = execution_id.to_string();
        self.readers.run(move |c| reads::get_execution(c, &id)).await
    }

    async fn get_executions(&self, ids: &[String]) -> Result<Vec<ExecutionRow>> {
        measure::count(Tx::GetExecution, SQLITE);
        let ids = ids.to_vec();
        self.readers.run(move |c| reads::get_executions(c, &ids)).await
    }

    async fn list_executions(&self, filter: ExecutionFilter) -> Result<ExecutionPage> {
        self.readers.run(move |c| reads::list_executions(c, &filter)).await
    }

    async fn count_executions(&self, filter: crate::CountFilter) -> Result<crate::ExecutionCounts> {
        self.readers.run(move |c| reads::count_executions(c, &filter)).await
    }

    async fn faults(&self, ids: &[String]) -> Result<Vec<FaultRow>> {
        let ids = ids.to_vec();
        self.readers.run(move |c| faults::get(c, &ids)).await
    }

    async fn count_active_executions(&self) -> Result<u64> {
        self.readers.run(reads::count_active).await
    }
}

#[async_trait::async_trait]
impl Inbox for SqliteStore {
    async fn enqueue_inbox(&self, execution_id: &str, message: &InboxMessage) -> Result<u64> {
        let (id, message) = (execution_id.to_string(), message.clone());
        measure::count(Tx::Enqueue, SQLITE);
        self.writer.run(move |c| queue::enqueue_inbox(c, &id, &message)).await
    }

    async fn inbox_result(&self, seq: u64) -> Result<InboxStatus> {
        measure::count(Tx::InboxResult, SQLITE);
        self.readers.run(move |c| queue::inbox_result(c, seq)).await
    }
}

#[async_trait::async_trait]
impl OwnerWrites for SqliteStore {
    async fn commit(&self, batch: CommitBatch) -> Result<CommitOutcome> {
        let mut outcomes = self.commit_all(vec![batch]).await?;
        outcomes
            .pop()
            .ok_or_else(|| crate::StoreError::Storage("commit produced no outcome".into()))
    }

    async fn commit_all(&self, batches: Vec<CommitBatch>) -> Result<Vec<CommitOutcome>> {
        let limited = batches.iter().any(CommitBatch::inserts_limited);
        let (outcomes, freed) =
            measure::commit(SQLITE, self.writer.run(move |c| commit::commit_all(c, batches)))
                .await?;
        self.flow_changed(limited, freed);
        Ok(outcomes)
    }

    async fn pending_inbox(
        &self,
        execution_id: Option<&str>,
        limit: u32,
    ) -> Result<Vec<InboxEntry>> {
        let id = execution_id.map(str::to_string);
        self.readers.run(move |c| queue::pending_inbox(c, id.as_deref(), limit)).await
    }

    async fn pending_inbox_owned(
        &self,
        node_id: &str,
        also: &[String],
        limit: u32,
    ) -> Result<Vec<InboxEntry>> {
        let (node, also) = (node_id.to_string(), also.to_vec());
        self.readers.run(move |c| cluster::pending_owned(c, &node, &also, limit)).await
    }

    async fn take_over_root(
        &self,
        root_id: &str,
        from_node: &str,
        to_node: &str,
    ) -> Result<Vec<(String, u64)>> {
        let (root, from, to) = (root_id.to_string(), from_node.to_string(), to_node.to_string());
        self.writer.run(move |c| cluster::take_over_root(c, &root, &from, &to)).await
    }

    async fn resume_node(
        &self,
        node_id: &str,
        after: &str,
        limit: u32,
    ) -> Result<Vec<ResumedExecution>> {
        let (node, after) = (node_id.to_string(), after.to_string());
        self.writer.run(move |c| cluster::resume_node(c, &node, &after, limit)).await
    }

    async fn note_faults(&self, notes: Vec<FaultNote>) -> Result<Vec<FaultRow>> {
        self.writer.run(move |c| faults::note(c, &notes)).await
    }

    async fn clear_faults(&self, ids: &[String]) -> Result<()> {
        let ids = ids.to_vec();
        self.writer.run(move |c| faults::clear(c, &ids)).await
    }

    async fn park_execution(
        &self,
        note: FaultNote,
        expected_epoch: Option<u64>,
        now_ms: u64,
    ) -> Result<FaultRow> {
        self.writer.run(move |c| faults::park(c, &note, expected_epoch, now_ms)).await
    }

    async fn unpark_execution(
        &self,
        execution_id: &str,
        expected_epoch: Option<u64>,
        now_ms: u64,
    ) -> Result<Option<FaultRow>> {
        let id = execution_id.to_string();
        self.writer.run(move |c| faults::unpark(c, &id, expected_epoch, now_ms)).await
    }
}

#[async_trait::async_trait]
impl TaskQueue for SqliteStore {
    async fn claim_matching(
        &self,
        filter: &ClaimFilter,
        limit: u32,
        claimer: &str,
        session: &str,
        worker_id: &str,
    ) -> Result<Vec<TaskRow>> {
        let filter = filter.clone();
        let (claimer, session) = (claimer.to_string(), session.to_string());
        let worker_id = worker_id.to_string();
        measure::count(Tx::Claim, SQLITE);
        self.writer
            .run(move |c| queue::claim_tasks(c, &filter, limit, &claimer, &session, &worker_id))
            .await
    }

    async fn claimed_tasks(&self, claimer: &str) -> Result<Vec<TaskRow>> {
        let claimer = claimer.to_string();
        self.readers.run(move |c| queue::claimed_by(c, &claimer)).await
    }

    async fn task_by_token(&self, token: &str) -> Result<Option<TaskRow>> {
        measure::count(Tx::TaskByToken, SQLITE);
        let token = token.to_string();
        self.readers.run(move |c| queue::task_by_token(c, &token)).await
    }

    async fn complete_task_row(
        &self,
        token: &str,
        worker_id: &str,
        report: Option<InboxMessage>,
    ) -> Result<Option<CompletedTask>> {
        let (token, worker_id) = (token.to_string(), worker_id.to_string());
        measure::count(Tx::Complete, SQLITE);
        let (completed, freed) = self
            .writer
            .run(move |c| queue::complete_task_row(c, &token, &worker_id, report))
            .await?;
        self.flow_changed(false, freed);
        Ok(completed)
    }

    async fn queue_backlog(&self) -> Result<Vec<QueueBacklog>> {
        self.readers.run(queue::queue_backlog).await
    }

    async fn release_claims(&self, claimer: &str, reason: &str) -> Result<Vec<TaskRow>> {
        let (claimer, reason) = (claimer.to_string(), reason.to_string());
        let released =
            self.writer.run(move |c| cluster::release_claims(c, &claimer, &reason)).await?;
        self.flow_changed(false, held_a_key(&released));
        Ok(released)
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
        let (claimer, tokens, reason) = (claimer.to_string(), tokens.to_vec(), reason.to_string());
        let released = self
            .writer
            .run(move |c| cluster::hand_back_claims(c, &claimer, &tokens, &reason))
            .await?;
        self.flow_changed(false, held_a_key(&released));
        Ok(released)
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
        let (worker_id, tokens) = (worker_id.to_string(), tokens.to_vec());
        let (claimer, session) = (claimer.to_string(), session.to_string());
        self.writer
            .run(move |c| cluster::adopt_claims(c, &worker_id, &tokens, &claimer, &session))
            .await
    }

    async fn orphaned_claimers(&self, timeout_ms: u64) -> Result<Vec<String>> {
        self.readers.run(move |c| cluster::orphaned_claimers(c, timeout_ms)).await
    }

    async fn claim_limited(
        &self,
        filter: &ClaimFilter,
        limit: u32,
        claimer: &str,
        session: &str,
        worker_id: &str,
    ) -> Result<LimitedClaim> {
        let filter = filter.clone();
        let (claimer, session) = (claimer.to_string(), session.to_string());
        let worker_id = worker_id.to_string();
        measure::count(Tx::ClaimLimited, SQLITE);
        self.writer
            .run(move |c| flow::claim_limited(c, &filter, limit, &claimer, &session, &worker_id))
            .await
    }

    async fn claim_with_limited(
        &self,
        filter: &ClaimFilter,
        limit: u32,
        claimer: &str,
        session: &str,
        worker_id: &str,
    ) -> Result<(Vec<TaskRow>, Result<LimitedClaim>)> {
        let filter = filter.clone();
        let (claimer, session) = (claimer.to_string(), session.to_string());
        let worker_id = worker_id.to_string();
        measure::count(Tx::Claim, SQLITE);
        measure::count(Tx::ClaimLimited, SQLITE);
        self.writer
            .run(move |c| {
                let rows = queue::claim_tasks(c, &filter, limit, &claimer, &session, &worker_id)?;
                let left = crate::model::credits_left(limit, rows.len());
                if left == 0 {
                    return Ok((rows, Ok(LimitedClaim::default())));
                }
                // A savepoint of its own inside the job's: a failed flow claim leaves
                // nothing behind and keeps the ordinary rows.
                let limited = conn::in_savepoint(c, |c| {
                    flow::claim_limited(c, &filter, left, &claimer, &session, &worker_id)
                });
                Ok((rows, limited))
            })
            .await
    }

    async fn limited_possible(&self) -> Result<bool> {
        if let Some(known) = self.flow.known() {
            return Ok(known);
        }
        let exists = self.readers.run(flow::limited_exists).await?;
        Ok(self.flow.settle(exists))
    }

    fn flow_wakeups(&self) -> Option<Arc<Notify>> {
        Some(Arc::clone(&self.flow_wakeups))
    }

    async fn flow_waiting(&self) -> Result<FlowWaiting> {
        self.readers.run(flow::flow_waiting).await
    }

    async fn waiting_on(&self, execution_id: &str) -> Result<Vec<(String, WaitReason)>> {
        let id = execution_id.to_string();
        self.readers.run(move |c| flow::waiting_on(c, &id)).await
    }
}

#[async_trait::async_trait]
impl RateLimits for SqliteStore {
    async fn set_rate_limit(&self, name: &str, limit: u32, period_ms: u64) -> Result<RateLimitRow> {
        let name = name.to_string();
        let row =
            self.writer.run(move |c| flow::set_rate_limit(c, &name, limit, period_ms)).await?;
        // Rows waiting on this name may be claimable now.
        self.flow_changed(false, true);
        Ok(row)
    }

    async fn list_rate_limits(&self) -> Result<Vec<RateLimitRow>> {
        self.readers.run(flow::list_rate_limits).await
    }

    async fn delete_rate_limit(&self, name: &str) -> Result<bool> {
        let name = name.to_string();
        self.writer.run(move |c| flow::delete_rate_limit(c, &name)).await
    }
}

#[async_trait::async_trait]
impl Timers for SqliteStore {
    async fn due_timers(&self, now_ms: u64, limit: u32) -> Result<Vec<TimerRow>> {
        self.readers.run(move |c| queue::due_timers(c, now_ms, limit)).await
    }

    async fn next_timer_at(&self) -> Result<Option<u64>> {
        self.readers.run(queue::next_timer_at).await
    }

    async fn fire_due_timers(&self, now_ms: u64, limit: u32) -> Result<Vec<(TimerRow, u64)>> {
        measure::count(Tx::FireTimers, SQLITE);
        self.writer.run(move |c| queue::fire_due_timers(c, now_ms, limit)).await
    }
}

#[async_trait::async_trait]
impl Nodes for SqliteStore {
    async fn heartbeat_node(&self, node: &NodeInfo) -> Result<u64> {
        let node = node.clone();
        self.writer.run(move |c| cluster::heartbeat(c, &node)).await
    }

    async fn live_nodes(&self, service: Option<&str>, timeout_ms: u64) -> Result<Vec<NodeRow>> {
        let service = service.map(str::to_string);
        self.readers.run(move |c| cluster::live(c, service.as_deref(), timeout_ms)).await
    }

    async fn list_nodes(&self) -> Result<Vec<NodeRow>> {
        self.readers.run(cluster::list).await
    }

    async fn remove_node(&self, node_id: &str) -> Result<()> {
        let id = node_id.to_string();
        self.writer.run(move |c| cluster::remove(c, &id)).await
    }
}

#[async_trait::async_trait]
impl Ownership for SqliteStore {
    async fn get_owner(&self, execution_id: &str) -> Result<Option<OwnerRow>> {
        measure::count(Tx::GetOwner, SQLITE);
        let id = execution_id.to_string();
        self.readers.run(move |c| queue::get_owner(c, &id)).await
    }

    async fn owned_executions(&self, node_id: &str) -> Result<Vec<String>> {
        let node = node_id.to_string();
        self.readers.run(move |c| cluster::owned(c, &node)).await
    }

    async fn orphaned_roots(&self, timeout_ms: u64, limit: u32) -> Result<Vec<OrphanRoot>> {
        self.readers.run(move |c| cluster::orphaned_roots(c, timeout_ms, limit)).await
    }
}

#[async_trait::async_trait]
impl Retention for SqliteStore {
    async fn delete_done_rows(&self, grace_ms: u64, limit: u32) -> Result<DoneRowsDeleted> {
        self.writer.run(move |c| retention::delete_done_rows(c, grace_ms, limit)).await
    }

    async fn release_closed_owners(&self, grace_ms: u64, limit: u32) -> Result<OwnersReleased> {
        self.writer.run(move |c| retention::release_closed_owners(c, grace_ms, limit)).await
    }

    async fn delete_expired(&self, now_ms: u64, limit: u32) -> Result<ExecutionsDeleted> {
        self.writer.run(move |c| retention::delete_expired(c, now_ms, limit)).await
    }

    async fn delete_idle_flow_rows(&self, limit: u32) -> Result<crate::FlowRowsDeleted> {
        self.writer.run(move |c| retention::delete_idle_flow_rows(c, limit)).await
    }

    async fn delete_finished_batches(
        &self,
        finished_before_ms: u64,
        limit: u32,
    ) -> Result<crate::BatchesDeleted> {
        self.writer
            .run(move |c| retention::delete_finished_batches(c, finished_before_ms, limit))
            .await
    }
}

#[async_trait::async_trait]
impl Deletion for SqliteStore {
    async fn delete_execution(&self, execution_id: &str) -> Result<DeleteOutcome> {
        let id = execution_id.to_string();
        self.writer.run(move |c| retention::delete_execution(c, &id)).await
    }
}
