//! The TypeScript SDK (`sdks/typescript`, npm package `@orbit/worker`) against the real
//! `orbit dev`: its conformance worker (`sdks/typescript/conformance/worker.mjs`, the
//! contract in `sdks/conformance/README.md`) runs as a child process and the histories are
//! checked — the example workflows, a retryable failure then success, heartbeats with
//! details and a cancellation delivered to the handler, redelivery with the same
//! idempotency key after a SIGKILL, a SIGTERM drain, the SDK's `Hello` identity in
//! `ListWorkers`, failover across frontends, reconnection after `orbit dev` restarts, and
//! mutual TLS with a token, where a refused identity exits at once.
//!
//! Needs the package built first: `cd sdks/typescript && npm ci && npm run build`
//! (scripts/test.sh does it).

mod common;

use common::*;
use orbit_api::v1 as pb;
use orbit_api::v1::admin_service_client::AdminServiceClient;
use orbit_api::v1::workflow_service_client::WorkflowServiceClient;
use orbit_server_kit::payload::struct_to_json_object;
use serde_json::{json, Value};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};
use tonic::transport::Channel;

/// Generous bound for anything that happens "soon" on a busy 2-core machine.
const WAIT: Duration = Duration::from_secs(60);

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

fn node() -> String {
    std::env::var("NODE").unwrap_or_else(|_| "node".to_string())
}

/// Fails (never skips) when the package was not built.
fn check_built() {
    let dist = repo().join("sdks/typescript/dist/index.js");
    assert!(
        dist.exists(),
        "the TypeScript SDK is not built ({}): run `cd sdks/typescript && npm ci && npm run build`",
        dist.display()
    );
}

/// One conformance worker process, its output in files under the test's directory.
struct TsWorker {
    child: ChildGuard,
    stdout: PathBuf,
    stderr: PathBuf,
}

impl TsWorker {
    fn spawn(dir: &Path, name: &str, env: &[(&str, String)]) -> TsWorker {
        let stdout = dir.join(format!("{name}.out"));
        let stderr = dir.join(format!("{name}.err"));
        let mut cmd = Command::new(node());
        cmd.current_dir(repo())
            .arg("sdks/typescript/conformance/worker.mjs")
            .env_remove("ORBIT_TOKEN")
            .env_remove("ORBIT_TLS_CA")
            .env("CONFORMANCE_DIR", dir.join("markers"))
            .stdin(Stdio::null())
            .stdout(std::fs::File::create(&stdout).expect("stdout file"))
            .stderr(std::fs::File::create(&stderr).expect("stderr file"));
        for (k, v) in env {
            cmd.env(k, v);
        }
        let child =
            ChildGuard(cmd.spawn().expect("spawn node sdks/typescript/conformance/worker.mjs"));
        TsWorker { child, stdout, stderr }
    }

    fn log(&self) -> String {
        std::fs::read_to_string(&self.stderr).unwrap_or_default()
    }

    /// Waits for the `READY` line (printed after the first `Welcome`).
    async fn ready(&mut self) {
        let deadline = Instant::now() + WAIT;
        loop {
            if std::fs::read_to_string(&self.stdout).unwrap_or_default().contains("READY") {
                return;
            }
            if let Ok(Some(status)) = self.child.0.try_wait() {
                panic!("the worker exited ({status}) before READY:\n{}", self.log());
            }
            assert!(Instant::now() < deadline, "no READY within {WAIT:?}:\n{}", self.log());
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    /// Waits (bounded) for the process to exit; its exit status.
    async fn exit(&mut self, within: Duration) -> std::process::ExitStatus {
        let deadline = Instant::now() + within;
        loop {
            if let Some(status) = self.child.0.try_wait().expect("try_wait") {
                return status;
            }
            assert!(
                Instant::now() < deadline,
                "the worker did not exit within {within:?}:\n{}",
                self.log()
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    fn signal(&self, sig: &str) {
        let ok = Command::new("kill")
            .args([&format!("-{sig}"), &self.child.0.id().to_string()])
            .status()
            .expect("kill")
            .success();
        assert!(ok, "kill -{sig} failed");
    }
}

/// A fresh `orbit dev` with the conformance definitions and the two examples registered.
async fn server(dir: &TempDir, extra: &[&str]) -> (Server, WorkflowServiceClient<Channel>) {
    std::fs::create_dir_all(dir.0.join("markers")).expect("markers dir");
    let server = Server::start(&dir.0.join("orbit.db"), extra).await;
    let mut c = server.client().await;
    for name in ["conformance-flaky", "conformance-heartbeat", "conformance-slow"] {
        let path = repo().join(format!("sdks/conformance/definitions/{name}.yaml"));
        register(&mut c, &std::fs::read_to_string(path).expect("definition")).await;
    }
    register_example(&mut c, "hello.yaml").await;
    register_example(&mut c, "order-saga.yaml").await;
    (server, c)
}

fn env_for(server: &Server, worker_id: &str) -> Vec<(&'static str, String)> {
    vec![
        ("ORBIT_ADDRESSES", format!("127.0.0.1:{}", server.port)),
        ("ORBIT_WORKER_ID", worker_id.to_string()),
    ]
}

fn payload(e: &pb::HistoryEvent) -> Value {
    Value::Object(struct_to_json_object(e.payload.clone().unwrap_or_default()).expect("payload"))
}

fn of_type<'a>(h: &'a [pb::HistoryEvent], t: &str) -> Vec<&'a pb::HistoryEvent> {
    h.iter().filter(|e| e.event_type == t).collect()
}

/// The marker files `<key>.<attempt>.<suffix>` the worker wrote.
fn markers(dir: &TempDir, suffix: &str) -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir(dir.0.join("markers"))
        .expect("markers dir")
        .filter_map(|e| e.ok()?.file_name().into_string().ok())
        .filter(|n| n.ends_with(suffix))
        .collect();
    names.sort();
    names
}

async fn wait_markers(dir: &TempDir, suffix: &str, n: usize) -> Vec<String> {
    let deadline = Instant::now() + WAIT;
    loop {
        let found = markers(dir, suffix);
        if found.len() >= n {
            return found;
        }
        assert!(Instant::now() < deadline, "only {found:?} within {WAIT:?}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn examples_retry_heartbeat_cancel_and_hello() {
    check_built();
    let dir = TempDir::new("sdk-ts-main");
    let (server, mut c) = server(&dir, &[]).await;
    // The first address refuses connections: the worker moves on to the second frontend.
    let mut env = env_for(&server, "ts-main");
    env[0].1 = format!("127.0.0.1:{},127.0.0.1:{}", free_port(), server.port);
    let mut worker = TsWorker::spawn(&dir.0, "main", &env);
    worker.ready().await;

    // Hello: ListWorkers shows the SDK and runtime strings.
    let mut admin = AdminServiceClient::connect(server.address()).await.expect("admin");
    let workers = admin
        .list_workers(pb::ListWorkersRequest::default())
        .await
        .expect("list workers")
        .into_inner()
        .workers;
    let me = workers.iter().find(|w| w.worker_id == "ts-main").expect("ts-main in ListWorkers");
    assert_eq!(me.sdk, "orbit-typescript 0.1.0");
    assert!(me.runtime.starts_with("node "), "runtime {:?}", me.runtime);

    // Examples.
    start(&mut c, "hello", "hello-1", json!({"name": "Ada"})).await.expect("start hello");
    let (status, out) = result(&mut c, "hello-1", WAIT).await;
    assert_eq!((status, out), (pb::ExecutionStatus::Completed, json!({"greeting": "Hello, Ada!"})));
    let order = json!({"order_id": "o-1", "amount": 500, "items": [{"sku": "a"}, {"sku": "b"}]});
    start(&mut c, "order-saga", "saga-ok", order).await.expect("start saga");
    let (status, out) = result(&mut c, "saga-ok", WAIT).await;
    assert_eq!(status, pb::ExecutionStatus::Completed, "{out}");
    assert_eq!(out["charge_id"], "ch-o-1");
    assert_eq!(out["reservations"], json!(["r-a", "r-b"]));
    let declined = json!({"order_id": "o-2", "amount": 13, "items": [{"sku": "a"}]});
    start(&mut c, "order-saga", "saga-13", declined).await.expect("start saga 13");
    let (status, out) = result(&mut c, "saga-13", WAIT).await;
    assert_eq!(status, pb::ExecutionStatus::Failed);
    assert!(out.as_str().unwrap_or_default().starts_with("CARD_DECLINED"), "{out}");

    // Retry: two retryable FLAKY failures, then success on attempt 3, one idempotency key.
    start(&mut c, "conformance-flaky", "flaky-1", json!({"fail_times": 2})).await.expect("start");
    let (status, out) = result(&mut c, "flaky-1", WAIT).await;
    assert_eq!(status, pb::ExecutionStatus::Completed, "{out}");
    assert_eq!(out["attempt"], 3);
    let h = history(&mut c, "flaky-1").await;
    let failures = of_type(&h, "StepAttemptFailed");
    assert_eq!(failures.len(), 2);
    for (i, f) in failures.iter().enumerate() {
        let error = &payload(f)["error"];
        assert_eq!(error["code"], "FLAKY");
        assert_eq!(error["retryable"], true);
        assert_eq!(error["message"], format!("attempt {}", i + 1));
    }
    assert_eq!(of_type(&h, "StepSucceeded").len(), 1);
    let keys: Vec<Value> = of_type(&h, "StepScheduled")
        .iter()
        .map(|e| payload(e)["idempotency_key"].clone())
        .collect();
    assert_eq!(keys.len(), 3);
    assert!(keys.iter().all(|k| *k == out["idempotency_key"]), "{keys:?} vs {out}");

    // Heartbeat + cancel: heartbeats with details are recorded; the cancellation reaches
    // the handler, and the execution ends CANCELLED.
    start(&mut c, "conformance-heartbeat", "beat-1", json!({})).await.expect("start beat");
    let h = history_until(&mut c, "beat-1", WAIT, |h| {
        h.iter().any(|e| e.event_type == "StepHeartbeat" && payload(e)["details"]["beats"] == 2)
    })
    .await;
    assert_eq!(payload(of_type(&h, "StepHeartbeat")[0])["details"], json!({"beats": 1}));
    c.cancel_execution(pb::CancelExecutionRequest {
        execution_id: "beat-1".into(),
        reason: "conformance".into(),
        request_id: String::new(),
    })
    .await
    .expect("cancel");
    let (status, _) = result(&mut c, "beat-1", WAIT).await;
    assert_eq!(status, pb::ExecutionStatus::Cancelled);
    // The handler saw the cancellation: its CANCELLED result arrives after the cancel
    // (recorded as stale, the step being cancelled already) rather than heartbeats going on.
    let h = history_until(&mut c, "beat-1", WAIT, |h| {
        h.iter().any(|e| {
            e.event_type == "StaleResultIgnored"
                || (e.event_type == "StepAttemptFailed"
                    && payload(e)["error"]["code"] == "CANCELLED")
        })
    })
    .await;
    assert!(
        !of_type(&h, "StepCancelled").is_empty() || !of_type(&h, "StepAttemptFailed").is_empty()
    );

    // Drained on SIGTERM with nothing running: exit 0.
    worker.signal("TERM");
    let status = worker.exit(WAIT).await;
    assert!(status.success(), "exit {status}:\n{}", worker.log());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigkill_mid_task_is_redelivered_with_the_same_idempotency_key() {
    check_built();
    let dir = TempDir::new("sdk-ts-kill");
    // A short session timeout: the killed worker's attempt is redelivered once it passes.
    let session_timeout = Duration::from_millis(2000);
    let (server, mut c) =
        server(&dir, &["--session-timeout-ms", &session_timeout.as_millis().to_string()]).await;
    let env = env_for(&server, "ts-kill");
    let mut first = TsWorker::spawn(&dir.0, "first", &env);
    first.ready().await;
    start(&mut c, "conformance-slow", "slow-kill", json!({"ms": 60000})).await.expect("start");
    let started = wait_markers(&dir, ".started", 1).await;
    first.signal("KILL");
    first.exit(WAIT).await;
    // A redelivery keeps the attempt number (`redelivery: true`), so it writes the same
    // marker: remove it to see the second start.
    std::fs::remove_file(dir.0.join("markers").join(&started[0])).expect("remove marker");
    // Past the session timeout the parked attempt is lost and redelivered; a worker that
    // came back sooner would adopt it instead.
    tokio::time::sleep(session_timeout * 2).await;

    // The fresh worker (same id) gets the redelivery and completes it after the task's 60 s.
    let mut second = TsWorker::spawn(&dir.0, "second", &env);
    second.ready().await;
    assert_eq!(wait_markers(&dir, ".started", 1).await, started, "started again");
    let (status, out) = result(&mut c, "slow-kill", Duration::from_secs(60) + WAIT).await;
    assert_eq!(status, pb::ExecutionStatus::Completed, "{out}");
    let h = history(&mut c, "slow-kill").await;
    let lost = of_type(&h, "StepAttemptUncertain");
    assert_eq!(lost.len(), 1, "the killed worker's attempt was lost");
    assert_eq!(payload(lost[0])["reason"], "SESSION_LOST");
    let scheduled = of_type(&h, "StepScheduled");
    assert_eq!(scheduled.len(), 2);
    assert_eq!(payload(scheduled[1])["redelivery"], true);
    let key = payload(scheduled[0])["idempotency_key"].clone();
    assert_eq!(payload(scheduled[1])["idempotency_key"], key);
    assert_eq!(out["idempotency_key"], key, "the handler saw the same idempotency key");
    let sessions: Vec<Value> =
        of_type(&h, "StepDispatched").iter().map(|e| payload(e)["session"].clone()).collect();
    assert_eq!(sessions.len(), 2);
    assert_ne!(sessions[0], sessions[1], "redelivered to the fresh process's session");
    drop(second);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigterm_drains_running_tasks_and_takes_no_new_ones() {
    check_built();
    let dir = TempDir::new("sdk-ts-drain");
    let (server, mut c) = server(&dir, &[]).await;
    let mut first = TsWorker::spawn(&dir.0, "first", &env_for(&server, "ts-drain-1"));
    first.ready().await;
    for id in ["drain-1", "drain-2"] {
        start(&mut c, "conformance-slow", id, json!({"ms": 1500})).await.expect("start");
    }
    wait_markers(&dir, ".started", 2).await;
    first.signal("TERM");
    // Give the worker's Drain time to be read before the third start (a start racing the
    // signal could be dispatched legitimately): the drain is logged once processed.
    let deadline = Instant::now() + WAIT;
    while !first.log().contains("draining") {
        assert!(Instant::now() < deadline, "no drain logged:\n{}", first.log());
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    tokio::time::sleep(Duration::from_secs(1)).await;
    start(&mut c, "conformance-slow", "drain-3", json!({"ms": 10})).await.expect("start third");
    let status = first.exit(WAIT).await;
    assert!(status.success(), "exit {status}:\n{}", first.log());
    assert_eq!(markers(&dir, ".done").len(), 2, "both in-flight tasks finished before the exit");
    for id in ["drain-1", "drain-2"] {
        let (status, out) = result(&mut c, id, WAIT).await;
        assert_eq!(status, pb::ExecutionStatus::Completed, "{id}: {out}");
        assert_eq!(out["worker_id"], "ts-drain-1");
    }
    let h = history(&mut c, "drain-3").await;
    assert!(of_type(&h, "StepDispatched").is_empty(), "the draining worker took the third task");

    let mut second = TsWorker::spawn(&dir.0, "second", &env_for(&server, "ts-drain-2"));
    second.ready().await;
    let (status, out) = result(&mut c, "drain-3", WAIT).await;
    assert_eq!(status, pb::ExecutionStatus::Completed, "{out}");
    assert_eq!(out["worker_id"], "ts-drain-2");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reconnects_after_orbit_dev_restarts() {
    check_built();
    let dir = TempDir::new("sdk-ts-restart");
    let (mut server, mut c) = server(&dir, &[]).await;
    let mut worker = TsWorker::spawn(&dir.0, "worker", &env_for(&server, "ts-restart"));
    worker.ready().await;
    start(&mut c, "hello", "before", json!({"name": "Ada"})).await.expect("start");
    assert_eq!(result(&mut c, "before", WAIT).await.0, pb::ExecutionStatus::Completed);

    // SIGKILL the server and start it again on the same port and database.
    let (port, db) = (server.port, server.db.clone());
    server.kill9();
    drop(server);
    let server = Server::start_on(&db, port, &[]).await;
    let mut c = server.client().await;
    start(&mut c, "hello", "after", json!({"name": "Grace"})).await.expect("start after restart");
    let (status, out) = result(&mut c, "after", WAIT).await;
    assert_eq!(
        (status, out),
        (pb::ExecutionStatus::Completed, json!({"greeting": "Hello, Grace!"})),
        "worker log:\n{}",
        worker.log()
    );
    assert!(worker.child.0.try_wait().expect("try_wait").is_none(), "the same process");
    assert!(worker.log().contains("reconnecting"), "{}", worker.log());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mutual_tls_with_a_token_and_a_refused_identity() {
    use common::secure::*;
    const APP: &str = "ts-test-app-token-5f1e2d3c4b5a69788796a5b4";
    const WORKER: &str = "ts-test-worker-token-0a1b2c3d4e5f607182";
    const BILLING: &str = "ts-test-billing-token-99887766554433221100";
    check_built();
    let dir = TempDir::new("sdk-ts-tls");
    std::fs::create_dir_all(dir.0.join("markers")).expect("markers dir");
    let pki = common::tls::Pki::new(&dir.0.join("pki"));
    let identities = [
        identity(
            "app",
            "client",
            APP,
            "    actions: [register, start, read]\n    workflows: ['*']\n",
        ),
        identity("runner", "worker", WORKER, "    tasks: ['*']\n"),
        identity("billing", "worker", BILLING, "    tasks: ['billing.*']\n"),
    ];
    let server = start_secured(&dir.0, &pki, &identities, APP).await;
    let address = common::tls::tls_address(&server);
    let mut c =
        common::tls::connect(&address, &pki.client("ca", Some("client"))).await.expect("client");
    register_example_as(&mut c, "hello.yaml", APP).await;
    start_as(&mut c, "hello", "tls-1", json!({"name": "Ada"}), APP).await;
    let env = |token: &str| {
        vec![
            ("ORBIT_ADDRESSES", address.clone()),
            ("ORBIT_WORKER_ID", "ts-tls".to_string()),
            ("ORBIT_TOKEN", token.to_string()),
            ("ORBIT_TLS_CA", pki.path("ca.pem").display().to_string()),
            ("ORBIT_TLS_CLIENT_CERT", pki.path("client.pem").display().to_string()),
            ("ORBIT_TLS_CLIENT_KEY", pki.path("client-key.pem").display().to_string()),
        ]
    };

    // Refused: a worker identity whose tasks do not cover what it offers, and an unknown
    // token. The worker exits non-zero with the status code, without retrying.
    for (token, code) in [(BILLING, "PERMISSION_DENIED"), ("not-a-known-token", "UNAUTHENTICATED")]
    {
        let mut refused = TsWorker::spawn(&dir.0, code, &env(token));
        let status = refused.exit(WAIT).await;
        let log = refused.log();
        assert_eq!(status.code(), Some(4), "{code}: {log}");
        assert!(log.contains(&format!("refused by the server: {code}")), "{code}: {log}");
        assert!(!log.contains("reconnecting"), "{code}: no retry after a refusal: {log}");
    }

    // Accepted over mutual TLS with the worker's token: the queued task runs.
    let mut worker = TsWorker::spawn(&dir.0, "accepted", &env(WORKER));
    worker.ready().await;
    let (status, out) = result_as(&mut c, "tls-1", APP, WAIT).await;
    assert_eq!(
        (status, out),
        (pb::ExecutionStatus::Completed, json!({"greeting": "Hello, Ada!"})),
        "worker log:\n{}",
        worker.log()
    );
}
