//! The constructs of issue 29 nested in each other: a failure branch (`on_failure`) on a
//! step inside a `for_each` group's elements, and a `race` inside a `repeat`'s iterations.
//! Units compose (`orders[1].charge.on_failure.tell`, `poll[0].first.1.slow`), each element
//! and iteration reads its own `failure`, and every history replays.

mod common;

use common::*;
use orbit_engine::event::{Event, TaskError};
use orbit_engine::sim::{Sim, TaskOutcome};
use orbit_engine::Status;
use serde_json::json;

const EACH_CATCH: &str = r#"
name: each-catch
version: "1"
tasks: { t: null, tell: null }
steps:
  - id: orders
    for_each: "${{ input.orders }}"
    as: order
    group:
      steps:
        - id: charge
          task: t
          input: "${{ order }}"
          retry: { max_attempts: 1 }
          on_failure:
            steps:
              - id: tell
                task: tell
                input: "${{ order + ': ' + failure.code }}"
            output: "${{ 'declined ' + order }}"
      output: "${{ steps.charge.output }}"
output: "${{ steps.orders.output }}"
"#;

#[test]
fn a_failure_branch_runs_inside_the_element_whose_step_failed() {
    let mut sim = Sim::new();
    sim.register(def(EACH_CATCH));
    sim.on_task("t", |r| {
        if r.input == json!("b") {
            TaskOutcome::Fail(TaskError::fatal("CARD_DECLINED", "no"))
        } else {
            TaskOutcome::Complete(json!(format!("charged {}", r.input.as_str().unwrap_or(""))))
        }
    });
    sim.on_task("tell", |r| TaskOutcome::Complete(r.input.clone()));
    sim.start("each-catch", "x", json!({"orders": ["a", "b", "c"]})).unwrap();
    assert!(sim.run(1_000));
    let e = exec(&sim, "x");
    assert_eq!(e.state.status(), Status::Completed, "{:?}", e.state.error);
    assert_eq!(e.state.output, Some(json!(["charged a", "declined b", "charged c"])));
    let tells: Vec<_> =
        sim.requests().iter().filter(|r| r.task == "tell").map(|r| r.step.clone()).collect();
    assert_eq!(tells, ["orders[1].charge.on_failure.tell"]);
    let told = sim.requests().iter().find(|r| r.task == "tell").map(|r| r.input.clone());
    assert_eq!(told, Some(json!("b: CARD_DECLINED")));
    let branched = events_of(&e.history, "StepFailureBranched");
    assert!(
        matches!(branched.as_slice(), [Event::StepFailureBranched { step, .. }] if step == "orders[1].charge"),
        "{branched:?}"
    );
    assert_replays(&sim);
}

const REPEAT_RACE: &str = r#"
name: repeat-race
version: "1"
tasks: { fast: null, slow: null }
steps:
  - id: poll
    repeat:
      steps:
        - id: first
          race:
            - steps: [ { id: quick, task: fast, input: "${{ iteration }}" } ]
            - steps: [ { id: slow, task: slow, input: "${{ iteration }}" } ]
      until: "${{ output.winner == 0 && iteration >= 1 }}"
      max_iterations: 5
      output: "${{ steps.first.output }}"
output: "${{ steps.poll.output }}"
"#;

#[test]
fn a_race_inside_a_repeat_is_decided_again_in_each_iteration() {
    let mut sim = Sim::new();
    sim.register(def(REPEAT_RACE));
    // The fast branch answers at once; the slow one never does: it is cancelled each time.
    sim.on_task("fast", |r| TaskOutcome::Complete(json!({"n": r.input.clone()})));
    sim.on_task("slow", |_| TaskOutcome::Hang);
    sim.start("repeat-race", "x", json!({})).unwrap();
    assert!(sim.run(1_000));
    let e = exec(&sim, "x");
    assert_eq!(e.state.status(), Status::Completed, "{:?}", e.state.error);
    assert_eq!(e.state.output, Some(json!({"winner": 0, "output": {"n": 1}})));
    let cancelled: Vec<_> =
        events_of(&e.history, "StepCancelled").into_iter().filter_map(|ev| ev.step()).collect();
    assert_eq!(cancelled, ["poll[0].first.1.slow", "poll[1].first.1.slow"]);
    assert_replays(&sim);
}
