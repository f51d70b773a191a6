//! The split topology in one test process: owners and frontends as separate nodes that
//! share only the SQLite store and gRPC — each has its own wake-ups and change hub, its own
//! membership heartbeat, and frontends reach owners through `RemoteOwners` on loopback. No
//! database notifications cross nodes here, so every cross-node wake-up goes by the
//! fallbacks (idle passes, dispatch fallback, reply re-reads): slower, never wrong.

use orbit_api::v1::admin_service_client::AdminServiceClient;
use orbit_api::v1::worker_service_client::WorkerServiceClient;
use orbit_api::v1::workflow_service_client::WorkflowServiceClient;
use orbit_cluster::{Membership, MembershipConfig, RemoteOwners, RetryPolicy};
use orbit_frontend::{Frontend, FrontendConfig};
use orbit_owner::{Owner, OwnerConfig};
use orbit_store::{ChangeHub, SqliteStore, Store};
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::Notify;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;
use tonic::transport::Channel;

/// Liveness timeout of every node.
pub const NODE_TIMEOUT_MS: u64 = 600;
const HEARTBEAT: Duration = Duration::from_millis(50);

/// One node: its address, and how to stop it cleanly or kill it.
pub struct Node {
    pub node_id: String,
    pub addr: SocketAddr,
    stop: CancellationToken,
    beat: JoinHandle<()>,
}

impl Node {
    /// Stops serving and heartbeating without leaving the cluster, like SIGKILL: the row
    /// stays until it times out.
    pub fn kill(&self) {
        self.beat.abort();
        self.stop.cancel();
    }
}

/// Owners and frontends on one store.
pub struct Topology {
    _dir: tempfile::TempDir,
    pub store: Arc<dyn Store>,
    pub owners: Vec<Node>,
    pub frontends: Vec<Node>,
}

async fn join(
    store: &Arc<dyn Store>,
    node_id: &str,
    service: &str,
    addr: SocketAddr,
) -> Membership {
    let m = Membership::new(
        store.clone(),
        MembershipConfig {
            node_id: node_id.into(),
            service: service.into(),
            addr: Some(addr.to_string()),
            heartbeat_interval: HEARTBEAT,
            node_timeout_ms: NODE_TIMEOUT_MS,
        },
    );
    m.beat().await.unwrap();
    m
}

async fn owner(store: &Arc<dyn Store>, node_id: &str) -> Node {
    let owner = Owner::new(
        OwnerConfig {
            node_id: node_id.into(),
            idle_pass: Duration::from_millis(30),
            node_timeout_ms: NODE_TIMEOUT_MS,
            takeover_interval: Some(Duration::from_millis(100)),
            ..OwnerConfig::default()
        },
        store.clone(),
        Arc::new(Notify::new()),
        Arc::new(Notify::new()),
        Arc::new(ChangeHub::new()),
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let membership = join(store, node_id, "owner", addr).await;
    let stop = CancellationToken::new();
    tokio::spawn(owner.serve(listener, stop.clone()));
    let beat = tokio::spawn({
        let stop = stop.clone();
        async move { membership.run(stop).await }
    });
    Node { node_id: node_id.into(), addr, stop, beat }
}

async fn frontend(store: &Arc<dyn Store>, node_id: &str) -> Node {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let membership = join(store, node_id, "frontend", addr).await;
    let retry = RetryPolicy { total: Duration::from_secs(5), ..RetryPolicy::default() };
    let owners = Arc::new(RemoteOwners::new(membership.clone(), retry));
    let frontend = Frontend::new(
        FrontendConfig {
            node_id: node_id.into(),
            dispatch_fallback_ms: 20,
            node_timeout_ms: NODE_TIMEOUT_MS,
            reply_timeout_ms: 5_000,
            ..FrontendConfig::default()
        },
        store.clone(),
        owners,
        Arc::new(Notify::new()),
        Arc::new(ChangeHub::new()),
    );
    let stop = CancellationToken::new();
    tokio::spawn(frontend.clone().serve(listener, stop.clone()));
    tokio::spawn({
        let (frontend, stop) = (frontend.clone(), stop.clone());
        async move {
            frontend.run_sweeper(NODE_TIMEOUT_MS, Duration::from_millis(100), stop).await;
        }
    });
    let beat = tokio::spawn({
        let stop = stop.clone();
        async move { membership.run(stop).await }
    });
    Node { node_id: node_id.into(), addr, stop, beat }
}

impl Topology {
    /// `owners` owners (`owner-1`, ...) and `frontends` frontends (`frontend-1`, ...).
    pub async fn start(owners: usize, frontends: usize) -> Topology {
        let dir = tempfile::tempdir().unwrap();
        let store: Arc<dyn Store> =
            Arc::new(SqliteStore::open_and_migrate(dir.path().join("orbit.db")).await.unwrap());
        let mut topo = Topology { _dir: dir, store, owners: Vec::new(), frontends: Vec::new() };
        for i in 1..=owners {
            topo.owners.push(owner(&topo.store, &format!("owner-{i}")).await);
        }
        for i in 1..=frontends {
            topo.frontends.push(frontend(&topo.store, &format!("frontend-{i}")).await);
        }
        topo
    }

    async fn channel(&self, i: usize) -> Channel {
        let url = format!("http://{}", self.frontends[i].addr);
        for _ in 0..100 {
            if let Ok(c) = Channel::from_shared(url.clone()).unwrap().connect().await {
                return c;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        panic!("frontend {i} does not accept connections");
    }

    /// A workflow client of frontend `i`.
    pub async fn workflows(&self, i: usize) -> WorkflowServiceClient<Channel> {
        WorkflowServiceClient::new(self.channel(i).await)
    }

    /// A worker client of frontend `i`.
    pub async fn workers(&self, i: usize) -> WorkerServiceClient<Channel> {
        WorkerServiceClient::new(self.channel(i).await)
    }

    /// An admin client of frontend `i`.
    pub async fn admin(&self, i: usize) -> AdminServiceClient<Channel> {
        AdminServiceClient::new(self.channel(i).await)
    }

    /// The node id in the owners row of `id`.
    pub async fn owner_of(&self, id: &str) -> (String, u64) {
        let o = self.store.get_owner(id).await.unwrap().unwrap();
        (o.node_id, o.epoch)
    }
}

impl Drop for Topology {
    fn drop(&mut self) {
        for n in self.owners.iter().chain(&self.frontends) {
            n.kill();
        }
    }
}
