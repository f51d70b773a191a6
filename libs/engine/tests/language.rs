//! The definition language's second round (issue 29): `continue_on_failure`.

mod common;

use common::*;
use orbit_engine::event::{Event, TaskError};
use orbit_engine::sim::{Sim, TaskOutcome};
use orbit_engine::Status;
use serde_json::json;

fn sim_with(yaml: &str) -> Sim {
    let mut sim = Sim::new();
    sim.register(def(yaml));
    sim
}

const CAUGHT: &str = r#"
name: caught
version: "1"
tasks: { pay: null, book: null, undo: null, ship: null }
steps:
  - id: book
    task: book
    compensate: { task: undo, input: book }
  - id: pay
    needs: [book]
    task: pay
    retry: { max_attempts: 2, initial_interval: 10ms }
    continue_on_failure: true
    compensate: { task: undo, input: pay }
  - id: each
    needs: [pay]
    for_each: [1, 2, 3]
    task: ship
    input: "${{ item }}"
    retry: { max_attempts: 1 }
    continue_on_failure: true
  - id: bad
    compute: "${{ input.missing.field }}"
    continue_on_failure: true
  - id: last
    needs: [each, bad]
    task: ship
    input: 0
    retry: { max_attempts: 1 }
output: "${{ {'pay': steps.pay.output, 'each': steps.each.output, 'bad': steps.bad.output.failed} }}"
"#;

#[test]
fn a_caught_failure_completes_the_step_with_the_failure_as_output_and_is_never_compensated() {
    let mut sim = sim_with(CAUGHT);
    sim.on_task("book", |_| TaskOutcome::Complete(json!("booked")));
    sim.on_task("pay", |_| TaskOutcome::Fail(TaskError::retryable("DECLINED", "card declined")));
    sim.on_task("ship", |r| {
        if r.input == json!(2) {
            TaskOutcome::Fail(TaskError::fatal("NO_STOCK", "none left"))
        } else if r.input == json!(0) {
            TaskOutcome::Fail(TaskError::fatal("LOST", "truck lost"))
        } else {
            TaskOutcome::Complete(r.input.clone())
        }
    });
    sim.on_task("undo", |r| TaskOutcome::Complete(r.input.clone()));
    sim.start("caught", "x", json!({})).unwrap();
    assert!(sim.run(1_000));
    let e = exec(&sim, "x");
    // `last` is not caught: the run fails, and compensation runs for `book` only.
    assert_eq!(e.state.status(), Status::Failed);
    let caught: Vec<(String, serde_json::Value)> = events_of(&e.history, "StepFailureCaught")
        .into_iter()
        .map(|ev| match ev {
            Event::StepFailureCaught { step, output, .. } => (step.clone(), output.clone()),
            _ => unreachable!(),
        })
        .collect();
    let keys: Vec<&str> = caught.iter().map(|(k, _)| k.as_str()).collect();
    assert_eq!(keys, ["bad", "pay", "each[1]"], "{caught:?}");
    assert_eq!(
        caught[1].1,
        json!({"failed": true, "error": {"code": "DECLINED", "message": "card declined"}})
    );
    // Retries ran first: two attempts of `pay`.
    assert_eq!(sim.requests().iter().filter(|r| r.step == "pay").count(), 2);
    // The elements completed; the fan-out succeeded with the caught element in its list.
    let each = e.state.unit("each").unwrap();
    assert_eq!(
        each.output,
        Some(
            json!([1, {"failed": true, "error": {"code": "NO_STOCK", "message": "none left"}}, 3])
        )
    );
    // Only `last` failed the run; no StepFailed for a caught unit.
    let failed: Vec<&Event> = events_of(&e.history, "StepFailed");
    assert!(matches!(failed.as_slice(), [Event::StepFailed { step, .. }] if step == "last"));
    // Compensation: `book` only (`pay` was caught, never compensated).
    let compensations: Vec<&str> =
        sim.requests().iter().filter_map(|r| r.step.strip_prefix("compensate:")).collect();
    assert_eq!(compensations, ["book"]);
    assert_replays(&sim);
}

#[test]
fn a_caught_failure_lets_the_workflow_complete() {
    let yaml = CAUGHT.replace("    input: 0\n    retry: { max_attempts: 1 }\n", "    input: 9\n");
    let mut sim = sim_with(&yaml);
    sim.on_task("book", |_| TaskOutcome::Complete(json!("booked")));
    sim.on_task("pay", |_| TaskOutcome::Fail(TaskError::fatal("DECLINED", "card declined")));
    sim.on_task("ship", |r| TaskOutcome::Complete(r.input.clone()));
    sim.start("caught", "x", json!({})).unwrap();
    assert!(sim.run(1_000));
    let e = exec(&sim, "x");
    assert_eq!(e.state.status(), Status::Completed, "{:?}", e.state.error);
    assert_eq!(
        e.state.output,
        Some(json!({
            "pay": {"failed": true, "error": {"code": "DECLINED", "message": "card declined"}},
            "each": [1, 2, 3],
            "bad": true
        }))
    );
    assert_eq!(sim.requests().iter().filter(|r| r.step == "pay").count(), 1, "fatal: no retry");
    assert_replays(&sim);
}

const GROUPED: &str = r#"
name: grouped
version: "1"
tasks: { t: null, undo: null }
steps:
  - id: first
    task: t
    input: first
  - id: ship
    needs: [first]
    group:
      steps:
        - id: pack
          task: t
          input: "${{ 'pack after ' + steps.first.output }}"
          compensate: { task: undo, input: "${{ steps.pack.output }}" }
        - id: label
          task: t
          input: label
        - id: send
          needs: [pack, label]
          group:
            steps:
              - id: go
                task: t
                input: "${{ steps.pack.output + '+' + steps.label.output }}"
            output: "${{ steps.go.output }}"
      output: "${{ {'pack': steps.pack.output, 'sent': steps.send.output} }}"
  - id: after
    compute: "${{ steps.ship.output.sent }}"
output: "${{ {'ship': steps.ship.output, 'after': steps.after.output} }}"
"#;

#[test]
fn a_group_runs_its_steps_as_one_step_with_its_output() {
    let mut sim = sim_with(GROUPED);
    sim.on_task("t", |r| TaskOutcome::Complete(r.input.clone()));
    sim.start("grouped", "x", json!({})).unwrap();
    assert!(sim.run(1_000));
    let e = exec(&sim, "x");
    assert_eq!(e.state.status(), Status::Completed, "{:?}", e.state.error);
    assert_eq!(
        e.state.output,
        Some(json!({
            "ship": {"pack": "pack after first", "sent": "pack after first+label"},
            "after": "pack after first+label"
        }))
    );
    let order: Vec<&str> = sim.requests().iter().map(|r| r.step.as_str()).collect();
    assert_eq!(order, ["first", "ship.pack", "ship.label", "ship.send.go"]);
    // The group resolves after its steps, the nested one first.
    let succeeded: Vec<&str> =
        events_of(&e.history, "StepSucceeded").into_iter().filter_map(|ev| ev.step()).collect();
    assert_eq!(
        succeeded,
        ["first", "ship.pack", "ship.label", "ship.send.go", "ship.send", "ship", "after"]
    );
    assert_replays(&sim);
}

#[test]
fn a_failed_step_fails_its_group_and_the_run_which_compensates_inside_the_group() {
    let mut sim = sim_with(GROUPED);
    sim.on_task("t", |r| {
        if r.input == json!("label") {
            TaskOutcome::Fail(TaskError::fatal("NO_LABEL", "printer jam"))
        } else {
            TaskOutcome::Complete(r.input.clone())
        }
    });
    sim.on_task("undo", |r| TaskOutcome::Complete(r.input.clone()));
    sim.start("grouped", "x", json!({})).unwrap();
    assert!(sim.run(1_000));
    let e = exec(&sim, "x");
    assert_eq!(e.state.status(), Status::Failed);
    let error = e.state.error.clone().unwrap();
    assert_eq!(error.code, "NO_LABEL");
    assert!(error.message.contains("ship.label"), "{}", error.message);
    let failed: Vec<&str> =
        events_of(&e.history, "StepFailed").into_iter().filter_map(|ev| ev.step()).collect();
    assert_eq!(failed, ["ship.label", "ship"]);
    let skipped: Vec<&str> =
        events_of(&e.history, "StepSkipped").into_iter().filter_map(|ev| ev.step()).collect();
    assert_eq!(skipped, ["ship.send"]);
    let undo: Vec<&str> =
        sim.requests().iter().filter(|r| r.task == "undo").map(|r| r.step.as_str()).collect();
    assert_eq!(undo, ["compensate:ship.pack"]);
    assert_eq!(
        sim.requests().iter().find(|r| r.task == "undo").unwrap().input,
        json!("pack after first")
    );
    assert_replays(&sim);
}

#[test]
fn a_caught_group_goes_on_with_its_failure_as_output() {
    let yaml = GROUPED.replace(
        "    needs: [first]\n    group:",
        "    needs: [first]\n    continue_on_failure: true\n    group:",
    );
    let yaml = yaml.replace(
        "compute: \"${{ steps.ship.output.sent }}\"",
        "compute: \"${{ steps.ship.output.error.code }}\"",
    );
    let mut sim = sim_with(&yaml);
    sim.on_task("t", |r| {
        if r.input == json!("label") {
            TaskOutcome::Fail(TaskError::fatal("NO_LABEL", "printer jam"))
        } else {
            TaskOutcome::Complete(r.input.clone())
        }
    });
    sim.start("grouped", "x", json!({})).unwrap();
    assert!(sim.run(1_000));
    let e = exec(&sim, "x");
    assert_eq!(e.state.status(), Status::Completed, "{:?}", e.state.error);
    assert_eq!(e.state.output.as_ref().unwrap()["after"], json!("NO_LABEL"));
    assert_eq!(events_of(&e.history, "StepFailureCaught").len(), 1);
    assert_replays(&sim);
}

const V1: &str = r#"
name: mig
version: "1"
tasks: { t: null }
steps:
  - id: g
    group:
      steps:
        - { id: a, task: t, input: a }
        - { id: b, needs: [a], task: t, input: b }
  - id: after
    needs: [g]
    task: t
    input: after
"#;

#[test]
fn a_group_migrates_as_one_step() {
    let plan_for = |v2: &str| {
        let mut sim = sim_with(V1);
        sim.on_task("t", |r| {
            if r.input == json!("a") {
                TaskOutcome::Complete(json!("A"))
            } else {
                TaskOutcome::Hang
            }
        });
        sim.start("mig", "x", json!({})).unwrap();
        sim.run(100);
        // `g.a` done, `g.b` in flight: the group runs.
        assert!(exec(&sim, "x").state.unit("g.b").is_some_and(|u| !u.status.is_resolved()));
        let plan =
            orbit_engine::migrate::plan(&exec(&sim, "x").def, &def(v2), &exec(&sim, "x").state);
        (sim, plan)
    };
    // A change inside the running group is unsafe.
    let changed = V1.replace("version: \"1\"", "version: \"2\"").replace("input: b", "input: bb");
    let (_, plan) = plan_for(&changed);
    assert!(!plan.is_safe(), "{plan:?}");
    // A change after it is not.
    let after =
        V1.replace("version: \"1\"", "version: \"2\"").replace("input: after", "input: later");
    let (_, plan) = plan_for(&after);
    assert!(plan.is_safe(), "{plan:?}");
    // Renaming the group: refused while a step of it is in flight (its unit key would
    // change under the attempt), and once it is done carries its steps' units over.
    let renamed = V1
        .replace("version: \"1\"", "version: \"2\"")
        .replace("  - id: g\n", "  - id: ship\n    renamed_from: g\n")
        .replace("needs: [g]", "needs: [ship]");
    let (_, plan) = plan_for(&renamed);
    assert!(!plan.is_safe(), "{plan:?}");
    let mut sim = sim_with(V1);
    sim.on_task("t", |r| {
        if r.input == json!("after") {
            TaskOutcome::Hang
        } else {
            TaskOutcome::Complete(r.input.clone())
        }
    });
    sim.start("mig", "x", json!({})).unwrap();
    sim.run(100);
    let plan = sim.migrate("x", def(&renamed)).unwrap();
    assert!(plan.is_safe(), "{plan:?}");
    let state = &exec(&sim, "x").state;
    let keys: Vec<&str> = state.units.keys().map(String::as_str).collect();
    assert_eq!(keys, ["after", "ship", "ship.a", "ship.b"]);
}

const ROUTED: &str = r#"
name: routed
version: "1"
input: { type: object, properties: { amount: { type: number } } }
tasks: { t: null }
steps:
  - id: quote
    compute: "${{ input.amount }}"
  - id: route
    switch:
      - when: "${{ steps.quote.output > 100.0 }}"
        steps:
          - { id: review, task: t, input: review }
          - { id: approve, needs: [review], task: t, input: "${{ steps.review.output + '+approve' }}" }
      - when: "${{ steps.quote.output > 10.0 }}"
        steps:
          - { id: auto, compute: auto }
        output: "${{ {'auto': steps.auto.output, 'amount': steps.quote.output} }}"
      - default:
          - { id: free, compute: free }
  - id: done
    compute: "${{ steps.route.output }}"
output: "${{ steps.done.output }}"
"#;

#[test]
fn a_switch_runs_exactly_one_branch() {
    for (amount, expected, tasks) in [
        (
            500,
            json!({"branch": 0, "output": "review+approve"}),
            vec!["route.0.review", "route.0.approve"],
        ),
        (50, json!({"branch": 1, "output": {"auto": "auto", "amount": 50}}), vec![]),
        (5, json!({"branch": 2, "output": "free"}), vec![]),
    ] {
        let mut sim = sim_with(ROUTED);
        sim.on_task("t", |r| TaskOutcome::Complete(r.input.clone()));
        sim.start("routed", "x", json!({"amount": amount})).unwrap();
        assert!(sim.run(1_000));
        let e = exec(&sim, "x");
        assert_eq!(e.state.status(), Status::Completed, "{amount}: {:?}", e.state.error);
        assert_eq!(e.state.output, Some(expected), "{amount}");
        let steps: Vec<&str> = sim.requests().iter().map(|r| r.step.as_str()).collect();
        assert_eq!(steps, tasks, "{amount}");
        // Only the chosen branch has units.
        let branch_units = e.state.units.keys().filter(|k| k.starts_with("route.")).count();
        assert!(branch_units >= 1, "{:?}", e.state.units.keys());
        assert_replays(&sim);
    }
    // Without a default branch and no `when` holding: nothing runs.
    let no_default =
        ROUTED.replace("      - default:\n          - { id: free, compute: free }\n", "");
    let mut sim = sim_with(&no_default);
    sim.start("routed", "x", json!({"amount": 5})).unwrap();
    assert!(sim.run(1_000));
    let e = exec(&sim, "x");
    assert_eq!(e.state.output, Some(json!({"branch": null, "output": null})));
    assert!(e.state.units.keys().all(|k| !k.starts_with("route.")));
    assert_replays(&sim);
}

#[test]
fn a_failing_branch_fails_the_switch_unless_caught() {
    let fail = |r: &orbit_engine::sim::TaskRequest| {
        if r.input == json!("review") {
            TaskOutcome::Fail(TaskError::fatal("REJECTED", "no"))
        } else {
            TaskOutcome::Complete(r.input.clone())
        }
    };
    let mut sim = sim_with(ROUTED);
    sim.on_task("t", fail);
    sim.start("routed", "x", json!({"amount": 500})).unwrap();
    assert!(sim.run(1_000));
    let e = exec(&sim, "x");
    assert_eq!(e.state.status(), Status::Failed);
    let failed: Vec<&str> =
        events_of(&e.history, "StepFailed").into_iter().filter_map(|ev| ev.step()).collect();
    assert_eq!(failed, ["route.0.review", "route"]);
    assert_replays(&sim);

    let caught =
        ROUTED.replace("  - id: route\n", "  - id: route\n    continue_on_failure: true\n");
    let mut sim = sim_with(&caught);
    sim.on_task("t", fail);
    sim.start("routed", "x", json!({"amount": 500})).unwrap();
    assert!(sim.run(1_000));
    let e = exec(&sim, "x");
    assert_eq!(e.state.status(), Status::Completed);
    assert_eq!(e.state.output.as_ref().unwrap()["error"]["code"], json!("REJECTED"));
    assert_replays(&sim);
}
