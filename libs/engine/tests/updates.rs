//! Updates in the engine: an accepted update records `UpdateAccepted` + `UpdateCompleted`
//! with the reply; a refused one (unknown, bad args, validator false, finished execution)
//! records nothing.

mod common;

use common::{def, events_of, exec};
use orbit_engine::sim::Sim;
use orbit_engine::{Command, Event};
use serde_json::json;

const DEF: &str = r#"
name: upd
version: "1"
signals: { go: {} }
updates:
  add:
    input: { type: object, required: [n], properties: { n: { type: integer } } }
    validator: "${{ args.n > 0 }}"
    reply: "${{ {'got': args.n, 'input': input.base} }}"
  ping: {}
steps:
  - { id: w, await: go }
"#;

fn sim() -> Sim {
    let mut sim = Sim::new();
    sim.register(def(DEF));
    sim.start("upd", "x", json!({"base": 7})).unwrap();
    sim.run(10);
    sim
}

fn update(name: &str, args: serde_json::Value) -> Command {
    Command::Update { name: name.into(), args, update_id: Some("u1".into()) }
}

#[test]
fn accepted_update_records_its_reply() {
    let mut sim = sim();
    sim.command("x", update("add", json!({"n": 2}))).unwrap();
    let history = &exec(&sim, "x").history;
    let accepted = events_of(history, "UpdateAccepted");
    assert_eq!(
        accepted,
        vec![&Event::UpdateAccepted {
            name: "add".into(),
            args: json!({"n": 2}),
            update_id: Some("u1".into())
        }]
    );
    let completed = events_of(history, "UpdateCompleted");
    assert_eq!(
        completed,
        vec![&Event::UpdateCompleted {
            name: "add".into(),
            result: json!({"got": 2, "input": 7}),
            accepted: None,
            error: None,
        }]
    );
    // No reply expression: null. (Its own update id: a repeated id records nothing.)
    let ping =
        Command::Update { name: "ping".into(), args: json!(null), update_id: Some("u2".into()) };
    sim.command("x", ping).unwrap();
    let last = &exec(&sim, "x").history.last().unwrap().event;
    assert_eq!(
        last,
        &Event::UpdateCompleted {
            name: "ping".into(),
            result: json!(null),
            accepted: None,
            error: None
        }
    );
    common::assert_replays(&sim);
}

#[test]
fn refused_updates_record_nothing() {
    let mut sim = sim();
    let before = exec(&sim, "x").history.len();
    let code = |sim: &mut Sim, name: &str, args| {
        sim.command("x", update(name, args)).unwrap_err().code.as_str().to_string()
    };
    assert_eq!(code(&mut sim, "add", json!({"n": 0})), "UPDATE_REJECTED");
    assert_eq!(code(&mut sim, "add", json!({"n": "a"})), "INVALID_INPUT");
    assert_eq!(code(&mut sim, "nope", json!({})), "UNKNOWN_UPDATE");
    assert_eq!(exec(&sim, "x").history.len(), before);

    sim.signal("x", "go", json!({})).unwrap();
    sim.run(10);
    assert!(exec(&sim, "x").state.status().is_closed());
    assert_eq!(code(&mut sim, "add", json!({"n": 1})), "EXECUTION_FINISHED");
}

#[test]
fn updates_parse_and_keep_the_hash_stable() {
    let with = def(DEF);
    assert_eq!(with.updates.len(), 2);
    assert!(with.updates["add"].validator.is_some());
    let doc = orbit_definition::to_document(&with);
    assert!(doc.to_string().contains("args.n > 0"), "{doc}");
    let err = orbit_definition::parse(&DEF.replace("args.n > 0", "argz.n > 0")).unwrap_err();
    assert!(err.to_string().contains("argz"), "{err}");
}
