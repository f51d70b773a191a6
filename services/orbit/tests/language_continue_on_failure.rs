//! `continue_on_failure` (issue 29) through the real `orbit dev` binary with a real Rust
//! worker: a caught failure is recorded as `StepFailureCaught` (after the step's retries),
//! its output is `{failed: true, error: {code, message}}`, the workflow goes on, each
//! `for_each` element is caught on its own, and a caught step is never compensated when the
//! workflow later fails.

mod common;

use common::kinds::*;
use common::*;
use orbit_api::v1 as pb;
use orbit_worker::{TaskContext, TaskFailure, Worker};
use serde_json::{json, Value};
use std::time::Duration;
use tokio_util::sync::CancellationToken;

/// The bound on a run's result: far above the example's 100 ms retry interval.
const WAIT: Duration = Duration::from_secs(60);

/// Serves the example's tasks and `undo`/`boom` of [`LATER_FAILURE`].
fn worker(address: &str, stop: &CancellationToken) {
    let w = Worker::builder(address.to_string())
        .worker_id("language-cof")
        .max_concurrency(8)
        .task("inventory.reserve", "1", |ctx: TaskContext| async move {
            let sku = ctx.input()["sku"].as_str().unwrap_or_default().to_string();
            Ok::<Value, TaskFailure>(json!({"reservation": format!("r-{sku}")}))
        })
        .task("inventory.release", "1", |_ctx: TaskContext| async move { Ok(json!({})) })
        .task("notify.email", "1", |_ctx: TaskContext| async move {
            Err(TaskFailure::retryable("SMTP_DOWN", "mail is down"))
        })
        .task("notify.sms", "1", |ctx: TaskContext| async move {
            let phone = ctx.input()["phone"].clone();
            if phone == json!("+0") {
                return Err(TaskFailure::fatal("BAD_NUMBER", "no such number"));
            }
            Ok(json!({"sent": phone}))
        })
        .task("boom", "1", |_ctx: TaskContext| async move {
            Err(TaskFailure::fatal("BOOM", "it broke"))
        })
        .build()
        .expect("worker");
    let stop = stop.clone();
    tokio::spawn(async move { w.run(stop).await });
}

/// A caught step, then a step whose failure is not caught: the run fails and compensates
/// `reserve` only.
const LATER_FAILURE: &str = r#"
name: cof-later-failure
version: "1"
tasks: { inventory.reserve: null, inventory.release: null, boom: null }
steps:
  - id: reserve
    task: inventory.reserve
    input: { sku: b }
    compensate: { task: inventory.release }
  - id: caught
    needs: [reserve]
    task: boom
    retry: { max_attempts: 1 }
    continue_on_failure: true
    compensate: { task: inventory.release }
  - id: fatal
    needs: [caught]
    task: boom
    retry: { max_attempts: 1 }
"#;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn caught_failures_are_recorded_and_the_workflow_goes_on() {
    let dir = TempDir::new("language-cof");
    let server = Server::start(&dir.0.join("orbit.db"), &[]).await;
    let mut c = server.client().await;
    register_example(&mut c, "continue-on-failure.yaml").await;
    register(&mut c, LATER_FAILURE).await;
    let stop = CancellationToken::new();
    worker(&server.address(), &stop);

    // The example, as its header promises.
    let input = json!({"sku": "a", "phones": ["+1", "+0", "+2"]});
    start(&mut c, "continue-on-failure", "cof-1", input).await.expect("start");
    let (status, output) = result(&mut c, "cof-1", WAIT).await;
    assert_eq!(status, pb::ExecutionStatus::Completed, "{output}");
    assert_eq!(
        output,
        json!({"reservation": "r-a", "email": "SMTP_DOWN", "sms_sent": 2, "sms_failed": 1})
    );
    let full = history(&mut c, "cof-1").await;
    let h = kinds(&full);
    // `email` was retried once under its policy, then caught.
    assert_eq!(count(&h, "StepAttemptFailed", "email"), 2, "{h:?}");
    assert!(position(&h, "RetryScheduled", "email") < position(&h, "StepFailureCaught", "email"));
    assert_eq!(count(&h, "StepFailureCaught", "sms[1]"), 1, "{h:?}");
    assert_eq!(count(&h, "StepSucceeded", "sms"), 1, "the fan-out succeeded: {h:?}");
    assert!(h.iter().all(|(t, _)| t != "StepFailed" && t != "CompensationStarted"), "{h:?}");
    assert!(position(&h, "StepFailureCaught", "email") < position(&h, "StepSucceeded", "summary"));
    // The caught event carries the failure as the step's output.
    let caught = full
        .iter()
        .find(|e| e.event_type == "StepFailureCaught" && e.step == "email")
        .expect("caught");
    let payload = event_payload(caught);
    assert_eq!(
        payload["output"],
        json!({"failed": true, "error": {"code": "SMTP_DOWN", "message": "mail is down"}})
    );
    assert_eq!(payload["error"]["code"], "SMTP_DOWN");

    // A later failure that is not caught: compensation skips the caught step.
    start(&mut c, "cof-later-failure", "cof-2", json!({})).await.expect("start");
    let (status, error) = result(&mut c, "cof-2", WAIT).await;
    assert_eq!(status, pb::ExecutionStatus::Failed, "{error}");
    let h = kinds(&history(&mut c, "cof-2").await);
    assert_eq!(count(&h, "StepFailureCaught", "caught"), 1, "{h:?}");
    assert_eq!(count(&h, "StepFailed", "fatal"), 1, "{h:?}");
    let compensated: Vec<&str> = h
        .iter()
        .filter(|(t, s)| t == "StepScheduled" && s.starts_with("compensate:"))
        .map(|(_, s)| s.as_str())
        .collect();
    assert_eq!(compensated, ["compensate:reserve"], "{h:?}");
    stop.cancel();
}
