//! The Rust SDK's typed client (`orbit_worker::client::Client`) against the real
//! `orbit dev`, with an `orbit-worker` serving the task: start (idempotent by id), query,
//! update, signal, result, history, watch, describe and cancel, with JSON payloads; errors
//! keep the server's status. `ListWorkers` shows the worker's `Hello.sdk` and `runtime`.

// Tests read their environment (ORBIT_PYTHON, the database URL) and the wall clock
// (unique names, deadlines of real processes) directly.
#![allow(clippy::disallowed_methods)]

mod common;

use common::*;
use orbit_api::v1 as pb;
use orbit_worker::client::Client;
use orbit_worker::{CancellationToken, TaskContext, TaskFailure, Worker};
use serde_json::{json, Value};
use std::time::{Duration, Instant};

/// Greets, waits for `go`; a query, an update and the greeting as output.
const WORKFLOW: &str = r#"
name: client-demo
version: "1"
tasks: { greet: { version: "1" } }
signals: { go: null }
queries: { greeted: "${{ steps.hi.output != null }}" }
updates:
  add:
    input: { type: object, required: [n], properties: { n: { type: integer } } }
    reply: "${{ {'sum': args.n + input.base} }}"
steps:
  - { id: hi, task: greet, input: { name: "${{ input.name }}" } }
  - { id: wait, needs: [hi], await: go }
output: "${{ steps.hi.output }}"
"#;

const WITHIN: Duration = Duration::from_secs(30);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_typed_client_drives_an_execution_end_to_end() {
    let dir = TempDir::new("rust-client");
    let server = Server::start(&dir.0.join("orbit.db"), &[]).await;
    let client = Client::connect(&server.address()).await.expect("connect");
    let register = pb::RegisterWorkflowRequest { document: WORKFLOW.into(), format: 0 };
    client.raw().register_workflow(register).await.expect("register");
    let stop = CancellationToken::new();
    let worker = Worker::builder(server.address())
        .worker_id("client-demo-worker")
        .task("greet", "1", |ctx: TaskContext| async move {
            let name = ctx.input()["name"].as_str().unwrap_or("?").to_owned();
            Ok::<Value, TaskFailure>(json!({ "greeting": format!("Hello, {name}!") }))
        })
        .build()
        .expect("worker");
    let s = stop.clone();
    tokio::spawn(async move { worker.run(s).await });

    let input = json!({"name": "Ada", "base": 10});
    let first = client.start("client-demo", Some("c-1"), input.clone()).await.expect("start");
    assert!(first.created);
    let again = client.start("client-demo", Some("c-1"), input).await.expect("start again");
    assert_eq!((again.created, again.execution_id.as_str()), (false, "c-1"));

    // The query turns true once the worker's greeting is recorded.
    let deadline = Instant::now() + WITHIN;
    while client.query("c-1", "greeted").await.expect("query") != json!(true) {
        assert!(Instant::now() < deadline, "the greet step did not complete");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert_eq!(
        client.update("c-1", "add", json!({"n": 5})).await.expect("update"),
        json!({"sum": 15})
    );
    let refused = client.update("c-1", "add", json!({"n": "x"})).await.expect_err("bad args");
    assert_eq!(code(refused.status().expect("a status")), "INVALID_INPUT");
    // A v2 that renames the completed `hi` without `renamed_from` is unsafe for it: the dry
    // run says so, the migration is refused with MIGRATION_UNSAFE; the execution stays on v1.
    let renamed = WORKFLOW.replace("version: \"1\"", "version: \"2\"").replace("hi", "hello");
    let register = pb::RegisterWorkflowRequest { document: renamed, format: 0 };
    client.raw().register_workflow(register).await.expect("register v2");
    let dry = client.migrate("c-1", "2", true).await.expect("dry run");
    assert!(!dry.safe && !dry.migrated, "{dry:?}");
    let refused = client.migrate("c-1", "2", false).await.expect_err("unsafe");
    assert_eq!(code(refused.status().expect("a status")), "MIGRATION_UNSAFE");
    let seq = client.signal("c-1", "go", json!({})).await.expect("signal");
    assert!(seq > 0);

    let result =
        tokio::time::timeout(WITHIN, client.result("c-1")).await.expect("ends").expect("result");
    assert_eq!(result.status, pb::ExecutionStatus::Completed, "{result:?}");
    assert_eq!(result.output, json!({"greeting": "Hello, Ada!"}));
    assert_eq!(result.execution_id, "c-1");

    let history = client.history("c-1").await.expect("history");
    let types: Vec<&str> = history.iter().map(|e| e.event_type.as_str()).collect();
    for expected in ["StepSucceeded", "UpdateAccepted", "SignalReceived", "WorkflowCompleted"] {
        assert!(types.contains(&expected), "{expected} missing from {types:?}");
    }
    let signalled = history.iter().find(|e| e.event_type == "SignalReceived").expect("signal");
    assert_eq!(signalled.seq, seq);

    // Watching a closed run replays its events, then the result, then ends.
    let mut watch = client.watch("c-1", 0).await.expect("watch");
    let mut watched = Vec::new();
    let mut watched_result = None;
    while let Some(message) = watch.message().await.expect("watch message") {
        match message.kind {
            Some(pb::watch_execution_response::Kind::Event(e)) => watched.push(e.seq),
            Some(pb::watch_execution_response::Kind::Result(r)) => {
                watched_result = Some(r.status())
            }
            None => {}
        }
    }
    assert_eq!(watched, history.iter().map(|e| e.seq).collect::<Vec<_>>());
    assert_eq!(watched_result, Some(pb::ExecutionStatus::Completed));

    let described = client.describe("c-1").await.expect("describe");
    let info = described.info.expect("info");
    assert_eq!(info.status(), pb::ExecutionStatus::Completed);

    // Cancel: the run waiting for `go` ends CANCELLED.
    client
        .start("client-demo", Some("c-2"), json!({"name": "Bo", "base": 0}))
        .await
        .expect("start");
    client.cancel("c-2", "no longer needed").await.expect("cancel");
    let cancelled =
        tokio::time::timeout(WITHIN, client.result("c-2")).await.expect("ends").expect("result");
    assert_eq!(cancelled.status, pb::ExecutionStatus::Cancelled);

    // Errors keep the server's status.
    let missing = client.describe("nope").await.expect_err("unknown id");
    assert_eq!(missing.status().map(tonic::Status::code), Some(tonic::Code::NotFound), "{missing}");

    // The worker's Hello: `orbit-rust <version>` and `rust <rustc version>`.
    let mut admin = orbit_api::v1::admin_service_client::AdminServiceClient::new(
        channel_to(&server.address()).await,
    );
    let workers =
        admin.list_workers(pb::ListWorkersRequest::default()).await.expect("list").into_inner();
    let w = workers.workers.iter().find(|w| w.worker_id == "client-demo-worker").expect("listed");
    assert_eq!(w.sdk, orbit_worker::SDK);
    assert!(w.sdk.starts_with("orbit-rust "), "{}", w.sdk);
    assert!(w.runtime.starts_with("rust "), "{}", w.runtime);
    stop.cancel();
}
