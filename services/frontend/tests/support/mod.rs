//! The server every frontend test talks to: a real SQLite store in a temp dir, the real
//! owner in the same process, and the frontend's own `serve` on a loopback port.
#![allow(dead_code, missing_docs)]

use orbit_api::v1::admin_service_client::AdminServiceClient;
use orbit_api::v1::server_message::{Kind as ServerKind, Task};
use orbit_api::v1::worker_message::{Credits, Hello, Kind as WorkerKind};
use orbit_api::v1::worker_service_client::WorkerServiceClient;
use orbit_api::v1::workflow_service_client::WorkflowServiceClient;
use orbit_api::v1::{ServerMessage, TaskRef, WorkerMessage};
use orbit_frontend::{Frontend, FrontendConfig};
use orbit_owner::{Owner, OwnerConfig};
use orbit_server_kit::{ErrorCode, OrbitError};
use orbit_store::{ChangeHub, SqliteStore, Store};
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::mpsc;
use tokio::sync::Notify;
use tokio_util::sync::CancellationToken;
use tonic::transport::Channel;
use tonic::Status;

pub struct Harness {
    _dir: tempfile::TempDir,
    pub workflows: WorkflowServiceClient<Channel>,
    pub workers: WorkerServiceClient<Channel>,
    pub admin: AdminServiceClient<Channel>,
}

/// A real SQLite store in `dir`, the real owner running in this process, and a frontend
/// configured by `config` in front of them (not serving yet).
pub async fn frontend(dir: &tempfile::TempDir, config: FrontendConfig) -> Frontend {
    frontend_and_owner(dir, config).await.0
}

/// Starts a store, an owner and a frontend configured by `config`.
pub async fn harness(config: FrontendConfig) -> Harness {
    let dir = tempfile::tempdir().unwrap();
    let frontend = frontend(&dir, config).await;
    serve(dir, frontend).await
}

/// [`harness`] wired as `orbit dev` wires it: the owner hands new tasks straight to the
/// frontend's sessions, through `wrap` (a test's view of the hand-offs). Returns the
/// frontend too.
pub async fn handoff_harness(
    config: FrontendConfig,
    wrap: impl FnOnce(Arc<dyn orbit_store::Handoff>) -> Arc<dyn orbit_store::Handoff>,
) -> (Harness, Frontend) {
    let dir = tempfile::tempdir().unwrap();
    let (frontend, owner) = frontend_and_owner(&dir, config).await;
    owner.set_handoff(wrap(frontend.handoff()));
    (serve(dir, frontend.clone()).await, frontend)
}

/// A store in `dir` and a running owner over it, with the wake-ups a frontend shares.
#[allow(dead_code)] // Not every test binary that includes `support` builds its own frontend.
pub async fn store_and_owner(
    dir: &tempfile::TempDir,
) -> (Arc<dyn Store>, Owner, Arc<Notify>, Arc<ChangeHub>) {
    let store = SqliteStore::open_and_migrate(dir.path().join("orbit.db")).await.unwrap();
    let store: Arc<dyn Store> = Arc::new(store);
    let ready = Arc::new(Notify::new());
    let changes = Arc::new(ChangeHub::new());
    let owner = Owner::new(
        OwnerConfig::default(),
        store.clone(),
        ready.clone(),
        Arc::new(Notify::new()),
        changes.clone(),
    );
    let running = owner.clone();
    tokio::spawn(async move { running.run(CancellationToken::new()).await });
    (store, owner, ready, changes)
}

async fn frontend_and_owner(dir: &tempfile::TempDir, config: FrontendConfig) -> (Frontend, Owner) {
    let (store, owner, ready, changes) = store_and_owner(dir).await;
    (Frontend::new(config, store, Arc::new(owner.clone()), ready, changes), owner)
}

async fn serve(dir: tempfile::TempDir, frontend: Frontend) -> Harness {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    // The frontend's own `serve`: the same server a standalone frontend process runs.
    tokio::spawn(frontend.serve(listener, CancellationToken::new()));
    let channel = Channel::from_shared(format!("http://{addr}")).unwrap().connect().await.unwrap();
    Harness {
        _dir: dir,
        workflows: WorkflowServiceClient::new(channel.clone()),
        workers: WorkerServiceClient::new(channel.clone()),
        admin: AdminServiceClient::new(channel),
    }
}

/// The sending half of a worker stream.
pub type Outbound = mpsc::Sender<WorkerMessage>;

/// A worker message of this kind.
pub fn say(kind: WorkerKind) -> WorkerMessage {
    WorkerMessage { kind: Some(kind) }
}

/// Opens a worker session serving `task` (version "1") as `worker_id`, waits for its
/// welcome and gives it `credits`.
pub async fn open_session(
    workers: &mut WorkerServiceClient<Channel>,
    worker_id: &str,
    task: &str,
    max_concurrency: u32,
    credits: u32,
) -> (Outbound, tonic::Streaming<ServerMessage>) {
    let (tx, rx) = mpsc::channel(16);
    let stream = tokio_stream::wrappers::ReceiverStream::new(rx);
    let mut inbound = workers.session(stream).await.unwrap().into_inner();
    let hello = Hello {
        worker_id: worker_id.into(),
        tasks: vec![TaskRef { name: task.into(), version: "1".into() }],
        max_concurrency,
        ..Default::default()
    };
    tx.send(say(WorkerKind::Hello(hello))).await.unwrap();
    let ServerKind::Welcome(_) = next(&mut inbound).await else { panic!("welcome first") };
    tx.send(say(WorkerKind::Credits(Credits { n: credits }))).await.unwrap();
    (tx, inbound)
}

/// The next task on the stream, skipping the acks of results before it.
pub async fn next_task(inbound: &mut tonic::Streaming<ServerMessage>) -> Task {
    loop {
        match next(inbound).await {
            ServerKind::Task(t) => return t,
            ServerKind::Ack(_) => continue,
            other => panic!("expected a task, got {other:?}"),
        }
    }
}

/// The next server message that is not a ping (bounded wait).
pub async fn next(inbound: &mut tonic::Streaming<ServerMessage>) -> ServerKind {
    loop {
        let message = tokio::time::timeout(Duration::from_secs(10), inbound.message())
            .await
            .expect("a server message in time")
            .unwrap()
            .expect("the stream is open");
        match message.kind.unwrap() {
            ServerKind::Ping(_) => continue,
            other => return other,
        }
    }
}

/// The Orbit error code a status carries.
pub fn code(status: &Status) -> ErrorCode {
    OrbitError::from_status(status).unwrap_or_else(|| panic!("no orbit code: {status:?}")).code
}
pub mod topology;
