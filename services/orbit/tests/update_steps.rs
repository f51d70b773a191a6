//! Update handlers with steps and update-with-start (issue 13, item 1) through the real
//! `orbit dev` and a real Rust worker:
//!
//! - a handler's task step runs on the worker inside the execution and the call answers the
//!   reply computed over its output; a retry with the same `request_id` answers the same
//!   reply and records nothing;
//! - a failing handler step answers `UPDATE_FAILED` (recorded in `UpdateCompleted.error`),
//!   the run goes on;
//! - a caller deadline that passes while the step runs answers `DEADLINE_EXCEEDED`; the
//!   update still completes and the retry returns its one reply;
//! - update-with-start starts a missing execution and applies the update (once, across a
//!   retry), applies only the update to an existing one, starts nothing when the update is
//!   refused, and the CLI's `--start-workflow` does the same;
//! - update-with-start is atomic: the update's acceptance is in the commit that creates the
//!   execution (seqs 1, 2 before anything decided, `WorkflowStarted` after it), for a
//!   handler with steps and one with an expression reply.

mod common;

use common::scenario::signal;
use common::*;
use orbit_api::v1 as pb;
use orbit_api::v1::workflow_service_client::WorkflowServiceClient;
use orbit_server_kit::payload::{json_to_proto, proto_to_json};
use orbit_worker::{TaskContext, TaskFailure, Worker};
use serde_json::{json, Value};
use std::process::Command;
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::Notify;
use tokio_util::sync::CancellationToken;
use tonic::transport::Channel;

/// The bound on any one wait: far above anything the tests configure.
const WAIT: Duration = Duration::from_secs(60);

/// A cart: `add` reserves stock on the worker (handler steps), then labels it; the reply
/// reads both steps, the args and the execution input. `peek` answers from an expression.
const CART: &str = r#"
name: cart
version: "1"
signals: { checkout: null }
tasks:
  stock.reserve:
    input: { type: object, required: [sku], properties: { sku: { type: string } } }
updates:
  add:
    input: { type: object, required: [sku], properties: { sku: { type: string } } }
    validator: "${{ args.sku != 'banned' }}"
    steps:
      - { id: hold, task: stock.reserve, input: { sku: "${{ args.sku }}" } }
      - { id: label, compute: "${{ 'held:' + steps.hold.output.hold }}" }
    reply: "${{ {'hold': steps.hold.output.hold, 'label': steps.label.output, 'owner': input.owner} }}"
  peek:
    reply: "${{ input.owner }}"
steps:
  - { id: wait, await: checkout }
"#;

/// Another workflow, to take an id `cart` then may not use.
const OTHER: &str = r#"
name: other
version: "1"
signals: { go: null }
steps:
  - { id: w, await: go }
"#;

/// The first `n` event types of a history, with their seqs.
fn head(events: &[pb::HistoryEvent], n: usize) -> Vec<(u64, &str)> {
    events.iter().take(n).map(|e| (e.seq, e.event_type.as_str())).collect()
}

fn count(events: &[pb::HistoryEvent], event_type: &str) -> usize {
    events.iter().filter(|e| e.event_type == event_type).count()
}

fn request(id: &str, name: &str, sku: &str, request_id: &str) -> pb::UpdateExecutionRequest {
    pb::UpdateExecutionRequest {
        execution_id: id.into(),
        name: name.into(),
        args: Some(json_to_proto(json!({ "sku": sku }))),
        request_id: request_id.into(),
        start: None,
    }
}

fn with_start(mut r: pb::UpdateExecutionRequest, workflow: &str) -> pb::UpdateExecutionRequest {
    r.start = Some(pb::StartExecutionRequest {
        workflow: workflow.into(),
        input: Some(json_to_proto(json!({"owner": "ann"}))),
        ..Default::default()
    });
    r
}

async fn send(
    c: &mut WorkflowServiceClient<Channel>,
    r: pb::UpdateExecutionRequest,
    deadline: Option<Duration>,
) -> Result<pb::UpdateExecutionResponse, tonic::Status> {
    let mut r = tonic::Request::new(r);
    if let Some(d) = deadline {
        r.set_timeout(d);
    }
    c.update_execution(r).await.map(tonic::Response::into_inner)
}

fn reply(r: &pb::UpdateExecutionResponse) -> Value {
    r.result.clone().map(proto_to_json).transpose().expect("JSON").unwrap_or(Value::Null)
}

/// A worker for `stock.reserve`: `none` is out of stock (not retryable), `slow` waits
/// until `release` is notified, anything else is held at once.
fn worker(address: String, stop: &CancellationToken, release: Arc<Notify>) {
    let w: Worker = Worker::builder(address)
        .worker_id("cart-worker")
        .task("stock.reserve", "1", move |ctx: TaskContext| {
            let release = Arc::clone(&release);
            async move {
                let sku = ctx.input()["sku"].as_str().unwrap_or_default().to_string();
                match sku.as_str() {
                    "none" => Err(TaskFailure::fatal("OUT_OF_STOCK", "none left")),
                    "slow" => {
                        release.notified().await;
                        Ok(json!({"hold": "h-slow"}))
                    }
                    _ => Ok(json!({"hold": format!("h-{sku}")})),
                }
            }
        })
        .max_concurrency(8)
        .build()
        .expect("worker");
    let stop = stop.clone();
    tokio::spawn(async move { w.run(stop).await });
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn handler_steps_reply_fail_and_outlive_the_callers_deadline() {
    let dir = TempDir::new("update-steps");
    let server = Server::start(&dir.0.join("orbit.db"), &[]).await;
    let mut c = server.client().await;
    register(&mut c, CART).await;
    let stop = CancellationToken::new();
    let release = Arc::new(Notify::new());
    worker(server.address(), &stop, Arc::clone(&release));
    start(&mut c, "cart", "cart-1", json!({"owner": "bob"})).await.expect("start");

    // The handler's task step runs on the worker; the reply reads its output.
    let first = send(&mut c, request("cart-1", "add", "a1", "r-1"), None).await.expect("add");
    let want = json!({"hold": "h-a1", "label": "held:h-a1", "owner": "bob"});
    assert_eq!(reply(&first), want);
    let h = history(&mut c, "cart-1").await;
    let accepted = h.iter().find(|e| e.event_type == "UpdateAccepted").expect("accepted");
    assert_eq!(accepted.seq, first.seq);
    let unit = format!("update:add@{}:hold", first.seq);
    assert!(
        h.iter().any(|e| e.event_type == "StepSucceeded" && e.step == unit),
        "the handler's step ran as {unit}: {h:?}"
    );
    // Retried: the one reply, nothing recorded.
    let again = send(&mut c, request("cart-1", "add", "a1", "r-1"), None).await.expect("retry");
    assert_eq!((reply(&again), again.seq), (want, first.seq));
    let h = history(&mut c, "cart-1").await;
    assert_eq!((count(&h, "UpdateAccepted"), count(&h, "UpdateCompleted")), (1, 1));

    // A failing handler step: UPDATE_FAILED, the same for its retry; the run goes on.
    let failed = send(&mut c, request("cart-1", "add", "none", "r-2"), None).await.unwrap_err();
    assert_eq!(code(&failed), "UPDATE_FAILED", "{failed:?}");
    assert_eq!(failed.code(), tonic::Code::FailedPrecondition);
    assert!(failed.message().contains("OUT_OF_STOCK"), "{failed:?}");
    let again = send(&mut c, request("cart-1", "add", "none", "r-2"), None).await.unwrap_err();
    assert_eq!((code(&again), again.message()), (code(&failed), failed.message()));
    let h = history(&mut c, "cart-1").await;
    assert_eq!((count(&h, "UpdateAccepted"), count(&h, "UpdateCompleted")), (2, 2));
    assert_eq!(count(&h, "WorkflowFailed"), 0, "a failed update does not fail the run");

    // The caller's deadline passes while the step runs: DEADLINE_EXCEEDED (the Orbit code
    // when the server's answer, sent just before the deadline, arrives first).
    let late = send(&mut c, request("cart-1", "add", "slow", "r-3"), Some(Duration::from_secs(3)))
        .await
        .unwrap_err();
    assert_eq!(late.code(), tonic::Code::DeadlineExceeded, "{late:?}");
    if let Some(orbit) = orbit_server_kit::OrbitError::from_status(&late) {
        assert_eq!(orbit.code.as_str(), "DEADLINE_EXCEEDED", "{late:?}");
    }
    // The update is accepted and goes on; once the worker finishes, the retry answers.
    history_until(&mut c, "cart-1", WAIT, |h| count(h, "UpdateAccepted") == 3).await;
    release.notify_one();
    let done =
        send(&mut c, request("cart-1", "add", "slow", "r-3"), Some(WAIT)).await.expect("r-3");
    assert_eq!(reply(&done)["hold"], "h-slow");
    let h = history(&mut c, "cart-1").await;
    assert_eq!((count(&h, "UpdateAccepted"), count(&h, "UpdateCompleted")), (3, 3));

    signal(&mut c, "cart-1", "checkout", json!({})).await;
    let (status, _) = result(&mut c, "cart-1", WAIT).await;
    assert_eq!(status, pb::ExecutionStatus::Completed);
    stop.cancel();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn update_with_start_starts_once_and_only_when_missing() {
    let dir = TempDir::new("update-with-start");
    let server = Server::start(&dir.0.join("orbit.db"), &[]).await;
    let mut c = server.client().await;
    register(&mut c, CART).await;
    register(&mut c, OTHER).await;
    let stop = CancellationToken::new();
    worker(server.address(), &stop, Arc::new(Notify::new()));

    // Missing: started with the given input, then updated; the reply reads that input.
    let r = with_start(request("cart-2", "add", "b2", "s-1"), "cart");
    let first = send(&mut c, r.clone(), Some(WAIT)).await.expect("update-with-start");
    assert!(first.created);
    assert_eq!(reply(&first)["owner"], "ann");
    // Retried: nothing started or applied again, the same reply.
    let again = send(&mut c, r, Some(WAIT)).await.expect("retry");
    assert!(!again.created);
    assert_eq!((reply(&again), again.seq), (reply(&first), first.seq));
    let h = history(&mut c, "cart-2").await;
    assert_eq!(count(&h, "WorkflowCreated"), 1);
    assert_eq!((count(&h, "UpdateAccepted"), count(&h, "UpdateCompleted")), (1, 1));
    // Atomic: accepted in the commit that created the execution, before its first decision
    // (every commit of a started execution after the first follows `WorkflowStarted`).
    assert_eq!(
        head(&h, 3),
        [(1, "WorkflowCreated"), (2, "UpdateAccepted"), (3, "WorkflowStarted")],
        "{h:#?}"
    );
    assert_eq!(h[0].timestamp, h[1].timestamp, "one pass: {h:#?}");
    assert_eq!(first.seq, 2);

    // An expression reply: accepted and answered in that first commit too.
    let r = with_start(request("cart-6", "peek", "x", "s-6"), "cart");
    let peeked = send(&mut c, r.clone(), Some(WAIT)).await.expect("peek with start");
    assert!(peeked.created);
    assert_eq!((reply(&peeked), peeked.seq, peeked.run), (json!("ann"), 2, 1));
    let h = history(&mut c, "cart-6").await;
    assert_eq!(
        head(&h, 4),
        [
            (1, "WorkflowCreated"),
            (2, "UpdateAccepted"),
            (3, "UpdateCompleted"),
            (4, "WorkflowStarted")
        ],
        "{h:#?}"
    );
    // Its retry (through the inbox now that the execution exists) records nothing.
    let again = send(&mut c, r, Some(WAIT)).await.expect("peek retry");
    assert_eq!((again.created, reply(&again), again.seq), (false, json!("ann"), 2));
    assert_eq!(history(&mut c, "cart-6").await.len(), h.len());

    // Existing: only the update (the start's input is not used).
    start(&mut c, "cart", "cart-3", json!({"owner": "cy"})).await.expect("start");
    let r = with_start(request("cart-3", "peek", "x", "s-2"), "cart");
    let existing = send(&mut c, r, Some(WAIT)).await.expect("existing");
    assert!(!existing.created);
    assert_eq!(reply(&existing), json!("cy"));
    assert_eq!(count(&history(&mut c, "cart-3").await, "WorkflowCreated"), 1);

    // A refused update starts nothing.
    let r = with_start(request("cart-4", "add", "banned", "s-3"), "cart");
    let refused = send(&mut c, r, Some(WAIT)).await.unwrap_err();
    assert_eq!(code(&refused), "UPDATE_REJECTED", "{refused:?}");
    let missing = c
        .describe_execution(pb::DescribeExecutionRequest {
            execution_id: "cart-4".into(),
            ..Default::default()
        })
        .await
        .unwrap_err();
    assert_eq!(code(&missing), "EXECUTION_NOT_FOUND", "{missing:?}");

    // An id taken by another workflow's execution is refused.
    start(&mut c, "other", "taken", json!(null)).await.expect("start other");
    let r = with_start(request("taken", "peek", "x", "s-4"), "cart");
    let taken = send(&mut c, r, Some(WAIT)).await.unwrap_err();
    assert_eq!(code(&taken), "EXECUTION_EXISTS", "{taken:?}");

    // The CLI: `--start-workflow` with `--input`, then the same call again.
    let cli = || {
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_orbit"));
        cmd.args(["execution", "update", "cart-5", "add", "--args", r#"{"sku": "c5"}"#])
            .args(["--start-workflow", "cart", "--input", r#"{"owner": "dee"}"#])
            .args(["--request-id", "cli-1", "--timeout", "60s", "--output", "json"])
            .args(["--address", &server.address()]);
        let (ok, out, err) = run_bounded(&mut cmd, WAIT);
        assert!(ok, "{out}\n{err}");
        serde_json::from_str::<Value>(out.trim()).expect(&out)
    };
    let printed = cli();
    assert_eq!(printed["result"], json!({"hold": "h-c5", "label": "held:h-c5", "owner": "dee"}));
    assert_eq!(cli()["seq"], printed["seq"]);
    let h = history(&mut c, "cart-5").await;
    assert_eq!((count(&h, "WorkflowCreated"), count(&h, "UpdateAccepted")), (1, 1));
    stop.cancel();
}

/// Issue 30, item 4: a retried update-with-start after the execution continued as new is
/// answered by its first acceptance (run 1), not applied again in the new run.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_retried_update_with_start_after_continue_as_new_is_applied_once() {
    const LOOPING: &str = r#"
name: looping
version: "1"
signals: { go: null }
updates:
  add:
    reply: "${{ args.sku }}"
steps:
  - { id: w, await: go }
  - { id: again, needs: [w], when: "${{ !has(input.n) }}", continue_as_new: { input: { n: 1 } } }
"#;
    let dir = TempDir::new("update-can");
    let server = Server::start(&dir.0.join("orbit.db"), &[]).await;
    let mut c = server.client().await;
    register(&mut c, LOOPING).await;
    let r = with_start(request("loop-1", "add", "first", "u-1"), "looping");
    let first = send(&mut c, r.clone(), Some(WAIT)).await.expect("update-with-start");
    assert!(first.created);
    assert_eq!((reply(&first), first.run), (json!("first"), 1));
    signal(&mut c, "loop-1", "go", json!(null)).await;
    let continued = history_until(&mut c, "loop-1", WAIT, |h| {
        h.first().is_some_and(|e| e.run == 2) && h.iter().any(|e| e.event_type == "WorkflowStarted")
    })
    .await;
    let again = send(&mut c, r, Some(WAIT)).await.expect("the retry after continue-as-new");
    assert!(!again.created);
    assert_eq!((reply(&again), again.seq, again.run), (json!("first"), first.seq, 1));
    let h = history(&mut c, "loop-1").await;
    assert_eq!(count(&h, "UpdateAccepted"), 0, "nothing accepted in run 2: {h:#?}");
    assert_eq!(h.len(), continued.len(), "run 2 recorded nothing");
}
