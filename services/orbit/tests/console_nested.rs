//! The console draws issue 29's nesting (services/console/assets/tree.js): a real `orbit
//! dev` runs a workflow with a `for_each` group over three orders, a `repeat` polling until
//! its third iteration and a `race` of a sleep against a task, with an in-test Rust
//! worker; then headless Chromium (`tests/console/nested.mjs`) checks the sub-steps drawn
//! under their steps, clicks element 2 and iteration 2 (the URL keeps them as
//! `?unit=orders[2]&unit=poll[2]`), checks those units' statuses, attempts and outputs,
//! the race's winner and its cancelled loser, and reloads to find the selection kept;
//! navigates a repeat nested in a `for_each` group at both levels
//! (`?unit=each[1].again[1]`); then opens a 1,000-element loop, drawn as one element and a strip of 40, and pages to the last.

// Tests read their environment (CHROMIUM) and the wall clock (deadlines of real processes).
#![allow(clippy::disallowed_methods)]

mod common;

use common::console::run_browser_script;
use orbit_api::v1 as pb;
use orbit_worker::{TaskContext, TaskFailure, Worker};
use serde_json::{json, Value};
use std::time::Duration;
use tokio_util::sync::CancellationToken;

const WAIT: Duration = Duration::from_secs(60);
const EXECUTION: &str = "nested-1";
const MANY_EXECUTION: &str = "many-1";
/// Elements of the big loop: the page draws at most one element's units and a strip of 40.
const MANY: usize = 1_000;

/// A `for_each` group of one `compute` step over [`MANY`] numbers (no worker needed).
const MANY_DEF: &str = r#"
name: console-many
version: "1"
steps:
  - id: many
    for_each: ${{ input.items }}
    group:
      steps:
        - id: double
          compute: ${{ item * 2.0 }}
"#;

/// Each order charged then shipped (two at a time), a status polled until `done` (at
/// iteration 2), then a race a quick task wins against an hour's sleep; beside them, a
/// repeat of two iterations in each element of a `for_each` group (loops nested), a group,
/// a switch whose default branch runs, and a charge whose expression fails (the input has no
/// card) caught by its `on_failure`.
const NESTED: &str = r#"
name: console-nested
version: "1"
tasks:
  nest.charge: { version: "1" }
  nest.ship: { version: "1" }
  nest.status: { version: "1" }
  nest.quick: { version: "1" }
steps:
  - id: orders
    for_each: ${{ input.orders }}
    as: order
    max_concurrency: 2
    group:
      steps:
        - id: charge
          task: nest.charge
          input: { order_id: "${{ order }}" }
        - id: ship
          needs: [charge]
          task: nest.ship
          input: { charge_id: "${{ steps.charge.output.charge_id }}" }
      output: { order: "${{ order }}", tracking: "${{ steps.ship.output.tracking }}" }
  - id: poll
    needs: [orders]
    repeat:
      steps:
        - id: check
          task: nest.status
          input: { iteration: "${{ iteration }}" }
      until: ${{ steps.check.output.state == 'done' }}
      max_iterations: 5
  - id: decision
    needs: [poll]
    race:
      - steps:
          - { id: deadline, sleep: 1h }
      - steps:
          - { id: quick, task: nest.quick }
  - id: each
    for_each: ${{ input.orders }}
    group:
      steps:
        - id: again
          repeat:
            steps:
              - id: step
                compute: ${{ iteration }}
            until: ${{ iteration >= 1.0 }}
            max_iterations: 3
  - id: ship
    group:
      steps:
        - { id: pack, compute: packed }
        - { id: label, needs: [pack], compute: labelled }
  - id: route
    switch:
      - when: false
        steps:
          - { id: big, compute: big }
      - default:
          - { id: small, compute: small }
  - id: charge
    compute: ${{ input.card.number }}
    on_failure:
      steps:
        - { id: tell, compute: told }
output:
  shipped: ${{ steps.orders.output }}
  winner: ${{ steps.decision.output.winner }}
"#;

/// Serves the tasks: charge `ch-<order>`, ship `T-<charge>`, the status `done` from
/// iteration 2 on (`running` before), quick `{}`.
fn worker(address: &str, stop: &CancellationToken) {
    let text = |ctx: &TaskContext, field: &str| {
        ctx.input()[field].as_str().unwrap_or_default().to_string()
    };
    let w = Worker::builder(address.to_string())
        .worker_id("console-nested-worker")
        .max_concurrency(4)
        .task("nest.charge", "1", move |ctx: TaskContext| {
            let id = text(&ctx, "order_id");
            async move { Ok::<Value, TaskFailure>(json!({"charge_id": format!("ch-{id}")})) }
        })
        .task("nest.ship", "1", move |ctx: TaskContext| {
            let id = text(&ctx, "charge_id");
            async move { Ok::<Value, TaskFailure>(json!({"tracking": format!("T-{id}")})) }
        })
        .task("nest.status", "1", |ctx: TaskContext| {
            let done = ctx.input()["iteration"].as_f64().unwrap_or_default() >= 2.0;
            async move {
                Ok::<Value, TaskFailure>(json!({"state": if done { "done" } else { "running" }}))
            }
        })
        .task(
            "nest.quick",
            "1",
            |_ctx: TaskContext| async move { Ok::<Value, TaskFailure>(json!({})) },
        )
        .build()
        .expect("worker");
    let stop = stop.clone();
    tokio::spawn(async move { w.run(stop).await });
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_execution_page_draws_loops_and_branches_nested() {
    let dir = common::TempDir::new("console-nested");
    let admin = format!("127.0.0.1:{}", common::free_port());
    let server =
        common::Server::start(&dir.0.join("orbit.db"), &["--admin-listen", admin.as_str()]).await;
    let stop = CancellationToken::new();
    worker(&server.address(), &stop);
    let mut c = server.client().await;
    common::register(&mut c, NESTED).await;
    let input = json!({"orders": ["o-0", "o-1", "o-2"]});
    common::start(&mut c, "console-nested", EXECUTION, input).await.expect("start");
    let (status, output) = common::result(&mut c, EXECUTION, WAIT).await;
    assert_eq!(status, pb::ExecutionStatus::Completed, "{output:?}");
    // What the page is checked against: three elements, three iterations, branch 1 won.
    let events = common::history(&mut c, EXECUTION).await;
    let has =
        |kind: &str, step: &str| events.iter().any(|e| e.event_type == kind && e.step == step);
    let done = ["orders[2]", "orders[2].ship", "poll[2]", "poll[2].check", "decision.1.quick"];
    let more = ["each[1].again[1].step", "ship.label", "route.1.small", "charge.on_failure.tell"];
    for step in done.into_iter().chain(more) {
        assert!(has("StepSucceeded", step), "StepSucceeded {step}");
    }
    assert!(!has("StepSucceeded", "poll[3]"), "the repeat stopped at iteration 2");
    assert!(has("StepCancelled", "decision.0.deadline"), "the race's loser was cancelled");
    common::register(&mut c, MANY_DEF).await;
    let items: Vec<f64> = (0..MANY).map(|i| i as f64).collect();
    common::start(&mut c, "console-many", MANY_EXECUTION, json!({ "items": items }))
        .await
        .expect("start");
    let (status, output) = common::result(&mut c, MANY_EXECUTION, WAIT).await;
    assert_eq!(status, pb::ExecutionStatus::Completed, "{output:?}");
    let (at, shots) = (admin.clone(), dir.0.join("shots"));
    let shots = std::env::var("ORBIT_CONSOLE_SHOTS").map_or(shots, Into::into);
    tokio::task::spawn_blocking(move || {
        run_browser_script("nested.mjs", &at, &shots, &[EXECUTION, MANY_EXECUTION]);
    })
    .await
    .expect("browser run");
    stop.cancel();
}
