//! The Rust SDK's conformance worker (`cargo run -p orbit-worker --example
//! conformance-worker`, sdks/conformance/README.md) as a separate process against the real
//! `orbit dev`: the examples, a retryable failure then success, heartbeats then a cancel,
//! SIGKILL mid-task (redelivery with the same idempotency key), SIGTERM drain (in-flight
//! tasks finish, no new one is taken), reconnect after `orbit dev` restarts, a refused
//! identity, and `ListWorkers` showing the SDK's `Hello`.
//!
//! The worker binary is built by the test (`cargo build -p orbit-worker --example
//! conformance-worker`, a no-op when up to date) next to the `orbit` binary under test.

mod common;

use common::*;
use orbit_api::v1 as pb;
use orbit_worker::client::Client;
use serde_json::{json, Value};
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

/// Generous for a busy two-core machine; every wait below is bounded by it.
const WITHIN: Duration = Duration::from_secs(60);

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// The example binary, built once per test process in the profile of the `orbit` binary.
fn worker_binary() -> &'static Path {
    static BINARY: OnceLock<PathBuf> = OnceLock::new();
    BINARY.get_or_init(|| {
        let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
        let status = Command::new(cargo)
            .current_dir(repo())
            .args(["build", "-q", "-p", "orbit-worker", "--example", "conformance-worker"])
            .status()
            .expect("run cargo build");
        assert!(status.success(), "building the conformance worker failed");
        let bin_dir = Path::new(env!("CARGO_BIN_EXE_orbit")).parent().expect("bin dir");
        let binary = bin_dir.join("examples").join("conformance-worker");
        assert!(binary.exists(), "{} missing after the build", binary.display());
        binary
    })
}

/// A running conformance worker; killed on drop. Its stderr goes to `log`.
struct WorkerProcess {
    child: ChildGuard,
    log: PathBuf,
}

impl WorkerProcess {
    /// Starts the worker with `env` (besides a clean `ORBIT_*` environment) and waits for
    /// `READY`, or for its exit when `expect_ready` is false.
    fn spawn(dir: &Path, name: &str, env: &[(&str, String)], expect_ready: bool) -> Self {
        let log = dir.join(format!("{name}.log"));
        let mut cmd = Command::new(worker_binary());
        for var in ["ORBIT_TOKEN", "ORBIT_TLS_CA", "ORBIT_TLS_CLIENT_CERT", "ORBIT_TLS_CLIENT_KEY"]
        {
            cmd.env_remove(var);
        }
        cmd.env("CONFORMANCE_DIR", dir).env("RUST_LOG", "info");
        for (k, v) in env {
            cmd.env(k, v);
        }
        let stderr = std::fs::File::create(&log).expect("log file");
        let mut child = cmd
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(stderr)
            .spawn()
            .expect("spawn the conformance worker");
        let stdout = child.stdout.take().expect("stdout");
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines().map_while(Result::ok) {
                if line == "READY" {
                    let _ = tx.send(());
                }
            }
        });
        let worker = WorkerProcess { child: ChildGuard(child), log };
        if expect_ready {
            let ready = rx.recv_timeout(WITHIN);
            assert!(ready.is_ok(), "no READY within {WITHIN:?}; log:\n{}", worker.log());
        }
        worker
    }

    fn log(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    fn signal(&self, signal: &str) {
        let pid = self.child.0.id().to_string();
        let status = Command::new("kill").args(["-s", signal, &pid]).status().expect("kill");
        assert!(status.success());
    }

    /// Waits for the exit (bounded) and returns its code.
    fn wait_exit(&mut self) -> Option<i32> {
        let deadline = Instant::now() + WITHIN;
        loop {
            if let Some(status) = self.child.0.try_wait().expect("try_wait") {
                return status.code();
            }
            assert!(Instant::now() < deadline, "the worker did not exit; log:\n{}", self.log());
            std::thread::sleep(Duration::from_millis(50));
        }
    }
}

fn env(address: &str, worker_id: &str) -> Vec<(&'static str, String)> {
    vec![("ORBIT_ADDRESSES", address.to_owned()), ("ORBIT_WORKER_ID", worker_id.to_owned())]
}

/// Registers the conformance definitions and the two examples.
async fn register_all(client: &Client) {
    let mut files: Vec<PathBuf> = std::fs::read_dir(repo().join("sdks/conformance/definitions"))
        .expect("definitions")
        .map(|e| e.expect("entry").path())
        .collect();
    files.push(example("hello.yaml"));
    files.push(example("order-saga.yaml"));
    for file in files {
        let document = std::fs::read_to_string(&file).expect("definition");
        let request = pb::RegisterWorkflowRequest { document, format: 0 };
        client.raw().register_workflow(request).await.expect("register");
    }
}

async fn run(
    client: &Client,
    workflow: &str,
    id: &str,
    input: Value,
) -> (pb::ExecutionStatus, Value, Option<pb::TaskError>) {
    client.start(workflow, Some(id), input).await.expect("start");
    let r =
        tokio::time::timeout(WITHIN, client.result(id)).await.expect("in time").expect("result");
    (r.status, r.output, r.error)
}

/// Polls `check` every 50 ms until it holds (bounded).
async fn until<F: std::future::Future<Output = bool>>(what: &str, mut check: impl FnMut() -> F) {
    let deadline = Instant::now() + WITHIN;
    while !check().await {
        assert!(Instant::now() < deadline, "{what}: not within {WITHIN:?}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

fn marker(dir: &Path, key: &str, attempt: u32, stage: &str) -> PathBuf {
    dir.join(format!("{key}.{attempt}.{stage}"))
}

/// The one `<key>.<attempt>.started` marker in `dir` for the execution `id`.
fn started_marker(dir: &Path, id: &str) -> Option<(String, u32)> {
    std::fs::read_dir(dir).ok()?.filter_map(Result::ok).find_map(|e| {
        let name = e.file_name().to_string_lossy().into_owned();
        let rest = name.strip_suffix(".started")?;
        let (key, attempt) = rest.rsplit_once('.')?;
        let attempt = attempt.parse().ok()?;
        key.starts_with(&format!("{id}:")).then(|| (key.to_owned(), attempt))
    })
}

/// Scenarios 1, 2, 3 and 8: the examples, retry, heartbeat + cancel, and the `Hello`; the
/// worker is given a dead frontend first, so it also moves on to the next address.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn examples_retry_heartbeat_cancel_and_hello() {
    let dir = TempDir::new("sdk-rust");
    let server = Server::start(&dir.0.join("orbit.db"), &[]).await;
    let client = Client::connect(&server.address()).await.expect("client");
    register_all(&client).await;
    let addresses = format!("127.0.0.1:{},127.0.0.1:{}", free_port(), server.port);
    let worker = WorkerProcess::spawn(&dir.0, "worker", &env(&addresses, "rust-conf"), true);

    let (status, output, _) = run(&client, "hello", "hello-1", json!({"name": "Ada"})).await;
    assert_eq!(
        (status, output),
        (pb::ExecutionStatus::Completed, json!({"greeting": "Hello, Ada!"}))
    );
    let order = |amount: u32| json!({"order_id": "o-1", "amount": amount, "items": [{"sku": "a"}]});
    let (status, output, _) = run(&client, "order-saga", "saga-ok", order(5)).await;
    assert_eq!(status, pb::ExecutionStatus::Completed, "{output}; log:\n{}", worker.log());
    assert_eq!(output["charge_id"], json!("ch-o-1"));
    let (status, _, error) = run(&client, "order-saga", "saga-13", order(13)).await;
    assert_eq!(status, pb::ExecutionStatus::Failed);
    assert_eq!(error.map(|e| e.code), Some("CARD_DECLINED".to_owned()));

    // Retry: two retryable FLAKY failures, then success on attempt 3, same key throughout.
    let (status, output, _) =
        run(&client, "conformance-flaky", "flaky-1", json!({"fail_times": 2})).await;
    assert_eq!(status, pb::ExecutionStatus::Completed, "{output}");
    assert_eq!(output["attempt"], json!(3));
    let history = client.history("flaky-1").await.expect("history");
    let failed: Vec<String> = history
        .iter()
        .filter(|e| e.event_type == "StepAttemptFailed")
        .map(|e| format!("{:?}", e.payload))
        .collect();
    assert_eq!(failed.len(), 2, "{failed:?}");
    assert!(failed.iter().all(|f| f.contains("FLAKY")), "{failed:?}");
    let scheduled_keys: Vec<String> = history
        .iter()
        .filter(|e| e.event_type == "StepScheduled")
        .map(|e| format!("{:?}", e.payload.as_ref().and_then(|p| p.fields.get("idempotency_key"))))
        .collect();
    assert_eq!(scheduled_keys.len(), 3);
    assert!(scheduled_keys.iter().all(|k| *k == scheduled_keys[0]), "{scheduled_keys:?}");
    assert!(scheduled_keys[0].contains(output["idempotency_key"].as_str().expect("key")));

    // Heartbeats with details, then a cancel the handler answers.
    client.start("conformance-heartbeat", Some("beat-1"), json!({})).await.expect("start");
    until("a recorded heartbeat", || async {
        let h = client.history("beat-1").await.expect("history");
        h.iter().any(|e| {
            e.event_type == "StepHeartbeat" && format!("{:?}", e.payload).contains("beats")
        })
    })
    .await;
    client.cancel("beat-1", "conformance").await.expect("cancel");
    let r = tokio::time::timeout(WITHIN, client.result("beat-1"))
        .await
        .expect("in time")
        .expect("result");
    assert_eq!(r.status, pb::ExecutionStatus::Cancelled);
    // The worker answered the cancel (its CANCELLED failure, recorded and ignored).
    until("the worker's answer to the cancel", || async {
        let h = client.history("beat-1").await.expect("history");
        h.iter().any(|e| {
            e.event_type == "StaleResultIgnored" && format!("{:?}", e.payload).contains("failed")
        })
    })
    .await;

    let mut admin =
        pb::admin_service_client::AdminServiceClient::new(channel_to(&server.address()).await);
    let workers =
        admin.list_workers(pb::ListWorkersRequest::default()).await.expect("list").into_inner();
    let w = workers.workers.iter().find(|w| w.worker_id == "rust-conf").expect("listed");
    assert_eq!(w.sdk, orbit_worker::SDK);
    assert!(w.runtime.starts_with("rust "), "{}", w.runtime);
    assert!(w.online);
}

/// Scenarios 4 and 5: SIGKILL mid-task (a fresh worker with the same id gets the attempt
/// again with the same idempotency key once the dead session's timeout passed), then SIGTERM
/// drain (both in-flight tasks finish before exit 0, a task started after the SIGTERM waits
/// for the next worker).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigkill_redelivers_and_sigterm_drains() {
    let dir = TempDir::new("sdk-rust-kill");
    let session_timeout_ms = 2000;
    let server = Server::start(
        &dir.0.join("orbit.db"),
        &["--session-timeout-ms", &session_timeout_ms.to_string()],
    )
    .await;
    let client = Client::connect(&server.address()).await.expect("client");
    register_all(&client).await;
    let address = format!("127.0.0.1:{}", server.port);

    let mut first = WorkerProcess::spawn(&dir.0, "first", &env(&address, "rust-kill"), true);
    client.start("conformance-slow", Some("slow-1"), json!({"ms": 10_000})).await.expect("start");
    until("the .started marker", || async { started_marker(&dir.0, "slow-1").is_some() }).await;
    let (key, attempt) = started_marker(&dir.0, "slow-1").expect("marker");
    first.signal("KILL");
    first.wait_exit();
    assert!(!marker(&dir.0, &key, attempt, "done").exists(), "killed before the task finished");
    // The dead session's attempts are handed back once its timeout passes without it.
    tokio::time::sleep(Duration::from_millis(session_timeout_ms * 2)).await;
    let mut second = WorkerProcess::spawn(&dir.0, "second", &env(&address, "rust-kill"), true);
    let r = tokio::time::timeout(WITHIN, client.result("slow-1"))
        .await
        .expect("in time")
        .expect("result");
    assert_eq!(r.status, pb::ExecutionStatus::Completed, "{r:?}; log:\n{}", second.log());
    assert_eq!(r.output["idempotency_key"], json!(key), "redelivered with the same key");
    assert_eq!(r.output["worker_id"], json!("rust-kill"));
    let history = client.history("slow-1").await.expect("history");
    let uncertain = history.iter().filter(|e| e.event_type == "StepAttemptUncertain").count();
    assert_eq!(uncertain, 1, "the killed worker's attempt was handed back");

    // SIGTERM with two tasks in flight.
    for id in ["drain-1", "drain-2"] {
        client.start("conformance-slow", Some(id), json!({"ms": 1500})).await.expect("start");
    }
    until("both .started markers", || async {
        started_marker(&dir.0, "drain-1").is_some() && started_marker(&dir.0, "drain-2").is_some()
    })
    .await;
    second.signal("TERM");
    // Started after the SIGTERM: the drained worker must not take it.
    client.start("conformance-slow", Some("drain-3"), json!({"ms": 10})).await.expect("start");
    assert_eq!(second.wait_exit(), Some(0), "log:\n{}", second.log());
    for id in ["drain-1", "drain-2"] {
        let (key, attempt) = started_marker(&dir.0, id).expect("marker");
        assert!(marker(&dir.0, &key, attempt, "done").exists(), "{id} finished before the exit");
        let r = tokio::time::timeout(WITHIN, client.result(id))
            .await
            .expect("in time")
            .expect("result");
        assert_eq!(r.status, pb::ExecutionStatus::Completed, "{id}");
    }
    assert!(started_marker(&dir.0, "drain-3").is_none(), "the draining worker took a new task");
    let info = client.describe("drain-3").await.expect("describe").info.expect("info");
    assert_eq!(info.status(), pb::ExecutionStatus::Running);
    let _third = WorkerProcess::spawn(&dir.0, "third", &env(&address, "rust-next"), true);
    let r = tokio::time::timeout(WITHIN, client.result("drain-3"))
        .await
        .expect("in time")
        .expect("result");
    assert_eq!(
        (r.status, &r.output["worker_id"]),
        (pb::ExecutionStatus::Completed, &json!("rust-next"))
    );
}

/// Scenario 6: `orbit dev` is SIGKILLed and restarted on the same port and database; the
/// same worker process reconnects and runs a new execution.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_worker_reconnects_after_orbit_dev_restarts() {
    let dir = TempDir::new("sdk-rust-restart");
    let db = dir.0.join("orbit.db");
    let mut server = Server::start(&db, &[]).await;
    let client = Client::connect(&server.address()).await.expect("client");
    register_all(&client).await;
    let port = server.port;
    let mut worker =
        WorkerProcess::spawn(&dir.0, "worker", &env(&format!("127.0.0.1:{port}"), "rust-re"), true);
    let (status, _, _) = run(&client, "hello", "before", json!({"name": "A"})).await;
    assert_eq!(status, pb::ExecutionStatus::Completed);

    server.kill9();
    let server = Server::start_on(&db, port, &[]).await;
    let client = Client::connect(&server.address()).await.expect("client");
    let (status, output, _) = run(&client, "hello", "after", json!({"name": "B"})).await;
    assert_eq!(
        (status, output),
        (pb::ExecutionStatus::Completed, json!({"greeting": "Hello, B!"}))
    );
    assert!(worker.child.0.try_wait().expect("try_wait").is_none(), "the same process ran it");
    assert!(worker.log().contains("reconnecting"), "log:\n{}", worker.log());
    worker.signal("TERM");
    assert_eq!(worker.wait_exit(), Some(0), "log:\n{}", worker.log());
}

const APP_TOKEN: &str = "rust-sdk-app-token-3c4d5e6f7a8b9c0d1e2f";
const WORKER_TOKEN: &str = "rust-sdk-worker-token-a1b2c3d4e5f60718";
const BILLING_TOKEN: &str = "rust-sdk-billing-token-0f1e2d3c4b5a6978";

/// Scenario 7 and the connection options: over mutual TLS, a worker identity whose tasks do
/// not cover the worker's exits non-zero printing `PERMISSION_DENIED` without retrying; the
/// right token runs the task.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_refused_identity_exits_and_the_right_one_serves_over_mutual_tls() {
    use common::secure::*;
    let dir = TempDir::new("sdk-rust-auth");
    let pki = common::tls::Pki::new(&dir.0.join("pki"));
    let identities = [
        identity(
            "app",
            "client",
            APP_TOKEN,
            "    actions: [register, start, read]\n    workflows: ['*']\n",
        ),
        identity("rust-workers", "worker", WORKER_TOKEN, "    tasks: ['*']\n    runtime: rust\n"),
        identity("billing", "worker", BILLING_TOKEN, "    tasks: ['billing.*']\n"),
    ];
    let server = start_secured(&dir.0, &pki, &identities, APP_TOKEN).await;
    let address = common::tls::tls_address(&server);
    let tls = pki.client("ca", Some("client"));
    let client = Client::connect_with(&address, &tls, Some(APP_TOKEN)).await.expect("client");
    register_all(&client).await;
    let tls_env = |token: &str| {
        let mut e = env(&address, "rust-auth");
        e.push(("ORBIT_TOKEN", token.to_owned()));
        e.push(("ORBIT_TLS_CA", pki.path("ca.pem").display().to_string()));
        e.push(("ORBIT_TLS_CLIENT_CERT", pki.path("client.pem").display().to_string()));
        e.push(("ORBIT_TLS_CLIENT_KEY", pki.path("client-key.pem").display().to_string()));
        e
    };

    let mut refused = WorkerProcess::spawn(&dir.0, "refused", &tls_env(BILLING_TOKEN), false);
    assert_eq!(refused.wait_exit(), Some(1), "log:\n{}", refused.log());
    let log = refused.log();
    assert!(log.contains("error: PERMISSION_DENIED"), "log:\n{log}");
    assert!(!log.contains("reconnecting"), "no retry after a refusal:\n{log}");

    // The runtime pin `rust` admits `rust <version>`.
    let _worker = WorkerProcess::spawn(&dir.0, "accepted", &tls_env(WORKER_TOKEN), true);
    let (status, output, _) = run(&client, "hello", "tls-1", json!({"name": "Ada"})).await;
    assert_eq!(
        (status, output),
        (pb::ExecutionStatus::Completed, json!({"greeting": "Hello, Ada!"}))
    );
}
