//! OpenTelemetry traces end to end: `orbit dev --otlp-endpoint` exports to an OTLP/gRPC
//! receiver served in this test (the `opentelemetry-proto` `TraceService`, real OTLP over
//! loopback), a 3-step workflow runs with a Rust worker (steps 1 and 3, in this process,
//! exporting through `orbit_telemetry`) and the Python worker (step 2,
//! the `orbit_worker` package of `sdks/python`), and `orbit dev` is restarted between steps 1 and 2.
//! The execution is ONE trace, whose id is the first 16 bytes of SHA-256 of its id: the
//! server's spans from both processes, and each worker's task span as the child of its
//! step attempt's span.
//!
//! Needs the Python SDK with its `otel` extra installed for `$ORBIT_PYTHON` (scripts/test.sh
//! installs it into `target/py-venv`); see `common::python::INSTALL`.

// Tests read their environment (ORBIT_PYTHON, the database URL) and the wall clock
// (unique names, deadlines of real processes) directly.
#![allow(clippy::disallowed_methods)]

mod common;

use common::otlp::{Received, Receiver};
use common::*;
use orbit_worker::{TaskContext, TaskFailure, Worker};
use serde_json::{json, Value};
use sha2::{Digest, Sha256};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};
use tokio_util::sync::CancellationToken;

const WORKFLOW: &str = r#"
name: traced
version: "1"
input: { type: object, required: [n], properties: { n: { type: number } } }
tasks:
  rs_a: { version: "1" }
  py_b: { version: "1" }
  rs_c: { version: "1" }
steps:
  - id: a
    task: rs_a
    input: { n: "${{ input.n }}" }
  - id: b
    task: py_b
    input: { n: "${{ steps.a.output.n }}" }
  - id: c
    task: rs_c
    input: { n: "${{ steps.b.output.n }}" }
output: ${{ steps.c.output }}
"#;

const PY_WORKER: &str = r#"
import sys
sys.path.insert(0, sys.argv[1])
from orbit_worker import Worker, parse_common_args, run_example

def py_b(ctx):
    return {"n": ctx.input["n"] * 10}

def make(**kw):
    w = Worker(**kw)
    w.register("py_b", "1", py_b)
    return w

run_example(make, parse_common_args("traced step b", sys.argv[2:]))
"#;

use common::python::{check_sdk, examples_dir as python_dir, python};

/// SIGTERM (a clean stop flushes the last spans), then wait for the exit.
fn stop(server: &mut Server) {
    let pid = server.child.id().to_string();
    let _ = Command::new("kill").args(["-TERM", &pid]).status();
    let deadline = Instant::now() + Duration::from_secs(30);
    while server.child.try_wait().expect("wait").is_none() {
        assert!(Instant::now() < deadline, "orbit dev did not stop on SIGTERM");
        std::thread::sleep(Duration::from_millis(50));
    }
}

fn of_execution(spans: &[Received], id: &str) -> Vec<Received> {
    spans.iter().filter(|s| s.attr("orbit.execution_id").as_deref() == Some(id)).cloned().collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_trace_per_execution_across_a_restart_with_rust_and_python_workers() {
    let py = python_dir();
    check_sdk("import opentelemetry.sdk, opentelemetry.exporter.otlp.proto.grpc.trace_exporter");
    let receiver = Receiver::start().await;
    let endpoint = receiver.endpoint();
    // This process's Rust worker exports its task spans like any traced process.
    let _traces = orbit_telemetry::init(&orbit_telemetry::TraceConfig {
        endpoint: Some(endpoint.clone()),
        sample_ratio: 1.0,
        service_name: "rust-worker".into(),
    })
    .expect("telemetry");

    let dir = TempDir::new("traces");
    let db = dir.0.join("orbit.db");
    let otlp = ["--otlp-endpoint", endpoint.as_str()];
    let mut server = Server::start(&db, &otlp).await;
    let port = server.port;
    let mut c = server.client().await;
    register(&mut c, WORKFLOW).await;

    let stop_worker = CancellationToken::new();
    let worker = Worker::builder(server.address())
        .worker_id("rust-traced")
        .reconnect_backoff(Duration::from_millis(20), Duration::from_millis(200))
        .task("rs_a", "1", |ctx: TaskContext| async move {
            Ok::<Value, TaskFailure>(json!({"n": ctx.input()["n"].as_i64().unwrap_or(0) + 1}))
        })
        .task("rs_c", "1", |ctx: TaskContext| async move {
            Ok::<Value, TaskFailure>(json!({"n": ctx.input()["n"].as_i64().unwrap_or(0) + 2}))
        })
        .build()
        .unwrap();
    let s = stop_worker.clone();
    let worker = tokio::spawn(async move { worker.run(s).await });

    let id = "traced-1";
    start(&mut c, "traced", id, json!({"n": 4})).await.unwrap();
    // Step a done (by the Rust worker): restart the server before step b is offered to
    // anyone who can run it (the Python worker is not running yet).
    history_until(&mut c, id, Duration::from_secs(30), |h| {
        h.iter().any(|e| e.step == "a" && e.event_type == "StepSucceeded")
    })
    .await;
    stop(&mut server);
    let before_restart = of_execution(&receiver.spans(), id);
    let mut server = Server::start_on(&db, port, &otlp).await;
    let mut c = server.client().await;

    let log_path = dir.0.join("py_worker.log");
    let log = std::fs::File::create(&log_path).expect("log file");
    let script = dir.0.join("py_b_worker.py");
    std::fs::write(&script, PY_WORKER).expect("script");
    let mut py_worker = ChildGuard(
        Command::new(python())
            .arg(&script)
            .arg(&py)
            .args(["--address", &format!("127.0.0.1:{port}"), "--max-tasks", "1"])
            .args(["--worker-id", "python-traced"])
            .env("OTEL_EXPORTER_OTLP_ENDPOINT", &endpoint)
            .env("OTEL_SERVICE_NAME", "python-worker")
            .stdin(Stdio::null())
            .stdout(log.try_clone().expect("log file"))
            .stderr(log)
            .spawn()
            .expect("spawn the python worker"),
    );
    let (status, output) = result(&mut c, id, Duration::from_secs(60)).await;
    let py_log = || std::fs::read_to_string(&log_path).unwrap_or_default();
    assert_eq!(status, orbit_api::v1::ExecutionStatus::Completed, "{output}\n{}", py_log());
    assert_eq!(output, json!({"n": 52}), "(4 + 1) * 10 + 2");
    // The Python worker exits after its one task (flushing its span on the way out).
    let deadline = Instant::now() + Duration::from_secs(30);
    while py_worker.0.try_wait().expect("wait").is_none() {
        assert!(Instant::now() < deadline, "python worker did not exit:\n{}", py_log());
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    stop(&mut server);
    stop_worker.cancel();
    let _ = tokio::time::timeout(Duration::from_secs(10), worker).await;

    // Every span expected: wait (bounded) until they are all exported.
    let task_span = |spans: &[Received], service: &str, task: &str| {
        spans
            .iter()
            .find(|s| s.service == service && s.span.name == format!("task {task}"))
            .cloned()
    };
    let complete = |all: &[Received]| {
        let spans = of_execution(all, id);
        task_span(&spans, "rust-worker", "rs_a").is_some()
            && task_span(&spans, "rust-worker", "rs_c").is_some()
            && task_span(&spans, "python-worker", "py_b").is_some()
            && spans.iter().any(|s| s.span.name == "workflow traced")
    };
    let spans = match receiver.wait_for(Duration::from_secs(30), complete).await {
        Ok(all) => of_execution(&all, id),
        Err(all) => {
            let names: Vec<_> = of_execution(&all, id)
                .iter()
                .map(|s| (s.service.clone(), s.span.name.clone()))
                .collect();
            panic!("spans missing; got {names:?}\n{}", py_log());
        }
    };

    // One trace, derived from the execution id.
    let expected: String =
        Sha256::digest(id.as_bytes())[..16].iter().map(|b| format!("{b:02x}")).collect();
    for s in &spans {
        assert_eq!(
            s.trace_id(),
            expected,
            "{} from {} is in another trace",
            s.span.name,
            s.service
        );
    }
    // The server's spans came from both processes: some before the restart, more after.
    let server_before = before_restart.iter().filter(|s| s.service == "orbit-dev").count();
    assert!(server_before > 0, "no server span before the restart");
    assert!(before_restart.iter().any(|s| s.span.name == "attempt rs_a"));
    for name in
        ["start", "owner.pass", "attempt rs_a", "dispatch py_b", "attempt py_b", "attempt rs_c"]
    {
        assert!(
            spans.iter().any(|s| s.service == "orbit-dev" && s.span.name == name),
            "no server span {name}"
        );
    }
    // Parents: the root has none; every other span hangs under a span of this trace.
    let root = spans.iter().find(|s| s.span.name == "workflow traced").unwrap();
    assert!(root.span.parent_span_id.is_empty(), "the root span has a parent");
    let ids: std::collections::BTreeSet<String> = spans.iter().map(Received::span_id).collect();
    for s in spans.iter().filter(|s| s.span.parent_span_id.len() == 8) {
        assert!(
            ids.contains(&s.parent_id()),
            "{} ({}) has an unknown parent",
            s.span.name,
            s.service
        );
    }
    // Each worker's task span is the child of its step attempt's span, with its attributes.
    for (service, task, step) in
        [("rust-worker", "rs_a", "a"), ("python-worker", "py_b", "b"), ("rust-worker", "rs_c", "c")]
    {
        let child = task_span(&spans, service, task).unwrap();
        let attempt = spans
            .iter()
            .find(|s| s.service == "orbit-dev" && s.span.name == format!("attempt {task}"))
            .unwrap_or_else(|| panic!("no attempt span for {task}"));
        assert_eq!(
            child.parent_id(),
            attempt.span_id(),
            "{task}'s task span is not the attempt's child"
        );
        assert_eq!(attempt.parent_id(), root.span_id(), "attempt {task} is not under the root");
        assert_eq!(attempt.attr("orbit.step").as_deref(), Some(step));
        assert_eq!(attempt.attr("orbit.attempt").as_deref(), Some("1"));
        assert_eq!(attempt.attr("orbit.task").as_deref(), Some(task));
        assert_eq!(attempt.attr("orbit.workflow").as_deref(), Some("traced"));
        assert_eq!(child.attr("orbit.step").as_deref(), Some(step));
    }
    let dispatch = spans.iter().find(|s| s.span.name == "dispatch py_b").unwrap();
    assert_eq!(dispatch.attr("orbit.worker").as_deref(), Some("python-traced"));
    let py_span = task_span(&spans, "python-worker", "py_b").unwrap();
    assert_eq!(py_span.attr("orbit.worker").as_deref(), Some("python-traced"));
}

/// Issue 30, item 3: a child execution's spans are in its root's trace (not a trace of
/// their own), and the child's `workflow` span hangs under its parent's.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_childs_spans_are_in_its_roots_trace() {
    const PARENT: &str = r#"
name: saga
version: "1"
steps:
  - { id: pay, workflow: payment }
  - { id: ship, needs: [pay], compute: "${{ steps.pay.output }}" }
output: "${{ steps.ship.output }}"
"#;
    const CHILD: &str = r#"
name: payment
version: "1"
steps:
  - { id: charge, workflow: ledger }
output: "${{ steps.charge.output }}"
"#;
    const GRANDCHILD: &str = "name: ledger\nversion: \"1\"\nsteps: [ { id: post, compute: 7 } ]\noutput: \"${{ steps.post.output }}\"\n";
    let receiver = Receiver::start().await;
    let endpoint = receiver.endpoint();
    let dir = TempDir::new("traces-children");
    let server =
        Server::start(&dir.0.join("orbit.db"), &["--otlp-endpoint", endpoint.as_str()]).await;
    let mut c = server.client().await;
    for doc in [PARENT, CHILD, GRANDCHILD] {
        register(&mut c, doc).await;
    }
    start(&mut c, "saga", "saga-1", json!({})).await.unwrap();
    assert_eq!(result(&mut c, "saga-1", Duration::from_secs(30)).await.1, json!(7));

    let ids = ["saga-1", "saga-1/pay", "saga-1/pay/charge"];
    let roots = |spans: &[Received]| {
        ids.iter()
            .filter(|id| {
                of_execution(spans, id).iter().any(|s| s.span.name.starts_with("workflow "))
            })
            .count()
    };
    let spans = receiver
        .wait_for(Duration::from_secs(30), |spans| roots(spans) == ids.len())
        .await
        .unwrap_or_else(|got| panic!("workflow spans missing ({} of 3)", roots(&got)));
    let expected: String =
        Sha256::digest(b"saga-1")[..16].iter().map(|b| format!("{b:02x}")).collect();
    let workflow_span = |id: &str| {
        of_execution(&spans, id)
            .into_iter()
            .find(|s| s.span.name.starts_with("workflow "))
            .unwrap_or_else(|| panic!("no workflow span of {id}"))
    };
    for id in ids {
        for s in of_execution(&spans, id) {
            assert_eq!(s.trace_id(), expected, "{} of {id} is in another trace", s.span.name);
        }
    }
    let (root, child, grandchild) =
        (workflow_span(ids[0]), workflow_span(ids[1]), workflow_span(ids[2]));
    assert!(root.span.parent_span_id.is_empty(), "the root's workflow span has no parent");
    assert_eq!(child.parent_id(), root.span_id(), "the child hangs under its parent");
    assert_eq!(grandchild.parent_id(), child.span_id(), "the grandchild under the child");
}
