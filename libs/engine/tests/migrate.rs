//! Migrations (`orbit_engine::migrate`): every safe/unsafe rule against a run driven to the
//! point it is about, the issue's scenario end to end (plan, events, continuing under the
//! new version, replay across the migration), renames with and without `renamed_from`, and a
//! removed running step cancelled.

mod common;

use common::migrating::{defs, expect, judged, plan_to};
use common::*;
use orbit_definition::Definition;
use orbit_engine::command::Command;
use orbit_engine::migrate::{migrate, plan, ChangeKind};
use orbit_engine::replay::{definition_hashes, replay, replay_defs};
use orbit_engine::sim::{Sim, TaskOutcome};
use orbit_engine::{ErrorCode, Event, Status, TaskError, UnitStatus};
use serde_json::{json, Value};
use std::collections::BTreeMap;

use ChangeKind::*;

const TASKS: &str = "tasks: { t: {}, u: {}, undo: {} }\nsignals: { go: null, go2: null }\n";

/// Version `version` of workflow `mig` with these `steps:` lines (and anything after).
fn wf(version: &str, rest: &str) -> Definition {
    def(&format!("name: mig\nversion: \"{version}\"\n{TASKS}{rest}"))
}

/// A simulator whose workers never answer: tests complete or fail units by hand.
fn started(d: &Definition) -> Sim {
    let mut sim = Sim::new();
    sim.register(d.clone());
    sim.on_task("t", |_| TaskOutcome::Hang);
    sim.on_task("u", |_| TaskOutcome::Hang);
    sim.on_task("undo", |_| TaskOutcome::Hang);
    sim.start("mig", "x", json!({})).unwrap();
    assert!(sim.run(100));
    sim
}

fn token(sim: &Sim, unit: &str) -> String {
    let request = sim.requests().iter().rev().find(|r| r.step == unit);
    request.unwrap_or_else(|| panic!("`{unit}` was never offered")).token.clone()
}

fn complete(sim: &mut Sim, unit: &str, output: Value) {
    let token = token(sim, unit);
    sim.command("x", Command::Complete { token, output }).unwrap();
    assert!(sim.run(100));
}

fn fail(sim: &mut Sim, unit: &str) {
    let token = token(sim, unit);
    let error = TaskError::fatal("BOOM", "it broke");
    sim.command("x", Command::Fail { token, error }).unwrap();
    assert!(sim.run(100));
}

fn status(sim: &Sim, unit: &str) -> Option<UnitStatus> {
    exec(sim, "x").state.unit(unit).map(|u| u.status)
}

/// The first unit key with this prefix.
fn unit_starting(sim: &Sim, prefix: &str) -> String {
    let state = &exec(sim, "x").state;
    let key = state.units.keys().find(|k| k.starts_with(prefix));
    key.unwrap_or_else(|| panic!("no unit `{prefix}...`")).clone()
}

const A: &str = "  - { id: a, task: t, input: { n: 1 } }\n";
const B: &str = "  - { id: b, task: t, needs: [a], input: { n: 2 } }\n";
const C: &str = "  - { id: c, task: t, needs: [b], input: { n: 3 } }\n";
const OUTPUT: &str = "output: \"${{ [steps.a.output.n, steps.b.output.n, steps.c.output.n] }}\"\n";

fn chain() -> String {
    format!("steps:\n{A}{B}{C}{OUTPUT}")
}

/// `a` done, `b` running (dispatched, its worker silent), `c` pending.
fn a_done_b_running() -> (Sim, Definition) {
    let v1 = wf("1", &chain());
    let mut sim = started(&v1);
    complete(&mut sim, "a", json!({"n": 1}));
    assert_eq!(status(&sim, "a"), Some(UnitStatus::Succeeded));
    assert_eq!(status(&sim, "b"), Some(UnitStatus::Dispatched));
    assert_eq!(status(&sim, "c"), None);
    (sim, v1)
}

#[test]
fn the_issue_scenario_adds_a_step_after_the_running_one_and_changes_a_pending_input() {
    let (mut sim, v1) = a_done_b_running();
    let v2 = wf(
        "2",
        &format!(
            "steps:\n{A}{B}  - {{ id: d, task: t, needs: [b], input: {{ n: 4 }} }}\n\
             \x20 - {{ id: c, task: t, needs: [b], input: {{ n: 30 }} }}\n\
             output: \"${{{{ [steps.a.output.n, steps.b.output.n, steps.c.output.n, steps.d.output.n] }}}}\"\n"
        ),
    );
    let p = plan_to(&sim, &v2);
    assert_eq!(
        judged(&p),
        expect(&[(Added, "d", true), (InputChanged, "c", true), (OutputChanged, "", true)])
    );
    assert!(p.is_safe() && !p.is_empty() && p.cancel.is_empty() && p.renames.is_empty());
    assert_eq!(p.changes[1].detail, r#"input {"n":3} -> {"n":30}"#);
    assert_eq!(p.changes[1].reason, "pending: not started yet: rendered when it starts");

    let planned = sim.migrate("x", v2.clone()).unwrap();
    assert_eq!(planned, p);
    assert!(sim.run(100));
    let e = exec(&sim, "x");
    assert_eq!((e.state.version.as_str(), e.state.definition_hash.as_str()), ("2", &*v2.hash));
    let migrated =
        e.history.iter().find(|h| h.event.type_name() == "DefinitionMigrated").unwrap().clone();
    assert_eq!(migrated.origin, orbit_engine::Origin::Recorded);

    complete(&mut sim, "b", json!({"n": 2}));
    let offered: Vec<(&str, &Value)> =
        sim.requests().iter().map(|r| (r.step.as_str(), &r.input)).collect();
    assert_eq!(offered[2..], [("d", &json!({"n": 4})), ("c", &json!({"n": 30}))]);
    complete(&mut sim, "d", json!({"n": 4}));
    complete(&mut sim, "c", json!({"n": 30}));
    let e = exec(&sim, "x");
    assert_eq!(e.state.status(), Status::Completed);
    assert_eq!(e.state.output, Some(json!([1, 2, 30, 4])));

    assert_eq!(definition_hashes(&e.history), [v1.hash.clone(), v2.hash.clone()]);
    replay_defs(&defs(&[&v1, &v2]), &e.history, &no_limits()).unwrap();
    let d = replay(&v1, &e.history, &no_limits()).expect_err("one definition cannot replay it");
    assert_eq!(d.seq, migrated.seq, "replay stops at the migration");
    assert!(replay(&v2, &e.history, &no_limits()).is_err());
    // A definition missing from the set is a divergence at the event that needs it.
    let d = replay_defs(&defs(&[&v1]), &e.history, &no_limits()).unwrap_err();
    assert_eq!((d.seq, d.expected), (migrated.seq, None));
    let d = replay_defs(&defs(&[&v2]), &e.history, &no_limits()).unwrap_err();
    assert_eq!(d.seq, 1);
}

#[test]
fn a_done_step_renamed_without_renamed_from_is_refused_and_with_it_carries_its_units() {
    let (mut sim, _) = a_done_b_running();
    let v3 = |renamed_from: &str| {
        wf(
            "3",
            &format!(
                "steps:\n  - {{ id: a2, {renamed_from}task: t, input: {{ n: 1 }} }}\n\
                 \x20 - {{ id: b, task: t, needs: [a2], input: {{ n: 2 }} }}\n\
                 \x20 - {{ id: c, task: t, needs: [b], input: {{ n: \"${{{{ steps.a2.output.n + 100.0 }}}}\" }} }}\n\
                 output: \"${{{{ [steps.a2.output.n, steps.b.output.n, steps.c.output.n] }}}}\"\n"
            ),
        )
    };
    let without = v3("");
    let p = plan_to(&sim, &without);
    assert_eq!(
        judged(&p),
        expect(&[
            (Added, "a2", true),
            (Removed, "a", false),
            (NeedsChanged, "b", true),
            (InputChanged, "c", true),
            (OutputChanged, "", true),
        ])
    );
    let e = exec(&sim, "x");
    let (error, refused) = migrate(&e.def, &without, &e.state).unwrap_err();
    assert_eq!(refused, p);
    assert_eq!(error.code, ErrorCode::MigrationUnsafe);
    assert_eq!(
        error.message,
        "migrating `mig` from version 1 to 3 is unsafe for this execution: a: removed (task) \
         (done: `a` succeeded: its recorded events name `a`, which the new version lacks; if \
         the step was renamed, declare `renamed_from: a` on the new step)"
    );
    let err = sim.migrate("x", without).unwrap_err();
    assert_eq!(err.code, ErrorCode::MigrationUnsafe);
    assert_eq!(exec(&sim, "x").state.version, "1", "nothing was recorded");

    let with = v3("renamed_from: a, ");
    let p = sim.migrate("x", with.clone()).unwrap();
    assert_eq!(
        judged(&p),
        expect(&[
            (Renamed, "a", true),
            (NeedsChanged, "b", true),
            (InputChanged, "c", true),
            (OutputChanged, "", true),
        ])
    );
    assert_eq!(p.renames, BTreeMap::from([("a".to_string(), "a2".to_string())]));
    assert!(sim.run(100));
    let state = &exec(&sim, "x").state;
    assert_eq!(status(&sim, "a"), None);
    assert_eq!(state.unit("a2").and_then(|u| u.output.clone()), Some(json!({"n": 1})));
    assert_eq!(state.success_order, ["a2"]);
    complete(&mut sim, "b", json!({"n": 2}));
    let c = sim.requests().iter().find(|r| r.step == "c");
    let c = c.unwrap_or_else(|| panic!("{:#?}", exec(&sim, "x").history));
    assert_eq!(c.input, json!({"n": 101}), "steps.a2.output reads the renamed unit");
    complete(&mut sim, "c", json!({"n": 101}));
    let e = exec(&sim, "x");
    assert_eq!(e.state.output, Some(json!([1, 2, 101])));
    let v1 = wf("1", &chain());
    replay_defs(&defs(&[&v1, &with]), &e.history, &no_limits()).unwrap();
}

#[test]
fn a_removed_running_step_is_cancelled_and_the_run_goes_on() {
    let v1 = wf(
        "1",
        &format!("steps:\n{A}  - {{ id: b, task: t }}\n  - {{ id: c, task: t, needs: [a] }}\n"),
    );
    let mut sim = started(&v1);
    complete(&mut sim, "a", json!(1));
    assert_eq!(status(&sim, "b"), Some(UnitStatus::Dispatched));
    let v2 = wf("2", &format!("steps:\n{A}  - {{ id: c, task: t, needs: [a] }}\n"));
    let p = sim.migrate("x", v2.clone()).unwrap();
    assert_eq!(judged(&p), expect(&[(Removed, "b", true)]));
    assert_eq!(p.cancel, ["b"]);
    assert_eq!(
        p.changes[0].reason,
        "running: `b` is dispatched: cancelled by the migration, not compensated (`b`)"
    );
    let e = exec(&sim, "x");
    let migrated = e.history.last().unwrap().clone();
    assert!(
        matches!(&migrated.event, Event::DefinitionMigrated { cancelled, .. } if cancelled == &["b"])
    );
    // The effect a decided StepCancelled has: the unit's offers are withdrawn.
    let fx = orbit_engine::effects::derive(&v2, &e.state, &[migrated], Default::default());
    assert_eq!(fx, [orbit_engine::Effect::CancelUnit { unit: "b".into() }]);
    assert!(sim.run(100));
    assert_eq!(status(&sim, "b"), Some(UnitStatus::Cancelled));
    // b's worker answers late: the result is stale.
    complete(&mut sim, "b", json!(2));
    let e = exec(&sim, "x");
    assert_eq!(types(&e.history).last(), Some(&"StaleResultIgnored"));
    complete(&mut sim, "c", json!(3));
    let e = exec(&sim, "x");
    assert_eq!(e.state.status(), Status::Completed);
    replay_defs(&defs(&[&v1, &v2]), &e.history, &no_limits()).unwrap();

    // A step added back under that id later would read the cancelled unit as its own.
    let v3 = wf(
        "3",
        &format!("steps:\n{A}  - {{ id: b, task: t }}\n  - {{ id: c, task: t, needs: [a] }}\n"),
    );
    let p = plan(&v2, &v3, &exec(&sim, "x").state);
    assert_eq!(judged(&p), expect(&[(Added, "b", false)]));
}

/// Every step rule, for a step that is done (`a`), running (`b`) and pending (`c`).
#[test]
fn each_step_rule_by_how_the_step_stands() {
    type Case = (&'static str, Vec<(&'static str, String)>, Vec<(ChangeKind, &'static str, bool)>);
    let line = |s: &str| format!("  - {{ {s} }}\n");
    let cases: Vec<Case> = vec![
        ("kind/done", vec![(A, line("id: a, compute: 1"))], vec![(KindChanged, "a", false)]),
        ("kind/running", vec![(B, line("id: b, needs: [a], compute: 2"))], vec![(KindChanged, "b", false)]),
        ("kind/pending", vec![(C, line("id: c, needs: [b], compute: 3"))], vec![(KindChanged, "c", true)]),
        ("task/done", vec![(A, line("id: a, task: u, input: { n: 1 }"))], vec![(TaskChanged, "a", false)]),
        ("task/running", vec![(B, line("id: b, task: u, needs: [a], input: { n: 2 }"))], vec![(TaskChanged, "b", false)]),
        ("task/pending", vec![(C, line("id: c, task: u, needs: [b], input: { n: 3 }"))], vec![(TaskChanged, "c", true)]),
        ("input/done", vec![(A, line("id: a, task: t, input: { n: 10 }"))], vec![(InputChanged, "a", true)]),
        ("input/running", vec![(B, line("id: b, task: t, needs: [a], input: { n: 20 }"))], vec![(InputChanged, "b", false)]),
        ("input/pending", vec![(C, line("id: c, task: t, needs: [b], input: { n: 30 }"))], vec![(InputChanged, "c", true)]),
        ("when/done", vec![(A, line("id: a, task: t, when: false, input: { n: 1 }"))], vec![(WhenChanged, "a", true)]),
        ("when/running", vec![(B, line("id: b, task: t, when: false, needs: [a], input: { n: 2 }"))], vec![(WhenChanged, "b", true)]),
        ("when/pending", vec![(C, line("id: c, task: t, when: false, needs: [b], input: { n: 3 }"))], vec![(WhenChanged, "c", true)]),
        ("for_each/done-without-fan-out", vec![(A, line("id: a, task: t, for_each: [1], input: { n: 1 }"))], vec![(ForEachChanged, "a", true)]),
        ("for_each/running", vec![(B, line("id: b, task: t, for_each: [1], needs: [a], input: { n: 2 }"))], vec![(ForEachChanged, "b", false)]),
        ("for_each/pending", vec![(C, line("id: c, task: t, for_each: [1], needs: [b], input: { n: 3 }"))], vec![(ForEachChanged, "c", true)]),
        ("needs/running", vec![(B, line("id: b, task: t, input: { n: 2 }"))], vec![(NeedsChanged, "b", true)]),
        ("needs/pending", vec![(C, line("id: c, task: t, needs: [a, b], input: { n: 3 }"))], vec![(NeedsChanged, "c", true)]),
        ("retry/done", vec![(A, line("id: a, task: t, retry: { max_attempts: 5 }, input: { n: 1 }"))], vec![(PolicyChanged, "a", true)]),
        ("retry/running", vec![(B, line("id: b, task: t, retry: { max_attempts: 5 }, timeout: 1m, needs: [a], input: { n: 2 }"))], vec![(PolicyChanged, "b", true), (PolicyChanged, "b", true)]),
        ("compensate/running", vec![(B, line("id: b, task: t, compensate: { task: undo }, needs: [a], input: { n: 2 }"))], vec![(PolicyChanged, "b", true)]),
        ("removed/done", vec![(A, String::new()), (B, line("id: b, task: t, input: { n: 2 }"))], vec![(Removed, "a", false), (NeedsChanged, "b", true)]),
        ("removed/running", vec![(B, String::new()), (C, line("id: c, task: t, needs: [a], input: { n: 3 }"))], vec![(Removed, "b", true), (NeedsChanged, "c", true)]),
        ("removed/pending", vec![(C, String::new())], vec![(Removed, "c", true)]),
        ("renamed/done", vec![(A, line("id: a2, renamed_from: a, task: t, input: { n: 1 }")), (B, line("id: b, task: t, needs: [a2], input: { n: 2 }"))], vec![(Renamed, "a", true), (NeedsChanged, "b", true)]),
        ("renamed/running", vec![(B, line("id: b2, renamed_from: b, task: t, needs: [a], input: { n: 2 }")), (C, line("id: c, task: t, needs: [b2], input: { n: 3 }"))], vec![(Renamed, "b", false), (NeedsChanged, "c", true)]),
        ("renamed/pending", vec![(C, line("id: c2, renamed_from: c, task: t, needs: [b], input: { n: 3 }"))], vec![(Renamed, "c", true)]),
        ("renamed-and-kind/pending", vec![(C, line("id: c2, renamed_from: c, needs: [b], compute: 3"))], vec![(Renamed, "c", true), (KindChanged, "c", true)]),
        ("same-id-new-kind-is-no-rename/done", vec![(A, line("id: a, sleep: 1s"))], vec![(KindChanged, "a", false)]),
    ];
    let mut sim = started(&wf("1", &format!("steps:\n{A}{B}{C}")));
    complete(&mut sim, "a", json!({"n": 1}));
    for (name, edits, expected) in cases {
        let mut steps = format!("{A}{B}{C}");
        for (from, to) in &edits {
            assert!(steps.contains(from), "{name}");
            steps = steps.replace(from, to);
        }
        let to = wf("2", &format!("steps:\n{steps}"));
        let p = plan_to(&sim, &to);
        assert_eq!(judged(&p), expect(&expected), "{name}: {p:#?}");
        let e = exec(&sim, "x");
        match migrate(&e.def, &to, &e.state) {
            Ok((_, events)) => assert!(p.is_safe() && events.len() == 1, "{name}"),
            Err((error, _)) => {
                assert!(!p.is_safe(), "{name}");
                assert_eq!(error.code, ErrorCode::MigrationUnsafe, "{name}");
                for c in p.unsafe_changes() {
                    assert!(error.message.contains(&c.describe()), "{name}: {}", error.message);
                }
            }
        }
    }
}

#[test]
fn renames_and_cancels_follow_the_plan() {
    let (sim, _) = a_done_b_running();
    let renamed = |s: &str| {
        let steps = format!("{A}{B}{C}").replace(C, s);
        plan_to(&sim, &wf("2", &format!("steps:\n{steps}")))
    };
    let p = renamed("  - { id: c2, renamed_from: c, task: t, needs: [b], input: { n: 3 } }\n");
    assert_eq!(p.renames, BTreeMap::from([("c".to_string(), "c2".to_string())]));
    // A running rename is refused, so it is not listed.
    let steps = format!("{A}{B}{C}")
        .replace(B, "  - { id: b2, renamed_from: b, task: t, needs: [a], input: { n: 2 } }\n")
        .replace("needs: [b]", "needs: [b2]");
    let p = plan_to(&sim, &wf("2", &format!("steps:\n{steps}")));
    assert!(p.renames.is_empty());
    assert_eq!(
        p.changes[0].reason,
        "running: `b` is dispatched: an attempt in flight carries the old unit key and \
         idempotency key; migrate once it is done"
    );
}

#[test]
fn a_frozen_fan_out_cannot_take_another_list_but_may_change_its_concurrency() {
    let fan = |list: &str, extra: &str| {
        wf("1", &format!("steps:\n  - {{ id: f, task: t, for_each: {list}, {extra}input: {{ n: \"${{{{ item }}}}\" }} }}\n  - {{ id: g, task: t, needs: [f] }}\n"))
    };
    let v1 = fan("[1, 2]", "max_concurrency: 1, ");
    let mut sim = started(&v1);
    complete(&mut sim, "f[0]", json!({"n": 1}));
    // Running: f[1] in flight.
    let p = plan_to(&sim, &fan("[1, 2, 3]", "max_concurrency: 1, "));
    assert_eq!(judged(&p), expect(&[(ForEachChanged, "f", false)]));
    assert!(
        p.changes[0].reason.starts_with("running: `f` is waiting (and 1 more open unit)"),
        "{}",
        p.changes[0].reason
    );
    let p = plan_to(&sim, &fan("[1, 2]", "max_concurrency: 2, "));
    assert_eq!(judged(&p), expect(&[(PolicyChanged, "f", true)]));
    complete(&mut sim, "f[1]", json!({"n": 2}));
    // Done, with its list frozen.
    assert_eq!(status(&sim, "f"), Some(UnitStatus::Succeeded));
    let p = plan_to(&sim, &fan("[1, 2, 3]", "max_concurrency: 1, "));
    assert_eq!(judged(&p), expect(&[(ForEachChanged, "f", false)]));
    assert!(p.changes[0].reason.contains("the fan-out of `f` was frozen from the old list"));
}

#[test]
fn task_contracts_are_checked_against_what_the_run_recorded() {
    let (sim, _) = a_done_b_running();
    let with_tasks = |tasks: &str| {
        def(&format!(
            "name: mig\nversion: \"2\"\ntasks: {tasks}\nsignals: {{ go: null, go2: null }}\n{}",
            chain()
        ))
    };
    // a's recorded output {n: 1} fails a contract that requires `m`.
    let strict = with_tasks("{ t: { output: { type: object, required: [m] } }, u: {}, undo: {} }");
    let p = plan_to(&sim, &strict);
    assert_eq!(
        judged(&p),
        expect(&[
            (OutputContractChanged, "a", false),
            (OutputContractChanged, "b", true),
            (OutputContractChanged, "c", true),
        ])
    );
    assert!(
        p.changes[0].reason.contains("the recorded output of `a` fails the new contract"),
        "{}",
        p.changes[0].reason
    );
    let fits = with_tasks("{ t: { output: { type: object, required: [n] } }, u: {}, undo: {} }");
    assert!(plan_to(&sim, &fits).is_safe());
    // The task's version: the attempt in flight was offered as the old one.
    let bumped = with_tasks("{ t: { version: \"2\" }, u: {}, undo: {} }");
    assert_eq!(
        judged(&plan_to(&sim, &bumped)),
        expect(&[(TaskChanged, "a", true), (TaskChanged, "b", false), (TaskChanged, "c", true)])
    );
    let input = with_tasks("{ t: { input: { type: object } }, u: {}, undo: {} }");
    assert!(plan_to(&sim, &input).changes.iter().all(|c| c.kind == InputContractChanged && c.safe));
    // A task no step calls in both versions is reported once, for the workflow.
    let undo = with_tasks("{ t: {}, u: {}, undo: { version: \"2\" } }");
    assert_eq!(judged(&plan_to(&sim, &undo)), expect(&[(TaskChanged, "", true)]));
}

#[test]
fn the_recorded_input_is_checked_against_the_new_input_contract() {
    let (sim, _) = a_done_b_running();
    let with_input = |schema: &str| wf("2", &format!("input: {schema}\n{}", chain()));
    let p = plan_to(&sim, &with_input("{ type: object, required: [order] }"));
    assert_eq!(judged(&p), expect(&[(InputContractChanged, "", false)]));
    let e = exec(&sim, "x");
    let (error, _) =
        migrate(&e.def, &with_input("{ type: object, required: [order] }"), &e.state).unwrap_err();
    assert!(
        error.message.contains("input contract added (the run's recorded input fails it"),
        "{}",
        error.message
    );
    let p = plan_to(
        &sim,
        &with_input("{ type: object, properties: { x: { type: string, default: a } } }"),
    );
    assert_eq!(judged(&p), expect(&[(InputContractChanged, "", true)]));
}

#[test]
fn workflow_declarations_are_safe_unless_the_run_waits_on_them() {
    let (sim, _) = a_done_b_running();
    let extra = |head: &str, tail: &str| {
        def(&format!("name: mig\nversion: \"2\"\n{head}{}{tail}", chain()))
    };
    let p = plan_to(
        &sim,
        &extra(
            "description: now with more\ntimeout: 1h\nlimits: { max_fan_out: 9 }\ntasks: { t: {}, u: {}, undo: {} }\nsignals: { go: null }\nqueries: { q: \"${{ 1 }}\" }\n",
            "",
        ),
    );
    assert_eq!(
        judged(&p),
        expect(&[
            (SettingsChanged, "", true),
            (SettingsChanged, "", true),
            (SettingsChanged, "", true),
            (SignalChanged, "", true),
            (QueryChanged, "", true),
        ])
    );
    let p = plan_to(&sim, &wf("2", &format!("steps:\n{A}{B}{C}output: \"${{{{ 1 }}}}\"\n")));
    assert_eq!(judged(&p), expect(&[(OutputChanged, "", true)]));
    // Only the version differs: nothing to list, but the run still moves to the new hash.
    let next = wf("2", &chain());
    let p = plan_to(&sim, &next);
    assert!(p.is_empty() && p.is_safe());
    let e = exec(&sim, "x");
    let (_, events) = migrate(&e.def, &next, &e.state).unwrap();
    assert_eq!(events.len(), 1);
}

#[test]
fn a_signal_a_running_await_waits_for_cannot_go() {
    let v1 = wf("1", "steps:\n  - { id: w, await: go }\n  - { id: z, task: t, needs: [w] }\n");
    let sim = started(&v1);
    assert_eq!(status(&sim, "w"), Some(UnitStatus::Waiting));
    let only_go2 = |steps: &str| {
        def(&format!("name: mig\nversion: \"2\"\ntasks: {{ t: {{}}, u: {{}}, undo: {{}} }}\nsignals: {{ go2: null }}\nsteps:\n{steps}"))
    };
    // The await now waits for another signal: both the step and the signal are refused.
    let p =
        plan_to(&sim, &only_go2("  - { id: w, await: go2 }\n  - { id: z, task: t, needs: [w] }\n"));
    assert_eq!(judged(&p), expect(&[(SignalChanged, "", false), (TaskChanged, "w", false)]));
    assert_eq!(p.changes[0].reason, "running: `w` waits for it");
    // The await goes too: it is cancelled, so nothing waits for the signal any more.
    let p = plan_to(&sim, &only_go2("  - { id: z, task: t }\n"));
    assert_eq!(
        judged(&p),
        expect(&[(SignalChanged, "", true), (Removed, "w", true), (NeedsChanged, "z", true)])
    );
    assert_eq!(p.cancel, ["w"]);
}

#[test]
fn an_update_handler_an_open_update_waits_on_cannot_go() {
    let v1 = wf(
        "1",
        "updates:\n  resize: { steps: [ { id: apply, task: t } ], reply: \"${{ 1 }}\" }\nsteps:\n  - { id: a, task: t }\n",
    );
    let mut sim = started(&v1);
    let update = Command::Update { name: "resize".into(), args: json!({}), update_id: None };
    sim.command("x", update).unwrap();
    assert!(sim.run(100));
    let key = unit_starting(&sim, "update:resize@");
    let key = key.as_str();
    assert!(key.ends_with(":apply"), "{key}");
    assert_eq!(status(&sim, key), Some(UnitStatus::Dispatched));
    let p = plan_to(&sim, &wf("2", "steps:\n  - { id: a, task: t }\n"));
    assert_eq!(
        judged(&p),
        expect(&[(UpdateChanged, "", false), (Removed, "update:resize:apply", true)])
    );
    assert_eq!(p.cancel, [key]);
    // Its reply may change: it is evaluated when the update completes.
    let p = plan_to(
        &sim,
        &wf("2", "updates:\n  resize: { steps: [ { id: apply2, renamed_from: apply, task: t } ], reply: \"${{ 2 }}\" }\nsteps:\n  - { id: a, task: t }\n"),
    );
    assert_eq!(
        judged(&p),
        expect(&[(UpdateChanged, "", true), (Renamed, "update:resize:apply", false)])
    );
    complete(&mut sim, key, json!(1));
    // The update completed: its instance is not live any more, so its steps may go.
    assert!(exec(&sim, "x").state.open_updates.is_empty());
    let p = plan_to(&sim, &wf("2", "steps:\n  - { id: a, task: t }\n"));
    assert_eq!(
        judged(&p),
        expect(&[(UpdateChanged, "", true), (Removed, "update:resize:apply", true)])
    );
    assert!(p.cancel.is_empty());
}

#[test]
fn handler_bodies_are_judged_per_instance_with_qualified_names() {
    let v1 = wf(
        "1",
        "steps:\n  - { id: a, task: t }\non_signal:\n  go: [ { id: n, task: t }, { id: m, task: t, needs: [n] } ]\n",
    );
    let mut sim = started(&v1);
    sim.signal("x", "go", json!({})).unwrap();
    assert!(sim.run(100));
    let n = unit_starting(&sim, "on_signal:go@");
    let instance = n.trim_end_matches('n').to_string();
    complete(&mut sim, &n, json!(1));
    let v2 = wf("2", "steps:\n  - { id: a, task: t }\non_signal:\n  go: [ { id: n2, task: t } ]\n");
    let p = plan_to(&sim, &v2);
    assert_eq!(
        judged(&p),
        expect(&[
            (Added, "on_signal:go:n2", true),
            (Removed, "on_signal:go:n", false),
            (Removed, "on_signal:go:m", true)
        ])
    );
    assert_eq!(p.cancel, [format!("{instance}m")]);
    let v2 = wf("2", "steps:\n  - { id: a, task: t }\non_signal:\n  go: [ { id: n2, renamed_from: n, task: t } ]\n");
    let p = sim.migrate("x", v2).unwrap();
    assert_eq!(p.renames, BTreeMap::from([("on_signal:go:n".into(), "on_signal:go:n2".into())]));
    assert!(sim.run(100));
    assert_eq!(status(&sim, &format!("{instance}n2")), Some(UnitStatus::Succeeded));
    assert_eq!(status(&sim, &format!("{instance}m")), Some(UnitStatus::Cancelled));
    complete(&mut sim, "a", json!(1));
    assert_eq!(exec(&sim, "x").state.status(), Status::Completed);
}

#[test]
fn dropping_a_compensation_the_wind_down_still_has_to_run_is_refused() {
    let steps = |c1: &str, c2: &str| {
        format!(
            "steps:\n  - {{ id: p, task: t{c1} }}\n  - {{ id: q, task: t, needs: [p]{c2} }}\n  - {{ id: r, task: t, needs: [q] }}\n"
        )
    };
    let undo = ", compensate: { task: undo }";
    let v1 = wf("1", &steps(undo, undo));
    let mut sim = started(&v1);
    complete(&mut sim, "p", json!(1));
    complete(&mut sim, "q", json!(2));
    fail(&mut sim, "r");
    // Compensation in reverse: q's runs (its worker silent), p's is due.
    assert_eq!(exec(&sim, "x").state.status(), Status::Compensating);
    assert_eq!(status(&sim, "compensate:q"), Some(UnitStatus::Dispatched));
    assert_eq!(status(&sim, "compensate:p"), None);
    let p = plan_to(&sim, &wf("2", &steps("", undo)));
    assert_eq!(judged(&p), expect(&[(PolicyChanged, "p", false)]));
    assert!(p.changes[0].reason.contains("`p` is still to be compensated"));
    let p = plan_to(&sim, &wf("2", &steps(undo, "")));
    assert_eq!(judged(&p), expect(&[(PolicyChanged, "q", true)]));
}

#[test]
fn refusals_name_their_code() {
    let (mut sim, v1) = a_done_b_running();
    let e = exec(&sim, "x");
    // Another workflow.
    let other = def(&format!("name: other\nversion: \"1\"\n{TASKS}{}", chain()));
    let (error, _) = migrate(&v1, &other, &e.state).unwrap_err();
    assert_eq!(error.code, ErrorCode::InvalidArgument);
    // A `from` the run is not on.
    let v2 = wf("2", &format!("steps:\n{A}{B}{C}"));
    let (error, _) = migrate(&v2, &v1, &e.state).unwrap_err();
    assert_eq!(error.code, ErrorCode::InvalidArgument);
    // The same hash: nothing to do.
    let (p, events) = migrate(&v1, &v1, &e.state).unwrap();
    assert!(p.is_empty() && events.is_empty());
    // A closed run.
    complete(&mut sim, "b", json!({"n": 2}));
    complete(&mut sim, "c", json!({"n": 3}));
    let e = exec(&sim, "x");
    assert_eq!(e.state.status(), Status::Completed);
    let (error, p) = migrate(&v1, &v2, &e.state).unwrap_err();
    assert_eq!(error.code, ErrorCode::ExecutionFinished);
    assert!(!p.is_empty(), "the plan comes with the refusal");
    assert_eq!(sim.migrate("x", v2).unwrap_err().code, ErrorCode::ExecutionFinished);
}
