//! The order saga runs to completion with the Python example worker
//! (`examples/python/order_worker.py`) as a child process against the real `orbit dev`;
//! the hello worker (`hello_worker.py`) connects over mutual TLS with a worker token to an
//! `orbit dev --identities`, and a wrong token or a worker identity for other tasks makes it
//! exit with one clear refusal line instead of retrying.
//!
//! Needs the Python SDK (`sdks/python`) installed for `$ORBIT_PYTHON` (scripts/test.sh
//! installs it into `target/py-venv`); see `common::python::INSTALL`.

// Tests read their environment (ORBIT_PYTHON, the database URL) and the wall clock
// (unique names, deadlines of real processes) directly.
#![allow(clippy::disallowed_methods)]

mod common;

use common::*;
use orbit_api::v1 as pb;
use serde_json::json;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use common::python::{check_sdk, examples_dir as python_dir, python};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn order_saga_completes_with_the_python_worker() {
    let py = python_dir();
    check_sdk("");

    let dir = TempDir::new("python-worker");
    let server = Server::start(&dir.0.join("orbit.db"), &[]).await;
    let mut c = server.client().await;
    register_example(&mut c, "order-saga.yaml").await;

    let log_path = dir.0.join("order_worker.log");
    let log = std::fs::File::create(&log_path).expect("log file");
    let mut child = ChildGuard(
        Command::new(python())
            .current_dir(&py)
            .arg(py.join("order_worker.py"))
            .args(["--address", &format!("127.0.0.1:{}", server.port), "--max-tasks", "3"])
            .args(["--worker-id", "py-order-worker"])
            .stdin(Stdio::null())
            .stdout(log.try_clone().expect("log file"))
            .stderr(log)
            .spawn()
            .expect("spawn python order_worker.py"),
    );
    let worker_log = || std::fs::read_to_string(&log_path).unwrap_or_default();

    start(
        &mut c,
        "order-saga",
        "py-order-1",
        json!({"order_id": "o-1", "amount": 500, "items": [{"sku": "a"}, {"sku": "b"}]}),
    )
    .await
    .expect("start");

    // The saga sleeps 10 s in `settle`; if the worker dies early, say so with its log.
    let waited = {
        let mut c2 = server.client().await;
        let wait =
            tokio::spawn(
                async move { result(&mut c2, "py-order-1", Duration::from_secs(40)).await },
            );
        tokio::pin!(wait);
        loop {
            tokio::select! {
                r = &mut wait => break r,
                () = tokio::time::sleep(Duration::from_millis(200)) => {
                    if let Some(status) = child.0.try_wait().expect("try_wait") {
                        if !status.success() {
                            panic!("the Python worker exited with {status} before the saga \
                                    finished; its log:\n{}", worker_log());
                        }
                    }
                }
            }
        }
    };
    let (status, output) = match waited {
        Ok(r) => r,
        Err(e) => panic!("waiting for the result failed ({e}); worker log:\n{}", worker_log()),
    };
    assert_eq!(
        (status, output),
        (
            pb::ExecutionStatus::Completed,
            json!({"order": "o-1", "charge_id": "ch-o-1", "approved_by": "auto", "reservations": ["r-a", "r-b"]})
        ),
        "worker log:\n{}",
        worker_log()
    );

    // With `--max-tasks 3` the worker drains and exits by itself after its three tasks.
    let deadline = Instant::now() + Duration::from_secs(15);
    let exit = loop {
        if let Some(status) = child.0.try_wait().expect("try_wait") {
            break Some(status);
        }
        if Instant::now() >= deadline {
            break None;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    match exit {
        Some(status) => {
            assert!(status.success(), "worker exited with {status}; log:\n{}", worker_log())
        }
        None => panic!(
            "the Python worker did not exit within 15 s of its 3 tasks; log:\n{}",
            worker_log()
        ),
    }
    drop(child); // kills it if still running
}

const APP_TOKEN: &str = "py-test-app-token-5f1e2d3c4b5a69788796a5b4";
const WORKER_TOKEN: &str = "py-test-worker-token-0a1b2c3d4e5f60718293";
const BILLING_TOKEN: &str = "py-test-billing-token-99887766554433221100";

/// Runs `hello_worker.py` with `args` (after the TLS flags for the client certificate) until
/// it exits: (exit code, its output). Bounded: a worker that retries for ever fails the test.
fn run_hello_worker(
    py: &Path,
    pki: &common::tls::Pki,
    address: &str,
    args: &[&str],
    log: &Path,
) -> (Option<i32>, String) {
    let file = std::fs::File::create(log).expect("log file");
    let mut child = ChildGuard(
        Command::new(python())
            .current_dir(py)
            .arg(py.join("hello_worker.py"))
            .args(["--address", address, "--max-tasks", "1"])
            .arg("--tls-ca")
            .arg(pki.path("ca.pem"))
            .arg("--tls-client-cert")
            .arg(pki.path("client.pem"))
            .arg("--tls-client-key")
            .arg(pki.path("client-key.pem"))
            .args(args)
            // Only the flags count: nothing from the environment of the test run.
            .env_remove("ORBIT_TOKEN")
            .env_remove("ORBIT_TLS_CA")
            .env_remove("ORBIT_TLS_CLIENT_CERT")
            .env_remove("ORBIT_TLS_CLIENT_KEY")
            .stdin(Stdio::null())
            .stdout(file.try_clone().expect("log file"))
            .stderr(file)
            .spawn()
            .expect("spawn python hello_worker.py"),
    );
    // A refusal arrives with the first response; a worker that got its task exits after
    // the drain. Both take seconds; 60 s is far beyond either on a busy machine.
    let deadline = Instant::now() + Duration::from_secs(60);
    let status = loop {
        if let Some(status) = child.0.try_wait().expect("try_wait") {
            break status;
        }
        assert!(
            Instant::now() < deadline,
            "hello_worker.py {args:?} did not exit within 60 s; its log:\n{}",
            std::fs::read_to_string(log).unwrap_or_default()
        );
        std::thread::sleep(Duration::from_millis(100));
    };
    (status.code(), std::fs::read_to_string(log).unwrap_or_default())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn python_worker_over_mutual_tls_with_a_token_and_refused_without_the_right_one() {
    use common::secure::*;
    let py = python_dir();
    check_sdk("");

    let dir = TempDir::new("python-worker-tls");
    let pki = common::tls::Pki::new(&dir.0.join("pki"));
    let identities = [
        app_client(APP_TOKEN),
        identity("greeters", "worker", WORKER_TOKEN, "    tasks: [greet]\n"),
        identity("billing", "worker", BILLING_TOKEN, "    tasks: ['billing.*']\n"),
    ];
    let server = start_secured(&dir.0, &pki, &identities, APP_TOKEN).await;
    let address = common::tls::tls_address(&server);
    let mut c =
        common::tls::connect(&address, &pki.client("ca", Some("client"))).await.expect("client");
    register_example_as(&mut c, "hello.yaml", APP_TOKEN).await;
    start_as(&mut c, "hello", "py-tls-1", json!({"name": "Ada"}), APP_TOKEN).await;

    // Refused: an unknown token, and a worker identity whose tasks do not cover `greet`.
    for (token, code) in
        [("not-a-known-token", "UNAUTHENTICATED"), (BILLING_TOKEN, "PERMISSION_DENIED")]
    {
        let log = dir.0.join(format!("refused-{code}.log"));
        let (exit, out) = run_hello_worker(&py, &pki, &address, &["--token", token], &log);
        assert_eq!(exit, Some(4), "{code}: the refused worker exits with 4; its log:\n{out}");
        let line = format!("orbit worker: refused by the server: {code}: ");
        assert_eq!(
            out.lines().filter(|l| l.starts_with(&line)).count(),
            1,
            "{code}: one refusal line `{line}...`; log:\n{out}"
        );
        assert!(!out.contains("Traceback"), "{code}: a clear line, not a traceback:\n{out}");
        assert!(!out.contains("reconnecting"), "{code}: no retry after a refusal:\n{out}");
        assert!(!out.contains("completed"), "{code}: no task ran:\n{out}");
    }
    // The task was never handed out: still queued, first attempt, no worker.
    let described = describe_as(&mut c, "py-tls-1", APP_TOKEN).await;
    let status = described.info.as_ref().map(|i| i.status);
    assert_eq!(status, Some(pb::ExecutionStatus::Running as i32), "{described:?}");
    let pending: Vec<_> = described
        .pending_tasks
        .iter()
        .map(|t| (t.attempt, t.state, t.worker_id.as_str()))
        .collect();
    assert_eq!(pending, vec![(1, pb::PendingTaskState::Queued as i32, "")], "{described:?}");

    // The right token over the same mutual TLS: the queued task runs and the execution
    // completes; the worker drains and exits 0 after its one task.
    let log = dir.0.join("accepted.log");
    let (exit, out) = run_hello_worker(&py, &pki, &address, &["--token", WORKER_TOKEN], &log);
    assert_eq!(exit, Some(0), "the worker with the right token failed; its log:\n{out}");
    assert!(out.contains("greet greet (py-tls-1) completed"), "{out}");
    let (status, output) = result_as(&mut c, "py-tls-1", APP_TOKEN, Duration::from_secs(30)).await;
    assert_eq!(
        (status, output),
        (pb::ExecutionStatus::Completed, json!({"greeting": "Hello, Ada!"})),
        "worker log:\n{out}"
    );
}

/// The Python SDK's `Client` drives executions through the public API: register, start,
/// update, migrate (dry run, then for real, to a v2 with a step added after the await),
/// signal, query, watch, result, describe, history and ListWorkers.
const CLIENT_SCRIPT: &str = r#"
import json, sys, time
from orbit_worker import Client, ExecutionResult

address, updatable, updatable_v2 = sys.argv[1], sys.argv[2], sys.argv[3]
out = {}
with Client(address) as c:
    out["registered"] = c.register(updatable)
    c.start("updatable", {"base": 10}, execution_id="py-upd")
    out["update"] = c.update("py-upd", "add", {"n": 5})
    c.register(updatable_v2)
    dry = c.migrate("py-upd", "2", dry_run=True)
    out["dry"] = [dry["safe"], dry["migrated"], [(ch["kind"], ch["step"]) for ch in dry["changes"]]]
    done = c.migrate("py-upd", "2", reason="python client")
    out["migrated"] = [done["migrated"], done["from_version"], done["to_version"], done["seq"] > 0]
    c.signal("py-upd", "go")
    upd = c.result("py-upd", timeout=60)
    out["upd"] = upd.status
    out["upd_output"] = upd.output

    order = {"order_id": "o-9", "amount": 1500, "items": [{"sku": "z"}]}
    out["started"] = c.start("order-saga", order, execution_id="py-client-1")
    deadline = time.monotonic() + 60
    while not c.query("py-client-1", "charged"):
        assert time.monotonic() < deadline, "never charged"
        time.sleep(0.1)
    out["charged"] = True
    c.signal("py-client-1", "approve", {"by": "py-client"})
    items = list(c.watch("py-client-1", timeout=120))
    last = items[-1]
    assert isinstance(last, ExecutionResult), last
    out["watched"] = [e.type for e in items[:-1]]
    out["result"] = {"status": last.status, "output": last.output}
    out["described"] = c.describe("py-client-1")["info"]["status"]
    out["history"] = [e.type for e in c.history("py-client-1")][-1]
    out["workers"] = sorted(w["sdk"] for w in c.list_workers() if w["workerId"] == "py-client-worker")
print(json.dumps(out))
"#;

const UPDATABLE: &str = r#"
name: updatable
version: "1"
signals: { go: null }
updates:
  add:
    input: { type: object, required: [n], properties: { n: { type: integer } } }
    reply: "${{ {'sum': args.n + input.base} }}"
steps:
  - { id: w, await: go }
"#;

/// [`UPDATABLE`] with a step after the await: a safe migration for an execution waiting.
const UPDATABLE_V2: &str = r#"
name: updatable
version: "2"
signals: { go: null }
updates:
  add:
    input: { type: object, required: [n], properties: { n: { type: integer } } }
    reply: "${{ {'sum': args.n + input.base} }}"
steps:
  - { id: w, await: go }
  - { id: after, needs: [w], compute: "${{ 'v2' }}" }
output: "${{ steps.after.output }}"
"#;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_python_client_starts_updates_signals_queries_and_watches() {
    let py = python_dir();
    check_sdk("");
    let dir = TempDir::new("python-client");
    let server = Server::start(&dir.0.join("orbit.db"), &[]).await;
    let mut c = server.client().await;
    register_example(&mut c, "order-saga.yaml").await;
    let address = format!("127.0.0.1:{}", server.port);
    let log_path = dir.0.join("worker.log");
    let log = std::fs::File::create(&log_path).expect("log file");
    let _worker = ChildGuard(
        Command::new(python())
            .current_dir(&py)
            .arg(py.join("order_worker.py"))
            .args(["--address", &address, "--worker-id", "py-client-worker"])
            .stdin(Stdio::null())
            .stdout(log.try_clone().expect("log file"))
            .stderr(log)
            .spawn()
            .expect("spawn python order_worker.py"),
    );
    let mut script = Command::new(python());
    script.args(["-c", CLIENT_SCRIPT, &address, UPDATABLE, UPDATABLE_V2]);
    // The saga sleeps 10 s; the rest takes seconds.
    let (ok, stdout, stderr) = run_bounded(&mut script, Duration::from_secs(180));
    let worker_log = std::fs::read_to_string(&log_path).unwrap_or_default();
    assert!(ok, "the client script failed:\n{stderr}\nworker log:\n{worker_log}");
    let out: serde_json::Value =
        serde_json::from_str(stdout.lines().last().unwrap_or_default()).expect("json line");
    assert_eq!(out["registered"], json!("1"));
    assert_eq!(out["update"], json!({"sum": 15}));
    assert_eq!(
        out["dry"],
        json!([true, false, [["added", "after"], ["output_changed", ""]]]),
        "{out}"
    );
    assert_eq!(out["migrated"], json!([true, "1", "2", true]), "{out}");
    assert_eq!(out["upd"], json!("COMPLETED"));
    assert_eq!(out["upd_output"], json!("v2"), "the execution finished through v2's path");
    assert_eq!(out["started"], json!("py-client-1"));
    assert_eq!(
        out["result"],
        json!({"status": "COMPLETED", "output": {"order": "o-9", "charge_id": "ch-o-9",
               "approved_by": "py-client", "reservations": ["r-z"]}}),
        "{out}"
    );
    let watched: Vec<&str> =
        out["watched"].as_array().expect("events").iter().filter_map(|e| e.as_str()).collect();
    assert_eq!(watched.first(), Some(&"WorkflowCreated"), "{out}");
    assert!(watched.contains(&"SignalReceived") && watched.contains(&"WorkflowCompleted"), "{out}");
    assert_eq!(out["described"], json!("EXECUTION_STATUS_COMPLETED"));
    assert_eq!(out["history"], json!("WorkflowCompleted"));
    let sdks: Vec<&str> =
        out["workers"].as_array().expect("workers").iter().filter_map(|w| w.as_str()).collect();
    assert!(matches!(sdks.as_slice(), [sdk] if sdk.starts_with("orbit-python ")), "{out}");
}

/// Opens `WorkerService.Session` with an unknown token over `grpc.aio`, as the SDK's worker
/// does (a request generator whose first message is the hello), `n` times in sequence, and
/// prints the count of each status it read. Waits (bounded) for the server to answer first.
const REFUSED_SESSIONS_SCRIPT: &str = r#"
import asyncio, collections, json, sys, time
import grpc
from orbit_worker._gen.orbit.v1 import worker_pb2, worker_pb2_grpc

address, n = sys.argv[1], int(sys.argv[2])
hello = worker_pb2.WorkerMessage(
    hello=worker_pb2.WorkerMessage.Hello(worker_id="w", tasks=[{"name": "greet"}]))

async def once():
    never = asyncio.Event()
    async def requests():
        yield hello
        await never.wait()
    async with grpc.aio.insecure_channel(address) as channel:
        call = worker_pb2_grpc.WorkerServiceStub(channel).Session(
            requests(), metadata=(("authorization", "Bearer not-a-known-token"),))
        try:
            await asyncio.wait_for(call.read(), 30)
            return "a message"
        except grpc.aio.AioRpcError as e:
            return f"{e.code().name}: {e.details()}"

async def main():
    deadline = time.monotonic() + 60
    while (first := await once()).startswith("UNAVAILABLE"):
        assert time.monotonic() < deadline, first
        await asyncio.sleep(0.1)
    seen = collections.Counter()
    for _ in range(n):
        seen[await once()] += 1
    print(json.dumps(seen))

asyncio.run(main())
"#;

/// A worker stream refused at its headers (an unknown token) reaches a `grpc.aio` client
/// as `UNAUTHENTICATED`, every time. The server answers a refusal after the request's first
/// message: answered at the headers, the client was often still sending its hello and read
/// `INTERNAL: Internal error from Core` instead (206 of 300 here over plain text), so a
/// worker with a wrong token logged a lost session and reconnected before it saw the
/// refusal (and failed `python_worker_over_mutual_tls...` in CI once).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_refused_worker_stream_reaches_a_grpc_aio_client_as_its_status() {
    check_sdk("");
    let dir = TempDir::new("python-refused");
    let identities = dir.0.join("identities.yaml");
    let app = common::secure::app_client(APP_TOKEN);
    std::fs::write(&identities, format!("identities:\n{app}")).expect("identities");
    let identities = identities.to_str().expect("utf-8 path");
    let server =
        Server::spawn_on(&dir.0.join("orbit.db"), free_port(), &["--identities", identities]);
    let address = format!("127.0.0.1:{}", server.port);
    let mut script = Command::new(python());
    script.args(["-c", REFUSED_SESSIONS_SCRIPT, &address, "100"]);
    let (ok, stdout, stderr) = run_bounded(&mut script, Duration::from_secs(240));
    assert!(ok, "the script failed:\n{stderr}");
    let seen: serde_json::Value =
        serde_json::from_str(stdout.lines().last().unwrap_or_default()).expect("json line");
    assert_eq!(seen, json!({"UNAUTHENTICATED: unknown token": 100}), "{stderr}");
}
