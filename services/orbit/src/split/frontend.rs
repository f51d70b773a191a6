//! `orbit frontend`: the public API, worker streams and the sweeper of dead frontends'
//! claims. Commands reach owners through the inbox and `RemoteOwners`; task notifications
//! wake the dispatchers, change notifications the watchers and reply waiters.

use super::args::FrontendArgs;
use super::backend::{Channel, Wakeup};
use super::node::{self, prepare};
use orbit_frontend::{Frontend, FrontendConfig};
use orbit_store::ChangeHub;
use std::process::ExitCode;
use std::sync::Arc;
use tokio::sync::Notify;

/// Runs a frontend until SIGINT/SIGTERM.
pub async fn run(args: FrontendArgs) -> ExitCode {
    let a = &args.common;
    let http = &args.http_step;
    if http.step.enable_http_step && a.auth.identities.is_some() && http.http_step_token.is_none() {
        eprintln!(
            "error: --enable-http-step with --identities needs --http-step-token \
             (ORBIT_HTTP_STEP_TOKEN): the token of a worker identity that may claim orbit.http"
        );
        return ExitCode::from(2);
    }
    let max_body = usize::try_from(args.payload.max_payload_bytes).unwrap_or(usize::MAX);
    let policy = match http.step.policy(max_body) {
        Ok(policy) => policy,
        Err(e) => {
            eprintln!("error: {e}");
            return ExitCode::from(2);
        }
    };
    let node = match prepare("frontend", "127.0.0.1:7233", a).await {
        Ok(n) => n,
        Err(code) => return code,
    };
    if let Err(e) = args.rate_limits.apply(node.database.store.as_ref()).await {
        eprintln!("error: --rate-limit: {e}");
        return ExitCode::from(1);
    }
    let tasks_ready = Arc::new(Notify::new());
    let changes = Arc::new(ChangeHub::new());
    let owners = Arc::new(node.owners(a));
    let frontend = Frontend::new(
        FrontendConfig {
            node_id: node.node_id.clone(),
            session_timeout_ms: args.session_timeout_ms,
            reply_timeout_ms: args.reply_timeout_ms,
            max_payload_bytes: args.payload.max_payload_bytes,
            node_timeout_ms: a.node_timeout_ms,
            ..FrontendConfig::default()
        },
        node.database.store.clone(),
        owners,
        tasks_ready.clone(),
        changes.clone(),
    );
    // Each heartbeat carries this frontend's worker sessions, so `ListWorkers` on any
    // frontend lists them without a query on a timer of its own.
    node.membership.report_with(Arc::new({
        let f = frontend.clone();
        move || f.sessions_report()
    }));
    let listen = node.database.listen(
        &[Channel::Tasks, Channel::Changes],
        Arc::new(move |w| match w {
            Wakeup::Tasks | Wakeup::Reconnected => tasks_ready.notify_waiters(),
            Wakeup::Changed(change) => {
                orbit_metrics::get().changes_received.with_label_values(&["notification"]).inc();
                changes.publish_changes(std::slice::from_ref(&change));
            }
            // Not listened to (`Channel`): owners act on the inbox, schedulers on timers.
            Wakeup::Inbox | Wakeup::Timers => {}
        }),
        node.shutdown.clone(),
    );
    // Dead frontends' claims are looked for when the live nodes change (each heartbeat
    // reads them in its own transaction), not on a timer of their own.
    let sweeper = {
        let (f, stop) = (frontend.clone(), node.shutdown.clone());
        let timeout = a.node_timeout_ms;
        let changes = node.membership.changes();
        let net = orbit_frontend::SWEEP_SAFETY_NET;
        tokio::spawn(async move { f.run_sweeper_on(timeout, changes, net, stop).await })
    };
    let sampler = {
        let (f, stop) = (frontend.clone(), node.shutdown.clone());
        let every = crate::dev::METRICS_SAMPLE_EVERY;
        tokio::spawn(async move { f.run_metrics_sampler(every, stop).await })
    };
    // The web console on the admin port, through this frontend's handlers and gate. Its
    // schedule writes wake schedulers through the store's notification, as gRPC ones do.
    let _ = node.admin_routes.set(Arc::new(orbit_console::Console::new(
        &frontend,
        Arc::new(Notify::new()),
        node.gate.gate.clone(),
    )));
    // One hand-off stream to each live owner (`lend`): drained sessions lend it credits.
    let lending = super::lend::spawn(
        frontend.clone(),
        node.membership.clone(),
        super::lend::Dial {
            tls: a.client_tls.options(),
            bearer: a.service_token.as_ref().map(crate::auth_args::Secret::bearer),
        },
        node.shutdown.clone(),
    );
    let beat = node.heartbeat();
    let mut tasks = vec![listen, sweeper, sampler, beat, lending];
    if let Some(policy) = policy {
        let dial = http_dial(&args, node.bound);
        tracing::info!(endpoint = %dial.endpoint, "the built-in HTTP step worker serves orbit.http");
        let stop = node.shutdown.clone();
        tasks.push(tokio::spawn(crate::http_step::run_worker(dial, policy, stop)));
    }
    let connections = node.connections(a);
    node.announce();
    let served = frontend.serve_with(node.listener, node.shutdown.clone(), connections).await;
    node::finish(&node.node_id, served, &node.shutdown, tasks).await
}

/// Where the built-in HTTP worker reaches this frontend: its advertised address (the one
/// its certificate names) or the bound one, over TLS when the port serves TLS, with the
/// CA and client certificate of the frontend's calls to owners and the step's token.
fn http_dial(args: &FrontendArgs, bound: std::net::SocketAddr) -> crate::http_step::Dial {
    let a = &args.common;
    let mut addr = bound;
    if addr.ip().is_unspecified() {
        addr.set_ip(std::net::Ipv4Addr::LOCALHOST.into());
    }
    let host = a.advertise.clone().unwrap_or_else(|| addr.to_string());
    let tls = a.connections.tls.files().is_some();
    crate::http_step::Dial {
        endpoint: format!("{}://{host}", if tls { "https" } else { "http" }),
        tls: if tls { a.client_tls.options() } else { orbit_api::tls::ClientTls::default() },
        token: args.http_step.http_step_token.clone(),
    }
}
