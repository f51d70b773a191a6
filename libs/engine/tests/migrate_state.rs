//! Folding `DefinitionMigrated`: renames (`step[i]` elements, `compensate:` and handler
//! units) and cancellations reach every part of the state that holds unit keys, exactly as
//! if the history had used the new names all along; the cancelled units get the effects a
//! decided `StepCancelled` gets; the event keeps its JSON form.

mod common;

use common::*;
use orbit_engine::effects::{derive, Effect};
use orbit_engine::event::{Event, HistoryEvent, Origin, TaskError};
use orbit_engine::migrate::{Change, ChangeKind};
use orbit_engine::{State, UnitStatus};
use serde_json::json;
use std::collections::BTreeMap;

fn history(version: &str, hash: &str, fan: &str, handler: &str) -> Vec<Event> {
    let scheduled = |step: String, key: &str| Event::StepScheduled {
        step,
        attempt: 1,
        input: json!({}),
        idempotency_key: key.into(),
        redelivery: false,
        flow: None,
    };
    let dispatched = |step: String, token: &str| Event::StepDispatched {
        step,
        attempt: 1,
        token: token.into(),
        worker_id: "w".into(),
        session: "s".into(),
        deadline: Some(1_000),
    };
    vec![
        Event::WorkflowCreated {
            execution_id: "x".into(),
            workflow: "w".into(),
            version: version.into(),
            definition_hash: hash.into(),
            input: json!({}),
            parent: None,
            schedule_id: None,
            run: 1,
            update_ids: vec![],
            priority: None,
            memo: None,
            resume: None,
        },
        Event::WorkflowStarted {},
        Event::StepFanOut { step: fan.into(), items: vec![json!(1), json!(2)] },
        scheduled(format!("{fan}[0]"), "k0"),
        dispatched(format!("{fan}[0]"), "t0"),
        Event::StepSucceeded { step: format!("{fan}[0]"), attempt: Some(1), output: json!(10) },
        scheduled(format!("{fan}[1]"), "k1"),
        dispatched(format!("{fan}[1]"), "t1"),
        Event::StepFailed { step: format!("{fan}[1]"), error: TaskError::fatal("BOOM", "") },
        scheduled("b".into(), "kb"),
        dispatched("b".into(), "tb"),
        Event::CancelRequested { reason: "stop".into() },
        Event::CompensationStarted { reason: "cancel".into(), steps: vec![format!("{fan}[0]")] },
        scheduled(format!("compensate:{fan}[0]"), "kc"),
        dispatched(format!("compensate:{fan}[0]"), "tc"),
        Event::HandlersStarted { outcome: "cancel".into() },
        scheduled(format!("on:cancel:{handler}"), "kh"),
    ]
}

fn fold(events: Vec<Event>) -> (State, Vec<HistoryEvent>) {
    let history: Vec<HistoryEvent> = events
        .into_iter()
        .enumerate()
        .map(|(i, event)| HistoryEvent {
            seq: i as u64 + 1,
            timestamp_ms: 100 + i as u64,
            origin: Origin::Recorded,
            event,
        })
        .collect();
    (State::from_history(&history), history)
}

fn migrated(renames: &[(&str, &str)], cancelled: &[&str]) -> Event {
    Event::DefinitionMigrated {
        from_version: "1".into(),
        to_version: "2".into(),
        from_hash: "h1".into(),
        to_hash: "h2".into(),
        renames: renames.iter().map(|(a, b)| ((*a).to_string(), (*b).to_string())).collect(),
        cancelled: cancelled.iter().map(|k| (*k).to_string()).collect(),
        changes: vec![Change {
            kind: ChangeKind::Renamed,
            step: "a".into(),
            detail: "renamed to `a2` (renamed_from: a)".into(),
            safe: true,
            reason: "done".into(),
        }],
        outputs: BTreeMap::new(),
    }
}

#[test]
fn a_migration_folds_as_if_the_history_had_used_the_new_names() {
    let mut old = history("1", "h1", "a", "h");
    old.push(migrated(&[("a", "a2"), ("on:cancel:h", "on:cancel:h2")], &["b"]));
    let mut new = history("2", "h2", "a2", "h2");
    new.push(Event::StepCancelled { step: "b".into() });
    let (after, _) = fold(old);
    let (expected, _) = fold(new);
    assert_eq!(after, expected);
    // The parts `State`'s equality leaves out of its serialised form are the same too.
    assert_eq!(after.open, expected.open);
    assert_eq!(after.elements, expected.elements);

    assert_eq!((after.version.as_str(), after.definition_hash.as_str()), ("2", "h2"));
    let keys: Vec<&str> = after.units.keys().map(String::as_str).collect();
    assert_eq!(keys, ["a2", "a2[0]", "a2[1]", "b", "compensate:a2[0]", "on:cancel:h2"]);
    assert_eq!(
        after.unit("b").map(|u| (u.status, u.token.clone())),
        Some((UnitStatus::Cancelled, None))
    );
    assert!(after.fanouts.contains_key("a2") && !after.fanouts.contains_key("a"));
    assert_eq!(after.success_order, ["a2[0]"]);
    assert_eq!(after.tokens["t0"], "a2[0]");
    assert_eq!(after.tokens["tc"], "compensate:a2[0]");
    assert_eq!(after.tokens["tb"], "b");
    let compensation = after.winding.as_ref().and_then(|w| w.compensation.clone());
    assert_eq!(compensation, Some(vec!["a2[0]".to_string()]));
    let open: Vec<&str> = after.open.iter().map(String::as_str).collect();
    assert_eq!(open, ["a2", "compensate:a2[0]", "on:cancel:h2"]);
    let e = &after.elements["a2"];
    assert_eq!((e.present, e.end, e.resolved), (2, 2, 1));
    assert_eq!(e.failed.iter().copied().collect::<Vec<_>>(), [1]);
}

#[test]
fn mapped_outputs_replace_recorded_ones_after_the_renames() {
    let mut events = history("1", "h1", "a", "h");
    let mut event = migrated(&[("a", "a2")], &[]);
    if let Event::DefinitionMigrated { outputs, .. } = &mut event {
        // `a2[0]` succeeded (mapped); `a2[1]` failed and `b` is open (left out); `a[0]` is
        // the old name (gone after the rename); `zz` is no unit.
        for key in ["a2[0]", "a2[1]", "b", "a[0]", "zz"] {
            outputs.insert(key.into(), json!({"mapped": key}));
        }
    }
    events.push(event.clone());
    let (after, _) = fold(events);
    let (before, _) = fold(history("1", "h1", "a", "h"));
    assert_eq!(
        after.unit("a2[0]").and_then(|u| u.output.clone()),
        Some(json!({"mapped": "a2[0]"}))
    );
    assert_eq!(
        after.unit("a2[1]").map(|u| u.output.clone()),
        before.unit("a[1]").map(|u| u.output.clone())
    );
    assert_eq!(after.unit("b").map(|u| u.output.clone()), Some(None));
    assert!(after.unit("zz").is_none() && after.unit("a[0]").is_none());
    assert_eq!(after.units.len(), before.units.len());
    // Recorded, in the event's JSON; absent there when nothing was mapped.
    let text = serde_json::to_value(&event).unwrap();
    assert_eq!(text["outputs"]["a2[0]"], json!({"mapped": "a2[0]"}));
    assert_eq!(serde_json::from_value::<Event>(text).unwrap(), event);
    let plain = serde_json::to_value(migrated(&[], &[])).unwrap();
    assert!(plain.get("outputs").is_none(), "{plain}");
}

#[test]
fn the_fold_of_a_migration_stays_total() {
    let mut events = history("1", "h1", "a", "h");
    // Onto a step with units, into another body, two onto one, malformed, unknown units:
    // nothing is lost or merged.
    events.push(migrated(
        &[
            ("a", "b"),
            ("on:cancel:h", "on:failure:h2"),
            ("b", "q"),
            ("zz", "q"),
            ("compensate:a[0]", "not an id"),
        ],
        &["nope", "a[0]", ""],
    ));
    let (after, _) = fold(events);
    let (before, _) = fold(history("1", "h1", "a", "h"));
    assert_eq!(after.units.len(), before.units.len());
    assert!(after.units.contains_key("a"), "`b` is taken: `a` keeps its key");
    assert!(after.units.contains_key("on:cancel:h"), "a rename never moves a unit to another body");
    assert_eq!(after.unit("a[0]").map(|u| u.status), Some(UnitStatus::Succeeded), "resolved stays");
    assert_eq!(
        after.unit("b").map(|u| u.status),
        Some(UnitStatus::Dispatched),
        "`q` is claimed twice"
    );
    assert_eq!(after.units.keys().collect::<Vec<_>>(), before.units.keys().collect::<Vec<_>>());
    let open_units: Vec<&String> =
        after.units.iter().filter(|(_, u)| !u.status.is_resolved()).map(|(k, _)| k).collect();
    assert_eq!(after.open.iter().collect::<Vec<_>>(), open_units, "`open` stays the open units");
}

#[test]
fn cancelled_units_get_the_effects_of_a_decided_cancel() {
    let d = def("name: w\nversion: \"1\"\nsteps:\n  - { id: kid, workflow: child }\n");
    let base = vec![
        Event::WorkflowCreated {
            execution_id: "x".into(),
            workflow: "w".into(),
            version: "1".into(),
            definition_hash: "h1".into(),
            input: json!({}),
            parent: None,
            schedule_id: None,
            run: 1,
            update_ids: vec![],
            priority: None,
            memo: None,
            resume: None,
        },
        Event::WorkflowStarted {},
        Event::ChildStarted {
            step: "kid".into(),
            child_id: "x/kid".into(),
            workflow: "child".into(),
            version: None,
            input: json!({}),
        },
    ];
    let effects_of = |last: Event| {
        let mut events = base.clone();
        events.push(last);
        let (state, history) = fold(events);
        derive(&d, &state, &history[history.len() - 1..], Default::default())
    };
    let by_migration = effects_of(migrated(&[], &["kid"]));
    let by_decider = effects_of(Event::StepCancelled { step: "kid".into() });
    assert_eq!(by_migration, by_decider);
    assert_eq!(
        by_migration,
        [
            Effect::CancelChild {
                child_id: "x/kid".into(),
                reason: orbit_engine::effects::CHILD_CANCEL_REASON.into()
            },
            Effect::CancelUnit { unit: "kid".into() },
        ]
    );
}

#[test]
fn the_event_keeps_its_json_form() {
    let event = migrated(&[("a", "a2")], &["b"]);
    let text = serde_json::to_value(&event).unwrap();
    assert_eq!(text["type"], "DefinitionMigrated");
    assert_eq!(text["renames"], json!({"a": "a2"}));
    assert_eq!(text["cancelled"], json!(["b"]));
    assert_eq!(text["changes"][0]["kind"], "renamed");
    let back: Event = serde_json::from_value(text).unwrap();
    assert_eq!(back, event);
    assert_eq!(event.type_name(), "DefinitionMigrated");
    assert_eq!(event.step(), None);
    // Written without the optional lists, it still reads.
    let bare = json!({"type": "DefinitionMigrated", "from_version": "1", "to_version": "2", "from_hash": "h1", "to_hash": "h2"});
    let back: Event = serde_json::from_value(bare).unwrap();
    assert!(
        matches!(back, Event::DefinitionMigrated { renames, .. } if renames == BTreeMap::new())
    );
}
