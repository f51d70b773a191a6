//! Loops (issue 29 items 1 and 2) through the real `orbit dev` binary with a real Rust
//! worker, on `examples/definitions/loops.yaml`: a `for_each` over a group runs the group
//! once per order (units `orders[i].charge`, `orders[i].ship`, each element recorded as
//! `orders[i]`, at most two elements at once), a failed element fails the step and the run,
//! whose compensation refunds every charge made; a `repeat` polls until its condition holds
//! (units `poll[n].check`, each iteration recorded as `poll[n]` with its output), its steps
//! seeing `iteration` and `previous`. A repeat without `max_iterations`, or above the
//! limit, and loops nested past the depth limit are refused at registration with a code
//! and a path.

mod common;

use common::kinds::*;
use common::*;
use orbit_api::v1 as pb;
use orbit_server_kit::payload::struct_to_json_object;
use orbit_worker::{TaskContext, TaskFailure, Worker};
use serde_json::{json, Value};
use std::time::Duration;
use tokio_util::sync::CancellationToken;

/// The bound on a run's result: far above the example's 1 s polls and 100 ms retries.
const WAIT: Duration = Duration::from_secs(90);

fn text(ctx: &TaskContext, key: &str) -> String {
    ctx.input()[key].as_str().unwrap_or_default().to_string()
}

/// Serves the example's tasks: `warehouse.ship` fails for good for the charge of order
/// `o-fail`; `jobs.status` says `done` from attempt 2 on, and echoes what it was given.
fn worker(address: &str, stop: &CancellationToken) {
    let w = Worker::builder(address.to_string())
        .worker_id("language-loops")
        .max_concurrency(8)
        .task("payments.charge", "1", |ctx: TaskContext| async move {
            Ok::<Value, TaskFailure>(json!({"charge_id": format!("ch-{}", text(&ctx, "order_id"))}))
        })
        .task("payments.refund", "1", |_ctx: TaskContext| async move { Ok(json!({})) })
        .task("warehouse.ship", "1", |ctx: TaskContext| async move {
            let charge = text(&ctx, "charge_id");
            if charge == "ch-o-fail" {
                return Err(TaskFailure::fatal("NO_CARRIER", "none today"));
            }
            Ok(json!({"tracking": format!("T-{charge}")}))
        })
        .task("jobs.status", "1", |ctx: TaskContext| async move {
            let attempt = ctx.input()["attempt"].as_u64().unwrap_or_default();
            let state = if attempt >= 2 { "done" } else { "running" };
            Ok(json!({"state": state, "seen": ctx.input().clone()}))
        })
        .build()
        .expect("worker");
    let stop = stop.clone();
    tokio::spawn(async move { w.run(stop).await });
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_for_each_group_and_a_repeat_run_through_the_server() {
    let dir = TempDir::new("language-loops");
    let server = Server::start(&dir.0.join("orbit.db"), &[]).await;
    let mut c = server.client().await;
    register_example(&mut c, "loops.yaml").await;
    let stop = CancellationToken::new();
    worker(&server.address(), &stop);

    let orders = json!([{"id": "o-1"}, {"id": "o-2"}, {"id": "o-3"}]);
    start(&mut c, "loops", "loop-1", json!({"orders": orders, "job": "j-1"})).await.expect("start");
    let (status, output) = result(&mut c, "loop-1", WAIT).await;
    assert_eq!(status, pb::ExecutionStatus::Completed, "{output}");
    let shipped: Vec<Value> = (1..=3)
        .map(|i| json!({"order": format!("o-{i}"), "tracking": format!("T-ch-o-{i}")}))
        .collect();
    assert_eq!(output, json!({"shipped": shipped, "polls": 3, "job": "done"}));

    let full = history(&mut c, "loop-1").await;
    let h = kinds(&full);
    let at = |kind: &str, unit: &str| position(&h, kind, unit);
    // Each element runs its own charge then ship, and is recorded once resolved.
    for i in 0..3 {
        let (charge, ship, element) =
            (format!("orders[{i}].charge"), format!("orders[{i}].ship"), format!("orders[{i}]"));
        assert!(at("StepSucceeded", &charge) < at("StepScheduled", &ship), "{h:?}");
        assert!(at("StepSucceeded", &ship) < at("StepSucceeded", &element), "{h:?}");
        assert!(at("StepSucceeded", &element) < at("StepSucceeded", "orders"), "{h:?}");
    }
    // max_concurrency 2: element 2 starts only after element 0 or 1 resolved.
    let first_done = at("StepSucceeded", "orders[0]").min(at("StepSucceeded", "orders[1]"));
    assert!(first_done < at("StepScheduled", "orders[2].charge"), "{h:?}");
    // The repeat runs after the loop, three iterations in order, each recorded with its
    // output before the next starts; the third holds `until`.
    assert!(at("StepSucceeded", "orders") < at("StepScheduled", "poll[0].check"));
    for n in 0..3 {
        let iteration = format!("poll[{n}]");
        assert!(at("StepSucceeded", &format!("poll[{n}].check")) < at("StepSucceeded", &iteration));
        if n < 2 {
            assert!(
                at("StepSucceeded", &iteration)
                    < at("StepScheduled", &format!("poll[{}].check", n + 1))
            );
            assert!(
                at("TimerStarted", &format!("poll[{n}].wait")) < at("StepSucceeded", &iteration)
            );
        }
    }
    assert_eq!(units(&h, "StepSkipped"), ["poll[2].wait"]);
    assert!(at("StepSucceeded", "poll[2]") < at("StepSucceeded", "poll"));
    assert!(h.iter().all(|(_, u)| u != "poll[3].check" && u != "poll[3]"), "{h:?}");
    // The recorded iteration output is what `previous` gave the next iteration's check.
    let output_of = |unit: &str| {
        let e = full
            .iter()
            .find(|e| e.event_type == "StepSucceeded" && e.step == unit)
            .unwrap_or_else(|| panic!("no StepSucceeded({unit})"));
        let payload =
            struct_to_json_object(e.payload.clone().unwrap_or_default()).expect("payload");
        payload.get("output").cloned().unwrap_or(Value::Null)
    };
    assert_eq!(output_of("poll[1]"), json!({"state": "running", "polls": 2}));
    assert_eq!(output_of("poll[2].check")["seen"]["last"], output_of("poll[1]"));
    assert_eq!(output_of("poll[0].check")["seen"]["last"], Value::Null);

    // A failed element fails the loop and the run; every charge made is refunded.
    let orders = json!([{"id": "o-1"}, {"id": "o-fail"}]);
    start(&mut c, "loops", "loop-2", json!({"orders": orders, "job": "j-2"})).await.expect("start");
    let (status, error) = result(&mut c, "loop-2", WAIT).await;
    assert_eq!(status, pb::ExecutionStatus::Failed, "{error}");
    assert!(error.as_str().is_some_and(|e| e.starts_with("NO_CARRIER")), "{error}");
    let h = kinds(&history(&mut c, "loop-2").await);
    let at = |kind: &str, unit: &str| position(&h, kind, unit);
    assert!(at("StepFailed", "orders[1].ship") < at("StepFailed", "orders[1]"));
    assert!(at("StepFailed", "orders[1]") < at("StepFailed", "orders"));
    assert!(at("StepFailed", "orders") < at("CompensationStarted", ""));
    let mut refunded = units(&h, "StepSucceeded");
    refunded.retain(|u| u.starts_with("compensate:"));
    refunded.sort();
    assert_eq!(refunded, ["compensate:orders[0].charge", "compensate:orders[1].charge"]);
    assert!(h.iter().all(|(_, u)| !u.starts_with("poll")), "{h:?}");
    stop.cancel();
}

/// The violations of a definition the server refuses: (code, path) pairs.
async fn refused(
    c: &mut orbit_api::v1::workflow_service_client::WorkflowServiceClient<
        tonic::transport::Channel,
    >,
    doc: &str,
) -> Vec<(String, String, String)> {
    let request = pb::RegisterWorkflowRequest { document: doc.into(), format: 0 };
    let status = c.register_workflow(request).await.expect_err("the definition must be refused");
    assert_eq!(code(&status), "INVALID_DEFINITION", "{status:?}");
    let e = orbit_server_kit::OrbitError::from_status(&status).expect("an Orbit error");
    e.details.into_iter().map(|v| (v.code, v.path, v.message)).collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unbounded_or_too_long_or_too_deep_loop_is_refused_at_registration() {
    let dir = TempDir::new("language-loops-refused");
    let server = Server::start(&dir.0.join("orbit.db"), &[]).await;
    let mut c = server.client().await;
    let doc = |repeat: &str| {
        format!(
            "name: bad\nversion: '1'\ntasks: {{ t: null }}\nsteps:\n  - id: r\n    repeat: {repeat}\n"
        )
    };
    let no_max = doc("{ steps: [ { id: a, task: t } ], until: '${{ true }}' }");
    let v = refused(&mut c, &no_max).await;
    assert!(
        v.iter()
            .any(|(code, path, _)| code == "MISSING_FIELD"
                && path == "steps[0].repeat.max_iterations"),
        "{v:?}"
    );
    let too_many =
        doc("{ steps: [ { id: a, task: t } ], until: '${{ true }}', max_iterations: 10001 }");
    let v = refused(&mut c, &too_many).await;
    assert!(
        v.iter().any(|(code, path, message)| code == "DOCUMENT_LIMIT"
            && path == "steps[0].repeat.max_iterations"
            && message.contains("10000")),
        "{v:?}"
    );
    // Nine nested loops: one past the nesting limit of 8.
    let mut inner = "{ id: a, task: t }".to_string();
    for _ in 0..9 {
        inner = format!("{{ id: n, for_each: [1], group: {{ steps: [ {inner} ] }} }}");
    }
    let deep = format!("name: deep\nversion: '1'\ntasks: {{ t: null }}\nsteps:\n  - {inner}\n");
    let v = refused(&mut c, &deep).await;
    assert!(
        v.iter().any(|(code, path, _)| code == "DOCUMENT_LIMIT" && path.ends_with(".group")),
        "{v:?}"
    );
    // The server still registers a good loop afterwards.
    let ok = doc("{ steps: [ { id: a, task: t } ], until: '${{ true }}', max_iterations: 3 }");
    register(&mut c, &ok).await;
}
