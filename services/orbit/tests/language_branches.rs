//! Failure branches (`on_failure`) and races (issue 29) through the real `orbit dev`
//! binary with a real Rust worker: a declined charge runs its branch (units
//! `charge.on_failure.<id>`, `failure` in their input) and the run completes with the
//! branch's output and no compensation; a failing branch fails the run, which compensates
//! what succeeded but never the failed step. A race of a signal against a deadline is won
//! by whichever comes first, the other branch's wait or timer is cancelled, and a running
//! task of a losing branch gets a cancel at its worker.

mod common;

use common::kinds::*;
use common::*;
use orbit_api::v1 as pb;
use orbit_server_kit::payload::json_to_proto;
use orbit_worker::{TaskContext, TaskFailure, Worker};
use serde_json::{json, Value};
use std::time::Duration;
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

/// The bound on a run's result: far above the 1 s sleeps and retry intervals used here.
const WAIT: Duration = Duration::from_secs(60);

fn text(ctx: &TaskContext, key: &str) -> String {
    ctx.input()[key].as_str().unwrap_or_default().to_string()
}

/// Serves the examples' tasks: `payments.charge` declines order `o-decl*`, `billing.invoice`
/// fails for `o-decl-noinv`; `slow.work` waits for its cancel and reports it on `cancels`.
fn worker(address: &str, stop: &CancellationToken, cancels: mpsc::UnboundedSender<String>) {
    let w =
        Worker::builder(address.to_string())
            .worker_id("language-branches")
            .max_concurrency(8)
            .task("inventory.reserve", "1", |ctx: TaskContext| async move {
                Ok::<Value, TaskFailure>(
                    json!({"reservation": format!("r-{}", text(&ctx, "order_id"))}),
                )
            })
            .task("inventory.release", "1", |_ctx: TaskContext| async move { Ok(json!({})) })
            .task("payments.refund", "1", |_ctx: TaskContext| async move { Ok(json!({})) })
            .task("payments.charge", "1", |ctx: TaskContext| async move {
                if text(&ctx, "order_id").starts_with("o-decl") {
                    return Err(TaskFailure::fatal("DECLINED", "card declined"));
                }
                Ok(json!({"charge_id": "ch-1"}))
            })
            .task("notify.email", "1", |ctx: TaskContext| async move {
                Ok(json!({"sent": text(&ctx, "reason")}))
            })
            .task("billing.invoice", "1", |ctx: TaskContext| async move {
                let order = text(&ctx, "order_id");
                if order == "o-decl-noinv" {
                    return Err(TaskFailure::fatal("NO_INVOICE", "billing is closed"));
                }
                Ok(json!({"invoice": format!("inv-{order}")}))
            })
            .task("approvals.request", "1", |ctx: TaskContext| async move {
                Ok(json!({"ticket": format!("t-{}", text(&ctx, "request_id"))}))
            })
            .task("approvals.escalate", "1", |_ctx: TaskContext| async move {
                Ok(json!({"to": "manager"}))
            })
            .task("slow.work", "1", move |ctx: TaskContext| {
                let cancels = cancels.clone();
                async move {
                    ctx.cancellation().cancelled().await;
                    let _ = cancels.send(ctx.execution_id().to_string());
                    Err::<Value, _>(TaskFailure::fatal("STOPPED", "cancelled"))
                }
            })
            .build()
            .expect("worker");
    let stop = stop.clone();
    tokio::spawn(async move { w.run(stop).await });
}

async fn serve(
    name: &str,
) -> (TempDir, Server, mpsc::UnboundedReceiver<String>, CancellationToken) {
    let dir = TempDir::new(name);
    let server = Server::start(&dir.0.join("orbit.db"), &[]).await;
    let (tx, rx) = mpsc::unbounded_channel();
    let stop = CancellationToken::new();
    worker(&server.address(), &stop, tx);
    (dir, server, rx, stop)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_declined_charge_runs_its_failure_branch_and_the_run_goes_on() {
    let (_dir, server, _rx, stop) = serve("language-on-failure").await;
    let mut c = server.client().await;
    register_example(&mut c, "on-failure.yaml").await;

    start(&mut c, "on-failure", "of-1", json!({"order_id": "o-decl", "amount": 120}))
        .await
        .expect("start");
    let (status, output) = result(&mut c, "of-1", WAIT).await;
    assert_eq!(status, pb::ExecutionStatus::Completed, "{output}");
    assert_eq!(
        output,
        json!({"order": "o-decl", "paid_by": "invoice", "invoice": "inv-o-decl", "declined": "DECLINED"})
    );
    let events = history(&mut c, "of-1").await;
    let h = kinds(&events);
    let at = |kind: &str, unit: &str| position(&h, kind, unit);
    assert!(at("StepFailureBranched", "charge") < at("StepScheduled", "charge.on_failure.tell"));
    assert!(
        at("StepSucceeded", "charge.on_failure.tell")
            < at("StepScheduled", "charge.on_failure.invoice")
    );
    assert!(at("StepSucceeded", "charge.on_failure.invoice") < at("StepFailureCaught", "charge"));
    assert!(at("StepFailureCaught", "charge") < at("StepSucceeded", "confirm"));
    assert!(h.iter().all(|(t, s)| t != "StepFailed" && !s.starts_with("compensate:")), "{h:?}");
    // The branch saw the failure; the step's recorded output is the branch's output.
    let tell = events
        .iter()
        .find(|e| e.event_type == "StepSucceeded" && e.step == "charge.on_failure.tell")
        .expect("tell");
    assert_eq!(event_payload(tell)["output"], json!({"sent": "DECLINED: card declined"}));
    let caught = &events[at("StepFailureCaught", "charge")];
    assert_eq!(event_payload(caught)["output"]["invoice"], json!("inv-o-decl"));
    assert_eq!(event_payload(caught)["error"]["code"], json!("DECLINED"));

    // A charge that goes through never starts the branch.
    start(&mut c, "on-failure", "of-2", json!({"order_id": "o-ok", "amount": 5}))
        .await
        .expect("start");
    let (status, output) = result(&mut c, "of-2", WAIT).await;
    assert_eq!(status, pb::ExecutionStatus::Completed, "{output}");
    assert_eq!(output["paid_by"], json!("card"));
    let h = kinds(&history(&mut c, "of-2").await);
    assert!(h.iter().all(|(_, s)| !s.contains("on_failure")), "{h:?}");
    stop.cancel();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failing_branch_fails_the_run_which_never_compensates_the_failed_step() {
    let (_dir, server, _rx, stop) = serve("language-on-failure-fails").await;
    let mut c = server.client().await;
    register_example(&mut c, "on-failure.yaml").await;
    start(&mut c, "on-failure", "of-3", json!({"order_id": "o-decl-noinv", "amount": 1}))
        .await
        .expect("start");
    let (status, error) = result(&mut c, "of-3", WAIT).await;
    assert_eq!(status, pb::ExecutionStatus::Failed, "{error}");
    assert!(error.as_str().is_some_and(|e| e.starts_with("NO_INVOICE")), "{error}");
    let h = kinds(&history(&mut c, "of-3").await);
    let at = |kind: &str, unit: &str| position(&h, kind, unit);
    assert!(at("StepFailed", "charge.on_failure.invoice") < at("StepFailed", "charge"));
    assert!(at("StepFailed", "charge") < at("CompensationStarted", ""));
    // The reservation (succeeded) and the branch's e-mail step (no compensate) are what
    // succeeded; only the reservation is undone — never the charge.
    assert!(at("CompensationStarted", "") < at("StepSucceeded", "compensate:reserve"));
    assert!(!has(&h, "StepScheduled", "compensate:charge"), "{h:?}");
    assert_eq!(h.iter().filter(|(t, _)| t == "StepFailureBranched").count(), 1, "{h:?}");
    stop.cancel();
}

async fn signal(
    c: &mut pb::workflow_service_client::WorkflowServiceClient<tonic::transport::Channel>,
    id: &str,
    name: &str,
    payload: Value,
) {
    c.signal_execution(pb::SignalExecutionRequest {
        execution_id: id.into(),
        name: name.into(),
        payload: Some(json_to_proto(payload)),
        ..Default::default()
    })
    .await
    .expect("signal");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_signal_against_a_deadline_is_one_race() {
    let (_dir, server, _rx, stop) = serve("language-race").await;
    let mut c = server.client().await;
    register_example(&mut c, "race.yaml").await;
    // The same race with a 1 s deadline, for the deadline to win within the test.
    let example = std::fs::read_to_string(example("race.yaml")).expect("example");
    let fast =
        example.replace("name: race\n", "name: race-fast\n").replace("sleep: 1h", "sleep: 1s");
    assert_ne!(fast, example);
    register(&mut c, &fast).await;

    // The signal comes first (the deadline is an hour away).
    start(&mut c, "race", "rc-1", json!({"request_id": "q-1"})).await.expect("start");
    history_until(&mut c, "rc-1", WAIT, |h| {
        let h = kinds(h);
        has(&h, "AwaitStarted", "decision.0.approval")
            && has(&h, "TimerStarted", "decision.1.deadline")
    })
    .await;
    signal(&mut c, "rc-1", "approve", json!({"by": "ops"})).await;
    let (status, output) = result(&mut c, "rc-1", WAIT).await;
    assert_eq!(status, pb::ExecutionStatus::Completed, "{output}");
    assert_eq!(
        output,
        json!({"request": "q-1", "winner": 0, "decision": {"approved": true, "by": "ops"}})
    );
    let h = kinds(&history(&mut c, "rc-1").await);
    let at = |kind: &str, unit: &str| position(&h, kind, unit);
    assert!(
        at("SignalDelivered", "decision.0.approval") < at("StepCancelled", "decision.1.deadline")
    );
    assert!(at("StepCancelled", "decision.1.deadline") < at("StepSucceeded", "decision"));
    assert!(!has(&h, "TimerFired", "decision.1.deadline"), "{h:?}");
    assert!(h.iter().all(|(_, s)| s != "decision.1.escalate"), "{h:?}");

    // No signal: the deadline fires, escalates and wins; the wait is cancelled.
    start(&mut c, "race-fast", "rc-2", json!({"request_id": "q-2"})).await.expect("start");
    let (status, output) = result(&mut c, "rc-2", WAIT).await;
    assert_eq!(status, pb::ExecutionStatus::Completed, "{output}");
    assert_eq!(
        output,
        json!({"request": "q-2", "winner": 1, "decision": {"approved": false, "escalated_to": "manager"}})
    );
    let h = kinds(&history(&mut c, "rc-2").await);
    let at = |kind: &str, unit: &str| position(&h, kind, unit);
    assert!(at("TimerFired", "decision.1.deadline") < at("StepSucceeded", "decision.1.escalate"));
    assert!(
        at("StepSucceeded", "decision.1.escalate") < at("StepCancelled", "decision.0.approval")
    );
    assert!(at("StepCancelled", "decision.0.approval") < at("StepSucceeded", "decision"));
    assert!(!has(&h, "SignalDelivered", "decision.0.approval"), "{h:?}");
    stop.cancel();
}

const RACE_TASK: &str = r#"
name: race-task
version: "1"
tasks: { slow.work: { version: "1" } }
steps:
  - id: r
    race:
      - steps: [ { id: work, task: slow.work, input: {}, timeout: 5m } ]
      - steps: [ { id: deadline, sleep: 1s } ]
output: "${{ steps.r.output }}"
"#;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_losing_branchs_running_task_gets_a_cancel() {
    let (_dir, server, mut cancels, stop) = serve("language-race-task").await;
    let mut c = server.client().await;
    register(&mut c, RACE_TASK).await;
    start(&mut c, "race-task", "rt-1", json!({})).await.expect("start");
    let (status, output) = result(&mut c, "rt-1", WAIT).await;
    assert_eq!(status, pb::ExecutionStatus::Completed, "{output}");
    assert_eq!(output, json!({"winner": 1, "output": null}));
    let h = kinds(&history(&mut c, "rt-1").await);
    let at = |kind: &str, unit: &str| position(&h, kind, unit);
    assert!(at("StepDispatched", "r.0.work") < at("StepCancelled", "r.0.work"));
    assert!(at("TimerFired", "r.1.deadline") < at("StepCancelled", "r.0.work"));
    assert!(at("StepCancelled", "r.0.work") < at("StepSucceeded", "r"));
    // The worker holding the task was told to stop.
    let cancelled = tokio::time::timeout(WAIT, cancels.recv()).await.expect("a cancel in time");
    assert_eq!(cancelled.as_deref(), Some("rt-1"));
    stop.cancel();
}
