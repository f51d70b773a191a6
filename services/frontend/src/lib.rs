//! The frontend service: the public `orbit.v1` API as a library.
//!
//! [`Frontend`] serves `WorkflowService` and `WorkerService`. It is stateless apart from the
//! worker streams it holds: reads (describe, query, history, watch, list) come from the
//! store; every command for an execution (start, signal, cancel, worker results) goes to
//! the execution's owner, either through `OwnerService` (start) or as an inbox entry
//! followed by `OwnerService.Wake`. A worker result is acknowledged only after it was
//! committed.
//!
//! The binary adds the two services from [`Frontend::services`] to its server (the
//! server kit adds health and reflection), plus `AdminService` from
//! [`Frontend::admin_service`].

mod admin;
mod claims;
mod defs;
mod error;
mod reply;
mod sampler;
mod schedule;
mod scope;
mod validate;
mod worker;
mod workflow;

use orbit_api::internal::v1::owner_service_server::OwnerService;
use orbit_api::v1::admin_service_server::AdminServiceServer;
use orbit_api::v1::worker_service_server::WorkerServiceServer;
use orbit_api::v1::workflow_service_server::WorkflowServiceServer;
use orbit_store::{ChangeHub, FrontendStore};
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::Notify;

pub use admin::AdminApi;
pub use schedule::ScheduleApi;
pub use worker::{check_message, Checked, WorkerApi};
pub use workflow::WorkflowApi;

/// The default `dispatch_fallback_ms`: 30 s.
pub const DISPATCH_SAFETY_NET_MS: u64 = 30_000;

/// How long the claim sweeper waits without a membership change before it looks for dead
/// frontends' claims anyway (see [`Frontend::run_sweeper_on`]).
pub const SWEEP_SAFETY_NET: Duration = Duration::from_secs(30);

/// How a frontend behaves. [`Default`] gives the documented defaults.
#[derive(Debug, Clone)]
pub struct FrontendConfig {
    /// This frontend's node id: the claimer recorded on task rows it hands out.
    pub node_id: String,
    /// How often workers should heartbeat, and how often the server pings a session.
    pub heartbeat_interval_ms: u64,
    /// How long a session lives without hearing from its worker; its in-flight attempts
    /// then become uncertain.
    pub session_timeout_ms: u64,
    /// The largest payload (input, signal payload, task output) accepted: the larger of its
    /// JSON and protobuf length (see `orbit_payload`).
    pub max_payload_bytes: u64,
    /// How long a signal or cancel waits for the owner's reply before `UNAVAILABLE`.
    pub reply_timeout_ms: u64,
    /// How often `WatchExecution` re-reads the store without a change notification (a
    /// safety net: commits notify watchers directly).
    pub watch_poll_ms: u64,
    /// How often a session's dispatcher looks for tasks without a "tasks ready" signal or
    /// new credits (a safety net: every commit that queues a task signals; issue 14: idle
    /// sessions make no query of their own in between). After a failed claim it looks
    /// again within a second whatever this says.
    pub dispatch_fallback_ms: u64,
    /// A node whose last heartbeat is older than this is dead (`ClusterStatus` liveness).
    pub node_timeout_ms: u64,
    /// Where the frontend reads `now` (sessions' last-seen and heartbeat times, schedule
    /// edits, queue ages). Default: the system clock; tests move one by hand.
    pub clock: orbit_clock::Clock,
    /// Notified when a start reserves a debounced execution (`dedupe: {keep: last}`), so
    /// an in-process scheduler (`orbit dev`) computes its next wake-up again; `None` in
    /// split mode, where the store's `orbit_timers` notification does it.
    pub scheduler_wake: Option<Arc<Notify>>,
}

impl Default for FrontendConfig {
    fn default() -> Self {
        FrontendConfig {
            node_id: "frontend".into(),
            heartbeat_interval_ms: 5_000,
            session_timeout_ms: 30_000,
            max_payload_bytes: orbit_server_kit::payload::DEFAULT_MAX_PAYLOAD_BYTES,
            reply_timeout_ms: 10_000,
            watch_poll_ms: 1_000,
            dispatch_fallback_ms: DISPATCH_SAFETY_NET_MS,
            node_timeout_ms: 10_000,
            clock: orbit_clock::Clock::system(),
            scheduler_wake: None,
        }
    }
}

impl FrontendConfig {
    /// The heartbeat interval told to workers: the configured one, but at most a third of
    /// the session timeout, so a worker that heartbeats as told is never timed out (a short
    /// `--session-timeout-ms` would otherwise end every idle session).
    pub(crate) fn heartbeat_interval(&self) -> Duration {
        let cap = (self.session_timeout_ms / 3).max(1);
        Duration::from_millis(self.heartbeat_interval_ms.clamp(1, cap))
    }

    pub(crate) fn session_timeout(&self) -> Duration {
        Duration::from_millis(self.session_timeout_ms.max(1))
    }
}

/// What every handler shares.
pub(crate) struct Shared {
    pub(crate) config: FrontendConfig,
    /// The frontend's view of the store: it has no `commit`, so it cannot write history.
    pub(crate) store: Arc<dyn FrontendStore>,
    pub(crate) owner: Arc<dyn OwnerService>,
    /// Notified by the owner after it commits new task rows.
    pub(crate) tasks_ready: Arc<Notify>,
    /// Tells watchers which executions' histories grew.
    pub(crate) changes: Arc<ChangeHub>,
    pub(crate) defs: defs::DefinitionCache,
    pub(crate) sessions: worker::Registry,
    /// Workflow and definition of recently dispatched runs, by (execution id, run).
    pub(crate) contexts:
        std::sync::Mutex<std::collections::HashMap<(String, u32), worker::Context>>,
    /// When this frontend was built, epoch milliseconds (reported by `ClusterStatus`).
    pub(crate) started_at_ms: u64,
    /// Whether the sampler watches the queue for the whole frontend (see `sampler`): its
    /// safety-net read wakes the sessions a queued row is for, so sessions keep no
    /// fallback timer of their own (one read per safety net, however many sessions).
    pub(crate) queue_watched: std::sync::atomic::AtomicBool,
    /// Credits of drained sessions lent to owners (the split's hand-off, `worker::lend`).
    pub(crate) lending: Arc<worker::Lending>,
}

/// The frontend: build it, then hand [`Frontend::services`] to a server.
#[derive(Clone)]
pub struct Frontend {
    shared: Arc<Shared>,
}

impl Frontend {
    /// Where an owner of the same process hands new tasks straight to this frontend's worker
    /// sessions (`Owner::set_handoff` in `orbit dev`; see `orbit_store::handoff`).
    #[must_use]
    pub fn handoff(&self) -> Arc<dyn orbit_store::Handoff> {
        Arc::new(worker::Handoffs { shared: Arc::downgrade(&self.shared) })
    }

    /// Keeps one `HandoffService.Lend` stream to the owner `owner` (node id) until it ends
    /// (see `worker::lend`): `open` starts the call with the requests to send. Returns when
    /// the stream ends; the caller opens another while the owner lives.
    pub async fn lend_to<F>(&self, owner: String, open: F)
    where
        F: FnOnce(
            tokio::sync::mpsc::UnboundedReceiver<orbit_api::internal::v1::LendRequest>,
        ) -> futures_util::future::BoxFuture<
            'static,
            Result<tonic::Streaming<orbit_api::internal::v1::LendResponse>, tonic::Status>,
        >,
    {
        worker::lend::run(self.shared.clone(), owner, open).await;
    }

    /// A frontend over `store`, routing commands to `owner` (the in-process owner in
    /// `orbit dev`, a gRPC client wrapper otherwise). `tasks_ready` is notified (with
    /// `notify_waiters`) whenever new task rows are committed; `changes` publishes the
    /// executions whose histories grew (watch streams wait on it instead of polling).
    #[must_use]
    pub fn new(
        config: FrontendConfig,
        store: Arc<dyn FrontendStore>,
        owner: Arc<dyn OwnerService>,
        tasks_ready: Arc<Notify>,
        changes: Arc<ChangeHub>,
    ) -> Frontend {
        let started_at_ms = config.clock.now();
        Frontend {
            shared: Arc::new(Shared {
                config,
                store,
                owner,
                tasks_ready,
                changes,
                defs: defs::DefinitionCache::default(),
                sessions: worker::Registry::default(),
                contexts: std::sync::Mutex::default(),
                started_at_ms,
                queue_watched: std::sync::atomic::AtomicBool::new(false),
                lending: Arc::default(),
            }),
        }
    }

    /// The `WorkflowService` implementation.
    #[must_use]
    pub fn workflow_api(&self) -> WorkflowApi {
        WorkflowApi::new(self.shared.clone())
    }

    /// The `WorkerService` implementation.
    #[must_use]
    pub fn worker_api(&self) -> WorkerApi {
        WorkerApi::new(self.shared.clone())
    }

    /// The `AdminService` implementation.
    #[must_use]
    pub fn admin_api(&self) -> AdminApi {
        AdminApi::new(self.shared.clone())
    }

    /// `AdminService`, ready to add to a tonic router.
    #[must_use]
    pub fn admin_service(&self) -> AdminServiceServer<AdminApi> {
        AdminServiceServer::new(self.admin_api())
    }

    /// The `ScheduleService` implementation. `wake` is notified when a schedule's due time
    /// may have moved nearer: `orbit dev` passes its scheduler's `Notify`; split frontends
    /// pass any (the store's `orbit_timers` notification wakes the schedulers there).
    #[must_use]
    pub fn schedule_api(&self, wake: Arc<Notify>) -> ScheduleApi {
        ScheduleApi::new(self.shared.clone(), wake)
    }

    /// `ScheduleService`, ready to add to a tonic router (see [`Frontend::schedule_api`]).
    #[must_use]
    pub fn schedule_service(
        &self,
        wake: Arc<Notify>,
    ) -> orbit_api::v1::schedule_service_server::ScheduleServiceServer<ScheduleApi> {
        orbit_api::v1::schedule_service_server::ScheduleServiceServer::new(self.schedule_api(wake))
    }

    /// Serves the public API (workflows, workers, admin, schedules — with health and reflection) on
    /// `listener` until `shutdown`, after handing back the claims of a previous run (retried
    /// while the store answers `Unavailable`).
    ///
    /// # Errors
    /// The store cannot be read, or the server fails.
    pub async fn serve(
        self,
        listener: tokio::net::TcpListener,
        shutdown: tokio_util::sync::CancellationToken,
    ) -> Result<(), Box<dyn std::error::Error + Send + Sync>> {
        self.serve_with(listener, shutdown, orbit_server_kit::ConnectionOptions::default()).await
    }

    /// [`Frontend::serve`] with the given keepalive and idle settings for connections.
    ///
    /// # Errors
    /// The store cannot be read, or the server fails.
    pub async fn serve_with(
        self,
        listener: tokio::net::TcpListener,
        shutdown: tokio_util::sync::CancellationToken,
        connections: orbit_server_kit::ConnectionOptions,
    ) -> Result<(), Box<dyn std::error::Error + Send + Sync>> {
        // Retried while the database is briefly away: the port is bound and announced.
        let what = "hand back a previous run's claims";
        let transient =
            |e: &orbit_store::StoreError| matches!(e, orbit_store::StoreError::Unavailable(_));
        let recovered = orbit_server_kit::while_unavailable(what, &shutdown, transient, || {
            self.recover_claims()
        })
        .await?;
        if recovered.is_none() {
            return Ok(());
        }
        let (workflows, workers) = self.services();
        orbit_server_kit::ServerKit::new()
            .connections(connections)
            .register_file_descriptor_set(orbit_api::FILE_DESCRIPTOR_SET)
            .add_service(workflows)
            .add_service(workers)
            .add_service(self.admin_service())
            .add_service(self.schedule_service(Arc::new(Notify::new())))
            .serve(listener, shutdown)
            .await?;
        Ok(())
    }

    /// Both services, ready to add to a tonic router.
    #[must_use]
    pub fn services(&self) -> (WorkflowServiceServer<WorkflowApi>, WorkerServiceServer<WorkerApi>) {
        (
            WorkflowServiceServer::new(self.workflow_api()),
            WorkerServiceServer::new(self.worker_api()),
        )
    }

    /// Hands back what a previous run of this frontend (same node id) left claimed: its
    /// sessions died with it, so each attempt still claimed becomes uncertain and the owner
    /// redelivers it (a worker that later reports it anyway still counts, rule 4). Call it
    /// before serving.
    ///
    /// # Errors
    /// The store cannot be read or written.
    pub async fn recover_claims(&self) -> Result<usize, orbit_store::StoreError> {
        claims::recover(&self.shared).await
    }

    /// Every `interval` until `shutdown`: hands back the claims of frontends with no live
    /// heartbeat within `node_timeout_ms` (killed, or cut off), so their attempts become
    /// uncertain and are redelivered. Results workers send later for those tokens, through
    /// any frontend, are still recorded. Errors are logged and retried.
    pub async fn run_sweeper(
        &self,
        node_timeout_ms: u64,
        interval: Duration,
        shutdown: tokio_util::sync::CancellationToken,
    ) {
        claims::sweep_until(&self.shared, node_timeout_ms, interval, shutdown).await;
    }

    /// Hands back the claims of dead frontends (as [`Frontend::run_sweeper`]) once at start,
    /// then whenever `changes` moves (the live nodes differ: a frontend went silent past
    /// `node_timeout_ms` or left; see `orbit_cluster::Membership::changes`), and at least
    /// every `safety_net`. A failed sweep is retried after a second. While idle it makes
    /// no query between two safety nets.
    pub async fn run_sweeper_on(
        &self,
        node_timeout_ms: u64,
        changes: tokio::sync::watch::Receiver<u64>,
        safety_net: Duration,
        shutdown: tokio_util::sync::CancellationToken,
    ) {
        claims::sweep_on(&self.shared, node_timeout_ms, changes, safety_net, shutdown).await;
    }

    /// One sweep (see [`Frontend::run_sweeper`]); returns how many claims were handed back.
    ///
    /// # Errors
    /// The store cannot be read or written.
    pub async fn sweep_once(&self, node_timeout_ms: u64) -> Result<usize, orbit_store::StoreError> {
        claims::sweep(&self.shared, node_timeout_ms).await
    }

    /// Samples this frontend's worker sessions and credits, and the task backlog (one
    /// grouped read of the queued rows), into their gauges every `interval` until
    /// `shutdown`; the backlog is read only while rows are queued, after a "tasks ready"
    /// signal, or every `dispatch_fallback_ms` (see `sampler`). While it runs it is also
    /// the sessions' safety net for a lost "tasks ready" signal: a read that finds rows a
    /// session with credits may claim wakes that session, which then needs no fallback
    /// timer of its own.
    pub async fn run_metrics_sampler(
        &self,
        interval: Duration,
        shutdown: tokio_util::sync::CancellationToken,
    ) {
        sampler::run(self.shared.clone(), interval, shutdown).await;
    }

    /// A compact JSON summary of the worker sessions open on this frontend (`None`: none),
    /// for its membership heartbeat to write, so `ListWorkers` on every frontend lists them
    /// (`orbit_cluster::Membership::report_with`).
    #[must_use]
    pub fn sessions_report(&self) -> Option<String> {
        admin::sessions_report(&self.shared.config.node_id, &self.shared.sessions.snapshot())
    }

    /// Worker sessions currently open on this frontend.
    #[must_use]
    pub fn open_sessions(&self) -> usize {
        self.shared.sessions.len()
    }
}
