//! Helpers for end-to-end tests: run the real `orbit` binary on a temporary SQLite file,
//! talk to it over loopback gRPC, run in-process Rust workers, read the file afterwards.

// Tests read their environment (ORBIT_PYTHON, the database URL) and the wall clock
// (unique names, deadlines of real processes) directly.
#![allow(clippy::disallowed_methods)]
#![allow(dead_code, missing_docs)]

pub mod admin;
pub mod batches;
pub mod bearer;
pub mod buf;
pub mod cluster;
pub mod console;
pub mod evolving;
pub mod grpcurl;
pub mod http_peer;
pub mod kinds;
pub mod otlp;
pub mod python;
pub mod scenario;
pub mod schedules;
pub mod secure;
pub mod split;
pub mod tls;

use orbit_api::v1 as pb;
use orbit_api::v1::workflow_service_client::WorkflowServiceClient;
use orbit_server_kit::payload::{json_to_proto, proto_to_json};
use serde_json::Value;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};
use tonic::transport::Channel;

/// A temporary directory removed on drop.
pub struct TempDir(pub PathBuf);

impl TempDir {
    pub fn new(name: &str) -> TempDir {
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos());
        let dir =
            std::env::temp_dir().join(format!("orbit-e2e-{name}-{}-{nanos}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("temp dir");
        TempDir(dir)
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// A free loopback port (bound and released; the server binds it right after). Never the
/// same port twice in one test process: the kernel may hand a just-released port to the
/// next bind, and two tests starting servers at once would then share one.
pub fn free_port() -> u16 {
    // `orbit dev` also binds its admin port, the gRPC port plus 2000: both are reserved,
    // or a test running beside another could be handed the other's admin port (its
    // server then cannot listen, and the test waits out its readiness deadline).
    const ADMIN_OFFSET: u16 = 2000;
    static GIVEN: std::sync::Mutex<Vec<u16>> = std::sync::Mutex::new(Vec::new());
    let bindable = |port: u16| std::net::TcpListener::bind(("127.0.0.1", port)).is_ok();
    loop {
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .and_then(|l| l.local_addr())
            .map(|a| a.port())
            .expect("free port");
        let Some(admin) = port.checked_add(ADMIN_OFFSET) else { continue };
        let mut given = GIVEN.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        if !given.contains(&port) && !given.contains(&admin) && bindable(admin) {
            given.extend([port, admin]);
            return port;
        }
    }
}

/// A running `orbit dev` process.
pub struct Server {
    pub child: Child,
    pub port: u16,
    pub db: PathBuf,
}

impl Server {
    /// Starts `orbit dev` on `db` and waits until it answers.
    pub async fn start(db: &Path, extra: &[&str]) -> Server {
        Server::start_on(db, free_port(), extra).await
    }

    /// Starts `orbit dev` on `db` and `port` (a restart keeps the port workers dial).
    pub async fn start_on(db: &Path, port: u16, extra: &[&str]) -> Server {
        let server = Server::spawn_on(db, port, extra);
        server.wait_ready().await;
        server
    }

    /// Spawns `orbit dev` on `db` and `port` without waiting: for servers whose readiness
    /// the caller checks itself (one that refuses anonymous calls, say).
    pub fn spawn_on(db: &Path, port: u16, extra: &[&str]) -> Server {
        let child = Command::new(env!("CARGO_BIN_EXE_orbit"))
            .args(["dev", "--db"])
            .arg(db)
            .args(["--listen", &format!("127.0.0.1:{port}"), "--log", "warn"])
            .args(extra)
            .stdout(Stdio::null())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("spawn orbit dev");
        Server { child, port, db: db.to_path_buf() }
    }

    pub fn address(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }

    async fn wait_ready(&self) {
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            if let Ok(mut c) = WorkflowServiceClient::connect(self.address()).await {
                if c.list_workflows(pb::ListWorkflowsRequest::default()).await.is_ok() {
                    return;
                }
            }
            assert!(Instant::now() < deadline, "orbit dev did not become ready");
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    pub async fn client(&self) -> WorkflowServiceClient<Channel> {
        WorkflowServiceClient::connect(self.address()).await.expect("connect")
    }

    /// SIGKILL, then reap.
    pub fn kill9(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        self.kill9();
    }
}

/// Path of an example definition.
pub fn example(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../examples/definitions").join(name)
}

pub async fn register(
    client: &mut WorkflowServiceClient<Channel>,
    document: &str,
) -> pb::RegisterWorkflowResponse {
    client
        .register_workflow(pb::RegisterWorkflowRequest { document: document.into(), format: 0 })
        .await
        .expect("register")
        .into_inner()
}

pub async fn register_example(client: &mut WorkflowServiceClient<Channel>, name: &str) {
    let doc = std::fs::read_to_string(example(name)).expect("example file");
    register(client, &doc).await;
}

pub async fn start(
    client: &mut WorkflowServiceClient<Channel>,
    workflow: &str,
    id: &str,
    input: Value,
) -> Result<pb::StartExecutionResponse, tonic::Status> {
    client
        .start_execution(pb::StartExecutionRequest {
            memo: None,
            workflow: workflow.into(),
            version: String::new(),
            input: Some(json_to_proto(input)),
            execution_id: id.into(),
            priority: 0,
        })
        .await
        .map(tonic::Response::into_inner)
}

/// Waits (bounded) for an execution's result: (status, output or error message).
pub async fn result(
    client: &mut WorkflowServiceClient<Channel>,
    id: &str,
    within: Duration,
) -> (pb::ExecutionStatus, Value) {
    result_of(client, tonic::Request::new(result_watch(id)), within).await
}

/// The watch request [`result_of`] expects: only the result.
pub fn result_watch(id: &str) -> pb::WatchExecutionRequest {
    pb::WatchExecutionRequest { execution_id: id.into(), result_only: true, ..Default::default() }
}

/// Waits (bounded) for the result `watch` (a [`result_watch`], possibly with metadata)
/// reports: (status, output or error message).
pub async fn result_of(
    client: &mut WorkflowServiceClient<Channel>,
    watch: tonic::Request<pb::WatchExecutionRequest>,
    within: Duration,
) -> (pb::ExecutionStatus, Value) {
    let id = watch.get_ref().execution_id.clone();
    let fut = async {
        let mut stream = client.watch_execution(watch).await.expect("watch").into_inner();
        while let Some(msg) = stream.message().await.expect("watch stream") {
            if let Some(pb::watch_execution_response::Kind::Result(r)) = msg.kind {
                let status = pb::ExecutionStatus::try_from(r.status)
                    .unwrap_or(pb::ExecutionStatus::Unspecified);
                let value = match (r.output, r.error) {
                    (Some(o), _) => proto_to_json(o).unwrap_or(Value::Null),
                    (None, Some(e)) => Value::String(format!("{}: {}", e.code, e.message)),
                    _ => Value::Null,
                };
                return (status, value);
            }
        }
        panic!("watch ended without a result for {id}");
    };
    tokio::time::timeout(within, fut)
        .await
        .unwrap_or_else(|_| panic!("no result for {id} within {within:?}"))
}

/// The Orbit error code of a failed call.
pub fn code(status: &tonic::Status) -> String {
    orbit_server_kit::OrbitError::from_status(status)
        .map_or_else(|| format!("{:?}", status.code()), |e| e.code.as_str().to_string())
}

// ---------------------------------------------------------------------------------------
// Helpers added for the worker-loss, bad-input, operability and Python-worker tests.

use orbit_api::v1::worker_message::{Credits, Hello, Kind as WorkerKind};
use orbit_api::v1::worker_service_client::WorkerServiceClient;
use tonic::codegen::tokio_stream::wrappers::ReceiverStream;

/// A worker `Session` stream driven by hand: the sender of worker messages and the
/// server's message stream.
pub struct RawSession {
    pub tx: tokio::sync::mpsc::Sender<pb::WorkerMessage>,
    pub rx: tonic::Streaming<pb::ServerMessage>,
}

pub fn hello(worker_id: &str, tasks: &[(&str, &str)], max_concurrency: u32) -> pb::WorkerMessage {
    pb::WorkerMessage {
        kind: Some(WorkerKind::Hello(Hello {
            worker_id: worker_id.into(),
            runtime: "e2e-test".into(),
            sdk: "raw-stream".into(),
            tasks: tasks
                .iter()
                .map(|(name, version)| pb::TaskRef {
                    name: (*name).into(),
                    version: (*version).into(),
                })
                .collect(),
            max_concurrency,
            labels: Default::default(),
        })),
    }
}

pub fn credits(n: u32) -> pb::WorkerMessage {
    pb::WorkerMessage { kind: Some(WorkerKind::Credits(Credits { n })) }
}

pub async fn worker_client(address: &str) -> WorkerServiceClient<Channel> {
    WorkerServiceClient::new(channel_to(address).await)
}

/// A connected channel to `address`: an `https://` address (a [`cluster::Topology`]
/// frontend) with the topologies' CA and client certificate ([`cluster::shared_tls`], the
/// admin identity), any other in plain text.
pub async fn channel_to(address: &str) -> Channel {
    let endpoint = if address.starts_with("https://") {
        cluster::shared_tls().endpoint(address).expect("tls endpoint")
    } else {
        Channel::from_shared(address.to_string()).expect("address")
    };
    endpoint.connect().await.expect("connect")
}

/// Opens a session whose first message is `first`; the call's own error, if any, is
/// returned (the server may also answer with an error as the first stream item).
pub async fn open_raw_session(
    address: &str,
    first: pb::WorkerMessage,
) -> Result<RawSession, tonic::Status> {
    let mut client = worker_client(address).await;
    let (tx, rx) = tokio::sync::mpsc::channel(64);
    tx.send(first).await.expect("queue first message");
    let fut = client.session(ReceiverStream::new(rx));
    let response = tokio::time::timeout(Duration::from_secs(10), fut)
        .await
        .expect("session call did not answer within 10s")?;
    Ok(RawSession { tx, rx: response.into_inner() })
}

impl RawSession {
    /// Hello, expects Welcome, then grants `n` credits.
    pub async fn start(
        address: &str,
        worker_id: &str,
        tasks: &[(&str, &str)],
        n: u32,
    ) -> RawSession {
        let mut s = open_raw_session(address, hello(worker_id, tasks, n.max(1)))
            .await
            .expect("open session");
        match s.next(Duration::from_secs(10)).await {
            Some(pb::server_message::Kind::Welcome(_)) => {}
            other => panic!("expected welcome, got {other:?}"),
        }
        s.tx.send(credits(n)).await.expect("send credits");
        s
    }

    /// The next server message other than a ping, bounded; `None` at end of stream.
    pub async fn next(&mut self, within: Duration) -> Option<pb::server_message::Kind> {
        let deadline = tokio::time::Instant::now() + within;
        loop {
            let msg = tokio::time::timeout_at(deadline, self.rx.message())
                .await
                .unwrap_or_else(|_| panic!("no server message within {within:?}"))
                .expect("session stream failed")?;
            match msg.kind {
                Some(pb::server_message::Kind::Ping(_)) | None => continue,
                Some(kind) => return Some(kind),
            }
        }
    }

    /// The next delivered task, bounded.
    pub async fn next_task(&mut self, within: Duration) -> pb::server_message::Task {
        match self.next(within).await {
            Some(pb::server_message::Kind::Task(t)) => t,
            other => panic!("expected a task, got {other:?}"),
        }
    }

    pub async fn complete(&self, token: &str, output: Value) {
        let msg = pb::WorkerMessage {
            kind: Some(WorkerKind::Complete(pb::worker_message::Complete {
                token: token.into(),
                output: Some(json_to_proto(output)),
            })),
        };
        self.tx.send(msg).await.expect("send complete");
    }
}

/// The whole history of the latest run of an execution (every page).
pub async fn history(
    client: &mut WorkflowServiceClient<Channel>,
    id: &str,
) -> Vec<pb::HistoryEvent> {
    let mut events = Vec::new();
    let mut page_token = String::new();
    loop {
        let page = client
            .get_history(pb::GetHistoryRequest {
                execution_id: id.into(),
                run: 0,
                page_size: 0,
                page_token: page_token.clone(),
            })
            .await
            .expect("get history")
            .into_inner();
        events.extend(page.events);
        if page.next_page_token.is_empty() {
            return events;
        }
        page_token = page.next_page_token;
    }
}

/// How often [`poll_until`] and [`history_until`] look again at a real process's state.
pub const POLL: Duration = Duration::from_millis(50);

/// Calls `probe` every [`POLL`] until it returns `Some` (its value is returned), failing
/// with `what()` once `within` has passed: the one wait-until loop for state of another
/// process, which paused time cannot reach.
pub async fn poll_until<T>(
    within: Duration,
    what: impl FnOnce() -> String,
    mut probe: impl AsyncFnMut() -> Option<T>,
) -> T {
    let deadline = Instant::now() + within;
    loop {
        if let Some(v) = probe().await {
            return v;
        }
        assert!(Instant::now() < deadline, "{} (waited {within:?})", what());
        tokio::time::sleep(POLL).await;
    }
}

/// The first of `id`'s pending tasks (`DescribeExecution`) for which `pick` holds, once one
/// does (bounded by `within`).
pub async fn pending_task_until(
    client: &mut WorkflowServiceClient<Channel>,
    id: &str,
    within: Duration,
    pick: impl Fn(&pb::PendingTask) -> bool,
) -> pb::PendingTask {
    let request = pb::DescribeExecutionRequest { execution_id: id.into(), ..Default::default() };
    poll_until(
        within,
        || format!("{id}: no pending task matched"),
        async || {
            let d =
                client.describe_execution(request.clone()).await.expect("describe").into_inner();
            d.execution.and_then(|e| e.pending_tasks.into_iter().find(|t| pick(t)))
        },
    )
    .await
}

/// Polls the history until `pred` holds (bounded); returns the last history read.
pub async fn history_until(
    client: &mut WorkflowServiceClient<Channel>,
    id: &str,
    within: Duration,
    pred: impl Fn(&[pb::HistoryEvent]) -> bool,
) -> Vec<pb::HistoryEvent> {
    let deadline = Instant::now() + within;
    loop {
        let h = history(client, id).await;
        if pred(&h) {
            return h;
        }
        if Instant::now() >= deadline {
            let types: Vec<_> = h.iter().map(|e| format!("{}({})", e.event_type, e.step)).collect();
            panic!("history of {id} did not reach the expected state within {within:?}: {types:?}");
        }
        tokio::time::sleep(POLL).await;
    }
}

/// A child process killed (and reaped) on drop.
pub struct ChildGuard(pub Child);

impl Drop for ChildGuard {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// A tool a test runs that is not Orbit's own code (buf, grpcurl): `$<env>`, else `name` on
/// PATH, else python3's scripts folder, where pip puts the binaries of the packages
/// scripts/test.sh installs. Panics with `install` when it is missing: a test needing the
/// tool never passes silently without it.
pub fn pip_tool(name: &str, env: &str, install: &str) -> PathBuf {
    if let Ok(path) = std::env::var(env) {
        return PathBuf::from(path);
    }
    let on_path = Command::new("sh").args(["-c", &format!("command -v {name}")]).output();
    if let Ok(out) = on_path {
        let p = String::from_utf8_lossy(&out.stdout).trim().to_string();
        if out.status.success() && !p.is_empty() {
            return PathBuf::from(p);
        }
    }
    let scripts = Command::new("python3")
        .args(["-c", "import sysconfig; print(sysconfig.get_path('scripts'))"])
        .output();
    if let Ok(out) = scripts {
        let p = PathBuf::from(String::from_utf8_lossy(&out.stdout).trim()).join(name);
        if p.exists() {
            return p;
        }
    }
    panic!("`{name}` not found (on PATH, in ${env} or in python3's scripts folder): install it with `{install}` (scripts/test.sh does)");
}

/// Runs a command to its end, bounded: (exit success, stdout, stderr). Kills it on timeout.
pub fn run_bounded(cmd: &mut Command, within: Duration) -> (bool, String, String) {
    use std::io::Read;
    let mut child = ChildGuard(
        cmd.stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap_or_else(|e| panic!("spawn {cmd:?}: {e}")),
    );
    let mut out = child.0.stdout.take().expect("stdout");
    let mut err = child.0.stderr.take().expect("stderr");
    let out_reader = std::thread::spawn(move || {
        let mut s = String::new();
        let _ = out.read_to_string(&mut s);
        s
    });
    let err_reader = std::thread::spawn(move || {
        let mut s = String::new();
        let _ = err.read_to_string(&mut s);
        s
    });
    let deadline = Instant::now() + within;
    let status = loop {
        if let Some(status) = child.0.try_wait().expect("wait") {
            break status;
        }
        if Instant::now() >= deadline {
            let _ = child.0.kill();
            let _ = child.0.wait();
            panic!("{cmd:?} did not finish within {within:?}");
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    let stdout = out_reader.join().unwrap_or_default();
    let stderr = err_reader.join().unwrap_or_default();
    (status.success(), stdout, stderr)
}

/// A history event's payload as JSON (an empty object when it has none).
pub fn event_payload(e: &pb::HistoryEvent) -> Value {
    let fields = e.payload.clone().unwrap_or_default();
    Value::Object(orbit_server_kit::payload::struct_to_json_object(fields).expect("payload"))
}

/// A worker of task `work` (`builder` names the server, credentials and worker id) whose
/// handler describes its own execution through `client` while it holds the task, and
/// returns what `DescribeExecution` said of its attempt: `{"worker_id", "state", "token"}`
/// (the state as the `PendingTaskState` name), plus the token it was given as `"mine"`.
/// Two credits: its first claim is never full, so its session lends or takes hand-offs.
pub fn describing_worker(
    builder: orbit_worker::WorkerBuilder,
    client: WorkflowServiceClient<Channel>,
    stop: &tokio_util::sync::CancellationToken,
) {
    use orbit_worker::{TaskContext, TaskFailure};
    let worker = builder
        .max_concurrency(2)
        .task("work", "1", move |ctx: TaskContext| {
            let mut client = client.clone();
            async move {
                let request = pb::DescribeExecutionRequest {
                    execution_id: ctx.execution_id().to_string(),
                    ..Default::default()
                };
                let described = client.describe_execution(request).await;
                let described =
                    described.map_err(|s| TaskFailure::fatal("DESCRIBE", s.message()))?;
                let execution = described.into_inner().execution.unwrap_or_default();
                let mine = execution.pending_tasks.iter().find(|t| t.unit == ctx.step());
                Ok::<Value, TaskFailure>(serde_json::json!({
                    "worker_id": mine.map(|t| t.worker_id.clone()),
                    "state": mine.map(|t| t.state().as_str_name()),
                    "token": mine.map(|t| t.token.clone()),
                    "mine": ctx.token(),
                }))
            }
        })
        .build()
        .expect("worker");
    let stop = stop.clone();
    tokio::spawn(async move { worker.run(stop).await });
}

/// One `work` step whose output is the workflow's: what [`describing_worker`] returned.
pub const DESCRIBED: &str = r#"
name: described
version: "1"
tasks: { work: {} }
steps:
  - { id: a, task: work }
output: "${{ steps.a.output }}"
"#;

/// Runs `n` executions of [`DESCRIBED`] one after another (after one to warm the worker's
/// session up, whose output is not checked) and asserts that each handler saw itself named
/// in `DescribeExecution`: the attempt dispatched, to `worker_id`, under its own token.
pub async fn assert_described_from_the_handler(
    client: &mut WorkflowServiceClient<Channel>,
    prefix: &str,
    worker_id: &str,
    n: usize,
    within: Duration,
) {
    let warm = format!("{prefix}-warm");
    start(client, "described", &warm, serde_json::json!({})).await.expect("start");
    assert_eq!(result(client, &warm, within).await.0, pb::ExecutionStatus::Completed);
    for i in 0..n {
        let id = format!("{prefix}-{i}");
        start(client, "described", &id, serde_json::json!({})).await.expect("start");
        let (status, seen) = result(client, &id, within).await;
        assert_eq!(status, pb::ExecutionStatus::Completed, "{seen}");
        assert_eq!(seen["worker_id"], serde_json::json!(worker_id), "{id}: {seen}");
        assert_eq!(seen["state"], serde_json::json!("PENDING_TASK_STATE_DISPATCHED"), "{seen}");
        assert_eq!(seen["token"], seen["mine"], "{id}: {seen}");
    }
}
