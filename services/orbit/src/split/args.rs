//! The flags of `orbit frontend`, `orbit owner` and `orbit scheduler`, each also read from
//! its `ORBIT_*` environment variable.

use std::net::SocketAddr;
use std::path::PathBuf;

/// Flags every split service takes.
#[derive(clap::Args, Debug, Clone)]
pub struct CommonArgs {
    /// The shared database every service of the cluster uses. PostgreSQL
    /// (`postgres://user:pass@host:5432/orbit?sslmode=require`; sslmode disable, prefer,
    /// require or verify-full), or `sqlite:///path/orbit.db` to try the split services on ONE
    /// machine (no cross-process notifications: wake-ups fall back to a 100 ms poll).
    /// Example: --database-url postgres://orbit:secret@db:5432/orbit?sslmode=verify-full
    #[arg(long, env = "ORBIT_DATABASE_URL", value_name = "URL")]
    pub database_url: String,
    /// PEM file of the CA that signed the PostgreSQL server's certificate, for
    /// sslmode=verify-full when the system roots do not include it.
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
    /// take over its executions, frontends hand back its claims. Example: --node-timeout-ms 5000
    #[arg(long, env = "ORBIT_NODE_TIMEOUT_MS", default_value_t = 10_000, value_name = "MS")]
    pub node_timeout_ms: u64,
    /// How often this node heartbeats (well below --node-timeout-ms).
    /// Example: --heartbeat-ms 500
    #[arg(long, env = "ORBIT_HEARTBEAT_MS", default_value_t = 1_000, value_name = "MS")]
    pub heartbeat_ms: u64,
    /// Log filter (`info`, `debug`, `orbit_owner=debug,info`, ...). Example: --log debug
    #[arg(long, env = "ORBIT_LOG", default_value = "info", value_name = "FILTER")]
    pub log: String,
}

/// Options of `orbit owner`.
#[derive(clap::Args, Debug)]
#[command(
    after_help = "Example:\n  ORBIT_DATABASE_URL=postgres://orbit:orbit@localhost/orbit \\\n    orbit owner --node-id owner-1 --listen 0.0.0.0:7234 --advertise owner-1:7234"
)]
pub struct OwnerArgs {
    #[command(flatten)]
    pub common: CommonArgs,
    #[command(flatten)]
    pub retention: crate::retention::RetentionArg,
}

/// Options of `orbit frontend`.
#[derive(clap::Args, Debug)]
#[command(
    after_help = "Example:\n  ORBIT_DATABASE_URL=postgres://orbit:orbit@localhost/orbit \\\n    orbit frontend --node-id frontend-1 --listen 0.0.0.0:7233"
)]
pub struct FrontendArgs {
    #[command(flatten)]
    pub common: CommonArgs,
    /// How long a worker session may stay silent before its attempts become uncertain.
    /// Example: --session-timeout-ms 15000
    #[arg(long, env = "ORBIT_SESSION_TIMEOUT_MS", default_value_t = 30_000, value_name = "MS")]
    pub session_timeout_ms: u64,
    /// How long a signal or cancel waits for the owner's reply before UNAVAILABLE (the
    /// command stays queued and is applied later). Example: --reply-timeout-ms 5000
    #[arg(long, env = "ORBIT_REPLY_TIMEOUT_MS", default_value_t = 10_000, value_name = "MS")]
    pub reply_timeout_ms: u64,
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
        Ok(())
    }
}
