//! Loops (issue 29 items 1 and 2) in the decider and the simulator: a `for_each` over a
//! group (units `g[i].sub`, the element and `index` in scope, `max_concurrency`, failure
//! and `continue_on_failure` per element, compensation inside elements) and `repeat`
//! (units `r[n].sub`, `iteration` and `previous`, `until`, `max_iterations`), each replayed.

mod common;

use common::*;
use orbit_engine::event::{Event, TaskError};
use orbit_engine::sim::{Sim, TaskOutcome};
use orbit_engine::Status;
use serde_json::{json, Value};

fn sim_with(yaml: &str) -> Sim {
    let mut sim = Sim::new();
    sim.register(def(yaml));
    sim
}

fn steps_of<'a>(history: &'a [orbit_engine::HistoryEvent], name: &str) -> Vec<&'a str> {
    events_of(history, name).into_iter().filter_map(|ev| ev.step()).collect()
}

const EACH: &str = r#"
name: each
version: "1"
tasks: { t: null, undo: null }
steps:
  - id: orders
    for_each: "${{ input.orders }}"
    as: order
    max_concurrency: 2
    group:
      steps:
        - id: charge
          task: t
          input: "${{ 'charge ' + order + ' #' + string(index) }}"
          compensate: { task: undo, input: "${{ 'refund ' + order }}" }
        - id: ship
          needs: [charge]
          task: t
          input: "${{ steps.charge.output + ' shipped' }}"
          retry: { max_attempts: 1 }
      output: "${{ {'order': order, 'ship': steps.ship.output} }}"
  - id: after
    compute: "${{ size(steps.orders.output) }}"
output: "${{ {'orders': steps.orders.output, 'after': steps.after.output} }}"
"#;

#[test]
fn a_for_each_group_runs_its_list_once_per_element_with_max_concurrency() {
    let mut sim = sim_with(EACH);
    sim.on_task("t", |r| TaskOutcome::Complete(r.input.clone()));
    sim.start("each", "x", json!({"orders": ["a", "b", "c"]})).unwrap();
    assert!(sim.run(1_000));
    let e = exec(&sim, "x");
    assert_eq!(e.state.status(), Status::Completed, "{:?}", e.state.error);
    let outputs = json!([
        {"order": "a", "ship": "charge a #0 shipped"},
        {"order": "b", "ship": "charge b #1 shipped"},
        {"order": "c", "ship": "charge c #2 shipped"},
    ]);
    assert_eq!(e.state.output, Some(json!({"orders": outputs, "after": 3})));
    // Elements 0 and 1 start together; 2 only once one of them resolved.
    let order: Vec<&str> = sim.requests().iter().map(|r| r.step.as_str()).collect();
    assert_eq!(order[..2], ["orders[0].charge", "orders[1].charge"]);
    assert_eq!(order.len(), 6);
    let at = |f: &dyn Fn(&Event) -> bool| e.history.iter().position(|h| f(&h.event)).unwrap();
    let first_done = at(
        &|ev| matches!(ev, Event::StepSucceeded { step, .. } if step == "orders[0]" || step == "orders[1]"),
    );
    let third =
        at(&|ev| matches!(ev, Event::StepScheduled { step, .. } if step == "orders[2].charge"));
    assert!(first_done < third, "element 2 started before a slot was free");
    // Every element is recorded with its output, then the step with the list.
    let succeeded = steps_of(&e.history, "StepSucceeded");
    for unit in ["orders[0]", "orders[1]", "orders[2]", "orders"] {
        assert!(succeeded.contains(&unit), "{unit}: {succeeded:?}");
    }
    assert_eq!(events_of(&e.history, "StepFanOut").len(), 1);
    assert_replays(&sim);
}

#[test]
fn an_empty_list_gives_an_empty_output() {
    let mut sim = sim_with(EACH);
    sim.start("each", "x", json!({"orders": []})).unwrap();
    assert!(sim.run(1_000));
    let e = exec(&sim, "x");
    assert_eq!(e.state.output, Some(json!({"orders": [], "after": 0})));
    assert!(sim.requests().is_empty());
}

#[test]
fn a_failed_element_fails_the_step_and_compensation_runs_inside_elements() {
    let mut sim = sim_with(EACH);
    sim.on_task("t", |r| {
        if r.input == json!("charge b #1 shipped") {
            TaskOutcome::Fail(TaskError::fatal("NO_STOCK", "none left"))
        } else {
            TaskOutcome::Complete(r.input.clone())
        }
    });
    sim.on_task("undo", |r| TaskOutcome::Complete(r.input.clone()));
    sim.start("each", "x", json!({"orders": ["a", "b", "c"]})).unwrap();
    assert!(sim.run(1_000));
    let e = exec(&sim, "x");
    assert_eq!(e.state.status(), Status::Failed);
    let error = e.state.error.clone().unwrap();
    assert_eq!(error.code, "NO_STOCK");
    assert!(
        error.message.contains("element 1") && error.message.contains("orders[1].ship"),
        "{}",
        error.message
    );
    let failed = steps_of(&e.history, "StepFailed");
    assert_eq!(failed[..3], ["orders[1].ship", "orders[1]", "orders"]);
    // Each charged element is refunded with its own element.
    let mut undo: Vec<(String, Value)> = sim
        .requests()
        .iter()
        .filter(|r| r.task == "undo")
        .map(|r| (r.step.clone(), r.input.clone()))
        .collect();
    undo.sort_by(|a, b| a.0.cmp(&b.0));
    assert!(undo.contains(&("compensate:orders[1].charge".into(), json!("refund b"))), "{undo:?}");
    assert!(undo.contains(&("compensate:orders[0].charge".into(), json!("refund a"))), "{undo:?}");
    assert_replays(&sim);
}

#[test]
fn continue_on_failure_catches_each_element_on_its_own() {
    let yaml = EACH.replace(
        "    max_concurrency: 2\n",
        "    max_concurrency: 2\n    continue_on_failure: true\n",
    );
    let mut sim = sim_with(&yaml);
    sim.on_task("t", |r| {
        if r.input == json!("charge b #1 shipped") {
            TaskOutcome::Fail(TaskError::fatal("NO_STOCK", "none left"))
        } else {
            TaskOutcome::Complete(r.input.clone())
        }
    });
    sim.start("each", "x", json!({"orders": ["a", "b", "c"]})).unwrap();
    assert!(sim.run(1_000));
    let e = exec(&sim, "x");
    assert_eq!(e.state.status(), Status::Completed, "{:?}", e.state.error);
    let out = e.state.output.clone().unwrap();
    assert_eq!(out["orders"][1]["failed"], json!(true));
    assert_eq!(out["orders"][1]["error"]["code"], json!("NO_STOCK"));
    assert_eq!(out["orders"][2]["ship"], json!("charge c #2 shipped"));
    assert_eq!(steps_of(&e.history, "StepFailureCaught"), ["orders[1]"]);
    assert_replays(&sim);
}

const POLL: &str = r#"
name: poll
version: "1"
tasks: { check: null }
steps:
  - id: start
    compute: 10
  - id: poll
    repeat:
      steps:
        - id: check
          task: check
          input: "${{ {'n': iteration, 'previous': previous, 'base': steps.start.output} }}"
        - id: note
          needs: [check]
          compute: "${{ steps.check.output.left }}"
      until: "${{ steps.check.output.left == 0 || output.left < 0 }}"
      max_iterations: 5
      output: "${{ {'left': steps.note.output, 'iteration': iteration} }}"
  - id: after
    compute: "${{ steps.poll.output.iteration }}"
output: "${{ steps.poll.output }}"
"#;

#[test]
fn a_repeat_runs_until_its_condition_holds_and_sees_iteration_and_previous() {
    let mut sim = sim_with(POLL);
    // Three checks: 2 left, 1 left, 0 left.
    sim.on_task("check", |r| {
        let n = r.input["n"].as_i64().unwrap();
        TaskOutcome::Complete(json!({"left": 2 - n, "seen": r.input.clone()}))
    });
    sim.start("poll", "x", json!({})).unwrap();
    assert!(sim.run(1_000));
    let e = exec(&sim, "x");
    assert_eq!(e.state.status(), Status::Completed, "{:?}", e.state.error);
    assert_eq!(e.state.output, Some(json!({"left": 0, "iteration": 2})));
    let inputs: Vec<(&str, &Value)> =
        sim.requests().iter().map(|r| (r.step.as_str(), &r.input)).collect();
    assert_eq!(inputs.len(), 3);
    assert_eq!(inputs[0], ("poll[0].check", &json!({"n": 0, "previous": null, "base": 10})));
    assert_eq!(
        inputs[2],
        ("poll[2].check", &json!({"n": 2, "previous": {"left": 1, "iteration": 1}, "base": 10}))
    );
    let succeeded = steps_of(&e.history, "StepSucceeded");
    let iterations: Vec<&str> =
        succeeded.iter().copied().filter(|s| s.starts_with("poll[") && s.ends_with(']')).collect();
    assert_eq!(iterations, ["poll[0]", "poll[1]", "poll[2]"]);
    assert!(succeeded.ends_with(&["poll[2]", "poll", "after"]), "{succeeded:?}");
    assert_eq!(e.state.unit("poll[1]").unwrap().output, Some(json!({"left": 1, "iteration": 1})));
    assert_replays(&sim);
}

#[test]
fn a_repeat_that_never_holds_fails_at_max_iterations_unless_caught() {
    let mut sim = sim_with(POLL);
    sim.on_task("check", |_| TaskOutcome::Complete(json!({"left": 7})));
    sim.start("poll", "x", json!({})).unwrap();
    assert!(sim.run(1_000));
    let e = exec(&sim, "x");
    assert_eq!(e.state.status(), Status::Failed);
    let error = e.state.error.clone().unwrap();
    assert_eq!(error.code, "LIMIT_EXCEEDED");
    assert!(error.message.contains("max_iterations 5"), "{}", error.message);
    assert_eq!(sim.requests().len(), 5);
    assert!(e.state.unit("poll[4]").is_some() && e.state.unit("poll[5]").is_none());
    assert_replays(&sim);

    let yaml = POLL.replace("  - id: poll\n", "  - id: poll\n    continue_on_failure: true\n");
    let yaml = yaml.replace("steps.poll.output.iteration", "steps.poll.output.error.code");
    let mut sim = sim_with(&yaml);
    sim.on_task("check", |_| TaskOutcome::Complete(json!({"left": 7})));
    sim.start("poll", "y", json!({})).unwrap();
    assert!(sim.run(1_000));
    let e = exec(&sim, "y");
    assert_eq!(e.state.status(), Status::Completed, "{:?}", e.state.error);
    assert_eq!(e.state.unit("after").unwrap().output, Some(json!("LIMIT_EXCEEDED")));
}

#[test]
fn a_failed_step_fails_the_repeat_at_once() {
    let mut sim = sim_with(POLL);
    sim.on_task("check", |r| {
        if r.input["n"] == json!(1) {
            TaskOutcome::Fail(TaskError::fatal("DOWN", "service down"))
        } else {
            TaskOutcome::Complete(json!({"left": 3}))
        }
    });
    sim.start("poll", "x", json!({})).unwrap();
    assert!(sim.run(1_000));
    let e = exec(&sim, "x");
    assert_eq!(e.state.status(), Status::Failed);
    let error = e.state.error.clone().unwrap();
    assert_eq!(error.code, "DOWN");
    assert!(error.message.contains("poll[1].check"), "{}", error.message);
    assert_eq!(sim.requests().len(), 2);
    let failed = steps_of(&e.history, "StepFailed");
    assert_eq!(failed, ["poll[1].check", "poll"]);
    // `note` needs the failed check; `after` never starts: the run winds down.
    assert_eq!(steps_of(&e.history, "StepSkipped"), ["poll[1].note"]);
    assert_replays(&sim);
}

#[test]
fn loops_nest_a_repeat_inside_a_for_each_group() {
    let yaml = r#"
name: nested
version: "1"
tasks: { t: null }
steps:
  - id: each
    for_each: [1, 2]
    as: x
    group:
      steps:
        - id: again
          repeat:
            steps:
              - id: step
                task: t
                input: "${{ x * 10.0 + iteration + index * 100.0 }}"
            until: "${{ iteration == x }}"
            max_iterations: 3
            output: "${{ steps.step.output }}"
      output: "${{ steps.again.output }}"
output: "${{ steps.each.output }}"
"#;
    let mut sim = sim_with(yaml);
    sim.on_task("t", |r| TaskOutcome::Complete(r.input.clone()));
    sim.start("nested", "x", json!({})).unwrap();
    assert!(sim.run(1_000));
    let e = exec(&sim, "x");
    assert_eq!(e.state.status(), Status::Completed, "{:?}", e.state.error);
    assert_eq!(e.state.output, Some(json!([11, 122])));
    let mut steps: Vec<&str> = sim.requests().iter().map(|r| r.step.as_str()).collect();
    steps.sort_unstable();
    assert_eq!(
        steps,
        [
            "each[0].again[0].step",
            "each[0].again[1].step",
            "each[1].again[0].step",
            "each[1].again[1].step",
            "each[1].again[2].step"
        ]
    );
    assert_replays(&sim);
}

/// The documented sizing (docs/definitions.md, "How big a loop fits"): a 1,000-element
/// `for_each` over a 5-task group is 5,000 task units and 16,005 events, inside the
/// server's default `max_history_events` of 50,000.
#[test]
fn a_thousand_elements_over_a_five_step_group_fit_the_default_history_limit() {
    let yaml = r#"
name: big
version: "1"
tasks: { t: null }
limits: { max_history_events: 50000 }
steps:
  - id: each
    for_each: "${{ input.items }}"
    max_concurrency: 100
    group:
      steps:
        - { id: a, task: t, input: "${{ item }}" }
        - { id: b, needs: [a], task: t, input: "${{ steps.a.output }}" }
        - { id: c, needs: [b], task: t, input: "${{ steps.b.output }}" }
        - { id: d, needs: [c], task: t, input: "${{ steps.c.output }}" }
        - { id: e, needs: [d], task: t, input: "${{ steps.d.output }}" }
      output: "${{ steps.e.output }}"
output: "${{ size(steps.each.output) }}"
"#;
    let mut sim = sim_with(yaml);
    sim.on_task("t", |r| TaskOutcome::Complete(r.input.clone()));
    let items: Vec<u64> = (0..1_000).collect();
    sim.start("big", "x", json!({"items": items})).unwrap();
    assert!(sim.run(100_000));
    let e = exec(&sim, "x");
    assert_eq!(e.state.status(), Status::Completed, "{:?}", e.state.error);
    assert_eq!(e.state.output, Some(json!(1_000)));
    assert_eq!(sim.requests().len(), 5_000);
    // Per element: 5 × (StepScheduled, StepDispatched, StepSucceeded) and its record;
    // then WorkflowCreated, WorkflowStarted, StepFanOut, the step's StepSucceeded and
    // WorkflowCompleted.
    assert_eq!(e.history.len(), 1_000 * (5 * 3 + 1) + 5);
}

#[test]
fn a_loop_whose_when_is_false_is_skipped_and_an_until_error_fails_the_repeat() {
    let yaml = r#"
name: skip
version: "1"
tasks: { t: null }
steps:
  - id: each
    when: "${{ input.go }}"
    for_each: [1, 2]
    group: { steps: [ { id: a, task: t } ] }
  - id: again
    when: "${{ input.go }}"
    repeat:
      steps: [ { id: a, compute: 1 } ]
      until: "${{ steps.a.output.nope }}"
      max_iterations: 3
"#;
    let mut sim = sim_with(yaml);
    sim.on_task("t", |r| TaskOutcome::Complete(r.input.clone()));
    sim.start("skip", "off", json!({"go": false})).unwrap();
    assert!(sim.run(1_000));
    let e = exec(&sim, "off");
    assert_eq!(e.state.status(), Status::Completed, "{:?}", e.state.error);
    assert_eq!(steps_of(&e.history, "StepSkipped"), ["each", "again"]);
    assert!(e.state.units.keys().all(|k| !k.contains('[')), "{:?}", e.state.units.keys());

    sim.start("skip", "on", json!({"go": true})).unwrap();
    assert!(sim.run(1_000));
    let e = exec(&sim, "on");
    assert_eq!(e.state.status(), Status::Failed);
    let error = e.state.error.clone().unwrap();
    assert_eq!(error.code, "EXPRESSION_ERROR");
    assert!(error.message.contains("repeat.until"), "{}", error.message);
    // The iteration is not recorded: `until` decides before it is.
    assert!(e.state.unit("again[0]").is_none());
    assert_replays(&sim);
}
