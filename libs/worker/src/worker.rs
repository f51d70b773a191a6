//! The worker: builder, session loop, reconnects and draining.

use std::any::Any;
use std::collections::HashMap;
use std::future::Future;
use std::panic::AssertUnwindSafe;
use std::sync::Arc;
use std::time::Duration;

use futures_util::FutureExt as _;
use orbit_api::v1::worker_message::{self, Kind as Out};
use orbit_api::v1::worker_service_client::WorkerServiceClient;
use orbit_api::v1::{server_message, ServerMessage, TaskError, TaskRef, WorkerMessage};
use serde_json::Value;
use tokio::sync::mpsc;
use tokio::task::AbortHandle;
use tokio::time::{Instant, MissedTickBehavior};
use tokio_stream::wrappers::UnboundedReceiverStream;
use tokio_stream::StreamExt as _;
use tokio_util::sync::CancellationToken;
use tonic::metadata::{Ascii, MetadataValue};
use tonic::transport::{Channel, Endpoint};
use tonic::{Code, Status, Streaming};
use tracing::{debug, info, warn};

use crate::backoff::Backoff;
use crate::credits::Credits;
use crate::outbox::Outbox;
use crate::task::{
    Event, Handler, HandlerFuture, Outcome, TaskContext, TaskFailure, CANCELLED,
    TASK_NOT_REGISTERED, UNHANDLED_EXCEPTION, WORKER_OVER_CAPACITY,
};
use crate::value;

/// `Hello.runtime` sent by this worker.
pub const RUNTIME: &str = "rust";

/// `Hello.sdk` sent by this worker: `orbit-worker/<crate version>`.
pub const SDK: &str = concat!("orbit-worker/", env!("CARGO_PKG_VERSION"));

/// The shortest heartbeat interval the worker uses, whatever the server asks for.
const MIN_HEARTBEAT_INTERVAL: Duration = Duration::from_millis(50);

/// How long a drained worker waits for the server to end the stream after half-closing.
const CLOSE_GRACE: Duration = Duration::from_secs(5);

/// Why [`Worker::run`] (or [`WorkerBuilder::build`]) failed.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum WorkerError {
    /// The builder's settings are invalid.
    #[error("invalid worker configuration: {0}")]
    Config(String),
    /// The server refused the session for a reason a reconnect cannot fix
    /// (`INVALID_ARGUMENT`, `PERMISSION_DENIED`, `UNAUTHENTICATED`, `UNIMPLEMENTED`).
    #[error("the server refused the session: {0}")]
    Rejected(Box<Status>),
    /// Shutdown did not finish within the drain timeout; the remaining tasks were aborted
    /// and their results (if any) not acknowledged.
    #[error(
        "drain timed out: {running} task(s) still running, {unacknowledged} result(s) not acknowledged"
    )]
    DrainTimeout {
        /// Tasks still running when the worker gave up.
        running: usize,
        /// Results the server had not acknowledged.
        unacknowledged: usize,
    },
}

/// Settings of a [`Worker`] besides its identity and tasks.
#[derive(Debug, Clone)]
struct Options {
    backoff_initial: Duration,
    backoff_max: Duration,
    drain_timeout: Duration,
    connect_timeout: Duration,
    handshake_timeout: Duration,
    default_heartbeat_interval: Duration,
    outbox_capacity: Option<usize>,
}

impl Default for Options {
    fn default() -> Self {
        Self {
            backoff_initial: Duration::from_millis(100),
            backoff_max: Duration::from_secs(10),
            drain_timeout: Duration::from_secs(30),
            connect_timeout: Duration::from_secs(5),
            handshake_timeout: Duration::from_secs(10),
            default_heartbeat_interval: Duration::from_secs(10),
            outbox_capacity: None,
        }
    }
}

/// Configures a [`Worker`]; start with [`Worker::builder`].
pub struct WorkerBuilder {
    endpoint: String,
    worker_id: Option<String>,
    max_concurrency: u32,
    labels: HashMap<String, String>,
    tasks: Vec<(TaskRef, Handler)>,
    bearer_token: Option<String>,
    options: Options,
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

    /// Adds a label shown in `ListWorkers` (`Hello.labels`).
    pub fn label(mut self, key: impl Into<String>, value: impl Into<String>) -> Self {
        self.labels.insert(key.into(), value.into());
        self
    }

    /// Registers the handler of task `name` at contract `version`. Registering the same
    /// name and version again replaces the handler.
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

    /// Sends `authorization: Bearer <token>` with the session.
    pub fn bearer_token(mut self, token: impl Into<String>) -> Self {
        self.bearer_token = Some(token.into());
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
            .map(|e| endpoint(e, &self.options))
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
            current: std::sync::atomic::AtomicUsize::new(0),
            hello,
            handlers: Arc::new(handlers),
            max_concurrency: self.max_concurrency,
            bearer,
            options: self.options,
        })
    }

    /// Builds the worker and runs it until `shutdown`; see [`Worker::run`].
    pub async fn run(self, shutdown: CancellationToken) -> Result<(), WorkerError> {
        self.build()?.run(shutdown).await
    }
}

/// One server address (`host:port` or a URI) as a tonic endpoint.
fn endpoint(address: &str, options: &Options) -> Result<Endpoint, WorkerError> {
    let uri =
        if address.contains("://") { address.to_string() } else { format!("http://{address}") };
    Ok(Endpoint::from_shared(uri.clone())
        .map_err(|e| WorkerError::Config(format!("endpoint `{uri}`: {e}")))?
        .connect_timeout(options.connect_timeout)
        .tcp_nodelay(true)
        .http2_keep_alive_interval(Duration::from_secs(30))
        .keep_alive_timeout(Duration::from_secs(10))
        .keep_alive_while_idle(true))
}

/// `<hostname>-<pid>`, or `rust-worker-<pid>` without a host name.
fn default_worker_id() -> String {
    let host = std::env::var("HOSTNAME")
        .ok()
        .or_else(|| std::fs::read_to_string("/etc/hostname").ok())
        .map(|h| h.trim().to_owned())
        .filter(|h| !h.is_empty())
        .unwrap_or_else(|| "rust-worker".into());
    format!("{host}-{}", std::process::id())
}

/// Task handlers by (name, version).
type Handlers = HashMap<(String, String), Handler>;

/// An Orbit worker: one `WorkerService.Session` stream at a time, reconnecting as needed.
pub struct Worker {
    /// Every frontend this worker may use; it stays on one until its stream breaks, then
    /// tries the next.
    endpoints: Vec<Endpoint>,
    current: std::sync::atomic::AtomicUsize,
    hello: worker_message::Hello,
    handlers: Arc<Handlers>,
    max_concurrency: u32,
    bearer: Option<MetadataValue<Ascii>>,
    options: Options,
}

impl std::fmt::Debug for Worker {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Worker")
            .field("endpoints", &self.endpoints.iter().map(Endpoint::uri).collect::<Vec<_>>())
            .field("hello", &self.hello)
            .finish_non_exhaustive()
    }
}

/// How one session ended without an error.
enum SessionEnd {
    /// Shutdown completed: everything finished and acknowledged, stream closed.
    Drained,
    /// The drain deadline passed.
    DrainTimedOut,
    /// The server ended the stream; reconnect.
    Closed,
}

/// Why one session ended badly.
#[derive(Debug, thiserror::Error)]
enum SessionError {
    #[error("connect failed: {0}")]
    Connect(#[source] tonic::transport::Error),
    #[error("the server refused the session: {0}")]
    Fatal(Box<Status>),
    #[error("stream failed: {0}")]
    Status(Box<Status>),
    #[error("protocol error: {0}")]
    Protocol(String),
    #[error("no welcome within {0:?}")]
    HandshakeTimeout(Duration),
    #[error("the outgoing stream closed")]
    Broken,
}

impl SessionError {
    fn from_status(status: Status) -> Self {
        match status.code() {
            Code::InvalidArgument
            | Code::PermissionDenied
            | Code::Unauthenticated
            | Code::Unimplemented => Self::Fatal(Box::new(status)),
            _ => Self::Status(Box::new(status)),
        }
    }
}

/// The outgoing half of the current stream went away.
#[derive(Debug)]
struct Broken;

impl From<Broken> for SessionError {
    fn from(_: Broken) -> Self {
        Self::Broken
    }
}

/// The sender of the current stream's worker messages.
type OutTx = mpsc::UnboundedSender<WorkerMessage>;

/// Sends one message on the current stream, if connected.
fn send(out: Option<&OutTx>, kind: Out) -> Result<(), Broken> {
    match out {
        Some(out) => out.send(WorkerMessage { kind: Some(kind) }).map_err(|_| Broken),
        None => Ok(()),
    }
}

/// Sleeps until `deadline`, or forever without one.
async fn sleep_until_opt(deadline: Option<Instant>) {
    match deadline {
        Some(deadline) => tokio::time::sleep_until(deadline).await,
        None => std::future::pending().await,
    }
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
            bearer_token: None,
            options: Options::default(),
        }
    }

    /// The id sent in `Hello.worker_id`.
    pub fn worker_id(&self) -> &str {
        &self.hello.worker_id
    }

    /// Runs the worker until `shutdown` is cancelled and the drain completes.
    ///
    /// Connects, says `Hello`, waits for `Welcome`, grants credits and runs tasks;
    /// reconnects with capped exponential backoff whenever the connection or stream breaks,
    /// re-sending unacknowledged results. On shutdown it sends `Drain`, lets in-flight tasks
    /// finish, waits for their acks, half-closes the stream and returns `Ok(())`. Returns an
    /// error when the server refuses the session for good or the drain times out; in both
    /// cases tasks still running are aborted.
    pub async fn run(self, shutdown: CancellationToken) -> Result<(), WorkerError> {
        let (events_tx, mut events) = mpsc::unbounded_channel();
        let capacity = self
            .options
            .outbox_capacity
            .unwrap_or_else(|| (self.max_concurrency as usize).saturating_mul(4).max(256));
        let mut st =
            State::new(Arc::clone(&self.handlers), self.max_concurrency, capacity, events_tx);
        let mut backoff = Backoff::new(self.options.backoff_initial, self.options.backoff_max);
        loop {
            if shutdown.is_cancelled() && !st.draining {
                st.begin_drain(self.options.drain_timeout);
            }
            if st.is_done() {
                return Ok(());
            }
            match self.session(&mut st, &mut events, &shutdown, &mut backoff).await {
                Ok(SessionEnd::Drained) => return Ok(()),
                Ok(SessionEnd::DrainTimedOut) => return Err(st.drain_timeout_error()),
                Ok(SessionEnd::Closed) => info!("the server closed the session; reconnecting"),
                Err(SessionError::Fatal(status)) => return Err(WorkerError::Rejected(status)),
                Err(error) => {
                    warn!(%error, "worker session lost; reconnecting");
                    self.rotate();
                }
            }
            st.credits.stream_reset();
            // Wait out the backoff, still collecting results of tasks that finish meanwhile.
            let until = Instant::now() + backoff.next_delay();
            loop {
                let drain_deadline = st.drain_deadline;
                tokio::select! {
                    () = tokio::time::sleep_until(until) => break,
                    Some(event) = events.recv() => {
                        // Offline: nothing to send, so this cannot fail.
                        let _ = st.on_event(event, None);
                    }
                    () = shutdown.cancelled(), if !st.draining => {
                        st.begin_drain(self.options.drain_timeout);
                        if st.is_done() {
                            return Ok(());
                        }
                    }
                    () = sleep_until_opt(drain_deadline) => return Err(st.drain_timeout_error()),
                }
            }
        }
    }

    /// The endpoint the next connection goes to.
    fn endpoint(&self) -> &Endpoint {
        let i = self.current.load(std::sync::atomic::Ordering::Relaxed);
        &self.endpoints[i % self.endpoints.len()]
    }

    /// After a failure, the next connection tries the next endpoint.
    fn rotate(&self) {
        if self.endpoints.len() > 1 {
            self.current.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        }
    }

    /// Connects, says hello and waits for the welcome.
    async fn open(
        &self,
    ) -> Result<
        (WorkerServiceClient<Channel>, OutTx, Streaming<ServerMessage>, server_message::Welcome),
        SessionError,
    > {
        let channel = self.endpoint().connect().await.map_err(SessionError::Connect)?;
        let mut client = WorkerServiceClient::new(channel);
        let (out, rx) = mpsc::unbounded_channel();
        send(Some(&out), Out::Hello(self.hello.clone()))?;
        let mut request = tonic::Request::new(UnboundedReceiverStream::new(rx));
        if let Some(bearer) = &self.bearer {
            request.metadata_mut().insert("authorization", bearer.clone());
        }
        let mut inbound =
            client.session(request).await.map_err(SessionError::from_status)?.into_inner();
        match inbound.next().await {
            Some(Ok(ServerMessage { kind: Some(server_message::Kind::Welcome(welcome)) })) => {
                Ok((client, out, inbound, welcome))
            }
            Some(Ok(other)) => {
                Err(SessionError::Protocol(format!("expected welcome first, got {other:?}")))
            }
            Some(Err(status)) => Err(SessionError::from_status(status)),
            None => Err(SessionError::Protocol("the stream ended before welcome".into())),
        }
    }

    /// One session: handshake, then the message loop until the stream ends or the drain
    /// completes.
    async fn session(
        &self,
        st: &mut State,
        events: &mut mpsc::UnboundedReceiver<Event>,
        shutdown: &CancellationToken,
        backoff: &mut Backoff,
    ) -> Result<SessionEnd, SessionError> {
        let handshake = self.options.handshake_timeout;
        let (_client, out, mut inbound, welcome) = tokio::time::timeout(handshake, self.open())
            .await
            .map_err(|_| SessionError::HandshakeTimeout(handshake))??;
        backoff.reset();
        for warning in &welcome.warnings {
            warn!(session_id = %welcome.session_id, "server warning: {warning}");
        }
        let heartbeat_interval = welcome
            .heartbeat_interval
            .and_then(|d| Duration::try_from(d).ok())
            .filter(|d| !d.is_zero())
            .unwrap_or(self.options.default_heartbeat_interval)
            .max(MIN_HEARTBEAT_INTERVAL);
        info!(
            session_id = %welcome.session_id,
            worker_id = %self.hello.worker_id,
            ?heartbeat_interval,
            "worker session established"
        );

        if st.draining {
            send(Some(&out), Out::Drain(worker_message::Drain {}))?;
        }
        st.resend_outbox(&out)?;
        st.grant(&out)?;

        let mut ticker =
            tokio::time::interval_at(Instant::now() + heartbeat_interval, heartbeat_interval);
        ticker.set_missed_tick_behavior(MissedTickBehavior::Delay);
        loop {
            if st.is_done() {
                // Half-close, then give the server a moment to end the stream.
                drop(out);
                let _ = tokio::time::timeout(CLOSE_GRACE, async {
                    while let Some(Ok(_)) = inbound.next().await {}
                })
                .await;
                return Ok(SessionEnd::Drained);
            }
            let drain_deadline = st.drain_deadline;
            tokio::select! {
                message = inbound.next() => match message {
                    Some(Ok(message)) => st.on_server_message(message, &out)?,
                    Some(Err(status)) => return Err(SessionError::from_status(status)),
                    None => return Ok(SessionEnd::Closed),
                },
                Some(event) = events.recv() => st.on_event(event, Some(&out))?,
                _ = ticker.tick() => st.heartbeat_all(&out)?,
                () = shutdown.cancelled(), if !st.draining => {
                    st.begin_drain(self.options.drain_timeout);
                    send(Some(&out), Out::Drain(worker_message::Drain {}))?;
                }
                () = sleep_until_opt(drain_deadline) => return Ok(SessionEnd::DrainTimedOut),
            }
        }
    }
}

/// A task running here.
struct Running {
    cancel: CancellationToken,
    abort: AbortHandle,
    cancel_reason: Option<String>,
}

impl Drop for Running {
    /// A task that is forgotten (finished, or the worker stops) is aborted: a no-op when it
    /// already finished.
    fn drop(&mut self) {
        self.abort.abort();
    }
}

/// Everything that survives reconnects: credits, running tasks, the outbox, the drain.
struct State {
    handlers: Arc<Handlers>,
    credits: Credits,
    outbox: Outbox<Out>,
    running: HashMap<String, Running>,
    draining: bool,
    drain_deadline: Option<Instant>,
    events: mpsc::UnboundedSender<Event>,
}

impl State {
    fn new(
        handlers: Arc<Handlers>,
        max_concurrency: u32,
        outbox_capacity: usize,
        events: mpsc::UnboundedSender<Event>,
    ) -> Self {
        Self {
            handlers,
            credits: Credits::new(max_concurrency),
            outbox: Outbox::new(outbox_capacity),
            running: HashMap::new(),
            draining: false,
            drain_deadline: None,
            events,
        }
    }

    /// Shutdown requested: take no more work, finish within `timeout`.
    fn begin_drain(&mut self, timeout: Duration) {
        info!(
            running = self.running.len(),
            unacknowledged = self.outbox.len(),
            "draining the worker"
        );
        self.draining = true;
        self.drain_deadline = Some(Instant::now() + timeout);
    }

    /// Draining and nothing left to finish or to get acknowledged.
    fn is_done(&self) -> bool {
        self.draining && self.running.is_empty() && self.outbox.is_empty()
    }

    fn drain_timeout_error(&self) -> WorkerError {
        WorkerError::DrainTimeout { running: self.running.len(), unacknowledged: self.outbox.len() }
    }

    /// Grants every free slot, unless draining or the outbox is full.
    fn grant(&mut self, out: &OutTx) -> Result<(), Broken> {
        if self.draining || self.outbox.is_full() {
            return Ok(());
        }
        match self.credits.grant() {
            0 => Ok(()),
            n => send(Some(out), Out::Credits(worker_message::Credits { n })),
        }
    }

    /// Sends every unacknowledged result again (after a reconnect).
    fn resend_outbox(&self, out: &OutTx) -> Result<(), Broken> {
        if !self.outbox.is_empty() {
            info!(results = self.outbox.len(), "re-sending unacknowledged results");
        }
        for result in self.outbox.pending() {
            send(Some(out), result.clone())?;
        }
        Ok(())
    }

    /// Records a result in the outbox and sends it if connected.
    fn report(&mut self, token: String, result: Out, out: Option<&OutTx>) -> Result<(), Broken> {
        self.outbox.push(token, result.clone());
        send(out, result)
    }

    /// A `Heartbeat` listing every running task.
    fn heartbeat_all(&self, out: &OutTx) -> Result<(), Broken> {
        let tokens = self.running.keys().cloned().collect();
        send(Some(out), Out::Heartbeat(worker_message::Heartbeat { tokens, details: None }))
    }

    fn on_server_message(&mut self, message: ServerMessage, out: &OutTx) -> Result<(), Broken> {
        match message.kind {
            Some(server_message::Kind::Task(task)) => self.on_task(task, out),
            Some(server_message::Kind::Ack(ack)) => {
                if self.outbox.ack(&ack.token) && !ack.accepted {
                    debug!(token = %ack.token, reason = %ack.reason, "result recorded but not applied");
                }
                self.grant(out)
            }
            Some(server_message::Kind::Cancel(cancel)) => {
                match self.running.get_mut(&cancel.token) {
                    Some(running) => {
                        debug!(token = %cancel.token, reason = %cancel.reason, "cancelling task");
                        running.cancel_reason = Some(cancel.reason);
                        running.cancel.cancel();
                    }
                    None => debug!(token = %cancel.token, "cancel for a task not running here"),
                }
                Ok(())
            }
            // Keepalive only: the protocol says the worker does not answer it.
            Some(server_message::Kind::Ping(_)) => Ok(()),
            Some(server_message::Kind::Welcome(_)) => {
                warn!("ignoring a second welcome on the same stream");
                Ok(())
            }
            None => Ok(()),
        }
    }

    fn on_task(&mut self, task: server_message::Task, out: &OutTx) -> Result<(), Broken> {
        let token = task.token.clone();
        if !self.credits.take() {
            warn!(%token, task = %task.task, "the server sent a task without a credit; refusing it");
            let failure = TaskFailure::retryable(
                WORKER_OVER_CAPACITY,
                "task delivered without a free credit on this worker",
            );
            return self.report(token.clone(), fail_message(token, failure), Some(out));
        }
        if self.running.contains_key(&token) {
            debug!(%token, "duplicate delivery of a running task");
            return self.grant(out);
        }
        if let Some(result) = self.outbox.get(&token) {
            debug!(%token, "delivery of a finished task; re-sending its result");
            send(Some(out), result.clone())?;
            return self.grant(out);
        }
        let Some(handler) = self.handlers.get(&(task.task.clone(), task.version.clone())).cloned()
        else {
            warn!(%token, task = %task.task, version = %task.version, "no handler for task");
            let failure = TaskFailure::retryable(
                TASK_NOT_REGISTERED,
                format!("this worker has no handler for {}@{}", task.task, task.version),
            );
            self.report(token.clone(), fail_message(token, failure), Some(out))?;
            return self.grant(out);
        };
        let cancel = CancellationToken::new();
        let ctx = TaskContext::new(&task, cancel.clone(), self.events.clone());
        let abort = spawn_task(handler, ctx, cancel.clone(), self.events.clone());
        self.credits.start();
        self.running.insert(token, Running { cancel, abort, cancel_reason: None });
        Ok(())
    }

    /// Handles an event from a task; `out` is `None` while disconnected.
    fn on_event(&mut self, event: Event, out: Option<&OutTx>) -> Result<(), Broken> {
        match event {
            Event::Finished { token, outcome } => {
                let Some(running) = self.running.remove(&token) else {
                    return Ok(());
                };
                self.credits.finish();
                let result = result_message(token.clone(), outcome, running.cancel_reason.clone());
                self.report(token, result, out)?;
                match out {
                    Some(out) => self.grant(out),
                    None => Ok(()),
                }
            }
            Event::Heartbeat { token, details } => {
                if self.running.contains_key(&token) {
                    let heartbeat = worker_message::Heartbeat { tokens: vec![token], details };
                    send(out, Out::Heartbeat(heartbeat))
                } else {
                    Ok(())
                }
            }
        }
    }
}

/// Runs a handler on its own tokio task; the handler's future is dropped when `cancel`
/// fires. Sends [`Event::Finished`] when done.
fn spawn_task(
    handler: Handler,
    ctx: TaskContext,
    cancel: CancellationToken,
    events: mpsc::UnboundedSender<Event>,
) -> AbortHandle {
    let token = ctx.token().to_owned();
    let handle = tokio::spawn(async move {
        // Calling the handler happens inside the guarded future, so a panic before its
        // first await is caught too.
        let run = AssertUnwindSafe(async move { handler(ctx).await }).catch_unwind();
        let outcome = tokio::select! {
            biased;
            () = cancel.cancelled() => Outcome::Cancelled,
            result = run => match result {
                Ok(result) => Outcome::Returned(result),
                Err(panic) => Outcome::Panicked(panic_message(panic.as_ref())),
            },
        };
        let _ = events.send(Event::Finished { token, outcome });
    });
    handle.abort_handle()
}

/// The text of a panic payload.
fn panic_message(panic: &(dyn Any + Send)) -> String {
    if let Some(s) = panic.downcast_ref::<&str>() {
        (*s).to_owned()
    } else if let Some(s) = panic.downcast_ref::<String>() {
        s.clone()
    } else {
        "non-string panic payload".to_owned()
    }
}

/// The `Complete` or `Fail` message for a finished task.
fn result_message(token: String, outcome: Outcome, cancel_reason: Option<String>) -> Out {
    match outcome {
        Outcome::Returned(Ok(output)) => match value::refused(&output, "output") {
            // The server could not take (or even decode) it: fail the attempt instead, so
            // the execution goes on rather than waiting for a result that never arrives.
            Some(refused) => fail_message(token, refused),
            None => Out::Complete(worker_message::Complete {
                token,
                output: value::to_proto_opt(&output),
            }),
        },
        Outcome::Returned(Err(failure)) => fail_message(token, failure),
        Outcome::Panicked(message) => {
            fail_message(token, TaskFailure::unhandled(format!("task handler panicked: {message}")))
        }
        Outcome::Cancelled => {
            let reason = cancel_reason
                .filter(|r| !r.is_empty())
                .unwrap_or_else(|| "cancelled by the server".to_owned());
            fail_message(token, TaskFailure::fatal(CANCELLED, reason))
        }
    }
}

/// A `Fail` message; an empty code becomes `UNHANDLED_EXCEPTION` (the server requires one).
/// Details over the payload limits are dropped and the payload code reported instead.
fn fail_message(token: String, failure: TaskFailure) -> Out {
    let code = if failure.code.is_empty() { UNHANDLED_EXCEPTION.to_owned() } else { failure.code };
    let refused = failure.details.as_deref().and_then(|d| value::refused(d, "details"));
    let failure = match refused {
        Some(mut refused) => {
            refused.message = format!("{} (the task failed with {code})", refused.message);
            return fail_message(token, refused);
        }
        None => TaskFailure { code, ..failure },
    };
    let code = failure.code;
    Out::Fail(worker_message::Fail {
        token,
        error: Some(TaskError {
            code,
            message: failure.message,
            retryable: failure.retryable,
            details: failure.details.as_deref().and_then(value::to_proto_opt),
        }),
    })
}

#[cfg(test)]
mod tests {
    //! The session state machine driven by hand: server messages in, worker messages out,
    //! without a network or a server.

    use super::*;
    use serde_json::json;

    fn handlers() -> Arc<Handlers> {
        let worker = Worker::builder("127.0.0.1:1")
            .worker_id("w-test")
            .task("echo", "1", |ctx: TaskContext| async move { Ok(ctx.input().clone()) })
            .task("boom", "1", |_ctx: TaskContext| async move {
                if true {
                    panic!("kaboom");
                }
                Ok(Value::Null)
            })
            .task("declined", "1", |_ctx: TaskContext| async move {
                Err(TaskFailure::fatal("CARD_DECLINED", "no funds").with_details(json!({"x": 1})))
            })
            .task("slow", "1", |ctx: TaskContext| async move {
                ctx.heartbeat(json!({"progress": 0.5}));
                tokio::time::sleep(Duration::from_secs(3600)).await;
                Ok(Value::Null)
            })
            .build()
            .expect("valid worker");
        worker.handlers
    }

    struct Harness {
        st: State,
        events: mpsc::UnboundedReceiver<Event>,
        out: OutTx,
        sent: mpsc::UnboundedReceiver<WorkerMessage>,
    }

    impl Harness {
        fn new(max: u32) -> Self {
            let (events_tx, events) = mpsc::unbounded_channel();
            let (out, sent) = mpsc::unbounded_channel();
            Self { st: State::new(handlers(), max, 16, events_tx), events, out, sent }
        }

        fn sent(&mut self) -> Vec<Out> {
            let mut v = Vec::new();
            while let Ok(m) = self.sent.try_recv() {
                v.push(m.kind.expect("kind set"));
            }
            v
        }

        fn deliver(&mut self, token: &str, task: &str, input: Value) {
            let task = server_message::Task {
                token: token.into(),
                task: task.into(),
                version: "1".into(),
                input: Some(value::to_proto(&input)),
                attempt: 1,
                ..Default::default()
            };
            let msg = ServerMessage { kind: Some(server_message::Kind::Task(task)) };
            self.st.on_server_message(msg, &self.out).expect("connected");
        }

        fn server(&mut self, kind: server_message::Kind) {
            self.st.on_server_message(ServerMessage { kind: Some(kind) }, &self.out).unwrap();
        }

        async fn next_finished(&mut self) {
            loop {
                let event = self.events.recv().await.expect("event");
                let finished = matches!(event, Event::Finished { .. });
                self.st.on_event(event, Some(&self.out)).unwrap();
                if finished {
                    return;
                }
            }
        }
    }

    fn credits(n: u32) -> Out {
        Out::Credits(worker_message::Credits { n })
    }

    fn ack(token: &str) -> server_message::Kind {
        server_message::Kind::Ack(server_message::Ack {
            token: token.into(),
            accepted: true,
            reason: String::new(),
        })
    }

    #[tokio::test]
    async fn task_completes_and_its_credit_is_granted_again() {
        let mut h = Harness::new(2);
        h.st.grant(&h.out).unwrap();
        assert_eq!(h.sent(), vec![credits(2)]);

        h.deliver("t1", "echo", json!({"order_id": "o-1", "amount": 1500}));
        assert_eq!(h.st.credits.running(), 1);
        h.next_finished().await;
        let sent = h.sent();
        assert_eq!(sent.len(), 2, "{sent:?}");
        match &sent[0] {
            Out::Complete(c) => {
                assert_eq!(c.token, "t1");
                assert_eq!(
                    value::from_proto_opt(c.output.as_ref()),
                    json!({"order_id": "o-1", "amount": 1500})
                );
            }
            other => panic!("expected complete, got {other:?}"),
        }
        assert_eq!(sent[1], credits(1));
        assert_eq!(h.st.outbox.len(), 1, "kept until acked");
        h.server(ack("t1"));
        assert!(h.st.outbox.is_empty());
    }

    #[tokio::test]
    async fn panic_becomes_unhandled_exception() {
        let mut h = Harness::new(1);
        h.st.grant(&h.out).unwrap();
        h.deliver("t1", "boom", Value::Null);
        h.next_finished().await;
        let sent = h.sent();
        let Out::Fail(fail) = &sent[1] else { panic!("expected fail, got {sent:?}") };
        let error = fail.error.as_ref().unwrap();
        assert_eq!(error.code, UNHANDLED_EXCEPTION);
        assert!(error.message.contains("kaboom"), "{}", error.message);
        assert!(error.retryable);
    }

    #[tokio::test]
    async fn handler_failure_is_reported_as_is() {
        let mut h = Harness::new(1);
        h.st.grant(&h.out).unwrap();
        h.deliver("t1", "declined", Value::Null);
        h.next_finished().await;
        let sent = h.sent();
        let Out::Fail(fail) = &sent[1] else { panic!("expected fail, got {sent:?}") };
        let error = fail.error.as_ref().unwrap();
        assert_eq!((error.code.as_str(), error.retryable), ("CARD_DECLINED", false));
        assert_eq!(value::from_proto_opt(error.details.as_ref()), json!({"x": 1}));
    }

    #[tokio::test]
    async fn cancel_drops_the_handler_and_reports_cancelled() {
        let mut h = Harness::new(1);
        h.st.grant(&h.out).unwrap();
        h.deliver("t1", "slow", Value::Null);
        // The handler's own heartbeat arrives first.
        let event = h.events.recv().await.unwrap();
        h.st.on_event(event, Some(&h.out)).unwrap();
        h.server(server_message::Kind::Cancel(server_message::Cancel {
            token: "t1".into(),
            reason: "execution cancelled".into(),
        }));
        h.next_finished().await;
        let sent = h.sent();
        let Out::Heartbeat(hb) = &sent[1] else { panic!("expected heartbeat, got {sent:?}") };
        assert_eq!(hb.tokens, vec!["t1".to_owned()]);
        assert_eq!(value::from_proto_opt(hb.details.as_ref()), json!({"progress": 0.5}));
        let Out::Fail(fail) = &sent[2] else { panic!("expected fail, got {sent:?}") };
        let error = fail.error.as_ref().unwrap();
        assert_eq!(error.code, CANCELLED);
        assert_eq!(error.message, "execution cancelled");
        assert_eq!(sent[3], credits(1));
        assert!(h.st.running.is_empty());
    }

    #[tokio::test]
    async fn task_beyond_granted_credits_is_refused() {
        let mut h = Harness::new(1);
        h.st.grant(&h.out).unwrap();
        h.deliver("t1", "slow", Value::Null);
        h.deliver("t2", "echo", Value::Null);
        assert_eq!(h.st.credits.running(), 1);
        let sent = h.sent();
        let Out::Fail(fail) = &sent[1] else { panic!("expected fail, got {sent:?}") };
        assert_eq!(fail.token, "t2");
        assert_eq!(fail.error.as_ref().unwrap().code, WORKER_OVER_CAPACITY);
    }

    #[tokio::test]
    async fn unknown_task_fails_and_returns_the_credit() {
        let mut h = Harness::new(1);
        h.st.grant(&h.out).unwrap();
        h.deliver("t1", "nope", Value::Null);
        let sent = h.sent();
        let Out::Fail(fail) = &sent[1] else { panic!("expected fail, got {sent:?}") };
        assert_eq!(fail.error.as_ref().unwrap().code, TASK_NOT_REGISTERED);
        assert_eq!(sent[2], credits(1));
    }

    #[tokio::test]
    async fn results_finished_offline_are_resent_after_reconnect() {
        let mut h = Harness::new(2);
        h.st.grant(&h.out).unwrap();
        h.deliver("t1", "echo", json!(1));
        h.deliver("t2", "slow", Value::Null);
        h.sent();
        // The stream breaks; t1 finishes while disconnected.
        h.st.credits.stream_reset();
        loop {
            let event = h.events.recv().await.unwrap();
            let finished = matches!(event, Event::Finished { .. });
            h.st.on_event(event, None).unwrap();
            if finished {
                break;
            }
        }
        assert!(h.sent().is_empty(), "nothing is sent while disconnected");
        // A new stream: resend, then grant only the slot t2 does not hold.
        h.st.resend_outbox(&h.out).unwrap();
        h.st.grant(&h.out).unwrap();
        h.st.heartbeat_all(&h.out).unwrap();
        let sent = h.sent();
        assert!(matches!(&sent[0], Out::Complete(c) if c.token == "t1"), "{sent:?}");
        assert_eq!(sent[1], credits(1));
        assert!(matches!(&sent[2], Out::Heartbeat(hb) if hb.tokens == vec!["t2".to_owned()]));
    }

    #[tokio::test]
    async fn draining_grants_nothing_and_finishes_after_acks() {
        let mut h = Harness::new(2);
        h.st.grant(&h.out).unwrap();
        h.deliver("t1", "echo", json!("x"));
        h.st.begin_drain(Duration::from_secs(5));
        assert!(!h.st.is_done());
        h.next_finished().await;
        assert!(!h.st.is_done(), "waits for the ack");
        let sent = h.sent();
        assert!(!sent.iter().any(|m| matches!(m, Out::Credits(c) if c.n == 1)), "{sent:?}");
        h.server(ack("t1"));
        assert!(h.st.is_done());
    }

    #[test]
    fn builder_validates() {
        let ok = |b: WorkerBuilder| b.task("t", "1", |_c| async { Ok(Value::Null) });
        assert!(Worker::builder("127.0.0.1:7233").build().is_err(), "no tasks");
        assert!(ok(Worker::builder("127.0.0.1:7233")).max_concurrency(0).build().is_err());
        assert!(ok(Worker::builder("127.0.0.1:7233")).worker_id("").build().is_err());
        assert!(ok(Worker::builder("127.0.0.1:7233")).worker_id("x".repeat(257)).build().is_err());
        let w = ok(Worker::builder("127.0.0.1:7233")).worker_id("w1").build().unwrap();
        assert_eq!(w.hello.runtime, "rust");
        assert!(w.hello.sdk.starts_with("orbit-worker/"));
        assert_eq!(w.hello.tasks, vec![TaskRef { name: "t".into(), version: "1".into() }]);
        assert_eq!(w.endpoint().uri().to_string(), "http://127.0.0.1:7233/");
        assert!(ok(Worker::builder(" , ")).build().is_err(), "no endpoint");
    }

    #[test]
    fn endpoints_rotate_after_a_failure() {
        let w = Worker::builder("127.0.0.1:7233, http://127.0.0.1:7243")
            .task("t", "1", |_c| async { Ok(Value::Null) })
            .build()
            .unwrap();
        assert_eq!(w.endpoint().uri().to_string(), "http://127.0.0.1:7233/");
        w.rotate();
        assert_eq!(w.endpoint().uri().to_string(), "http://127.0.0.1:7243/");
        w.rotate();
        assert_eq!(w.endpoint().uri().to_string(), "http://127.0.0.1:7233/");
    }

    #[tokio::test]
    async fn run_returns_at_once_when_shut_down_before_connecting() {
        let worker = Worker::builder("127.0.0.1:1")
            .task("t", "1", |_c| async { Ok(Value::Null) })
            .build()
            .unwrap();
        let shutdown = CancellationToken::new();
        shutdown.cancel();
        worker.run(shutdown).await.expect("nothing to drain");
    }

    #[tokio::test]
    async fn run_keeps_retrying_an_unreachable_server_until_shutdown() {
        let worker = Worker::builder("127.0.0.1:1")
            .task("t", "1", |_c| async { Ok(Value::Null) })
            .reconnect_backoff(Duration::from_millis(5), Duration::from_millis(20))
            .build()
            .unwrap();
        let shutdown = CancellationToken::new();
        let run = tokio::spawn(worker.run(shutdown.clone()));
        tokio::time::sleep(Duration::from_millis(100)).await;
        assert!(!run.is_finished());
        shutdown.cancel();
        tokio::time::timeout(Duration::from_secs(5), run)
            .await
            .expect("stops promptly")
            .expect("no panic")
            .expect("clean shutdown");
    }
}
