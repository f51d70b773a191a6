//! Update handlers with steps: the steps run as one instance inside the execution (unit keys
//! `update:<name>@<seq>:<step>`), the reply is decided once they are resolved (over their
//! outputs and `args`), a failed step answers `UPDATE_FAILED` without failing the run, a
//! wind-down abandons a running update with `UPDATE_FAILED`, and the run completes only
//! after every accepted update has its reply.

mod common;

use common::{def, events_of, exec};
use orbit_engine::event::HistoryEvent;
use orbit_engine::sim::{Sim, TaskOutcome};
use orbit_engine::state::Status;
use orbit_engine::{Command, Event, TaskError};
use serde_json::json;

const DEF: &str = r#"
name: upd_steps
version: "1"
signals: { go: {} }
tasks:
  stock.reserve:
    input: { type: object, required: [sku], properties: { sku: { type: string } } }
updates:
  reserve:
    input: { type: object, required: [sku], properties: { sku: { type: string } } }
    validator: "${{ args.sku != '' }}"
    steps:
      - { id: hold, task: stock.reserve, input: { sku: "${{ args.sku }}" } }
      - { id: label, compute: "${{ 'held ' + steps.hold.output.id }}" }
    reply: "${{ {'label': steps.label.output, 'sku': args.sku, 'base': input.base} }}"
  wait:
    steps:
      - { id: nap, sleep: 1h }
    reply: "${{ 'woke' }}"
steps:
  - { id: w, await: go }
output: "${{ steps.w.output }}"
"#;

fn update(name: &str, args: serde_json::Value, id: &str) -> Command {
    Command::Update { name: name.into(), args, update_id: Some(id.into()) }
}

fn sim(reserve: impl FnMut(&orbit_engine::sim::TaskRequest) -> TaskOutcome + 'static) -> Sim {
    let mut sim = Sim::new();
    sim.register(def(DEF));
    sim.on_task("stock.reserve", reserve);
    sim.start("upd_steps", "x", json!({"base": 7})).unwrap();
    sim.run(10);
    sim
}

fn seq_of(history: &[HistoryEvent], name: &str) -> u64 {
    history.iter().find(|h| h.event.type_name() == name).map(|h| h.seq).expect(name)
}

#[test]
fn the_reply_is_decided_over_the_handlers_step_outputs() {
    let mut sim = sim(|r| TaskOutcome::Complete(json!({"id": format!("h-{}", r.input["sku"])})));
    sim.command("x", update("reserve", json!({"sku": "a1"}), "u1")).unwrap();
    // Accepted alone: the reply waits for the steps.
    let h = &exec(&sim, "x").history;
    assert_eq!(h.last().unwrap().event.type_name(), "UpdateAccepted");
    let accepted = seq_of(h, "UpdateAccepted");
    sim.run(10);
    let e = exec(&sim, "x");
    let completed = events_of(&e.history, "UpdateCompleted");
    assert_eq!(
        completed,
        vec![&Event::UpdateCompleted {
            name: "reserve".into(),
            result: json!({"label": "held h-\"a1\"", "sku": "a1", "base": 7}),
            accepted: Some(accepted),
            error: None,
        }]
    );
    // The handler's units are keyed by the update's instance and ran through the worker.
    let key = format!("update:reserve@{accepted}:hold");
    assert_eq!(e.state.units[&key].status.as_str(), "succeeded");
    assert_eq!(sim.requests()[0].input, json!({"sku": "a1"}));
    assert!(e.state.open_updates.is_empty());
    assert_eq!(e.state.status(), Status::Running, "an update does not end the run");
    assert_eq!(
        orbit_engine::update::completion(&e.history, accepted).unwrap().unwrap(),
        &json!({"label": "held h-\"a1\"", "sku": "a1", "base": 7})
    );
    sim.signal("x", "go", json!(1)).unwrap();
    sim.run(10);
    assert_eq!(exec(&sim, "x").state.status(), Status::Completed);
    common::assert_replays(&sim);
}

#[test]
fn a_failed_step_fails_the_update_not_the_run() {
    let mut sim = sim(|_| TaskOutcome::Fail(TaskError::fatal("OUT_OF_STOCK", "none left")));
    sim.command("x", update("reserve", json!({"sku": "b"}), "u1")).unwrap();
    sim.run(10);
    let e = exec(&sim, "x");
    let accepted = seq_of(&e.history, "UpdateAccepted");
    let Some(Err(error)) = orbit_engine::update::completion(&e.history, accepted) else {
        panic!("no failed completion: {:?}", e.history)
    };
    assert_eq!(error.code, orbit_engine::update::UPDATE_FAILED);
    assert!(
        error.message.contains("`hold`") && error.message.contains("OUT_OF_STOCK"),
        "{error:?}"
    );
    assert_eq!(error.details.as_ref().unwrap()["error"]["code"], "OUT_OF_STOCK");
    // The dependent step was skipped, the run goes on and still completes normally.
    let label = format!("update:reserve@{accepted}:label");
    assert_eq!(e.state.units[&label].status.as_str(), "skipped");
    assert_eq!(e.state.status(), Status::Running);
    sim.signal("x", "go", json!(2)).unwrap();
    sim.run(10);
    assert_eq!(exec(&sim, "x").state.status(), Status::Completed);
    assert_eq!(exec(&sim, "x").state.output, Some(json!(2)));
    common::assert_replays(&sim);
}

#[test]
fn the_run_completes_only_after_its_updates_replied() {
    let mut sim = sim(|_| TaskOutcome::Complete(json!({"id": "z"})));
    sim.command("x", update("wait", json!(null), "u1")).unwrap();
    sim.signal("x", "go", json!(3)).unwrap();
    // Up to just before the nap ends: the main body is done, the update is not.
    let start = exec(&sim, "x").history[0].timestamp_ms;
    sim.run_until(start + 3_000_000);
    assert!(events_of(&exec(&sim, "x").history, "UpdateCompleted").is_empty());
    assert_eq!(exec(&sim, "x").state.status(), Status::Running);
    sim.run(10);
    let e = exec(&sim, "x");
    let types = common::types(&e.history);
    let completed = types.iter().position(|t| *t == "UpdateCompleted").expect("completed");
    let done = types.iter().position(|t| *t == "WorkflowCompleted").expect("run completed");
    assert!(completed < done, "{types:?}");
    let accepted = seq_of(&e.history, "UpdateAccepted");
    assert_eq!(orbit_engine::update::completion(&e.history, accepted), Some(Ok(&json!("woke"))));
    common::assert_replays(&sim);
}

#[test]
fn a_wind_down_abandons_a_running_update() {
    let mut sim = sim(|_| TaskOutcome::Complete(json!({"id": "z"})));
    sim.command("x", update("wait", json!(null), "u1")).unwrap();
    sim.run_until(exec(&sim, "x").history[0].timestamp_ms + 1000);
    sim.cancel("x", "stop").unwrap();
    sim.run(10);
    let e = exec(&sim, "x");
    assert_eq!(e.state.status(), Status::Cancelled);
    let accepted = seq_of(&e.history, "UpdateAccepted");
    let Some(Err(error)) = orbit_engine::update::completion(&e.history, accepted) else {
        panic!("no failed completion: {:?}", e.history)
    };
    assert_eq!(error.code, "UPDATE_FAILED");
    assert!(error.message.contains("winding down (cancel)"), "{error:?}");
    assert_eq!(e.state.units[&format!("update:wait@{accepted}:nap")].status.as_str(), "cancelled");
    common::assert_replays(&sim);
}

#[test]
fn handler_steps_parse_check_and_round_trip() {
    let d = def(DEF);
    assert_eq!(d.updates["reserve"].steps.len(), 2);
    assert!(d.updates["reserve"].steps[1].deps.contains("hold"), "implied by steps.hold");
    let doc = orbit_definition::to_document(&d);
    assert_eq!(doc["updates"]["reserve"]["steps"][0]["id"], "hold");
    assert_eq!(orbit_definition::parse(&doc.to_string()).unwrap().hash, d.hash);
    // The reply may read the handler's steps and main steps, nothing else.
    let bad = DEF.replace("steps.label.output, 'sku'", "steps.nope.output, 'sku'");
    let err = orbit_definition::parse(&bad).unwrap_err().to_string();
    assert!(err.contains("steps.nope"), "{err}");
    // Handler steps are never compensated.
    let bad =
        DEF.replace("{ id: nap, sleep: 1h }", "{ id: nap, sleep: 1h, compensate: { sleep: 1s } }");
    let err = orbit_definition::parse(&bad).unwrap_err().to_string();
    assert!(err.contains("update handlers"), "{err}");
}
