//! Update-with-start in the engine: the update is accepted in the execution's first batch,
//! right after `WorkflowCreated` and before the first decision, and the decider treats it
//! exactly like an update accepted later (same outcome, the history replays). A refused
//! update starts nothing; a repeated update id records nothing.

mod common;

use common::{assert_replays, def, events_of, exec, types};
use orbit_engine::sim::{Sim, TaskOutcome};
use orbit_engine::state::Status;
use orbit_engine::{Command, ErrorCode, Event};
use serde_json::{json, Value};

const DEF: &str = r#"
name: uws
version: "1"
signals: { go: {} }
tasks:
  stock.reserve: {}
updates:
  add:
    input: { type: object, required: [n], properties: { n: { type: integer } } }
    validator: "${{ args.n > 0 }}"
    reply: "${{ {'got': args.n, 'base': input.base} }}"
  reserve:
    steps:
      - { id: hold, task: stock.reserve, input: { sku: "${{ args.sku }}" } }
    reply: "${{ {'held': steps.hold.output, 'base': input.base} }}"
steps:
  - { id: w, await: go }
output: "${{ steps.w.output }}"
"#;

fn update(name: &str, args: Value) -> Command {
    Command::Update { name: name.into(), args, update_id: Some("u1".into()) }
}

fn sim() -> Sim {
    let mut sim = Sim::new();
    sim.register(def(DEF));
    sim.on_task("stock.reserve", |r| TaskOutcome::Complete(json!(format!("h-{}", r.input["sku"]))));
    sim
}

/// The outcome an update accepted after the start gets: the run to compare against.
fn later(name: &str, args: Value) -> Sim {
    let mut sim = sim();
    sim.start("uws", "x", json!({"base": 7})).unwrap();
    sim.run(10);
    sim.command("x", update(name, args)).unwrap();
    sim.run(10);
    sim.signal("x", "go", json!("done")).unwrap();
    sim.run(10);
    sim
}

fn completed(sim: &Sim) -> Vec<(Value, Option<u64>)> {
    events_of(&exec(sim, "x").history, "UpdateCompleted")
        .into_iter()
        .map(|e| match e {
            Event::UpdateCompleted { result, accepted, .. } => (result.clone(), *accepted),
            _ => unreachable!(),
        })
        .collect()
}

#[test]
fn an_expression_update_is_accepted_and_answered_in_the_first_batch() {
    let mut sim = sim();
    sim.start_with_update("uws", "x", json!({"base": 7}), update("add", json!({"n": 2}))).unwrap();
    // Nothing decided yet: the first batch is the start and the update, in that order.
    let h = &exec(&sim, "x").history;
    assert_eq!(types(h), ["WorkflowCreated", "UpdateAccepted", "UpdateCompleted"]);
    assert_eq!(h.iter().map(|e| e.seq).collect::<Vec<_>>(), [1, 2, 3]);
    sim.run(10);
    let h = &exec(&sim, "x").history;
    assert_eq!(
        &types(h)[..5],
        ["WorkflowCreated", "UpdateAccepted", "UpdateCompleted", "WorkflowStarted", "AwaitStarted"]
    );
    sim.signal("x", "go", json!("done")).unwrap();
    sim.run(10);
    assert_eq!(exec(&sim, "x").state.status(), Status::Completed);
    // The same reply as an update accepted once the run was under way.
    assert_eq!(completed(&sim), vec![(json!({"got": 2, "base": 7}), None)]);
    assert_eq!(completed(&sim), completed(&later("add", json!({"n": 2}))));
    assert_replays(&sim);
}

#[test]
fn an_update_with_steps_accepted_in_the_first_batch_runs_them_after_the_start() {
    let mut sim = sim();
    sim.start_with_update("uws", "x", json!({"base": 7}), update("reserve", json!({"sku": "a"})))
        .unwrap();
    assert_eq!(types(&exec(&sim, "x").history), ["WorkflowCreated", "UpdateAccepted"]);
    sim.run(10);
    let e = exec(&sim, "x");
    // The handler's unit is keyed by the acceptance at seq 2 and ran through the worker.
    assert_eq!(e.state.units["update:reserve@2:hold"].status.as_str(), "succeeded");
    assert!(e.state.open_updates.is_empty());
    assert_eq!(completed(&sim), vec![(json!({"held": "h-\"a\"", "base": 7}), Some(2))]);
    // The reply equals the one of the same update accepted later (only its seq differs).
    let late: Vec<Value> =
        completed(&later("reserve", json!({"sku": "a"}))).into_iter().map(|(r, _)| r).collect();
    assert_eq!(late, vec![json!({"held": "h-\"a\"", "base": 7})]);
    sim.signal("x", "go", json!("done")).unwrap();
    sim.run(10);
    assert_eq!(exec(&sim, "x").state.status(), Status::Completed);
    assert_replays(&sim);
}

#[test]
fn a_refused_update_starts_nothing() {
    let mut sim = sim();
    let e = sim
        .start_with_update("uws", "x", json!({"base": 7}), update("add", json!({"n": 0})))
        .unwrap_err();
    assert_eq!(e.code, ErrorCode::UpdateRejected);
    let e = sim.start_with_update("uws", "x", json!({}), update("nope", json!(null))).unwrap_err();
    assert_eq!(e.code, ErrorCode::UnknownUpdate);
    assert!(sim.execution("x").is_none());
    // The id stays free: a start afterwards creates it.
    sim.start("uws", "x", json!({"base": 1})).unwrap();
    assert_eq!(types(&exec(&sim, "x").history), ["WorkflowCreated"]);
}

#[test]
fn a_repeated_update_id_records_nothing_and_names_the_first_acceptance() {
    let mut sim = sim();
    sim.start_with_update("uws", "x", json!({"base": 7}), update("add", json!({"n": 2}))).unwrap();
    sim.run(10);
    let before = exec(&sim, "x").history.len();
    // A retry arriving through the inbox (different args even): nothing new, seq 2 answers.
    sim.command("x", update("add", json!({"n": 5}))).unwrap();
    assert_eq!(exec(&sim, "x").history.len(), before);
    assert_eq!(orbit_engine::update::accepted(&exec(&sim, "x").state, "u1"), Some((1, 2)));
    // After the run ended too: the first acceptance still answers (no EXECUTION_FINISHED).
    sim.signal("x", "go", json!("done")).unwrap();
    sim.run(10);
    let after = exec(&sim, "x").history.len();
    sim.command("x", update("add", json!({"n": 2}))).unwrap();
    assert_eq!(exec(&sim, "x").history.len(), after);
    // Another id is a new update, refused once finished.
    let other = Command::Update { name: "add".into(), args: json!({"n": 1}), update_id: None };
    assert_eq!(sim.command("x", other).unwrap_err().code, ErrorCode::ExecutionFinished);
}

/// Issue 30, item 4: update ids are carried across continue-as-new, so a retried
/// update-with-start after the run continued is answered by its first acceptance (run 1)
/// instead of being applied again in run 2.
#[test]
fn an_update_id_is_remembered_across_continue_as_new() {
    const LOOPING: &str = r#"
name: looping
version: "1"
signals: { go: {} }
updates:
  add:
    reply: "${{ args.n }}"
steps:
  - { id: w, await: go }
  - { id: again, needs: [w], when: "${{ input.n < 2 }}", continue_as_new: { input: { n: "${{ input.n + 1.0 }}" } } }
"#;
    let mut sim = Sim::new();
    sim.register(def(LOOPING));
    sim.start_with_update("looping", "x", json!({"n": 0}), update("add", json!({"n": 1}))).unwrap();
    sim.run(10);
    for _ in 0..2 {
        sim.signal("x", "go", json!("next")).unwrap();
        sim.run(10);
    }
    let e = exec(&sim, "x");
    assert_eq!(e.state.run, 3, "continued twice");
    let created = &e.history[0].event;
    assert!(
        matches!(created, Event::WorkflowCreated { update_ids, .. } if update_ids.len() == 1 && update_ids[0].run == 1),
        "{created:?}"
    );
    let before = e.history.len();
    sim.command("x", update("add", json!({"n": 1}))).unwrap();
    let e = exec(&sim, "x");
    assert_eq!(e.history.len(), before, "the retry recorded nothing in run 3");
    assert_eq!(orbit_engine::update::accepted(&e.state, "u1"), Some((1, 2)), "run 1's acceptance");
    assert!(events_of(&e.history, "UpdateAccepted").is_empty());
    assert_replays(&sim);
}

#[test]
fn carried_update_ids_are_bounded_to_the_most_recent() {
    let mut state = orbit_engine::State { run: 9, ..Default::default() };
    let n = orbit_engine::update::MAX_CARRIED_UPDATE_IDS;
    for i in 0..n {
        state.carried_update_ids.insert(format!("old-{i}"), (1, i as u64 + 1));
    }
    state.update_ids.insert("mine".into(), 5);
    let carried = orbit_engine::update::carried(&state);
    assert_eq!(carried.len(), n);
    assert_eq!(carried.last().map(|c| (c.id.as_str(), c.run)), Some(("mine", 9)), "newest last");
    assert!(!carried.iter().any(|c| c.id == "old-0"), "the oldest is forgotten");
}
