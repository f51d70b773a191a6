//! Groups and switches (issue 29) through the real `orbit dev` binary with a real Rust
//! worker: the group's steps run as units `ship.<id>` with their own dependencies, the
//! group resolves after them with its output, and a step failing for good fails the group
//! and the run, whose compensation undoes the group's succeeded steps; a switch runs
//! exactly one branch (units `route.<branch>.<id>`), chosen by its conditions.

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

fn text(ctx: &TaskContext, key: &str) -> String {
    ctx.input()[key].as_str().unwrap_or_default().to_string()
}

/// Serves the examples' tasks; `carrier.send` fails for good for order `o-fail`.
fn worker(address: &str, stop: &CancellationToken) {
    let w =
        Worker::builder(address.to_string())
            .worker_id("language-groups")
            .max_concurrency(8)
            .task("warehouse.pack", "1", |ctx: TaskContext| async move {
                Ok::<Value, TaskFailure>(json!({"box": format!("box-{}", text(&ctx, "sku"))}))
            })
            .task("warehouse.unpack", "1", |_ctx: TaskContext| async move { Ok(json!({})) })
            .task("warehouse.label", "1", |ctx: TaskContext| async move {
                Ok(json!({"label": format!("L-{}", text(&ctx, "order_id"))}))
            })
            .task("refunds.review", "1", |_ctx: TaskContext| async move {
                Ok(json!({"reviewer": "ops"}))
            })
            .task("payments.refund", "1", |_ctx: TaskContext| async move { Ok(json!({})) })
            .task("carrier.send", "1", |ctx: TaskContext| async move {
                let label = text(&ctx, "label");
                if label == "L-o-fail" {
                    return Err(TaskFailure::fatal("NO_CARRIER", "none today"));
                }
                Ok(json!({"tracking": format!("T-{label}")}))
            })
            .build()
            .expect("worker");
    let stop = stop.clone();
    tokio::spawn(async move { w.run(stop).await });
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_group_runs_as_one_step_and_its_failure_fails_the_run() {
    let dir = TempDir::new("language-groups");
    let server = Server::start(&dir.0.join("orbit.db"), &[]).await;
    let mut c = server.client().await;
    register_example(&mut c, "groups.yaml").await;
    let stop = CancellationToken::new();
    worker(&server.address(), &stop);

    start(&mut c, "groups", "grp-1", json!({"order_id": "o-1", "sku": "a"})).await.expect("start");
    let (status, output) = result(&mut c, "grp-1", WAIT).await;
    assert_eq!(status, pb::ExecutionStatus::Completed, "{output}");
    assert_eq!(output, json!({"order": "o-1", "tracking": "T-L-o-1", "box": "box-a"}));
    let h = kinds(&history(&mut c, "grp-1").await);
    // `check` first (the group reads it), the group's steps by their own `needs`, the
    // group after its steps, `receipt` after the group.
    let at = |kind: &str, unit: &str| position(&h, kind, unit);
    assert!(at("StepSucceeded", "check") < at("StepScheduled", "ship.pack"));
    assert!(at("StepScheduled", "ship.label") < at("StepSucceeded", "ship.pack"), "{h:?}");
    assert!(at("StepSucceeded", "ship.pack") < at("StepScheduled", "ship.send"));
    assert!(at("StepSucceeded", "ship.label") < at("StepScheduled", "ship.send"));
    assert!(at("StepSucceeded", "ship.send") < at("StepSucceeded", "ship"));
    assert!(at("StepSucceeded", "ship") < at("StepSucceeded", "receipt"));
    assert!(h.iter().all(|(_, s)| !s.starts_with("compensate:")), "{h:?}");

    start(&mut c, "groups", "grp-2", json!({"order_id": "o-fail", "sku": "b"}))
        .await
        .expect("start");
    let (status, error) = result(&mut c, "grp-2", WAIT).await;
    assert_eq!(status, pb::ExecutionStatus::Failed, "{error}");
    assert!(error.as_str().is_some_and(|e| e.starts_with("NO_CARRIER")), "{error}");
    let h = kinds(&history(&mut c, "grp-2").await);
    let at = |kind: &str, unit: &str| position(&h, kind, unit);
    // The step fails, then its group, then the run winds down and unpacks.
    assert!(at("StepFailed", "ship.send") < at("StepFailed", "ship"));
    assert!(at("StepFailed", "ship") < at("CompensationStarted", ""));
    assert!(at("CompensationStarted", "") < at("StepSucceeded", "compensate:ship.pack"));
    assert!(h.iter().all(|(t, s)| !(t == "StepScheduled" && s == "receipt")), "{h:?}");
    stop.cancel();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_switch_runs_exactly_one_branch() {
    let dir = TempDir::new("language-switch");
    let server = Server::start(&dir.0.join("orbit.db"), &[]).await;
    let mut c = server.client().await;
    register_example(&mut c, "switch.yaml").await;
    let stop = CancellationToken::new();
    worker(&server.address(), &stop);
    for (id, amount, branch, by, tasks) in [
        ("sw-500", 500, 0, "ops", vec!["route.0.review", "route.0.refund"]),
        ("sw-50", 50, 1, "auto", vec!["route.1.refund"]),
        ("sw-0", 0, 2, "nobody", vec![]),
    ] {
        start(&mut c, "switch", id, json!({"order_id": "o-1", "amount": amount}))
            .await
            .expect("start");
        let (status, output) = result(&mut c, id, WAIT).await;
        assert_eq!(status, pb::ExecutionStatus::Completed, "{id}: {output}");
        assert_eq!(output, json!({"order": "o-1", "branch": branch, "reviewed_by": by}), "{id}");
        let h = kinds(&history(&mut c, id).await);
        let scheduled: Vec<&str> =
            h.iter().filter(|(t, _)| t == "StepScheduled").map(|(_, s)| s.as_str()).collect();
        assert_eq!(scheduled, tasks, "{id}: {h:?}");
        // Only the chosen branch has units; the switch resolves after them.
        let other =
            |u: &str| u.starts_with("route.") && !u.starts_with(&format!("route.{branch}."));
        assert!(h.iter().all(|(_, u)| !other(u)), "{id}: {h:?}");
        assert!(position(&h, "StepSucceeded", "route") < position(&h, "StepSucceeded", "receipt"));
    }
    stop.cancel();
}
