//! Payload limits in the decider and the commands: every value the engine would record is
//! checked for size (`PAYLOAD_TOO_LARGE`) and nesting depth (`PAYLOAD_TOO_DEEP`) first;
//! a violation fails the step (or refuses the command) and nothing over the limits reaches
//! the history.

mod common;

use common::*;
use orbit_definition::Limits;
use orbit_engine::event::{Event, TaskError};
use orbit_engine::sim::{Sim, TaskOutcome};
use orbit_engine::Status;
use orbit_payload::MAX_DEPTH;
use serde_json::{json, Value};

fn nested_lists(depth: usize) -> Value {
    (0..depth).fold(json!(1), |v, _| Value::Array(vec![v]))
}

/// A sim under a server limit of `max` bytes.
fn sim_under(yaml: &str, max: u64) -> Sim {
    let mut sim = Sim::new();
    sim.limits = Limits { max_payload_bytes: Some(max), ..Limits::default() };
    sim.register(def(yaml));
    sim
}

/// The run's error code once it is FAILED.
fn failed(sim: &Sim, id: &str) -> TaskError {
    let e = exec(sim, id);
    assert_eq!(e.state.status(), Status::Failed, "{:?}", e.history);
    e.state.error.clone().expect("an error")
}

/// No recorded event carries a value over the limits.
fn history_within_limits(sim: &Sim, id: &str, max: u64) {
    for he in &exec(sim, id).history {
        let v = serde_json::to_value(&he.event).unwrap();
        let m = orbit_payload::measure(&v);
        // The event wraps its payload one or two levels deep.
        assert!(m.depth <= MAX_DEPTH + 2, "{} is {} deep", he.event.type_name(), m.depth);
        assert!(m.json_bytes <= max + 1024, "{} is {} bytes", he.event.type_name(), m.json_bytes);
    }
}

const COMPUTE: &str = r#"
name: c
version: "1"
steps:
  - { id: c, compute: "${{ input.n.map(i, input.n) }}" }
output: "${{ steps.c.output }}"
"#;

#[test]
fn a_compute_value_over_max_payload_bytes_fails_its_step() {
    let mut sim = sim_under(COMPUTE, 10_000);
    let n: Vec<u32> = (0..100).collect();
    sim.start("c", "x", json!({ "n": n })).unwrap();
    sim.run(100);
    let error = failed(&sim, "x");
    assert_eq!(error.code, "PAYLOAD_TOO_LARGE");
    assert!(error.message.starts_with("compute value is "), "{}", error.message);
    assert!(events_of(&exec(&sim, "x").history, "StepSucceeded").is_empty());
    history_within_limits(&sim, "x", 10_000);
}

#[test]
fn a_compute_value_nested_too_deep_fails_its_step_with_the_path() {
    let yaml = r#"
name: d
version: "1"
steps:
  - { id: c, compute: { a: { b: "${{ input.v }}" } } }
"#;
    let mut sim = sim_under(yaml, 1 << 20);
    // The input itself is within the limit; the computed value is deeper.
    sim.start("d", "x", json!({ "v": nested_lists(MAX_DEPTH - 1) })).unwrap();
    sim.run(100);
    let error = failed(&sim, "x");
    assert_eq!(error.code, "PAYLOAD_TOO_DEEP");
    assert!(error.message.contains("compute value.a.b[0]"), "{}", error.message);
    history_within_limits(&sim, "x", 1 << 20);
}

#[test]
fn for_each_items_workflow_output_and_continue_as_new_input_are_checked() {
    let fan = r#"
name: fan
version: "1"
steps:
  - { id: f, for_each: "${{ [[input.v]] }}", compute: "${{ item }}" }
"#;
    let out = r#"
name: out
version: "1"
steps:
  - { id: s, compute: "${{ 1 }}" }
output: { wrap: { w: "${{ input.v }}" } }
"#;
    let can = r#"
name: can
version: "1"
steps:
  - { id: again, continue_as_new: { input: { v: { w: "${{ input.v }}" } } } }
"#;
    for (yaml, name) in [(fan, "fan"), (out, "out"), (can, "can")] {
        let mut sim = sim_under(yaml, 1 << 20);
        sim.start(name, "x", json!({ "v": nested_lists(MAX_DEPTH - 1) })).unwrap();
        sim.run(100);
        assert_eq!(failed(&sim, "x").code, "PAYLOAD_TOO_DEEP", "{name}");
        assert!(events_of(&exec(&sim, "x").history, "WorkflowContinuedAsNew").is_empty(), "{name}");
        history_within_limits(&sim, "x", 1 << 20);
    }
}

const TASK: &str = r#"
name: t
version: "1"
tasks: { work: {} }
steps:
  - { id: w, task: work, input: { v: "${{ input.v }}" } }
"#;

#[test]
fn worker_results_over_the_limits_fail_the_attempt_without_retry() {
    let cases: Vec<(TaskOutcome, &str)> = vec![
        (TaskOutcome::Complete(nested_lists(MAX_DEPTH + 1)), "PAYLOAD_TOO_DEEP"),
        (TaskOutcome::Complete(json!("x".repeat(20_000))), "PAYLOAD_TOO_LARGE"),
        (
            TaskOutcome::Fail(TaskError {
                details: Some(nested_lists(MAX_DEPTH + 1)),
                ..TaskError::retryable("CARD_DECLINED", "no")
            }),
            "PAYLOAD_TOO_DEEP",
        ),
    ];
    for (outcome, code) in cases {
        let mut sim = sim_under(TASK, 10_000);
        let o = outcome.clone();
        sim.on_task("work", move |_| o.clone());
        sim.start("t", "x", json!({ "v": 1 })).unwrap();
        sim.run(100);
        let error = failed(&sim, "x");
        assert_eq!(error.code, code, "{outcome:?}");
        assert!(error.details.is_none());
        // Not retried: one attempt.
        let attempts = events_of(&exec(&sim, "x").history, "StepAttemptFailed").len();
        assert_eq!(attempts, 1, "{outcome:?}");
        history_within_limits(&sim, "x", 10_000);
    }
}

#[test]
fn commands_with_payloads_over_the_limits_are_refused() {
    let mut sim = sim_under(TASK, 10_000);
    let e = sim.start("t", "deep", json!({ "v": nested_lists(MAX_DEPTH) })).unwrap_err();
    assert_eq!(e.code.as_str(), "PAYLOAD_TOO_DEEP");
    assert!(e.message.contains("input.v[0]"), "{}", e.message);
    let e = sim.start("t", "big", json!({ "v": vec![1; 5_000] })).unwrap_err();
    assert_eq!(e.code.as_str(), "PAYLOAD_TOO_LARGE", "11 protobuf bytes per number: {}", e.message);

    let signals = r#"
name: s
version: "1"
signals: { go: null }
steps:
  - { id: wait, await: go }
"#;
    let mut sim = sim_under(signals, 10_000);
    sim.start("s", "x", json!({})).unwrap();
    sim.run(10);
    let e = sim.signal("x", "go", nested_lists(MAX_DEPTH + 1)).unwrap_err();
    assert_eq!(e.code.as_str(), "PAYLOAD_TOO_DEEP");
    assert!(events_of(&exec(&sim, "x").history, "SignalReceived").is_empty());
    sim.signal("x", "go", json!({"ok": 1})).unwrap();
    sim.run(10);
    assert_eq!(exec(&sim, "x").state.status(), Status::Completed);
}

#[test]
fn a_workflows_own_limit_is_stricter_than_the_servers() {
    let yaml =
        COMPUTE.replace("version: \"1\"", "version: \"1\"\nlimits: { max_payload_bytes: 200 }");
    let mut sim = sim_under(&yaml, 1 << 20);
    sim.start("c", "x", json!({ "n": [1, 2, 3, 4, 5, 6, 7, 8, 9, 10] })).unwrap();
    sim.run(100);
    let error = failed(&sim, "x");
    assert_eq!(error.code, "PAYLOAD_TOO_LARGE");
    assert!(error.message.contains("max_payload_bytes 200"), "{}", error.message);
    assert!(!matches!(
        exec(&sim, "x").history.last().map(|h| &h.event),
        Some(Event::WorkflowCompleted { .. })
    ));
}
