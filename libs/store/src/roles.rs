//! The role traits: the storage surface cut by who needs it. Every backend implements each
//! one; each service holds only a view made of the roles it needs
//! ([`FrontendStore`](crate::FrontendStore), [`OwnerStore`](crate::OwnerStore),
//! [`SchedulerStore`](crate::SchedulerStore), [`MembershipStore`](crate::MembershipStore)).
//!
//! Conventions every backend follows:
//! * domain times (event timestamps, projection times, timer due times) come from the caller;
//!   bookkeeping times (`created_at` of inbox and queue rows, claim and done times, owner
//!   `since`) come from the store's clock (the database clock on PostgreSQL);
//! * a method either fully applies or changes nothing;
//! * no method blocks the async runtime.

pub use crate::dedupe::StartDedupe;

use crate::batch::{CommitBatch, CommitOutcome};
use crate::count::{CountFilter, ExecutionCounts};
use crate::error::Result;
use crate::fault::{FaultNote, FaultRow};
use crate::flow::{FlowWaiting, LimitedClaim, RateLimitRow, WaitReason};
use crate::inbox::InboxMessage;
use crate::migrations::{AppliedMigration, SchemaStatus};
use crate::model::{
    ClaimFilter, CompletedTask, DefinitionRow, ExecutionFilter, ExecutionPage, ExecutionRow,
    InboxEntry, InboxStatus, NodeInfo, NodeRow, OrphanRoot, OwnerRow, PutOutcome, QueueBacklog,
    ResumedExecution, TaskRow, TimerRow,
};
use crate::retention::{DeleteOutcome, DoneRowsDeleted, ExecutionsDeleted, OwnersReleased};
use orbit_engine::HistoryEvent;

/// Schema migrations: run once by every process at start, before it takes a role.
#[async_trait::async_trait]
pub trait Migrations: Send + Sync {
    /// Apply the numbered migrations not yet recorded in `schema_migrations`, in order.
    /// Idempotent. Returns the versions applied by this call.
    async fn migrate(&self) -> Result<Vec<u32>>;

    /// The rows of `schema_migrations` by version; empty when the table does not exist
    /// yet (a database never migrated). Read-only.
    async fn applied_migrations(&self) -> Result<Vec<AppliedMigration>>;

    /// The recorded migrations compared with the shipped ones (see [`SchemaStatus`]).
    async fn schema_status(&self) -> Result<SchemaStatus> {
        Ok(SchemaStatus::of(self.applied_migrations().await?))
    }
}

/// Workflow definitions: registered by the frontend, read by frontend and owner.
#[async_trait::async_trait]
pub trait Definitions: Send + Sync {
    /// Register a definition. Immutable per (name, version): the same hash again is
    /// `Unchanged`, a different hash is [`StoreError::Conflict`](crate::StoreError::Conflict).
    async fn put_definition(
        &self,
        name: &str,
        version: &str,
        hash: &str,
        document: &str,
    ) -> Result<PutOutcome>;

    /// A definition by (name, version), or the latest version of `name` when `version` is
    /// `None` (`orbit_definition::version::latest`: the highest semantic version, see
    /// docs/definitions.md, "Versions").
    async fn get_definition(
        &self,
        name: &str,
        version: Option<&str>,
    ) -> Result<Option<DefinitionRow>>;

    /// Every definition, by name then registration order.
    async fn list_definitions(&self) -> Result<Vec<DefinitionRow>>;

    /// The versions of `name` with their hashes, in registration order (no documents: what
    /// a start without a version resolves the latest from).
    async fn definition_versions(&self, name: &str) -> Result<Vec<crate::VersionRow>>;

    /// Declares `workflow`'s search attributes in the server-wide catalog (issue 28): the
    /// names not declared yet are added with their type, unless one of the names is
    /// declared with another type (then nothing is added). Returns the stored rows of the
    /// names asked for, which the caller compares with what it declared (a name may come
    /// back missing when a concurrent declaration of it has not committed yet: ask again).
    async fn declare_search_attributes(
        &self,
        workflow: &str,
        declared: &[(String, orbit_definition::SearchType)],
    ) -> Result<Vec<crate::SearchAttributeRow>>;

    /// Every declared search attribute, by name.
    async fn search_attributes(&self) -> Result<Vec<crate::SearchAttributeRow>>;
}

/// Reads of executions: histories, projections, lists, fault rows. Read-only.
#[async_trait::async_trait]
pub trait ExecutionReads: Send + Sync {
    /// The history of one run, in seq order (empty if there is none).
    async fn load_history(&self, execution_id: &str, run: u32) -> Result<Vec<HistoryEvent>>;

    /// The events of one run after `after_seq`, in seq order (for watchers and paging).
    async fn history_after(
        &self,
        execution_id: &str,
        run: u32,
        after_seq: u64,
    ) -> Result<Vec<HistoryEvent>>;

    /// The projection of an execution.
    async fn get_execution(&self, execution_id: &str) -> Result<Option<ExecutionRow>>;

    /// The projections of those of `ids` that exist, each once (an id may be asked twice),
    /// in no particular order: one read for several executions (an owner's starts of one
    /// pass, issue 25).
    async fn get_executions(&self, ids: &[String]) -> Result<Vec<ExecutionRow>>;

    /// A page of executions matching `filter`, newest first.
    async fn list_executions(&self, filter: ExecutionFilter) -> Result<ExecutionPage>;

    /// How many executions `filter` matches, in total and by its groups.
    async fn count_executions(&self, filter: CountFilter) -> Result<ExecutionCounts>;

    /// The fault rows of `ids` that exist, by execution id.
    async fn faults(&self, ids: &[String]) -> Result<Vec<FaultRow>>;

    /// How many executions are not closed (pending, running, compensating or suspended):
    /// what `max_active_executions` is checked against, once per start (an index range
    /// scan of `executions_by_status`, never per step).
    async fn count_active_executions(&self) -> Result<u64>;
}

/// The command channel to an execution's owner: write an entry, read its reply. Any service
/// may write one; only the owner applies it (marks it done in a commit, see [`OwnerWrites`]).
#[async_trait::async_trait]
pub trait Inbox: Send + Sync {
    /// Write a command for an execution's owner; returns its seq. A message with a request
    /// id ([`InboxMessage::request_id`]) is written once per execution and kind: a second
    /// one writes nothing and returns the first entry's seq, whose reply answers the retry
    /// (such entries are kept until their execution is deleted).
    async fn enqueue_inbox(&self, execution_id: &str, message: &InboxMessage) -> Result<u64>;

    /// Whether an inbox entry was applied, and the owner's reply.
    /// [`StoreError::NotFound`](crate::StoreError::NotFound) if the entry does not exist.
    async fn inbox_result(&self, seq: u64) -> Result<InboxStatus>;
}

/// Everything only the owner of an execution writes: histories and projections
/// ([`CommitBatch`]), the owned inbox it consumes, takeover, faults and parking. A service that
/// does not hold this trait cannot write history.
#[async_trait::async_trait]
pub trait OwnerWrites: Send + Sync {
    /// Apply one [`CommitBatch`] atomically (fence, projection, events, tasks, timers, inbox).
    async fn commit(&self, batch: CommitBatch) -> Result<CommitOutcome>;

    /// Apply several batches (any executions) in ONE transaction: all or none. This is how an
    /// owner commits a whole decision pass under load.
    async fn commit_all(&self, batches: Vec<CommitBatch>) -> Result<Vec<CommitOutcome>>;

    /// Pending (not done) inbox entries, by seq; of one execution or of all. Unlike
    /// [`OwnerWrites::pending_inbox_owned`] it includes the entries of a parked execution:
    /// terminating one answers every entry still pending.
    async fn pending_inbox(
        &self,
        execution_id: Option<&str>,
        limit: u32,
    ) -> Result<Vec<InboxEntry>>;

    /// Pending inbox entries, by seq, of the executions whose owners row names `node_id`,
    /// plus those of the executions in `also` (the ones the caller holds in memory: if it
    /// lost them, its commit is fenced and it drops them). Entries of parked executions
    /// (see [`OwnerWrites::park_execution`]) are left out, except `resume` and `terminate`.
    async fn pending_inbox_owned(
        &self,
        node_id: &str,
        also: &[String],
        limit: u32,
    ) -> Result<Vec<InboxEntry>>;

    /// Takes over every owners row of `root_id` still held by `from_node`, in one
    /// transaction: `node_id = to_node`, `epoch = epoch + 1`. Queued tasks of the tree are
    /// announced again (PostgreSQL: NOTIFY). Returns (execution id, new epoch) of each row
    /// taken; empty when another node took the tree first.
    async fn take_over_root(
        &self,
        root_id: &str,
        from_node: &str,
        to_node: &str,
    ) -> Result<Vec<(String, u64)>>;

    /// A restarted node's fence and inventory, one page at a time: moves the next `limit`
    /// owners rows of `node_id` after `after` (by execution id; `""` for the first page)
    /// to `epoch + 1` in one transaction and returns them by id, with their new epoch,
    /// whether the execution is open and whether its history records a child start.
    /// Called until a page is short, it moves EVERY row of the node — what
    /// [`OwnerWrites::take_over_root`] from `node_id` to itself does for each of its
    /// roots — so a previous process with this node id can never commit again. Queued
    /// tasks are announced again (PostgreSQL: NOTIFY). A statement per page instead of a
    /// read and a transaction per root, and pages so the caller never holds every row at
    /// once: an owner with 1,000,000 sleeping executions restarts in seconds.
    async fn resume_node(
        &self,
        node_id: &str,
        after: &str,
        limit: u32,
    ) -> Result<Vec<ResumedExecution>>;

    /// Counts failures (see [`FaultNote`]) in one transaction; returns each row afterwards,
    /// in the order of `notes`. Parked rows are returned unchanged.
    async fn note_faults(&self, notes: Vec<FaultNote>) -> Result<Vec<FaultRow>>;

    /// Deletes the fault rows of `ids` (parked or not); missing rows are ignored.
    async fn clear_faults(&self, ids: &[String]) -> Result<()>;

    /// Parks an execution, fenced by `expected_epoch` like a commit: counts `note`, marks
    /// the row parked (the offending entry is `note.inbox_seq`), keeps the projection's
    /// status for unpark and sets it to `SUSPENDED`. Parking a parked execution only
    /// updates the note. [`StoreError::NotFound`](crate::StoreError::NotFound) without a
    /// projection, [`StoreError::Fenced`](crate::StoreError::Fenced) as for a commit.
    async fn park_execution(
        &self,
        note: FaultNote,
        expected_epoch: Option<u64>,
        now_ms: u64,
    ) -> Result<FaultRow>;

    /// Unparks an execution, fenced like [`OwnerWrites::park_execution`]: the projection gets its
    /// status from before the park back and the fault row (mark and count) is deleted.
    /// Returns the row removed, `None` when the execution was not parked (nothing changes).
    async fn unpark_execution(
        &self,
        execution_id: &str,
        expected_epoch: Option<u64>,
        now_ms: u64,
    ) -> Result<Option<FaultRow>>;
}

/// The task queue as the frontend serves it to workers: claim, complete, release, backlog.
#[async_trait::async_trait]
pub trait TaskQueue: Send + Sync {
    /// Claim up to `limit` (at most [`MAX_CLAIM`](crate::MAX_CLAIM)) queued rows of the
    /// given task names that carry no limit, in rank order (priority, then age: see
    /// [`crate::flow`]), for a frontend (`claimer`) and a worker `session` of `worker_id`
    /// (limited rows are left to [`TaskQueue::claim_limited`]): queued → claimed with a fresh random token
    /// ([`new_task_token`](crate::new_task_token)), bound to `worker_id`. In the same
    /// transaction a `dispatched` inbox entry is written per row for its owner. No row is
    /// ever handed to two claimers.
    async fn claim_tasks(
        &self,
        task_names: &[String],
        limit: u32,
        claimer: &str,
        session: &str,
        worker_id: &str,
    ) -> Result<Vec<TaskRow>> {
        let filter = ClaimFilter::names(task_names);
        self.claim_matching(&filter, limit, claimer, session, worker_id).await
    }

    /// [`claim_tasks`](TaskQueue::claim_tasks) for the rows `filter` admits: of its tasks at
    /// an announced version (or any, where none was announced), routed to its language or to
    /// none. What a worker session claims with.
    async fn claim_matching(
        &self,
        filter: &ClaimFilter,
        limit: u32,
        claimer: &str,
        session: &str,
        worker_id: &str,
    ) -> Result<Vec<TaskRow>>;

    /// Rows still claimed by `claimer` (a frontend node), oldest first. A frontend that
    /// starts again finds here the claims of its previous incarnation, whose sessions died
    /// with it.
    async fn claimed_tasks(&self, claimer: &str) -> Result<Vec<TaskRow>>;

    /// The task row a token was issued for (to see whether it was cancelled or done).
    async fn task_by_token(&self, token: &str) -> Result<Option<TaskRow>>;

    /// Record the result worker `worker_id` reports for `token`: the row becomes done (if it
    /// was claimed or cancelled) and, with a report, an inbox entry for the owner is written
    /// in the same transaction. `None` when no row carries the token. When the row was
    /// claimed for another worker nothing is written: the row comes back unchanged
    /// (`newly_done` false, no `inbox_seq`), its `worker_id` telling the caller why.
    async fn complete_task_row(
        &self,
        token: &str,
        worker_id: &str,
        report: Option<InboxMessage>,
    ) -> Result<Option<CompletedTask>>;

    /// The backlog of queued (unclaimed) rows per task name and version, ordered by name
    /// then version; tasks with nothing queued are absent. Read-only.
    async fn queue_backlog(&self) -> Result<Vec<QueueBacklog>>;

    /// Hands back every row still claimed by `claimer` (a dead or restarted frontend): each
    /// becomes `cancelled` and gets one `uncertain` inbox entry with `reason` for its owner,
    /// in one transaction, so concurrent callers never release a row twice. A worker that
    /// still reports the attempt is recorded (rule 4 decides). Returns the rows released.
    async fn release_claims(&self, claimer: &str, reason: &str) -> Result<Vec<TaskRow>>;

    /// [`TaskQueue::release_claims`] for the rows among `tokens` that `claimer` still holds
    /// (a session's attempts when it is lost, or one whose heartbeat stopped): a row
    /// another frontend adopted meanwhile ([`TaskQueue::adopt_claims`]), or one already
    /// done or cancelled, is left alone. Returns the rows handed back.
    async fn hand_back_claims(
        &self,
        claimer: &str,
        tokens: &[String],
        reason: &str,
    ) -> Result<Vec<TaskRow>>;

    /// A worker reconnected through `claimer` (a frontend) and names `tokens` as still
    /// held: the rows among them still claimed for `worker_id` now name `claimer` and
    /// `session`, so the frontend its old stream reached no longer hands them back and the
    /// new one supervises them. Returns the rows moved (rows done, cancelled or claimed
    /// for another worker are left alone).
    async fn adopt_claims(
        &self,
        worker_id: &str,
        tokens: &[String],
        claimer: &str,
        session: &str,
    ) -> Result<Vec<TaskRow>>;

    /// Claimers of `claimed` rows that have no live node (any service) within `timeout_ms`.
    async fn orphaned_claimers(&self, timeout_ms: u64) -> Result<Vec<String>>;

    /// Claims up to `limit` (at most [`MAX_CLAIM`](crate::MAX_CLAIM)) queued LIMITED rows
    /// (a concurrency key, a rate limit or a fair key, see [`crate::flow`]) that `filter`
    /// admits, in the flow claim's order (least share of a fair key first, then rank; see
    /// [`crate::flow`]), leaving each exactly as [`TaskQueue::claim_matching`] leaves a row (a
    /// fresh token, `worker_id`, its `dispatched` entry). A row is taken only while its
    /// concurrency key is held by fewer claimed rows than the row's limit, counting the
    /// rows this claim takes, and while its rate bucket has a start left in the current
    /// window (windows of the limit's period aligned to the epoch; a named limit is read
    /// from the rate limits, an unknown name holds the row); each row taken uses one start,
    /// in the same transaction. Rows of a key or bucket at its limit never keep rows of
    /// other keys behind them waiting. Exact across concurrent claimers (PostgreSQL: every
    /// flow claim of every process is serialized): the limits are never exceeded. What an
    /// ordinary claim never takes.
    async fn claim_limited(
        &self,
        filter: &ClaimFilter,
        limit: u32,
        claimer: &str,
        session: &str,
        worker_id: &str,
    ) -> Result<LimitedClaim>;

    /// Whether limited rows may be queued or claimed, so whether
    /// [`TaskQueue::claim_limited`] can find anything: one read at the first call, then
    /// answered from memory — set by this store's own commits of limited rows and
    /// (PostgreSQL) by the `orbit_tasks` notifications of other processes' (payload
    /// `limited`; a listener that reconnects makes a "no" read again). Once true it stays
    /// true.
    async fn limited_possible(&self) -> Result<bool>;

    /// One claim of both kinds, for a session that may find limited rows
    /// ([`TaskQueue::limited_possible`]): [`TaskQueue::claim_matching`] up to `limit`, then
    /// [`TaskQueue::claim_limited`] with what is left (nothing when the ordinary rows took
    /// it all). The flow claim's own failure keeps the ordinary rows (the inner result).
    /// SQLite runs both in one job of its single writer, so a claim waits for one group
    /// commit, not two; this default runs the two calls one after the other.
    async fn claim_with_limited(
        &self,
        filter: &ClaimFilter,
        limit: u32,
        claimer: &str,
        session: &str,
        worker_id: &str,
    ) -> Result<(Vec<TaskRow>, Result<LimitedClaim>)> {
        let rows = self.claim_matching(filter, limit, claimer, session, worker_id).await?;
        let left = crate::model::credits_left(limit, rows.len());
        let limited = if left == 0 {
            Ok(LimitedClaim::default())
        } else {
            self.claim_limited(filter, left, claimer, session, worker_id).await
        };
        Ok((rows, limited))
    }

    /// The in-process wake-up of flow claims (SQLite, one process): notified
    /// (`notify_waiters`) after every commit of this store that queued a limited row or
    /// moved a row holding a concurrency key out of `claimed` (a slot freed), and after a
    /// named rate limit was set. `None` on PostgreSQL, whose writes send
    /// `orbit_tasks` with the payload `limited` instead.
    fn flow_wakeups(&self) -> Option<std::sync::Arc<tokio::sync::Notify>>;

    /// The queued limited rows by why they wait and the busiest concurrency keys (see
    /// [`FlowWaiting`]): one read, for a metrics sampler. A row waits on
    /// [`WaitReason::Concurrency`] when its key's claimed rows reach its limit, else on
    /// [`WaitReason::RateLimit`] when its bucket has no start left in the current window
    /// (or its named limit is unknown), else it is [`WaitReason::Ready`].
    async fn flow_waiting(&self) -> Result<FlowWaiting>;

    /// The queued limited rows of one execution as `(unit_key, reason)` by row id, judged
    /// as in [`TaskQueue::flow_waiting`] (`DescribeExecution`'s `PendingTask.waiting_on`).
    async fn waiting_on(&self, execution_id: &str) -> Result<Vec<(String, WaitReason)>>;
}

/// Server-wide named rate limits (`rate_limit: {name}` on a step): the admin API sets them,
/// the flow claim reads them.
#[async_trait::async_trait]
pub trait RateLimits: Send + Sync {
    /// Creates or replaces the limit `name`: at most `limit` starts per window of
    /// `period_ms` per bucket. Starts already taken in the current window stay counted.
    /// [`StoreError::InvalidArgument`](crate::StoreError::InvalidArgument) for an empty
    /// name, a zero limit or period.
    async fn set_rate_limit(&self, name: &str, limit: u32, period_ms: u64) -> Result<RateLimitRow>;

    /// Every named limit, by name.
    async fn list_rate_limits(&self) -> Result<Vec<RateLimitRow>>;

    /// Deletes a named limit; false when there was none. Rows referencing it stay queued.
    async fn delete_rate_limit(&self, name: &str) -> Result<bool>;
}

/// Durable timers as the scheduler fires them (owners write them in their commits).
#[async_trait::async_trait]
pub trait Timers: Send + Sync {
    /// Timers due at `now_ms`, by due time.
    async fn due_timers(&self, now_ms: u64, limit: u32) -> Result<Vec<TimerRow>>;

    /// The earliest due time of any timer.
    async fn next_timer_at(&self) -> Result<Option<u64>>;

    /// The scheduler's step: take up to `limit` timers due at `now_ms` (by due time), and in
    /// one transaction turn each into a `timer` inbox entry for its execution and delete it.
    /// Returns each fired timer with the seq of its inbox entry.
    async fn fire_due_timers(&self, now_ms: u64, limit: u32) -> Result<Vec<(TimerRow, u64)>>;
}

/// Cluster membership: the `nodes` table of heartbeats.
#[async_trait::async_trait]
pub trait Nodes: Send + Sync {
    /// Records a heartbeat of `node` with the store's clock: inserts its `nodes` row or
    /// refreshes it (a new incarnation also resets `started_at`). Returns the store's now.
    async fn heartbeat_node(&self, node: &NodeInfo) -> Result<u64>;

    /// A heartbeat of `node` and the nodes live after it (every service, `node` included,
    /// by node id): what a membership beat needs, so reading the membership costs no
    /// transaction of its own (issue 14: an idle node makes one transaction per beat).
    /// The default runs [`Nodes::heartbeat_node`] then [`Nodes::live_nodes`]; PostgreSQL
    /// does both in one statement.
    async fn beat_and_list(&self, node: &NodeInfo, timeout_ms: u64) -> Result<Vec<NodeRow>> {
        self.heartbeat_node(node).await?;
        self.live_nodes(None, timeout_ms).await
    }

    /// Nodes (of `service`, or of every service) whose last heartbeat is no older than
    /// `timeout_ms` by the store's clock, by node id.
    async fn live_nodes(&self, service: Option<&str>, timeout_ms: u64) -> Result<Vec<NodeRow>>;

    /// Every `nodes` row, live or not, by node id.
    async fn list_nodes(&self) -> Result<Vec<NodeRow>>;

    /// Deletes a node's row (a clean shutdown: it is dead at once, no timeout to wait).
    async fn remove_node(&self, node_id: &str) -> Result<()>;
}

/// Who owns which execution: reads of the `owners` table (the owner changes it through
/// [`OwnerWrites`]).
#[async_trait::async_trait]
pub trait Ownership: Send + Sync {
    /// The owners row of an execution.
    async fn get_owner(&self, execution_id: &str) -> Result<Option<OwnerRow>>;

    /// Open executions (not in a terminal status) owned by `node_id`, by id.
    async fn owned_executions(&self, node_id: &str) -> Result<Vec<String>>;

    /// Root trees owned by a node with no live `owner` heartbeat within `timeout_ms` (or no
    /// `nodes` row at all), that still have work: an open execution or a pending inbox
    /// entry. Distinct (root, node) pairs, at most `limit`.
    async fn orphaned_roots(&self, timeout_ms: u64, limit: u32) -> Result<Vec<OrphanRoot>>;
}

/// The retention sweeper's batch deletes of applied rows, closed owners and expired trees.
#[async_trait::async_trait]
pub trait Retention: Send + Sync {
    /// Deletes up to `limit` applied (`done`) inbox entries and up to `limit` `done` task rows
    /// whose done time (store clock) is older than `grace_ms`, oldest first. A reply is read
    /// by its waiter within the frontend's reply timeout, so a grace above it (with margin)
    /// never deletes a reply someone still waits for.
    async fn delete_done_rows(&self, grace_ms: u64, limit: u32) -> Result<DoneRowsDeleted>;

    /// Deletes the owners rows of up to `limit` root trees whose root closed more than
    /// `grace_ms` ago (store clock), with every execution of the tree closed and no pending
    /// inbox entry; then answers up to `limit` pending entries of closed executions that have
    /// no owners row with [`finished_reply`](crate::finished_reply) (no owner will apply
    /// them). A commit still holding such an execution is fenced (no owners row).
    async fn release_closed_owners(&self, grace_ms: u64, limit: u32) -> Result<OwnersReleased>;

    /// Deletes up to `limit` root trees whose root's `delete_after` is before `now_ms` and
    /// whose executions are all closed: every execution of the tree and all their rows.
    /// Concurrent callers (PostgreSQL) take disjoint trees (`SKIP LOCKED`).
    async fn delete_expired(&self, now_ms: u64, limit: u32) -> Result<ExecutionsDeleted>;

    /// Deletes up to `limit` rate buckets whose window ended (store clock) and up to
    /// `limit` `fair_served` rows of fair keys with no queued fair row and no claimed row.
    /// Neither changes what a claim admits: an ended window starts over at the next claim,
    /// and a missing served row only orders a returning key first among its ties.
    async fn delete_idle_flow_rows(&self, limit: u32) -> Result<crate::FlowRowsDeleted>;

    /// Deletes up to `limit` `batch_items` rows of batch jobs that finished (`COMPLETED`,
    /// `CANCELLED`, `FAILED`) with their last change (`updated_at`, the batch runner's
    /// clock) at or before `finished_before_ms`, then up to `limit` such jobs that have no
    /// item left: a job's row goes last, so a job being deleted is still found by id
    /// meanwhile. A running job is never touched. Concurrent callers (PostgreSQL) take
    /// disjoint rows (`SKIP LOCKED`).
    async fn delete_finished_batches(
        &self,
        finished_before_ms: u64,
        limit: u32,
    ) -> Result<crate::BatchesDeleted>;
}

/// An operator's delete of one closed execution tree (`DeleteExecution`).
#[async_trait::async_trait]
pub trait Deletion: Send + Sync {
    /// Deletes one execution and its descendants (by `parent_id`) with all their rows, if
    /// every one of them is closed; otherwise deletes nothing and names the open ones.
    async fn delete_execution(&self, execution_id: &str) -> Result<DeleteOutcome>;
}

mod scheduled;
pub use scheduled::{BatchJobs, Schedules};
