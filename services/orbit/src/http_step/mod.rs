//! The built-in HTTP step (`http:` in a definition, task `orbit.http`), off by default.
//!
//! `--enable-http-step` tells the owner the http adapter runs here (`Capabilities{http}`), so
//! an http attempt is queued under `orbit.http` like any task instead of failing
//! `ADAPTER_DISABLED`, and starts a built-in worker in the same process that serves that
//! queue over the loopback gRPC port. The pass never waits on a request: the result comes
//! back as a task result through the worker path, with the usual fencing (a stale token's
//! result is dropped), attempt deadline (`timeout:` on the step) and retry policy.
//!
//! Only hosts on `--http-allow-host` may be called, redirects included: the allow-list is
//! the security boundary that keeps definitions from reaching internal services.

mod client;

pub use client::{call, Policy};

use orbit_engine::effects::{HTTP_TASK, HTTP_TASK_VERSION};
use orbit_worker::{TaskContext, Worker};
use std::sync::Arc;
use std::time::{Duration, SystemTime};
use tokio_util::sync::CancellationToken;

/// A request's timeout when its step sets none.
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(30);

/// The flags of the built-in HTTP step (`orbit dev`).
#[derive(clap::Args, Debug, Clone, Default)]
pub struct HttpStepArgs {
    /// Run `http:` steps (off by default: they fail ADAPTER_DISABLED). Only hosts given with
    /// --http-allow-host may be called. Example: --enable-http-step --http-allow-host api.example.com
    #[arg(
        long,
        env = "ORBIT_ENABLE_HTTP_STEP",
        value_parser = clap::builder::BoolishValueParser::new(),
        action = clap::ArgAction::SetTrue
    )]
    pub enable_http_step: bool,
    /// A host (any port) or host:port that http steps may call; repeatable, or
    /// comma-separated in the variable. Redirects elsewhere fail. Example: --http-allow-host 127.0.0.1:8080
    #[arg(
        long = "http-allow-host",
        env = "ORBIT_HTTP_ALLOW_HOSTS",
        value_delimiter = ',',
        value_name = "HOST[:PORT]"
    )]
    pub http_allow_hosts: Vec<String>,
}

impl HttpStepArgs {
    /// The policy when the step is enabled; `max_body_bytes` is the server's payload limit.
    pub fn policy(&self, max_body_bytes: usize) -> Option<Policy> {
        self.enable_http_step.then(|| Policy::new(&self.http_allow_hosts, max_body_bytes))
    }
}

/// Serves `orbit.http` attempts from the server at `addr` until `shutdown`.
pub async fn run_worker(addr: String, policy: Policy, shutdown: CancellationToken) {
    let policy = Arc::new(policy);
    let handler = move |ctx: TaskContext| {
        let policy = policy.clone();
        async move {
            // Slightly past the attempt's deadline: the server's TIMEOUT is authoritative
            // there, the client's own timeout only bounds a step without `timeout:`.
            let timeout = ctx
                .deadline()
                .and_then(|d| d.duration_since(SystemTime::now()).ok())
                .map_or(DEFAULT_TIMEOUT, |left| left + Duration::from_secs(1));
            call(&policy, ctx.input(), timeout).await
        }
    };
    let worker = Worker::builder(addr)
        .worker_id("orbit-builtin-http")
        .max_concurrency(64)
        .task(HTTP_TASK, HTTP_TASK_VERSION, handler)
        .run(shutdown)
        .await;
    if let Err(e) = worker {
        tracing::error!(error = %e, "the built-in http worker stopped");
    }
}
