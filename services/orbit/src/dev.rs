//! `orbit dev`: the frontend, the owner and the scheduler in one process on an embedded
//! SQLite file, serving the public API (plus health, reflection and the internal services)
//! on one port.

use crate::admin_args::DatabaseProbe;
use crate::retention::{millis, RetentionArg, SweepArgs};
use orbit_api::internal::v1::owner_service_server::{OwnerService, OwnerServiceServer};
use orbit_api::internal::v1::scheduler_service_server::SchedulerServiceServer;
use orbit_engine::Capabilities;
use orbit_frontend::{Frontend, FrontendConfig};
use orbit_owner::{Clock, Owner, OwnerConfig};
use orbit_scheduler::{BatchRunner, BatchRunnerConfig, Scheduler, Sweeper};
use orbit_server_kit::{signal_token, Readiness, ServerKit};
use orbit_store::{ChangeHub, SqliteStore, Store};
use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;
use tokio::net::TcpListener;
use tokio::sync::Notify;
use tokio_util::sync::CancellationToken;

/// How often the task backlog and worker gauges are sampled (one grouped read).
pub const METRICS_SAMPLE_EVERY: std::time::Duration = std::time::Duration::from_secs(5);

/// Options of `orbit dev`.
#[derive(clap::Args, Debug)]
#[command(
    after_help = "Example:\n  orbit dev                      # serves 127.0.0.1:7233, state in ./orbit-dev.db\n  orbit dev --db /tmp/o.db --listen 127.0.0.1:7300"
)]
pub struct DevArgs {
    /// SQLite file holding every definition, history and queue (created if missing).
    #[arg(long, env = "ORBIT_DB", default_value = "./orbit-dev.db")]
    pub db: PathBuf,
    /// Address to serve the gRPC API on.
    #[arg(long, env = "ORBIT_LISTEN", default_value = "127.0.0.1:7233")]
    pub listen: SocketAddr,
    /// Log filter (`info`, `debug`, `orbit_owner=debug`, ...).
    #[arg(long, env = "ORBIT_LOG", default_value = "info")]
    pub log: String,
    /// How long a worker session may stay silent before its attempts become uncertain; a
    /// worker whose stream broke and that reconnects (same worker id) within it keeps
    /// them. Workers are told to heartbeat at most every third of it.
    #[arg(long, env = "ORBIT_SESSION_TIMEOUT_MS", default_value_t = 30_000)]
    pub session_timeout_ms: u64,
    #[command(flatten)]
    pub connections: crate::split::ConnectionArgs,
    /// Poison quarantine: an execution whose processing failed this many times (a caught
    /// panic, or the process ending while applying its entries) is parked as SUSPENDED
    /// until `orbit execution resume|terminate`.
    #[arg(long, env = "ORBIT_MAX_FAILURES", default_value_t = 3, value_name = "N",
          value_parser = clap::value_parser!(u32).range(1..))]
    pub max_failures: u32,
    #[command(flatten)]
    pub retention: RetentionArg,
    #[command(flatten)]
    pub sweep: SweepArgs,
    /// Without `--identities` every RPC is served anonymously, so only on a loopback
    /// address unless `--insecure`.
    #[command(flatten)]
    pub auth: crate::auth_args::AuthArgs,
    #[command(flatten)]
    pub schema: crate::migrate::NoMigrateArg,
    /// OpenTelemetry traces.
    #[command(flatten)]
    pub traces: crate::trace_args::TraceArgs,
    #[command(flatten)]
    pub admin: crate::admin_args::AdminArgs,
    /// The built-in HTTP step (and, with identities, the token its worker opens its
    /// session with).
    #[command(flatten)]
    pub http_step: crate::http_step::FrontendHttpArgs,
    #[command(flatten)]
    pub limits: crate::limit_args::LimitArgs,
    #[command(flatten)]
    pub rate_limits: crate::rate_limit_args::RateLimitArgs,
}

/// Runs `orbit dev` until SIGINT/SIGTERM.
pub async fn run(args: DevArgs) -> ExitCode {
    let _traces = match args.traces.init("orbit-dev") {
        Ok(guard) => guard,
        Err(code) => return code,
    };
    crate::logs::init(&args.log);
    if let Err(e) = args.auth.check(&args.connections) {
        eprintln!("error: {e}");
        return ExitCode::from(2);
    }
    if let Err(code) = args.auth.enforce("orbit dev", args.listen, &args.connections, false) {
        return code;
    }
    // The built-in http worker dials this process over loopback in plain text, as the
    // worker identity of `--http-step-token` when identities are on.
    let http = &args.http_step;
    if http.step.enable_http_step && args.connections.tls.files().is_some() {
        eprintln!(
            "error: --enable-http-step cannot be combined with TLS in `orbit dev` yet (its \
             built-in worker dials this process without a client certificate); run \
             `orbit frontend --enable-http-step` for a TLS deployment"
        );
        return ExitCode::from(2);
    }
    if http.step.enable_http_step
        && args.auth.identities.is_some()
        && http.http_step_token.is_none()
    {
        eprintln!(
            "error: --enable-http-step with --identities needs --http-step-token \
             (ORBIT_HTTP_STEP_TOKEN): the token of a worker identity that may claim orbit.http"
        );
        return ExitCode::from(2);
    }
    let listener = match TcpListener::bind(args.listen).await {
        Ok(l) => l,
        Err(e) => {
            eprintln!("error: cannot listen on {}: {e}", args.listen);
            return ExitCode::from(5);
        }
    };
    let auth = args.auth.identities.is_some();
    let admin = match args.admin.bind(args.listen, &args.connections.tls, auth).await {
        Ok(a) => a,
        Err(code) => return code,
    };
    let shutdown = signal_token();
    let config = FrontendConfig {
        session_timeout_ms: args.session_timeout_ms,
        max_payload_bytes: args.limits.payload.max_payload_bytes,
        ..FrontendConfig::default()
    };
    if let Err(e) = args.sweep.check(config.reply_timeout_ms) {
        eprintln!("error: {e}");
        return ExitCode::from(2);
    }
    let retention = (args.retention.clone(), args.sweep.clone());
    let http_step = match args
        .http_step
        .step
        .policy(orbit_server_kit::payload::DEFAULT_MAX_PAYLOAD_BYTES as usize)
    {
        Ok(policy) => policy,
        Err(e) => {
            eprintln!("error: {e}");
            return ExitCode::from(2);
        }
    };
    let options = ServeOptions {
        connections: args.connections.options(),
        max_failures: args.max_failures,
        retention: &retention,
        identities: args.auth.identities.clone(),
        mesh: args.connections.mesh.identity(),
        no_migrate: args.schema.no_migrate,
        admin,
        http_step,
        http_step_token: args.http_step.http_step_token.clone(),
        limits: Some(args.limits.clone()),
        rate_limits: args.rate_limits.clone(),
    };
    if args.connections.mesh.tls_from_mesh {
        tracing::info!(mesh_identity = ?options.mesh, "TLS is delegated to the service mesh: this port serves plain text to the local sidecar");
    }
    match serve_with(&args.db, listener, shutdown, config, options, true).await {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e:#}");
            match e.downcast_ref::<crate::migrate::SchemaError>() {
                Some(crate::migrate::SchemaError::Mismatch(_)) => {
                    ExitCode::from(crate::migrate::SCHEMA_MISMATCH)
                }
                _ => ExitCode::from(4),
            }
        }
    }
}

/// Serves every service on `listener` over the SQLite file at `db` until `shutdown`, with
/// the default retention.
///
/// # Errors
/// The store cannot be opened or migrated, or the server fails.
pub async fn serve(
    db: &std::path::Path,
    listener: TcpListener,
    shutdown: CancellationToken,
    frontend: FrontendConfig,
    connections: orbit_server_kit::ConnectionOptions,
    max_failures: u32,
    announce: bool,
) -> anyhow::Result<()> {
    let retention = (RetentionArg::default(), SweepArgs::default());
    let options = ServeOptions {
        connections,
        max_failures,
        retention: &retention,
        identities: None,
        mesh: None,
        no_migrate: false,
        admin: None,
        http_step: None,
        http_step_token: None,
        limits: None,
        rate_limits: crate::rate_limit_args::RateLimitArgs::default(),
    };
    serve_with(db, listener, shutdown, frontend, options, announce).await
}

/// What [`serve_with`] takes beyond [`serve`]'s defaults.
pub struct ServeOptions<'a> {
    /// Keepalive and idle timeout of the server's connections.
    pub connections: orbit_server_kit::ConnectionOptions,
    /// Failures after which an execution is parked (poison quarantine).
    pub max_failures: u32,
    /// The retention of finished executions and the sweeper's pace.
    pub retention: &'a (RetentionArg, SweepArgs),
    /// The identities file enforced on every RPC, if any (`--identities`).
    pub identities: Option<PathBuf>,
    /// The service mesh header that may name the caller (`--mesh-identity`); only used with
    /// `identities`.
    pub mesh: Option<orbit_auth::MeshIdentity>,
    /// Only check the schema, never migrate (`--no-migrate`, see `crate::migrate`).
    pub no_migrate: bool,
    /// The built-in HTTP step's policy when `--enable-http-step` (see `crate::http_step`).
    pub http_step: Option<crate::http_step::Policy>,
    /// The worker identity's token the built-in HTTP worker opens its session with, when
    /// identities are on (`--http-step-token`).
    pub http_step_token: Option<crate::http_step::StepToken>,
    /// The bound admin HTTP port (`/metrics`, `/healthz`, `/readyz`, `/ui`), if served.
    pub admin: Option<crate::admin_args::AdminPort>,
    /// Server-wide limits (`--max-*`); `None`: the defaults (only the payload limit).
    pub limits: Option<crate::limit_args::LimitArgs>,
    /// Server-wide named rate limits to set at start (`--rate-limit`).
    pub rate_limits: crate::rate_limit_args::RateLimitArgs,
}

/// [`serve`] with its options: connections, the poison quarantine's threshold, the retention
/// of finished executions and the sweeper's pace.
///
/// # Errors
/// The store cannot be opened or migrated, or the server fails.
pub async fn serve_with(
    db: &std::path::Path,
    listener: TcpListener,
    shutdown: CancellationToken,
    frontend: FrontendConfig,
    options: ServeOptions<'_>,
    announce: bool,
) -> anyhow::Result<()> {
    let ServeOptions {
        connections,
        max_failures,
        retention: (retention, sweep),
        identities,
        mesh,
        no_migrate,
        admin,
        http_step,
        http_step_token,
        limits,
        rate_limits,
    } = options;
    // Loaded before anything is opened: a bad file stops the start with its path and code.
    let gate = crate::auth_args::Gate::load(identities.as_deref(), mesh)?;
    let connections =
        orbit_server_kit::ConnectionOptions { gate: gate.gate.clone(), ..connections };
    let store: Arc<dyn Store> = Arc::new(SqliteStore::open(db).await?);
    crate::migrate::prepare(store.as_ref(), no_migrate).await?;
    rate_limits.apply(store.as_ref()).await?;
    // Ready while the SQLite file answers with the expected schema; gRPC health follows.
    let readiness = Readiness::new(vec![Arc::new(DatabaseProbe::new(store.clone()))]);
    let connections =
        orbit_server_kit::ConnectionOptions { readiness: Some(readiness.clone()), ..connections };
    let tasks_ready = Arc::new(Notify::new());
    let timers_changed = Arc::new(Notify::new());
    let changes = Arc::new(ChangeHub::new());
    let owner = Owner::new(
        OwnerConfig {
            node_id: "dev".into(),
            max_failures,
            retention_ms: millis(retention.retention),
            capabilities: Capabilities { http: http_step.is_some() },
            limits: limits.as_ref().map_or_else(|| OwnerConfig::default().limits, |l| l.engine()),
            max_active_executions: limits.as_ref().and_then(|l| l.max_active_executions),
            evict_after_ms: limits
                .as_ref()
                .map_or(orbit_owner::OwnerConfig::default().evict_after_ms, |l| l.evict_after_ms.0),
            ..OwnerConfig::default()
        },
        store.clone(),
        tasks_ready.clone(),
        timers_changed.clone(),
        changes.clone(),
    );
    let owner_api: Arc<dyn OwnerService> = Arc::new(owner.clone());
    // Schedule writes wake the scheduler through the timers' Notify (no polling of its own).
    let schedules_changed = timers_changed.clone();
    let scheduler =
        Scheduler::new("dev", store.clone(), owner_api.clone(), timers_changed, Clock::system());
    let sweeper = Sweeper::new(store.clone(), sweep.config(), Clock::system());
    // Batch jobs: replies are seen on the process's change hub, as the frontend sees them.
    let batches = BatchRunner::new(
        "dev",
        store.clone(),
        owner_api.clone(),
        Clock::system(),
        BatchRunnerConfig {
            changes: Some(changes.clone()),
            reply_timeout: std::time::Duration::from_millis(frontend.reply_timeout_ms),
        },
    );
    let frontend = Frontend::new(
        FrontendConfig {
            node_id: "dev".into(),
            scheduler_wake: Some(schedules_changed.clone()),
            ..frontend
        },
        store,
        owner_api,
        tasks_ready,
        changes,
    );
    // New tasks go straight to a matching worker session (one commit per step, issue 14).
    owner.set_handoff(frontend.handoff());

    let owner_task = {
        let (owner, shutdown) = (owner.clone(), shutdown.clone());
        tokio::spawn(async move { owner.run(shutdown).await })
    };
    let scheduler_task = {
        let (scheduler, shutdown) = (scheduler.clone(), shutdown.clone());
        tokio::spawn(async move { scheduler.run(shutdown).await })
    };

    let sweeper_task = {
        let shutdown = shutdown.clone();
        tokio::spawn(async move { sweeper.run(shutdown).await })
    };
    let batches_task = {
        let shutdown = shutdown.clone();
        tokio::spawn(async move { batches.run(shutdown).await })
    };

    let sampler_task = {
        let (f, stop) = (frontend.clone(), shutdown.clone());
        tokio::spawn(async move { f.run_metrics_sampler(METRICS_SAMPLE_EVERY, stop).await })
    };
    // The admin port with the web console from its first answer (nothing above waits).
    let console = orbit_server_kit::AdminSlot::default();
    let _ = console.set(Arc::new(orbit_console::Console::new(
        &frontend,
        schedules_changed.clone(),
        gate.gate.clone(),
    )));
    let admin_tasks = crate::admin_args::start("orbit dev", admin, &readiness, &console, &shutdown);
    frontend.recover_claims().await?;
    let (workflows, workers) = frontend.services();
    let admin = frontend.admin_service();
    let schedules = frontend.schedule_service(schedules_changed);
    let kit = ServerKit::new()
        .connections(connections)
        .register_file_descriptor_set(orbit_api::FILE_DESCRIPTOR_SET)
        .add_service(workflows)
        .add_service(workers)
        .add_service(admin)
        .add_service(schedules)
        .add_service(OwnerServiceServer::new(owner))
        .add_service(SchedulerServiceServer::new(scheduler));
    if announce {
        let addr = listener.local_addr()?;
        tracing::info!(%addr, db = %db.display(), "orbit dev serving");
        eprintln!("orbit dev serving on {addr} (state in {})", db.display());
    }
    // The http step's worker reaches this process over loopback like any worker (its
    // results take the worker path: fencing, deadlines, retries).
    let http_task = match http_step {
        Some(policy) => {
            let mut addr = listener.local_addr()?;
            if addr.ip().is_unspecified() {
                addr.set_ip(std::net::Ipv4Addr::LOCALHOST.into());
            }
            let stop = shutdown.clone();
            let dial = crate::http_step::Dial {
                endpoint: addr.to_string(),
                token: http_step_token,
                ..crate::http_step::Dial::default()
            };
            Some(tokio::spawn(crate::http_step::run_worker(dial, policy, stop)))
        }
        None => None,
    };
    kit.serve(listener, shutdown.clone()).await?;
    drop(gate);
    shutdown.cancel();
    owner_task.await??;
    scheduler_task.await?;
    sweeper_task.await?;
    batches_task.await?;
    sampler_task.await?;
    if let Some(task) = http_task {
        let _ = task.await;
    }
    for task in admin_tasks {
        let _ = task.await;
    }
    Ok(())
}
