//! Configuring a worker: [`WorkerBuilder`] collects identity, tasks and settings, and
//! [`WorkerBuilder::build`] validates them once, so a [`Worker`] that exists is runnable
//! (its endpoints parse, its bearer token is valid metadata, it has a task).

use std::collections::HashMap;
use std::future::Future;
use std::sync::atomic::AtomicUsize;
use std::sync::Arc;
use std::time::Duration;

use orbit_api::v1::worker_message;
use orbit_api::v1::TaskRef;
use serde_json::Value;
use tokio_util::sync::CancellationToken;
use tonic::metadata::{Ascii, MetadataValue};
use tonic::transport::Endpoint;

use crate::env::{default_worker_id, tls_from_env, token_from_env};
use crate::error::WorkerError;
use crate::options::{Options, SessionHook};
use crate::task::{Handler, HandlerFuture, TaskContext, TaskFailure};
use crate::worker::Worker;

/// `Hello.runtime` sent by this worker: `rust <version of the compiler that built it>`,
/// for example `rust 1.83.0` (plain `rust` if the build could not ask the compiler).
pub const RUNTIME: &str = env!("ORBIT_WORKER_RUNTIME");

/// `Hello.sdk` sent by this worker: `orbit-rust <crate version>`, the `<sdk name> <version>`
/// form every Orbit SDK sends (`orbit-python 0.1.0`, `orbit-typescript 0.1.0`, ...).
pub const SDK: &str = concat!("orbit-rust ", env!("CARGO_PKG_VERSION"));

/// Configures a [`Worker`]; start with [`Worker::builder`].
pub struct WorkerBuilder {
    endpoint: String,
    worker_id: Option<String>,
    max_concurrency: u32,
    labels: HashMap<String, String>,
    tasks: Vec<(TaskRef, Handler)>,
    bearer_token: Option<String>,
    tls: orbit_api::tls::ClientTls,
    options: Options,
    on_session: Option<SessionHook>,
}

impl std::fmt::Debug for WorkerBuilder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("WorkerBuilder")
            .field("endpoint", &self.endpoint)
            .field("worker_id", &self.worker_id)
            .field("max_concurrency", &self.max_concurrency)
            .field("tasks", &self.tasks.iter().map(|(t, _)| t).collect::<Vec<_>>())
            .finish_non_exhaustive()
    }
}

impl WorkerBuilder {
    /// The worker's stable id (`Hello.worker_id`, at most 256 bytes). Keep it across
    /// reconnects of one process. Default: `<hostname>-<pid>`.
    pub fn worker_id(mut self, id: impl Into<String>) -> Self {
        self.worker_id = Some(id.into());
        self
    }

    /// The most tasks run at once (`Hello.max_concurrency`, and the credit limit). At
    /// least 1; default 10.
    pub fn max_concurrency(mut self, n: u32) -> Self {
        self.max_concurrency = n;
        self
    }

    /// Adds a label (`Hello.labels`), shown in `ListWorkers`: a step's `on: {key: value}`
    /// sends its attempts only to workers holding every pair it names
    /// (docs/flow-control.md, "Worker pools and sticky workers").
    pub fn label(mut self, key: impl Into<String>, value: impl Into<String>) -> Self {
        self.labels.insert(key.into(), value.into());
        self
    }

    /// Registers the handler of task `name` at contract `version`. Registering the same
    /// name and version again replaces the handler. Version `""` serves every version of
    /// the task that has no handler of its own.
    ///
    /// A handler is any `Fn(TaskContext) -> impl Future<Output = Result<Value, TaskFailure>>`
    /// (an `async fn` or a closure returning an `async` block). A panic in it is reported as
    /// `Fail{code: "UNHANDLED_EXCEPTION", retryable: true}`.
    pub fn task<F, Fut>(
        mut self,
        name: impl Into<String>,
        version: impl Into<String>,
        handler: F,
    ) -> Self
    where
        F: Fn(TaskContext) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = Result<Value, TaskFailure>> + Send + 'static,
    {
        let task = TaskRef { name: name.into(), version: version.into() };
        let handler: Handler = Arc::new(move |ctx| -> HandlerFuture { Box::pin(handler(ctx)) });
        self.tasks.retain(|(t, _)| *t != task);
        self.tasks.push((task, handler));
        self
    }

    /// Registers a synchronous (blocking) handler of task `name` at contract `version`: it
    /// runs on tokio's blocking thread pool, so it may do blocking IO or CPU work without
    /// stalling the worker's session. Otherwise the same as [`WorkerBuilder::task`].
    ///
    /// A blocking handler cannot be stopped from outside: when the server cancels the task
    /// it should poll [`TaskContext::is_cancelled`] and return (for example
    /// `Err(TaskFailure::fatal(CANCELLED, ..))`) within the
    /// [cancel grace](WorkerBuilder::cancel_grace); after that the worker reports `CANCELLED`
    /// and frees the slot, while the thread runs on to its end and its result is discarded.
    pub fn sync_task<F>(
        self,
        name: impl Into<String>,
        version: impl Into<String>,
        handler: F,
    ) -> Self
    where
        F: Fn(TaskContext) -> Result<Value, TaskFailure> + Send + Sync + 'static,
    {
        let handler = Arc::new(handler);
        self.task(name, version, move |ctx| {
            let handler = Arc::clone(&handler);
            async move {
                match tokio::task::spawn_blocking(move || handler(ctx)).await {
                    Ok(result) => result,
                    // Re-raised here so the runner reports it like an async handler's panic.
                    Err(e) if e.is_panic() => std::panic::resume_unwind(e.into_panic()),
                    Err(e) => Err(TaskFailure::unhandled(e.to_string())),
                }
            }
        })
    }

    /// Sends `authorization: Bearer <token>` with the session: the token of a `worker` (or
    /// `admin`) identity when the server enforces an identities file (docs/security.md).
    /// Default: the `ORBIT_TOKEN` variable if set and not empty ([`token_from_env`]), else
    /// no token.
    pub fn bearer_token(mut self, token: impl Into<String>) -> Self {
        self.bearer_token = Some(token.into());
        self
    }

    /// TLS for the connections: the CA that signed the frontend's certificate and, for
    /// mutual TLS, this worker's certificate and key (see [`orbit_api::tls::ClientTls`]).
    /// With a CA, an address without a scheme is dialled as `https://`. Default: the
    /// `ORBIT_TLS_CA`, `ORBIT_TLS_CLIENT_CERT` and `ORBIT_TLS_CLIENT_KEY` variables if set,
    /// else plain text.
    pub fn tls(mut self, tls: orbit_api::tls::ClientTls) -> Self {
        self.tls = tls;
        self
    }

    /// Reconnect delays: `initial`, doubling up to `max`, with jitter. Default 100 ms to
    /// 10 s. The delay resets once a session is established.
    pub fn reconnect_backoff(mut self, initial: Duration, max: Duration) -> Self {
        self.options.backoff_initial = initial;
        self.options.backoff_max = max;
        self
    }

    /// How long shutdown waits for in-flight tasks to finish and their results to be
    /// acknowledged before aborting them. Default 30 s.
    pub fn drain_timeout(mut self, timeout: Duration) -> Self {
        self.options.drain_timeout = timeout;
        self
    }

    /// Calls `hook` with the session id each time a session is established (after the
    /// server's `Welcome`, so also after every reconnect), for example to report readiness.
    /// It runs on the session loop: keep it short.
    pub fn on_session(mut self, hook: impl Fn(&str) + Send + Sync + 'static) -> Self {
        self.on_session = Some(Arc::new(hook));
        self
    }

    /// How long a handler may take to return on its own once the server cancelled its task
    /// (cooperative cancellation: the handler watches [`TaskContext::cancellation`] or
    /// polls [`TaskContext::is_cancelled`], cleans up and returns; what it returns is
    /// reported). After the grace the handler's future is dropped and the worker reports
    /// `Fail{code: "CANCELLED", retryable: false}` itself. `Duration::ZERO` drops a handler
    /// at its next await at once. Default 5 s.
    pub fn cancel_grace(mut self, grace: Duration) -> Self {
        self.options.cancel_grace = grace;
        self
    }

    /// The TCP/HTTP2 connect timeout. Default 5 s.
    pub fn connect_timeout(mut self, timeout: Duration) -> Self {
        self.options.connect_timeout = timeout;
        self
    }

    /// How long to wait for `Welcome` after connecting. Default 10 s.
    pub fn handshake_timeout(mut self, timeout: Duration) -> Self {
        self.options.handshake_timeout = timeout;
        self
    }

    /// The heartbeat interval used when `Welcome.heartbeat_interval` is unset or zero.
    /// Default 10 s.
    pub fn default_heartbeat_interval(mut self, interval: Duration) -> Self {
        self.options.default_heartbeat_interval = interval;
        self
    }

    /// How many unacknowledged results the worker keeps before it stops granting credits.
    /// Default `max(256, 4 × max_concurrency)`.
    pub fn outbox_capacity(mut self, n: usize) -> Self {
        self.options.outbox_capacity = Some(n);
        self
    }

    /// Validates the settings.
    pub fn build(self) -> Result<Worker, WorkerError> {
        let worker_id = self.worker_id.unwrap_or_else(default_worker_id);
        if worker_id.is_empty() || worker_id.len() > 256 {
            return Err(WorkerError::Config(format!(
                "worker_id must be 1 to 256 bytes, got {} bytes",
                worker_id.len()
            )));
        }
        if self.max_concurrency == 0 {
            return Err(WorkerError::Config("max_concurrency must be at least 1".into()));
        }
        if self.tasks.is_empty() {
            return Err(WorkerError::Config("register at least one task".into()));
        }
        if let Some((t, _)) = self.tasks.iter().find(|(t, _)| t.name.is_empty()) {
            return Err(WorkerError::Config(format!("task name must not be empty: {t:?}")));
        }
        let endpoints = self
            .endpoint
            .split(',')
            .map(str::trim)
            .filter(|e| !e.is_empty())
            .map(|e| endpoint(e, &self.tls, &self.options))
            .collect::<Result<Vec<_>, _>>()?;
        if endpoints.is_empty() {
            return Err(WorkerError::Config("give at least one endpoint".into()));
        }
        let bearer = match &self.bearer_token {
            Some(token) => {
                Some(format!("Bearer {token}").parse::<MetadataValue<Ascii>>().map_err(|_| {
                    WorkerError::Config("bearer token must be printable ASCII".into())
                })?)
            }
            None => None,
        };
        let hello = worker_message::Hello {
            worker_id,
            runtime: RUNTIME.into(),
            sdk: SDK.into(),
            tasks: self.tasks.iter().map(|(t, _)| t.clone()).collect(),
            max_concurrency: self.max_concurrency,
            labels: self.labels,
        };
        let handlers = self
            .tasks
            .into_iter()
            .map(|(t, h)| ((t.name, t.version), h))
            .collect::<HashMap<_, _>>();
        Ok(Worker {
            endpoints,
            current: AtomicUsize::new(0),
            hello,
            handlers: Arc::new(handlers),
            max_concurrency: self.max_concurrency,
            bearer,
            options: self.options,
            on_session: self.on_session,
        })
    }

    /// Builds the worker and runs it until `shutdown`; see [`Worker::run`].
    pub async fn run(self, shutdown: CancellationToken) -> Result<(), WorkerError> {
        self.build()?.run(shutdown).await
    }
}

/// One server address (`host:port` or a URI) as a tonic endpoint.
fn endpoint(
    address: &str,
    tls: &orbit_api::tls::ClientTls,
    options: &Options,
) -> Result<Endpoint, WorkerError> {
    Ok(tls
        .endpoint(address)
        .map_err(|e| WorkerError::Config(format!("endpoint `{address}`: {e}")))?
        .connect_timeout(options.connect_timeout)
        .tcp_nodelay(true)
        .http2_keep_alive_interval(Duration::from_secs(30))
        .keep_alive_timeout(Duration::from_secs(10))
        .keep_alive_while_idle(true))
}

impl Worker {
    /// Starts configuring a worker that connects to `endpoint` (`host:port`, or a URI such
    /// as `http://host:port`). Several frontends may be given, separated by commas: the
    /// worker uses one at a time and moves to the next when a connection or stream fails.
    pub fn builder(endpoint: impl Into<String>) -> WorkerBuilder {
        WorkerBuilder {
            endpoint: endpoint.into(),
            worker_id: None,
            max_concurrency: 10,
            labels: HashMap::new(),
            tasks: Vec::new(),
            bearer_token: token_from_env(),
            tls: tls_from_env(),
            options: Options::default(),
            on_session: None,
        }
    }
}

impl Worker {
    /// Starts configuring a worker from the environment, the variables the SDK conformance
    /// suite sets (sdks/conformance/README.md): `ORBIT_ADDRESSES` (comma-separated
    /// frontends, default `127.0.0.1:7233`), `ORBIT_WORKER_ID` (default `<hostname>-<pid>`)
    /// and `ORBIT_MAX_CONCURRENCY` (default 10), besides `ORBIT_TOKEN` and the
    /// `ORBIT_TLS_*` variables every builder reads. Settings made on the returned builder
    /// override the environment.
    ///
    /// # Errors
    ///
    /// `ORBIT_MAX_CONCURRENCY` that is not a number.
    // The SDK's documented configuration is its environment.
    #[allow(clippy::disallowed_methods)]
    pub fn builder_from_env() -> Result<WorkerBuilder, WorkerError> {
        let var = |name: &str| std::env::var(name).ok().filter(|v| !v.trim().is_empty());
        let mut builder =
            Self::builder(var("ORBIT_ADDRESSES").unwrap_or_else(|| "127.0.0.1:7233".into()));
        if let Some(id) = var("ORBIT_WORKER_ID") {
            builder = builder.worker_id(id);
        }
        if let Some(n) = var("ORBIT_MAX_CONCURRENCY") {
            let n = n.trim().parse().map_err(|_| {
                WorkerError::Config(format!("ORBIT_MAX_CONCURRENCY must be a number, got {n:?}"))
            })?;
            builder = builder.max_concurrency(n);
        }
        Ok(builder)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn builder_validates() {
        let ok = |b: WorkerBuilder| b.task("t", "1", |_c| async { Ok(Value::Null) });
        assert!(Worker::builder("127.0.0.1:7233").build().is_err(), "no tasks");
        assert!(ok(Worker::builder("127.0.0.1:7233")).max_concurrency(0).build().is_err());
        assert!(ok(Worker::builder("127.0.0.1:7233")).worker_id("").build().is_err());
        assert!(ok(Worker::builder("127.0.0.1:7233")).worker_id("x".repeat(257)).build().is_err());
        let w = ok(Worker::builder("127.0.0.1:7233")).worker_id("w1").build().unwrap();
        assert!(w.hello.runtime.starts_with("rust"), "{}", w.hello.runtime);
        assert_eq!(w.hello.sdk, format!("orbit-rust {}", env!("CARGO_PKG_VERSION")));
        assert_eq!(w.hello.tasks, vec![TaskRef { name: "t".into(), version: "1".into() }]);
        assert_eq!(w.endpoint().uri().to_string(), "http://127.0.0.1:7233/");
        assert!(ok(Worker::builder(" , ")).build().is_err(), "no endpoint");
    }
}
