//! Reset and fork of a FAILED execution through the CLI (`orbit execution reset` / `fork`)
//! and the three SDK clients, against the real `orbit dev`:
//!
//! * v1 computes `first`, waits for signal `go`, then calls an `http` step the server does
//!   not enable, which fails at once (`ADAPTER_DISABLED`): the execution ends FAILED;
//! * v2 computes `call` instead; a reset back to just before `call` with v2 keeps `first`
//!   and `wait` (and the signal it got), runs `call` again and completes in run 2;
//! * a fork of run 1 right after `wait` started keeps `first`, runs `wait` again (the signal
//!   received after that seq is not given to the fork), and completes once signalled.
//!
//! The dry runs print or answer the plan and write nothing; impossible points are refused
//! with `RESET_POINT_INVALID`.

// Tests read their environment (ORBIT_PYTHON, NODE) and the wall clock (deadlines of real
// processes) directly.
#![allow(clippy::disallowed_methods)]

mod common;

use common::python::{check_sdk, python};
use common::{code, history, register, result, run_bounded, Server, TempDir};
use orbit_api::v1 as pb;
use orbit_api::v1::workflow_service_client::WorkflowServiceClient;
use orbit_worker::client::{Client, Fork, Reset};
use serde_json::{json, Value};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;
use tonic::transport::Channel;

const V1: &str = r#"
name: resettable
version: "1"
signals: { go: null }
steps:
  - { id: first, compute: "${{ 'kept' }}" }
  - { id: wait, needs: [first], await: go }
  - { id: call, needs: [wait], http: { method: GET, url: "http://127.0.0.1:9/" } }
  - { id: after, needs: [call], compute: "${{ steps.first.output + '/' + steps.call.output }}" }
output: "${{ steps.after.output }}"
"#;

/// [`V1`] with `call` computed instead of called: what a reset or a fork goes on with.
const V2: &str = r#"
name: resettable
version: "2"
signals: { go: null }
steps:
  - { id: first, compute: "${{ 'kept' }}" }
  - { id: wait, needs: [first], await: go }
  - { id: call, needs: [wait], compute: "${{ 'fixed' }}" }
  - { id: after, needs: [call], compute: "${{ steps.first.output + '/' + steps.call.output }}" }
output: "${{ steps.after.output }}"
"#;

/// Generous bound for anything that happens "soon" on a busy 2-core machine.
const WAIT: Duration = Duration::from_secs(60);

async fn signal_go(c: &mut WorkflowServiceClient<Channel>, id: &str) {
    let request = pb::SignalExecutionRequest {
        execution_id: id.into(),
        name: "go".into(),
        payload: None,
        request_id: String::new(),
    };
    c.signal_execution(request).await.expect("signal go");
}

/// Registers both versions, starts `id` on v1, signals it and waits until it FAILED.
/// Returns the seq right after which `wait` is open (its first event): a fork point.
async fn failed_execution(c: &mut WorkflowServiceClient<Channel>, id: &str) -> u64 {
    register(c, V1).await;
    register(c, V2).await;
    let v1 = pb::StartExecutionRequest {
        memo: None,
        workflow: "resettable".into(),
        version: "1".into(),
        input: None,
        execution_id: id.into(),
        priority: 0,
    };
    c.start_execution(v1).await.expect("start on v1");
    signal_go(c, id).await;
    let (status, error) = result(c, id, WAIT).await;
    assert_eq!(status, pb::ExecutionStatus::Failed, "{error}");
    assert!(error.to_string().contains("ADAPTER_DISABLED"), "{error}");
    let h = history(c, id).await;
    h.iter().find(|e| e.step == "wait").map(|e| e.seq).expect("wait started")
}

/// `orbit execution ARGS --address ...`: (exit code, stdout, stderr).
fn orbit(server: &Server, args: &[&str]) -> (i32, String, String) {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_orbit"));
    cmd.arg("execution").args(args).args(["--address", &server.address()]);
    let out = cmd.output().expect("run the orbit CLI");
    let text = |b: &[u8]| String::from_utf8_lossy(b).to_string();
    (out.status.code().unwrap_or(-1), text(&out.stdout), text(&out.stderr))
}

/// [`orbit`] with `--output json`, which must succeed: its document.
fn orbit_json(server: &Server, args: &[&str]) -> Value {
    let args = [args, &["--output", "json"]].concat();
    let (exit, stdout, stderr) = orbit(server, &args);
    assert_eq!(exit, 0, "orbit execution {args:?}: {stderr}");
    serde_json::from_str(stdout.trim()).unwrap_or_else(|e| panic!("{e}: {stdout}"))
}

/// (status, run, version) of `orbit execution describe ID`.
fn described(server: &Server, id: &str) -> (String, u64, String) {
    let d = orbit_json(server, &["describe", id]);
    let info = &d["info"];
    let text = |v: &Value| v.as_str().unwrap_or_default().to_string();
    (text(&info["status"]), info["run"].as_u64().unwrap_or(0), text(&info["version"]))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_cli_resets_and_forks_a_failed_execution() {
    let dir = TempDir::new("reset-cli");
    let server = Server::start(&dir.0.join("orbit.db"), &[]).await;
    let mut c = server.client().await;
    let wait_seq = failed_execution(&mut c, "r-1").await;
    let failed = history(&mut c, "r-1").await;
    let last = failed.last().expect("events").seq;

    // Impossible points are refused with the code (exit 4) and nothing is written.
    let (exit, _, stderr) = orbit(&server, &["reset", "r-1", "--to-step", "after"]);
    assert_eq!(exit, 4, "{stderr}");
    assert!(stderr.contains("RESET_POINT_INVALID") && stderr.contains("never started"), "{stderr}");
    let (exit, _, stderr) = orbit(&server, &["reset", "r-1", "--to-seq", &last.to_string()]);
    assert_eq!(exit, 4, "{stderr}");
    assert!(stderr.contains("RESET_POINT_INVALID"), "{stderr}");

    // The dry run prints the plan and writes nothing.
    let (exit, text, stderr) = orbit(&server, &["reset", "r-1", "--to-step", "call", "--dry-run"]);
    assert_eq!(exit, 0, "{stderr}");
    let point = failed.iter().find(|e| e.step == "call").expect("call started").seq - 1;
    assert_eq!(
        text,
        format!(
            "point:         before step call first started (events through seq {point} kept)\n\
             version:       1\n\
             kept:          first, wait\n\
             run again:     none\n\
             signals after: 0\n\
             dry run: nothing written (run 1 would be reset)\n"
        )
    );
    assert_eq!(history(&mut c, "r-1").await, failed, "a dry run writes nothing");
    assert_eq!(described(&server, "r-1"), ("FAILED".into(), 1, "1".into()));

    // With v2 the plan shows the checked diff; the reset reopens the execution in run 2,
    // which keeps `first` and `wait` and completes through v2's `call`.
    let args = ["reset", "r-1", "--to-step", "call", "--to-version", "2", "--reason", "fix call"];
    let (exit, text, stderr) = orbit(&server, &args);
    assert_eq!(exit, 0, "{stderr}");
    assert!(text.contains("kept:          first, wait\n"), "{text}");
    assert!(text.contains("migration:     1 -> 2, safe\n"), "{text}");
    assert!(text.lines().any(|l| l.starts_with("  safe") && l.contains(" call: ")), "{text}");
    let done = text.lines().last().unwrap_or_default();
    let seq: u64 = done
        .strip_prefix("reset: run 2, RunRestored at seq ")
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| panic!("{text}"));
    let (status, output) = result(&mut c, "r-1", WAIT).await;
    assert_eq!((status, output), (pb::ExecutionStatus::Completed, json!("kept/fixed")));
    assert_eq!(described(&server, "r-1"), ("COMPLETED".into(), 2, "2".into()));
    let run2 = history(&mut c, "r-1").await;
    let restored = run2.iter().find(|e| e.event_type == "RunRestored").expect("RunRestored");
    assert_eq!(restored.seq, seq, "the printed seq is the RunRestored's");
    let started_again: Vec<_> =
        run2.iter().filter(|e| e.seq > seq && !e.step.is_empty()).map(|e| &e.step).collect();
    assert!(!started_again.iter().any(|s| *s == "first" || *s == "wait"), "{started_again:?}");

    // A fork of run 1 right after `wait` started: `first` kept, `wait` runs again, and the
    // signal received later stays with the source.
    let at = wait_seq.to_string();
    let fork = ["fork", "r-1", "--run", "1", "--at", &at, "--new-id", "r-1-fork"];
    let (exit, text, stderr) = orbit(&server, &[&fork[..], &["--dry-run"]].concat());
    assert_eq!(exit, 0, "{stderr}");
    assert!(
        text.starts_with(&format!("point:         r-1, run 1, after seq {wait_seq}")),
        "{text}"
    );
    assert!(text.contains("kept:          first\nrun again:     wait\n"), "{text}");
    assert!(text.contains("signals after: 1 (not given to the fork)\n"), "{text}");
    assert!(text.ends_with("dry run: nothing written (r-1-fork would run version 1)\n"), "{text}");
    let (exit, _, stderr) = orbit(&server, &["describe", "r-1-fork"]);
    assert_eq!(exit, 3, "a dry run creates nothing: {stderr}");

    let forked =
        orbit_json(&server, &[&fork[..], &["--version", "2", "--reason", "what if"]].concat());
    assert_eq!(forked["created"], json!(true), "{forked}");
    assert_eq!((&forked["execution_id"], &forked["version"]), (&json!("r-1-fork"), &json!("2")));
    assert_eq!(forked["plan"]["forgotten"], json!(["wait"]), "{forked}");
    assert_eq!(forked["plan"]["safe"], json!(true), "{forked}");
    assert_eq!(described(&server, "r-1-fork"), ("RUNNING".into(), 1, "2".into()));
    let again = orbit_json(&server, &[&fork[..], &["--version", "2"]].concat());
    assert_eq!(again["created"], json!(false), "the same new id answers the fork: {again}");
    signal_go(&mut c, "r-1-fork").await;
    let (status, output) = result(&mut c, "r-1-fork", WAIT).await;
    assert_eq!((status, output), (pb::ExecutionStatus::Completed, json!("kept/fixed")));
    assert_eq!(described(&server, "r-1-fork"), ("COMPLETED".into(), 1, "2".into()));
    assert_eq!(described(&server, "r-1"), ("COMPLETED".into(), 2, "2".into()), "source untouched");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_rust_client_resets_and_forks() {
    let dir = TempDir::new("reset-rust");
    let server = Server::start(&dir.0.join("orbit.db"), &[]).await;
    let mut c = server.client().await;
    let wait_seq = failed_execution(&mut c, "rs-1").await;
    let client = Client::connect(&server.address()).await.expect("connect");

    let refused = client.reset(Reset::to_step("rs-1", "after")).await.expect_err("never started");
    assert_eq!(code(refused.status().expect("a status")), "RESET_POINT_INVALID");
    let dry = client.reset(Reset::to_step("rs-1", "call").dry_run()).await.expect("dry run");
    let plan = dry.plan.clone().expect("plan");
    assert!(!dry.reset && dry.run == 1 && dry.seq == 0, "{dry:?}");
    assert_eq!((plan.kept, plan.version.as_str()), (vec!["first".into(), "wait".into()], "1"));
    let reset = Reset::to_step("rs-1", "call").to_version("2").reason("rust").request_id("r-1");
    let done = client.reset(reset.clone()).await.expect("reset");
    assert!(done.reset && done.run == 2 && done.seq > 0, "{done:?}");
    let retried = client.reset(reset).await.expect("the same request id");
    assert_eq!((retried.run, retried.seq), (done.run, done.seq), "a retry resets once");
    let result = tokio::time::timeout(WAIT, client.result("rs-1")).await.expect("ends");
    let result = result.expect("result");
    assert_eq!((result.status, result.run), (pb::ExecutionStatus::Completed, 2), "{result:?}");
    assert_eq!(result.output, json!("kept/fixed"));

    let fork = Fork::new("rs-1", wait_seq, "rs-1-fork").run(1).version("2");
    let dry = client.fork(fork.clone().dry_run()).await.expect("fork dry run");
    assert!(!dry.created, "{dry:?}");
    assert_eq!(dry.plan.clone().expect("plan").signals_after, 1, "{dry:?}");
    let forked = client.fork(fork).await.expect("fork");
    assert!(forked.created && forked.version == "2", "{forked:?}");
    assert_eq!(forked.plan.expect("plan").forgotten, ["wait"]);
    client.signal("rs-1-fork", "go", json!(null)).await.expect("signal the fork");
    let result = tokio::time::timeout(WAIT, client.result("rs-1-fork")).await.expect("ends");
    assert_eq!(result.expect("result").output, json!("kept/fixed"));
}

/// The Python client: the dry run, a refused point, the reset, the fork.
const PYTHON_SCRIPT: &str = r#"
import json, sys
import grpc
from orbit_worker import Client

address, at = sys.argv[1], int(sys.argv[2])
out = {}
with Client(address) as c:
    dry = c.reset("py-1", step="call", dry_run=True)
    out["dry"] = [dry["reset"], dry["run"], dry["plan"]["kept"], dry["plan"]["forgotten"]]
    try:
        c.reset("py-1", step="after")
        out["refused"] = None
    except grpc.RpcError as e:
        out["refused"] = dict(e.trailing_metadata() or ()).get("orbit-error-code")
    done = c.reset("py-1", step="call", to_version="2", reason="python client")
    out["reset"] = [done["reset"], done["run"], done["seq"] > 0, done["plan"]["safe"]]
    out["output"] = c.result("py-1", timeout=60).output
    dry = c.fork("py-1", at, "py-1-fork", run=1, dry_run=True)
    out["fork_dry"] = [dry["created"], dry["plan"]["signals_after"], dry["version"]]
    fork = c.fork("py-1", at, "py-1-fork", run=1, version="2", reason="what if")
    out["fork"] = [fork["created"], fork["execution_id"], fork["version"], fork["plan"]["forgotten"]]
    c.signal("py-1-fork", "go")
    out["fork_output"] = c.result("py-1-fork", timeout=60).output
print(json.dumps(out))
"#;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_python_client_resets_and_forks() {
    check_sdk("");
    let dir = TempDir::new("reset-python");
    let server = Server::start(&dir.0.join("orbit.db"), &[]).await;
    let mut c = server.client().await;
    let wait_seq = failed_execution(&mut c, "py-1").await;
    let mut script = Command::new(python());
    let address = format!("127.0.0.1:{}", server.port);
    script.args(["-c", PYTHON_SCRIPT, &address, &wait_seq.to_string()]);
    let (ok, stdout, stderr) = run_bounded(&mut script, Duration::from_secs(180));
    assert!(ok, "the client script failed:\n{stderr}");
    let out: Value =
        serde_json::from_str(stdout.lines().last().unwrap_or_default()).expect("json line");
    assert_eq!(out["dry"], json!([false, 1, ["first", "wait"], []]), "{out}");
    assert_eq!(out["refused"], json!("RESET_POINT_INVALID"), "{out}");
    assert_eq!(out["reset"], json!([true, 2, true, true]), "{out}");
    assert_eq!(out["output"], json!("kept/fixed"), "{out}");
    assert_eq!(out["fork_dry"], json!([false, 1, "1"]), "{out}");
    assert_eq!(out["fork"], json!([true, "py-1-fork", "2", ["wait"]]), "{out}");
    assert_eq!(out["fork_output"], json!("kept/fixed"), "{out}");
}

/// The TypeScript client (`sdks/typescript/dist`, imported from the path in argv[2]).
const TYPESCRIPT_SCRIPT: &str = r#"
const [address, dist, at] = process.argv.slice(2);
const { OrbitClient, ExecutionStatus } = await import(dist);
const c = new OrbitClient({ address });
const out = {};
try {
  const dry = await c.reset("ts-1", { step: "call" }, { dryRun: true });
  out.dry = [dry.reset, dry.run, dry.plan.kept, dry.plan.forgotten];
  out.refused = await c.reset("ts-1", { step: "after" }).then(
    () => null,
    (e) => e.metadata.get("orbit-error-code")[0],
  );
  const done = await c.reset("ts-1", { step: "call" }, { toVersion: "2", reason: "ts client" });
  out.reset = [done.reset, done.run, done.seq > 0, done.plan.safe];
  const result = await c.result("ts-1");
  out.output = [result.status === ExecutionStatus.EXECUTION_STATUS_COMPLETED, result.output];
  const dryFork = await c.fork("ts-1", Number(at), "ts-1-fork", { run: 1, dryRun: true });
  out.forkDry = [dryFork.created, dryFork.plan.signalsAfter, dryFork.version];
  const fork = await c.fork("ts-1", Number(at), "ts-1-fork", { run: 1, version: "2" });
  out.fork = [fork.created, fork.executionId, fork.version, fork.plan.forgotten];
  await c.signal("ts-1-fork", "go");
  out.forkOutput = (await c.result("ts-1-fork")).output;
} finally {
  c.close();
}
console.log(JSON.stringify(out));
"#;

fn typescript_dist() -> PathBuf {
    let dist = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../sdks/typescript/dist/index.js");
    assert!(
        dist.exists(),
        "the TypeScript SDK is not built ({}): run `cd sdks/typescript && npm ci && npm run build`",
        dist.display()
    );
    dist.canonicalize().expect("dist path")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_typescript_client_resets_and_forks() {
    let dist = format!("file://{}", typescript_dist().display());
    let dir = TempDir::new("reset-typescript");
    let server = Server::start(&dir.0.join("orbit.db"), &[]).await;
    let mut c = server.client().await;
    let wait_seq = failed_execution(&mut c, "ts-1").await;
    let script = dir.0.join("reset.mjs");
    std::fs::write(&script, TYPESCRIPT_SCRIPT).expect("write the script");
    let node = std::env::var("NODE").unwrap_or_else(|_| "node".to_string());
    let mut cmd = Command::new(node);
    let address = format!("127.0.0.1:{}", server.port);
    cmd.arg(&script).args([&address, &dist, &wait_seq.to_string()]);
    let (ok, stdout, stderr) = run_bounded(&mut cmd, Duration::from_secs(180));
    assert!(ok, "the client script failed:\n{stderr}");
    let out: Value =
        serde_json::from_str(stdout.lines().last().unwrap_or_default()).expect("json line");
    assert_eq!(out["dry"], json!([false, 1, ["first", "wait"], []]), "{out}");
    assert_eq!(out["refused"], json!("RESET_POINT_INVALID"), "{out}");
    assert_eq!(out["reset"], json!([true, 2, true, true]), "{out}");
    assert_eq!(out["output"], json!([true, "kept/fixed"]), "{out}");
    assert_eq!(out["forkDry"], json!([false, 1, "1"]), "{out}");
    assert_eq!(out["fork"], json!([true, "ts-1-fork", "2", ["wait"]]), "{out}");
    assert_eq!(out["forkOutput"], json!("kept/fixed"), "{out}");
}
