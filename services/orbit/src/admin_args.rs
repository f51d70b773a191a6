//! The admin HTTP port of `orbit dev` and every split service (`--admin-listen`), and the
//! readiness probes the process is judged by: the database answers with the schema this
//! binary expects, and (split services) the node holds its membership.
//!
//! The default admin address is the gRPC host with the port plus 2000 (`orbit dev` and a
//! frontend on :7233 → :9233, an owner :7234 → :9234, a scheduler :7235 → :9235); with
//! gRPC on port 0 it is port 0 too. When that derived port is taken the process logs it
//! and serves the admin port on a free one instead (an explicit `--admin-listen` that
//! cannot be bound stops the start). The bound address is printed on stderr.
//!
//! The port speaks plain HTTP unless `--admin-tls`, which serves it over HTTPS with the gRPC
//! port's certificate (`--tls-cert`/`--tls-key`, reloaded the same way). It is off by default
//! so existing probes and scrapes keep working; with identities and TLS on and the admin port
//! not on loopback, a warning says the console's token crosses it in clear.

use crate::tls_args::TlsArgs;
use orbit_cluster::Membership;
use orbit_server_kit::tls::ReloadingConfig;
use orbit_server_kit::{AdminSlot, Probe, Readiness};
use orbit_store::Migrations;
use std::future::Future;
use std::net::SocketAddr;
use std::pin::Pin;
use std::process::ExitCode;
use std::sync::Arc;
use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;

/// How far the default admin port sits from the gRPC port.
pub const ADMIN_PORT_OFFSET: u16 = 2000;

/// The admin port flag.
#[derive(clap::Args, Debug, Clone, Default)]
pub struct AdminArgs {
    /// Address of the admin HTTP port (`/metrics`, `/healthz`, `/readyz`, and the web
    /// console `/ui` on `orbit dev` and frontends), or `off`.
    /// Default: the gRPC host, port + 2000 (7233 → 9233). Plain HTTP: keep it private.
    /// Example: --admin-listen 0.0.0.0:9233
    #[arg(long, env = "ORBIT_ADMIN_LISTEN", value_name = "HOST:PORT|off")]
    pub admin_listen: Option<String>,
    /// Serve the admin port over HTTPS with the --tls-cert/--tls-key of the gRPC port
    /// (reloaded with it; no client certificate asked). Needs --tls-cert. Off by default:
    /// probes and Prometheus scrapes then need `https://` and the CA.
    /// Example: --admin-tls
    #[arg(long, env = "ORBIT_ADMIN_TLS")]
    pub admin_tls: bool,
}

/// The bound admin port and, with `--admin-tls`, its TLS config.
pub struct AdminPort {
    pub listener: TcpListener,
    pub tls: Option<Arc<ReloadingConfig>>,
}

impl AdminArgs {
    /// Binds the admin port for a gRPC server bound at `grpc` (`Ok(None)`: turned off),
    /// served with `tls` (the gRPC port's) when `--admin-tls`. `auth` says whether
    /// identities are enforced, for the warning about a console token in clear. An `Err` is
    /// the exit code, after saying why on stderr.
    pub async fn bind(
        &self,
        grpc: SocketAddr,
        tls: &TlsArgs,
        auth: bool,
    ) -> Result<Option<AdminPort>, ExitCode> {
        let files = tls.files();
        if self.admin_tls && files.is_none() {
            eprintln!("error: --admin-tls needs --tls-cert and --tls-key");
            return Err(ExitCode::from(2));
        }
        let Some(listener) = self.bind_listener(grpc).await? else { return Ok(None) };
        let tls = match files {
            Some(files) if self.admin_tls => {
                Some(ReloadingConfig::new_https(files).map_err(|e| {
                    eprintln!("error: --admin-tls: {e}");
                    ExitCode::from(2)
                })?)
            }
            Some(_) => {
                let addr = listener.local_addr().ok();
                if auth && addr.is_some_and(|a| !a.ip().is_loopback()) {
                    tracing::warn!(?addr, "the admin port serves plain HTTP while the gRPC port uses TLS and identities: the web console's token crosses it in clear; add --admin-tls or keep it on loopback");
                }
                None
            }
            None => None,
        };
        Ok(Some(AdminPort { listener, tls }))
    }

    async fn bind_listener(&self, grpc: SocketAddr) -> Result<Option<TcpListener>, ExitCode> {
        match self.admin_listen.as_deref() {
            Some("off") => Ok(None),
            Some(addr) => {
                let addr: SocketAddr = addr.parse().map_err(|_| {
                    eprintln!("error: --admin-listen {addr}: expected HOST:PORT or off");
                    ExitCode::from(2)
                })?;
                TcpListener::bind(addr).await.map(Some).map_err(|e| {
                    eprintln!("error: cannot listen on {addr} (--admin-listen): {e}");
                    ExitCode::from(5)
                })
            }
            None => {
                let port = match grpc.port() {
                    0 => 0,
                    p => p.checked_add(ADMIN_PORT_OFFSET).unwrap_or(0),
                };
                let derived = SocketAddr::new(grpc.ip(), port);
                match TcpListener::bind(derived).await {
                    Ok(l) => Ok(Some(l)),
                    Err(e) => {
                        tracing::warn!(%derived, error = %e, "default admin port taken; serving it on a free port");
                        let any = SocketAddr::new(grpc.ip(), 0);
                        TcpListener::bind(any).await.map(Some).map_err(|e| {
                            eprintln!("error: cannot listen on {any} (admin port): {e}");
                            ExitCode::from(5)
                        })
                    }
                }
            }
        }
    }
}

/// Starts the readiness checks and, with a listener, the admin HTTP port; both stop with
/// `shutdown`. Prints the admin address (`<what> admin http on ADDR`). Routes put in `extra`
/// later (the web console of a process holding a frontend) are served from then on.
pub fn start(
    what: &str,
    port: Option<AdminPort>,
    readiness: &Readiness,
    extra: &AdminSlot,
    shutdown: &CancellationToken,
) -> Vec<tokio::task::JoinHandle<()>> {
    let mut tasks = Vec::new();
    let (r, stop) = (readiness.clone(), shutdown.clone());
    tasks.push(tokio::spawn(async move { r.run(stop).await }));
    if let Some(AdminPort { listener, tls }) = port {
        if let Ok(addr) = listener.local_addr() {
            let scheme = if tls.is_some() { "https" } else { "http" };
            eprintln!("{what} admin {scheme} on {addr}");
        }
        if let Some(tls) = &tls {
            tls.spawn_reloader(shutdown.clone());
        }
        let (r, stop, extra) = (readiness.clone(), shutdown.clone(), extra.clone());
        tasks.push(tokio::spawn(orbit_server_kit::serve_admin_tls(
            listener,
            Some(r),
            extra,
            tls,
            stop,
        )));
    }
    tasks
}

/// The database answers and its schema is the one this binary runs.
///
/// Alone (`orbit dev`), each check reads the schema. With the node's membership (the
/// split), the heartbeat is the evidence the database answers (it writes every
/// `--heartbeat-ms`; a failed beat fails this probe at once), and the schema is read again
/// only every [`SCHEMA_RECHECK`] and after a failed beat, so readiness adds no
/// transaction of its own between two of those (issue 14: idle cost).
pub struct DatabaseProbe {
    store: Arc<dyn Migrations>,
    beats: Option<Membership>,
    /// When the schema was last found right.
    schema_ok: std::sync::Mutex<Option<tokio::time::Instant>>,
}

/// How long a split node trusts the schema it last read (see [`DatabaseProbe`]).
pub const SCHEMA_RECHECK: std::time::Duration = std::time::Duration::from_secs(30);

impl DatabaseProbe {
    /// Reads the schema at every check.
    pub fn new(store: Arc<dyn Migrations>) -> DatabaseProbe {
        DatabaseProbe { store, beats: None, schema_ok: std::sync::Mutex::new(None) }
    }

    /// Follows `membership`'s heartbeats, reading the schema every [`SCHEMA_RECHECK`].
    pub fn with_heartbeat(store: Arc<dyn Migrations>, membership: Membership) -> DatabaseProbe {
        DatabaseProbe { beats: Some(membership), ..DatabaseProbe::new(store) }
    }

    fn schema_fresh(&self) -> bool {
        self.beats.is_some()
            && self
                .schema_ok
                .lock()
                .ok()
                .and_then(|at| *at)
                .is_some_and(|at| at.elapsed() < SCHEMA_RECHECK)
    }

    fn note_schema(&self, ok: bool) {
        if let Ok(mut at) = self.schema_ok.lock() {
            *at = ok.then(tokio::time::Instant::now);
        }
    }
}

impl Probe for DatabaseProbe {
    fn name(&self) -> &'static str {
        "database"
    }

    fn check(&self) -> Pin<Box<dyn Future<Output = Result<(), String>> + Send + '_>> {
        Box::pin(async move {
            let patience = orbit_server_kit::readiness::DEFAULT_PROBE_TIMEOUT;
            if let Some(failure) = self.beats.as_ref().and_then(|m| m.beat_failure(patience)) {
                // Read again once the database is back: it may have been migrated meanwhile.
                self.note_schema(false);
                return Err(failure);
            }
            if self.schema_fresh() {
                return Ok(());
            }
            // Pending migrations are a problem here whatever --no-migrate says: the process
            // migrated at start, so any found now were not applied by it.
            let status = self.store.schema_status().await.map_err(|e| e.to_string())?;
            let checked = status.check(false).map_err(|mismatch| mismatch.to_string());
            self.note_schema(checked.is_ok());
            checked
        })
    }
}

/// The node's heartbeats reach the store within the node timeout.
pub struct MembershipProbe(pub Membership);

impl Probe for MembershipProbe {
    fn name(&self) -> &'static str {
        "membership"
    }

    fn check(&self) -> Pin<Box<dyn Future<Output = Result<(), String>> + Send + '_>> {
        let problem = self.0.membership_problem();
        Box::pin(async move { problem.map_or(Ok(()), Err) })
    }
}
