//! The flags of `orbit frontend`, `orbit owner` and `orbit scheduler`, each also read from
//! its `ORBIT_*` environment variable.

use std::net::SocketAddr;
use std::path::PathBuf;

/// Keepalive, idle, TLS and service-mesh settings of the connections a server accepts
/// (`orbit dev` and every split service). 0 turns a setting off.
#[derive(clap::Args, Debug, Clone)]
pub struct ConnectionArgs {
    /// Close a client connection that has had no open call for this long (a worker's
    /// session stream is an open call, so it stays up). 0: never.
    /// Example: --idle-timeout-ms 600000
    #[arg(long, env = "ORBIT_IDLE_TIMEOUT_MS", default_value_t = 300_000, value_name = "MS")]
    pub idle_timeout_ms: u64,
    /// Send an HTTP/2 keepalive ping on every connection this often, to find dead peers
    /// on quiet connections. 0: never. Example: --http2-keepalive-interval-ms 10000
    #[arg(
        long,
        env = "ORBIT_HTTP2_KEEPALIVE_INTERVAL_MS",
        default_value_t = 30_000,
        value_name = "MS"
    )]
    pub http2_keepalive_interval_ms: u64,
    /// Close a connection whose keepalive ping is not answered within this long.
    /// Example: --http2-keepalive-timeout-ms 5000
    #[arg(
        long,
        env = "ORBIT_HTTP2_KEEPALIVE_TIMEOUT_MS",
        default_value_t = 20_000,
        value_name = "MS"
    )]
    pub http2_keepalive_timeout_ms: u64,
    /// TCP keepalive idle time on accepted sockets (the kernel probes a silent peer after
    /// it). 0: off. Example: --tcp-keepalive-ms 30000
    #[arg(long, env = "ORBIT_TCP_KEEPALIVE_MS", default_value_t = 60_000, value_name = "MS")]
    pub tcp_keepalive_ms: u64,
    #[command(flatten)]
    pub tls: crate::tls_args::TlsArgs,
    #[command(flatten)]
    pub mesh: crate::mesh_args::MeshArgs,
}

impl ConnectionArgs {
    /// The settings for the server builder.
    pub fn options(&self) -> orbit_server_kit::ConnectionOptions {
        let ms = |v: u64| (v > 0).then(|| std::time::Duration::from_millis(v));
        orbit_server_kit::ConnectionOptions {
            idle_timeout: ms(self.idle_timeout_ms),
            http2_keepalive_interval: ms(self.http2_keepalive_interval_ms),
            http2_keepalive_timeout: ms(self.http2_keepalive_timeout_ms),
            tcp_keepalive: ms(self.tcp_keepalive_ms),
            tls: self.tls.files(),
            // Set by the caller from `AuthArgs` (`crate::auth_args::Gate`).
            gate: None,
            // Set by the caller once its probes exist (`crate::admin_args`).
            readiness: None,
        }
    }

    /// Flag combinations clap cannot check by itself (the mesh flags against TLS).
    pub fn check(&self) -> Result<(), String> {
        self.mesh.check(&self.tls)
    }
}

/// Flags every split service takes.
#[derive(clap::Args, Debug, Clone)]
pub struct CommonArgs {
    /// The shared database every service of the cluster uses. PostgreSQL
    /// (`postgres://user:pass@host:5432/orbit?sslmode=require`; sslmode disable, prefer,
    /// require, verify-ca or verify-full), or `sqlite:///path/orbit.db` to try the split services on ONE
    /// machine (no cross-process notifications: wake-ups fall back to a 100 ms poll).
    /// Example: --database-url postgres://orbit:secret@db:5432/orbit?sslmode=verify-full
    #[arg(long, env = "ORBIT_DATABASE_URL", value_name = "URL")]
    pub database_url: String,
    /// PEM file of the CA that signed the PostgreSQL server's certificate, for
    /// sslmode=verify-ca or verify-full (with require, the chain is then verified too) when
    /// the system roots do not include it.
    /// Example: --database-ca-file /etc/orbit/db-ca.pem
    #[arg(long, env = "ORBIT_DATABASE_CA_FILE", value_name = "PEM")]
    pub database_ca_file: Option<PathBuf>,
    /// Database connections this process keeps open at most. Example: --pool-size 32
    #[arg(long, env = "ORBIT_POOL_SIZE", default_value_t = 16, value_name = "N")]
    pub pool_size: u32,
    /// Address to serve gRPC on (default: 127.0.0.1:7233 for a frontend, :7234 for an
    /// owner, :7235 for a scheduler; port 0 picks a free port).
    /// Example: --listen 0.0.0.0:7234
    #[arg(long, env = "ORBIT_LISTEN", value_name = "HOST:PORT")]
    pub listen: Option<SocketAddr>,
    /// Address other services reach this one at, recorded in the `nodes` table (default:
    /// the bound listen address). Set it when listening on 0.0.0.0 or behind NAT.
    /// Example: --advertise owner-1.orbit.svc:7234
    #[arg(long, env = "ORBIT_ADVERTISE", value_name = "HOST:PORT")]
    pub advertise: Option<String>,
    /// Stable node id; a restarted process with the same id resumes its own work (default:
    /// `<service>-<port>`). Example: --node-id owner-1
    #[arg(long, env = "ORBIT_NODE_ID", value_name = "ID")]
    pub node_id: Option<String>,
    /// A node whose last heartbeat (database clock) is older than this is dead: owners
    /// take over its executions, frontends hand back its claims. PostgreSQL also ends this
    /// node's sessions left idle inside a transaction this long (a paused process's row
    /// locks go with its liveness). Example: --node-timeout-ms 5000
    #[arg(long, env = "ORBIT_NODE_TIMEOUT_MS", default_value_t = 10_000, value_name = "MS")]
    pub node_timeout_ms: u64,
    /// How often this node heartbeats (well below --node-timeout-ms). Each beat is one
    /// transaction that also reads the live nodes: an idle node's cost is about one
    /// transaction per beat (the default, 2 s, keeps an idle node under one transaction
    /// per second with its 30 s safety nets), and a dead node is noticed within
    /// --node-timeout-ms plus one beat. Example: --heartbeat-ms 500
    #[arg(long, env = "ORBIT_HEARTBEAT_MS", default_value_t = 2_000, value_name = "MS")]
    pub heartbeat_ms: u64,
    /// Start even if another process heartbeats this --node-id (by default a live
    /// duplicate makes the start fail with exit code 6; a process that died is waited out
    /// for at most --node-timeout-ms). Use it only when the other process is gone for
    /// good: two live processes with one id fence each other. Example: --take-over
    #[arg(
        long,
        env = "ORBIT_TAKE_OVER",
        value_parser = clap::builder::BoolishValueParser::new(),
        action = clap::ArgAction::SetTrue
    )]
    pub take_over: bool,
    #[command(flatten)]
    pub schema: crate::migrate::NoMigrateArg,
    /// Log filter (`info`, `debug`, `orbit_owner=debug,info`, ...). Example: --log debug
    #[arg(long, env = "ORBIT_LOG", default_value = "info", value_name = "FILTER")]
    pub log: String,
    #[command(flatten)]
    pub connections: ConnectionArgs,
    /// TLS of the calls this service makes to owners.
    #[command(flatten)]
    pub client_tls: orbit_cli::flags::ClientTlsArgs,
    /// Who may call this service, and the opt-out of the safe defaults.
    #[command(flatten)]
    pub auth: crate::auth_args::AuthArgs,
    /// Bearer token this service sends on its calls to other services (owners), when
    /// their identities file holds it as a `service` identity. A client certificate
    /// (--tls-client-cert) of a service identity works too. Never logged.
    /// Example: ORBIT_SERVICE_TOKEN=5c0e... (prefer the variable: flags show in `ps`)
    #[arg(long, env = "ORBIT_SERVICE_TOKEN", hide_env_values = true, value_name = "TOKEN")]
    pub service_token: Option<crate::auth_args::Secret>,
    /// OpenTelemetry traces.
    #[command(flatten)]
    pub traces: crate::trace_args::TraceArgs,
    #[command(flatten)]
    pub admin: crate::admin_args::AdminArgs,
}

/// Options of `orbit owner`.
#[derive(clap::Args, Debug)]
#[command(
    after_help = "Example:\n  ORBIT_DATABASE_URL=postgres://orbit:orbit@localhost/orbit \\\n    orbit owner --node-id owner-1 --listen 0.0.0.0:7234 --advertise owner-1:7234"
)]
pub struct OwnerArgs {
    #[command(flatten)]
    pub common: CommonArgs,
    /// Poison quarantine: an execution whose processing failed this many times (a caught
    /// panic, or an owner process ending while applying its entries — counted in the
    /// database, across restarts and owners) is parked as SUSPENDED until
    /// `orbit execution resume|terminate`. Example: --max-failures 5
    #[arg(long, env = "ORBIT_MAX_FAILURES", default_value_t = 3, value_name = "N",
          value_parser = clap::value_parser!(u32).range(1..))]
    pub max_failures: u32,
    #[command(flatten)]
    pub retention: crate::retention::RetentionArg,
    #[command(flatten)]
    pub limits: crate::limit_args::LimitArgs,
    #[command(flatten)]
    pub http_step: crate::http_step::HttpCapabilityArg,
}

/// Options of `orbit frontend`.
#[derive(clap::Args, Debug)]
#[command(
    after_help = "Example:\n  ORBIT_DATABASE_URL=postgres://orbit:orbit@localhost/orbit \\\n    orbit frontend --node-id frontend-1 --listen 0.0.0.0:7233"
)]
pub struct FrontendArgs {
    #[command(flatten)]
    pub common: CommonArgs,
    /// How long a worker session may stay silent before its attempts become uncertain; a
    /// worker whose stream broke and that reconnects (same worker id) within it keeps
    /// them. Workers are told to heartbeat at most every third of it.
    /// Example: --session-timeout-ms 15000
    #[arg(long, env = "ORBIT_SESSION_TIMEOUT_MS", default_value_t = 30_000, value_name = "MS")]
    pub session_timeout_ms: u64,
    /// How long a signal or cancel waits for the owner's reply before UNAVAILABLE (the
    /// command stays queued and is applied later). Example: --reply-timeout-ms 5000
    #[arg(long, env = "ORBIT_REPLY_TIMEOUT_MS", default_value_t = 10_000, value_name = "MS")]
    pub reply_timeout_ms: u64,
    #[command(flatten)]
    pub payload: crate::limit_args::PayloadLimitArg,
    #[command(flatten)]
    pub http_step: crate::http_step::FrontendHttpArgs,
    #[command(flatten)]
    pub rate_limits: crate::rate_limit_args::RateLimitArgs,
}

/// Options of `orbit scheduler`.
#[derive(clap::Args, Debug)]
#[command(
    after_help = "Example:\n  ORBIT_DATABASE_URL=postgres://orbit:orbit@localhost/orbit \\\n    orbit scheduler --node-id scheduler-1 --listen 0.0.0.0:7235"
)]
pub struct SchedulerArgs {
    #[command(flatten)]
    pub common: CommonArgs,
    #[command(flatten)]
    pub sweep: crate::retention::SweepArgs,
}

impl CommonArgs {
    /// Flag combinations clap cannot check by itself.
    pub fn check(&self) -> Result<(), String> {
        if self.heartbeat_ms == 0 || self.heartbeat_ms >= self.node_timeout_ms {
            return Err(format!(
                "--heartbeat-ms ({}) must be above 0 and below --node-timeout-ms ({})",
                self.heartbeat_ms, self.node_timeout_ms
            ));
        }
        if self.pool_size == 0 {
            return Err("--pool-size must be at least 1".into());
        }
        self.connections.check()
    }
}
