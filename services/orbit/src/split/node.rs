//! What every split service does before serving and after: logs, flags, the bound
//! listener, the node id, the database (retried while it is unreachable, so services may
//! start before it), membership, the ready line, and a clean stop.

use super::args::CommonArgs;
use super::backend::{ConnectError, Database, DatabaseOptions};
use crate::admin_args::{DatabaseProbe, MembershipProbe};
use orbit_cluster::{
    claim_node_id, IdentityError, Membership, MembershipConfig, NodeIdClaim, RemoteOwners,
    RetryPolicy,
};
use orbit_server_kit::{signal_token, Readiness};
use std::net::SocketAddr;
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;
use tokio::net::TcpListener;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

/// How long a starting service keeps trying to reach the database.
const CONNECT_PATIENCE: Duration = Duration::from_secs(120);
/// The exit code of a service whose node id another live process runs.
pub const NODE_ID_IN_USE: u8 = 6;

/// A split service ready to serve.
pub struct Node {
    pub service: &'static str,
    pub node_id: String,
    pub listener: TcpListener,
    pub bound: SocketAddr,
    pub database: Database,
    pub membership: Membership,
    pub shutdown: CancellationToken,
    /// Authentication of every request (`--identities`); its reload stops with the node.
    pub gate: crate::auth_args::Gate,
    /// Flushes the last spans when the node is dropped (traces on).
    pub _traces: Option<orbit_telemetry::Guard>,
    /// Database, schema and membership, checked every second; `/readyz` and gRPC health
    /// follow it.
    pub readiness: Readiness,
    /// The admin port's extra routes: a frontend puts its web console here.
    pub admin_routes: orbit_server_kit::AdminSlot,
}

/// Prepares a node of `service`; an `Err` is the exit code (after saying why on stderr).
pub async fn prepare(
    service: &'static str,
    default_listen: &str,
    args: &CommonArgs,
) -> Result<Node, ExitCode> {
    let traces = args.traces.init(&format!("orbit-{service}"))?;
    crate::logs::init(&args.log);
    if let Err(e) = args.check().and_then(|()| args.auth.check(&args.connections)) {
        eprintln!("error: {e}");
        return Err(ExitCode::from(2));
    }
    let listen = match args.listen {
        Some(a) => a,
        None => default_listen.parse().map_err(|_| ExitCode::from(2))?,
    };
    let what = format!("orbit {service}");
    args.auth.enforce(&what, listen, &args.connections, true)?;
    let gate = args.auth.gate(&args.connections).map_err(|e| {
        eprintln!("error: {e}");
        ExitCode::from(crate::auth_args::REFUSED)
    })?;
    let listener = TcpListener::bind(listen).await.map_err(|e| {
        eprintln!("error: cannot listen on {listen}: {e}");
        ExitCode::from(5)
    })?;
    let bound = listener.local_addr().map_err(|e| {
        eprintln!("error: cannot read the bound address: {e}");
        ExitCode::from(5)
    })?;
    // Bound before the database is reached, so a bad address fails the start at once.
    let auth = args.auth.identities.is_some();
    let admin = args.admin.bind(bound, &args.connections.tls, auth).await?;
    let node_id = args.node_id.clone().unwrap_or_else(|| format!("{service}-{}", bound.port()));
    let shutdown = signal_token();
    let options = DatabaseOptions {
        url: args.database_url.clone(),
        ca_file: args.database_ca_file.clone(),
        pool_size: args.pool_size,
        application_name: format!("orbit-{node_id}"),
        // Others take this node's work over once it is silent this long; a transaction it
        // left open (paused between two round trips) must not hold their takeover back.
        idle_in_transaction_timeout: Duration::from_millis(args.node_timeout_ms),
        no_migrate: args.schema.no_migrate,
    };
    let database = connect(&options, &shutdown).await?;
    let membership = Membership::new(
        database.store.clone(),
        MembershipConfig {
            node_id: node_id.clone(),
            service: service.to_string(),
            addr: Some(args.advertise.clone().unwrap_or_else(|| bound.to_string())),
            heartbeat_interval: Duration::from_millis(args.heartbeat_ms),
            node_timeout_ms: args.node_timeout_ms,
        },
    );
    // One process per node id: checked before the first beat, which would overwrite the
    // other process's row.
    let poll = Duration::from_millis(args.heartbeat_ms);
    loop {
        let claim = claim_node_id(
            database.store.as_ref(),
            &node_id,
            args.node_timeout_ms,
            poll,
            args.take_over,
        );
        let outcome = tokio::select! {
            () = shutdown.cancelled() => return Err(ExitCode::from(4)),
            outcome = claim => outcome,
        };
        match outcome {
            Ok(NodeIdClaim::Free) => break,
            Ok(NodeIdClaim::Stale { waited }) => {
                tracing::info!(%node_id, ?waited, "the previous process of this node id stopped heartbeating; starting");
                break;
            }
            Ok(NodeIdClaim::TakenOver) => {
                tracing::warn!(%node_id, "taking over node id {node_id} from a process that still heartbeats it (--take-over)");
                break;
            }
            Err(IdentityError::InUse(in_use)) => {
                eprintln!("error: {in_use}");
                return Err(ExitCode::from(NODE_ID_IN_USE));
            }
            Err(IdentityError::Store(e)) => {
                tracing::warn!(error = %e, "cannot read the nodes table; retrying");
                tokio::select! {
                    () = shutdown.cancelled() => return Err(ExitCode::from(4)),
                    () = tokio::time::sleep(Duration::from_millis(500)) => {}
                }
            }
        }
    }
    // Registered before serving: owners must be routable, frontends must look alive before
    // they hand out claims.
    while let Err(e) = membership.beat().await {
        tracing::warn!(error = %e, "cannot register in the nodes table; retrying");
        tokio::select! {
            () = shutdown.cancelled() => return Err(ExitCode::from(4)),
            () = tokio::time::sleep(Duration::from_millis(500)) => {}
        }
    }
    let readiness = Readiness::new(vec![
        Arc::new(DatabaseProbe::with_heartbeat(database.store.clone(), membership.clone())),
        Arc::new(MembershipProbe(membership.clone())),
    ]);
    // Stops with the shutdown token; nothing waits for it.
    let admin_routes = orbit_server_kit::AdminSlot::default();
    let _ = crate::admin_args::start(&what, admin, &readiness, &admin_routes, &shutdown);
    Ok(Node {
        service,
        node_id,
        listener,
        bound,
        database,
        membership,
        shutdown,
        gate,
        readiness,
        admin_routes,
        _traces: traces,
    })
}

async fn connect(o: &DatabaseOptions, shutdown: &CancellationToken) -> Result<Database, ExitCode> {
    let started = tokio::time::Instant::now();
    let mut pause = Duration::from_millis(200);
    loop {
        match Database::connect(o).await {
            Ok(db) => return Ok(db),
            Err(ConnectError::Config(e)) => {
                eprintln!("error: {e}");
                return Err(ExitCode::from(2));
            }
            Err(ConnectError::Schema(e)) => {
                eprintln!("error: {e}");
                return Err(ExitCode::from(crate::migrate::SCHEMA_MISMATCH));
            }
            Err(ConnectError::Unreachable(e)) if started.elapsed() >= CONNECT_PATIENCE => {
                eprintln!("error: cannot reach the database: {e}");
                return Err(ExitCode::from(4));
            }
            Err(ConnectError::Unreachable(e)) => {
                tracing::warn!(error = %e, "cannot reach the database yet; retrying");
            }
        }
        tokio::select! {
            () = shutdown.cancelled() => return Err(ExitCode::from(4)),
            () = tokio::time::sleep(pause) => {}
        }
        pause = (pause * 2).min(Duration::from_secs(5));
    }
}

impl Node {
    /// The owners' `OwnerService` over gRPC, with this node's TLS options and service
    /// credentials (client certificate, `--service-token`).
    pub fn owners(&self, args: &CommonArgs) -> RemoteOwners {
        let owners = RemoteOwners::new(self.membership.clone(), RetryPolicy::default())
            .with_tls(args.client_tls.options());
        match &args.service_token {
            Some(token) => owners.with_bearer(token.bearer()),
            None => owners,
        }
    }

    /// The settings of the server this node serves: `args`' connection flags and the gate.
    pub fn connections(&self, args: &CommonArgs) -> orbit_server_kit::ConnectionOptions {
        orbit_server_kit::ConnectionOptions {
            gate: self.gate.gate.clone(),
            readiness: Some(self.readiness.clone()),
            ..args.connections.options()
        }
    }

    /// Starts heartbeating (until shutdown, then the node row is removed).
    pub fn heartbeat(&self) -> JoinHandle<()> {
        let (m, stop) = (self.membership.clone(), self.shutdown.clone());
        tokio::spawn(async move { m.run(stop).await })
    }

    /// The line tests and scripts wait for.
    pub fn announce(&self) {
        tracing::info!(service = self.service, node_id = %self.node_id, addr = %self.bound, "serving");
        eprintln!("orbit {} {} serving on {}", self.service, self.node_id, self.bound);
    }
}

/// Waits for the background tasks after the server stopped, and turns the outcome into the
/// exit code.
pub async fn finish(
    node_id: &str,
    served: Result<(), Box<dyn std::error::Error + Send + Sync>>,
    shutdown: &CancellationToken,
    tasks: Vec<JoinHandle<()>>,
) -> ExitCode {
    shutdown.cancel();
    for t in tasks {
        let _ = t.await;
    }
    match served {
        Ok(()) => {
            tracing::info!(node_id, "stopped");
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("error: {e}");
            ExitCode::from(4)
        }
    }
}
