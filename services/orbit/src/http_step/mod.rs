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
//!
//! On the split services the two halves live apart: `orbit owner --enable-http-step` queues
//! http attempts (the capability), and `orbit frontend --enable-http-step --http-allow-host
//! …` runs the built-in worker, which dials its own frontend (TLS and client certificate as
//! the frontend's calls to owners, `--http-step-token` as its worker identity). Setting
//! `ORBIT_ENABLE_HTTP_STEP` and `ORBIT_HTTP_ALLOW_HOSTS` for the whole cluster enables both.

mod client;
mod tls;

pub use client::{call, Policy};

use orbit_engine::effects::{HTTP_TASK, HTTP_TASK_VERSION};
use orbit_worker::{TaskContext, Worker};
use std::sync::Arc;
use std::time::{Duration, SystemTime};
use tokio_util::sync::CancellationToken;

/// The `worker_id` of the built-in worker (shown in `StepDispatched` and `ListWorkers`).
pub const WORKER_ID: &str = "orbit-builtin-http";

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
    /// A PEM file of CA certificates https steps trust besides the public web roots (for
    /// services with a private CA). Example: --http-ca-file /etc/orbit/internal-ca.pem
    #[arg(long, env = "ORBIT_HTTP_CA_FILE", value_name = "PEM")]
    pub http_ca_file: Option<std::path::PathBuf>,
    /// Attempts of http steps the built-in worker runs at once. Example: --http-max-concurrency 128
    #[arg(long, env = "ORBIT_HTTP_MAX_CONCURRENCY", value_name = "N",
          default_value_t = client::DEFAULT_MAX_CONCURRENCY,
          value_parser = clap::value_parser!(u32).range(1..=4096))]
    pub http_max_concurrency: u32,
    /// Requests in flight to one host:port at most; an attempt to a host at its limit fails
    /// at once with HTTP_HOST_BUSY (retryable) instead of taking a slot, so one hung host
    /// cannot starve steps to others. Example: --http-max-per-host 8
    #[arg(long, env = "ORBIT_HTTP_MAX_PER_HOST", value_name = "N",
          default_value_t = client::DEFAULT_MAX_PER_HOST,
          value_parser = clap::value_parser!(u32).range(1..=4096))]
    pub http_max_per_host: u32,
}

/// `orbit owner --enable-http-step`: http attempts are queued for the built-in worker the
/// frontends run, instead of failing `ADAPTER_DISABLED`.
#[derive(clap::Args, Debug, Clone, Default)]
pub struct HttpCapabilityArg {
    /// Queue `http:` steps for the built-in HTTP worker of the frontends started with
    /// --enable-http-step (off by default: they fail ADAPTER_DISABLED). Enable it on every
    /// owner and frontend, e.g. with ORBIT_ENABLE_HTTP_STEP=true. Example: --enable-http-step
    #[arg(
        long,
        env = "ORBIT_ENABLE_HTTP_STEP",
        value_parser = clap::builder::BoolishValueParser::new(),
        action = clap::ArgAction::SetTrue
    )]
    pub enable_http_step: bool,
}

/// `orbit frontend --enable-http-step`: runs the built-in HTTP worker in the frontend.
#[derive(clap::Args, Debug, Clone, Default)]
pub struct FrontendHttpArgs {
    #[command(flatten)]
    pub step: HttpStepArgs,
    /// Bearer token of the worker identity the built-in HTTP worker opens its session as,
    /// when identities are on (an identity of kind `worker` whose tasks include
    /// `orbit.http`). Never logged. Example: ORBIT_HTTP_STEP_TOKEN=5c0e... (prefer the variable)
    #[arg(long, env = "ORBIT_HTTP_STEP_TOKEN", hide_env_values = true, value_name = "TOKEN")]
    pub http_step_token: Option<StepToken>,
}

/// The built-in worker's token; its `Debug` hides it.
#[derive(Clone)]
pub struct StepToken(String);

impl std::fmt::Debug for StepToken {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("StepToken(…)")
    }
}

impl std::str::FromStr for StepToken {
    type Err = String;

    fn from_str(s: &str) -> Result<StepToken, String> {
        let token = s.trim();
        if token.is_empty() || !token.bytes().all(|b| b.is_ascii_graphic()) {
            return Err("a token is printable ASCII without spaces".into());
        }
        Ok(StepToken(token.to_string()))
    }
}

/// How the built-in worker reaches the server it serves.
#[derive(Debug, Clone, Default)]
pub struct Dial {
    /// `http://…` or `https://…` of the WorkerService.
    pub endpoint: String,
    /// CA (and client certificate) for an `https` endpoint.
    pub tls: orbit_api::tls::ClientTls,
    /// The worker identity's token, when identities are on.
    pub token: Option<StepToken>,
}

impl HttpStepArgs {
    /// The policy when the step is enabled; `max_body_bytes` is the server's payload limit.
    ///
    /// # Errors
    /// `--http-ca-file` cannot be read or holds no certificate.
    pub fn policy(&self, max_body_bytes: usize) -> Result<Option<Policy>, String> {
        if !self.enable_http_step {
            return Ok(None);
        }
        let policy = Policy::new(&self.http_allow_hosts, max_body_bytes)
            .with_limits(self.http_max_concurrency, self.http_max_per_host);
        match &self.http_ca_file {
            Some(ca) => policy.with_ca(ca).map(Some),
            None => Ok(Some(policy)),
        }
    }
}

/// Serves `orbit.http` attempts from the server `dial` names until `shutdown`.
pub async fn run_worker(dial: Dial, policy: Policy, shutdown: CancellationToken) {
    let max_concurrency = policy.max_concurrency;
    let policy = Arc::new(policy);
    let handler = move |ctx: TaskContext| {
        let policy = policy.clone();
        async move {
            // Slightly past the attempt's deadline: the server's TIMEOUT is authoritative
            // there, the client's own timeout only bounds a step without `timeout:`.
            let timeout = ctx
                .deadline()
                .and_then(|d| d.duration_since(wall_clock()).ok())
                .map_or(DEFAULT_TIMEOUT, |left| left + Duration::from_secs(1));
            call(&policy, ctx.input(), timeout).await
        }
    };
    let mut builder = Worker::builder(dial.endpoint)
        .worker_id(WORKER_ID)
        .max_concurrency(max_concurrency)
        .task(HTTP_TASK, HTTP_TASK_VERSION, handler);
    if dial.tls.ca.is_some() {
        builder = builder.tls(dial.tls);
    }
    if let Some(StepToken(token)) = dial.token {
        builder = builder.bearer_token(token);
    }
    let worker = builder.run(shutdown).await;
    if let Err(e) = worker {
        tracing::error!(error = %e, "the built-in http worker stopped");
    }
}

/// Now, as the `SystemTime` a task's deadline is given in.
fn wall_clock() -> SystemTime {
    SystemTime::UNIX_EPOCH + Duration::from_millis(orbit_owner::system_clock())
}
