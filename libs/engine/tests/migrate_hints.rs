//! Migration hints (`migrations:` in the target definition): a done step whose task's output
//! contract changed is refused without a hint and migrated with one; the mapped outputs are
//! recorded in `DefinitionMigrated`, replace the recorded ones (elements and the fan-out
//! list too), are what later steps read, and replay without being evaluated again; a
//! mapping that fails (evaluation, budget, payload limit, contract) is refused with its
//! reason and path; a hint whose `from` does not match is ignored.

mod common;

use common::migrating::{defs, expect, judged, plan_to};
use common::*;
use orbit_definition::Definition;
use orbit_engine::command::Command;
use orbit_engine::migrate::{migrate, ChangeKind, Plan};
use orbit_engine::replay::replay_defs;
use orbit_engine::sim::{Sim, TaskOutcome};
use orbit_engine::{ErrorCode, Event, Status, UnitStatus};
use serde_json::{json, Value};
use std::collections::BTreeMap;

use ChangeKind::*;

/// Version `version` of workflow `hint` with these lines after `name` and `version`.
fn wf(version: &str, rest: &str) -> Definition {
    def(&format!("name: hint\nversion: \"{version}\"\nsignals: {{ go: null }}\n{rest}"))
}

/// A simulator whose workers never answer: tests complete units by hand.
fn started(d: &Definition) -> Sim {
    let mut sim = Sim::new();
    sim.register(d.clone());
    sim.on_task("t", |_| TaskOutcome::Hang);
    sim.on_task("u", |_| TaskOutcome::Hang);
    sim.start("hint", "x", json!({"k": 7})).unwrap();
    assert!(sim.run(100));
    sim
}

fn complete(sim: &mut Sim, unit: &str, output: Value) {
    let request = sim.requests().iter().rev().find(|r| r.step == unit);
    let token = request.unwrap_or_else(|| panic!("`{unit}` was never offered")).token.clone();
    sim.command("x", Command::Complete { token, output }).unwrap();
    assert!(sim.run(100));
}

fn change(p: &Plan, kind: ChangeKind) -> &orbit_engine::migrate::Change {
    p.changes.iter().find(|c| c.kind == kind).unwrap_or_else(|| panic!("no {kind:?} in {p:#?}"))
}

fn output(sim: &Sim, unit: &str) -> Option<Value> {
    exec(sim, "x").state.unit(unit).and_then(|u| u.output.clone())
}

/// v1: `a` (done, output `{n: 1}`), `g` waiting for `go`, `b` after both reading `a`.
const V1: &str = "tasks: { t: {}, u: {} }\nsteps:\n\
    \x20 - { id: a, task: t, input: { n: 1 } }\n\
    \x20 - { id: g, await: go }\n\
    \x20 - { id: b, task: u, needs: [a, g], input: \"${{ steps.a.output.n }}\" }\n\
    output: \"${{ steps.a.output }}\"\n";

/// v2: `a` renamed to `first`, whose task now returns `{value: {n}, from}`; `b` reads the
/// new shape.
fn v2(migrations: &str) -> Definition {
    wf(
        "2",
        &format!(
            "tasks:\n  t: {{ output: {{ type: object, required: [value, from], properties: \
             {{ value: {{ type: object, required: [n] }}, from: {{ type: integer }} }} }} }}\n  u: {{}}\n\
             steps:\n  - {{ id: first, renamed_from: a, task: t, input: {{ n: 1 }} }}\n\
             \x20 - {{ id: g, await: go }}\n\
             \x20 - {{ id: b, task: u, needs: [first, g], input: \"${{{{ steps.first.output.value.n }}}}\" }}\n\
             output: \"${{{{ steps.first.output }}}}\"\n{migrations}"
        ),
    )
}

/// `first` maps `a`'s recorded output, reading it both as `output` and as the old
/// `steps.a`, and the old run's input.
const HINT: &str = "migrations:\n  - from: \"1\"\n    outputs:\n      \
                    first: { value: \"${{ output }}\", from: \"${{ input.k + steps.a.output.n }}\" }\n";

fn a_done() -> (Sim, Definition) {
    let v1 = wf("1", V1);
    let mut sim = started(&v1);
    complete(&mut sim, "a", json!({"n": 1}));
    assert_eq!(exec(&sim, "x").state.unit("g").map(|u| u.status), Some(UnitStatus::Waiting));
    (sim, v1)
}

#[test]
fn a_changed_output_contract_is_refused_without_a_hint_and_mapped_with_one() {
    let (mut sim, v1) = a_done();
    let without = v2("");
    let p = plan_to(&sim, &without);
    assert_eq!(
        judged(&p),
        expect(&[
            (Renamed, "a", true),
            (OutputContractChanged, "a", false),
            (InputChanged, "b", true),
            (NeedsChanged, "b", true),
            (OutputChanged, "", true),
        ])
    );
    assert!(!p.is_safe());
    assert!(p.outputs.is_empty());
    assert!(
        change(&p, OutputContractChanged)
            .reason
            .contains("the recorded output of `a` fails the new contract"),
        "{p:#?}"
    );
    assert_eq!(sim.migrate("x", without).unwrap_err().code, ErrorCode::MigrationUnsafe);

    let with = v2(HINT);
    let p = plan_to(&sim, &with);
    assert!(p.is_safe(), "{p:#?}");
    let mapped = change(&p, OutputMapped);
    assert_eq!((mapped.step.as_str(), mapped.safe), ("a", true));
    assert_eq!(
        mapped.detail,
        "output mapped by migrations hint migrations[0].outputs.first (from `1`)"
    );
    assert_eq!(
        mapped.reason,
        "done: `a` succeeded: 1 recorded output replaced by the mapped ones, each within the \
         output contract of `t`"
    );
    assert!(
        change(&p, OutputContractChanged)
            .reason
            .ends_with("the outputs mapped by the migrations hint pass it"),
        "{p:#?}"
    );
    // Keyed as the unit is after the rename.
    let expected = json!({"value": {"n": 1}, "from": 8});
    assert_eq!(p.outputs, BTreeMap::from([("first".to_string(), expected.clone())]));

    let planned = sim.migrate("x", with.clone()).unwrap();
    assert_eq!(planned, p);
    let e = exec(&sim, "x");
    let recorded = e.history.last().unwrap();
    assert!(
        matches!(&recorded.event, Event::DefinitionMigrated { outputs, .. } if *outputs == p.outputs)
    );
    assert!(sim.run(100));
    assert_eq!(output(&sim, "first"), Some(expected.clone()));
    assert!(exec(&sim, "x").state.unit("a").is_none());

    // The step after it reads the mapped shape.
    sim.signal("x", "go", json!(null)).unwrap();
    assert!(sim.run(100));
    let offered = sim.requests().iter().find(|r| r.step == "b").expect("b offered");
    assert_eq!(offered.input, json!(1));
    complete(&mut sim, "b", json!("done"));
    let e = exec(&sim, "x");
    assert_eq!(e.state.status(), Status::Completed);
    assert_eq!(e.state.output, Some(expected));
    // Replay applies the recorded outputs as they are.
    replay_defs(&defs(&[&v1, &with]), &e.history, &no_limits()).unwrap();
}

#[test]
fn a_hint_whose_from_does_not_match_is_ignored_and_the_first_match_applies() {
    let (sim, _) = a_done();
    let without = plan_to(&sim, &v2(""));
    let other = v2(&HINT.replace("from: \"1\"", "from: [\"0.*\", \"1.*\", \"10\"]"));
    let p = plan_to(&sim, &other);
    assert_eq!(judged(&p), judged(&without));
    assert!(!p.is_safe() && p.outputs.is_empty());

    let second = v2(&format!(
        "{HINT}  - from: [\"0.9\", \"1\"]\n    outputs: {{ first: {{ value: {{ n: 1 }}, from: 0 }} }}\n"
    )
    .replace("from: \"1\"\n", "from: \"2*\"\n"));
    let p = plan_to(&sim, &second);
    assert!(p.is_safe(), "{p:#?}");
    assert_eq!(
        change(&p, OutputMapped).detail,
        "output mapped by migrations hint migrations[1].outputs.first (from `1`)"
    );
    assert_eq!(p.outputs["first"], json!({"value": {"n": 1}, "from": 0}));
}

#[test]
fn a_mapping_that_fails_is_refused_with_its_reason() {
    let (sim, _) = a_done();
    let refused = |first: &str, extra: &str| {
        let to = v2(&format!(
            "{extra}migrations:\n  - from: \"1\"\n    outputs: {{ first: {first} }}\n"
        ));
        let e = exec(&sim, "x");
        let (error, p) = migrate(&e.def, &to, &e.state).unwrap_err();
        assert_eq!(error.code, ErrorCode::MigrationUnsafe);
        assert!(p.outputs.is_empty());
        let mapped = change(&p, OutputMapped).clone();
        assert!(!mapped.safe);
        assert!(error.message.contains(&mapped.reason), "{}", error.message);
        mapped.reason
    };
    // The result fails the new contract.
    let reason = refused("\"${{ {'value': output} }}\"", "");
    assert!(
        reason.starts_with(
            "done: `a` succeeded: `a`: the mapped output fails the output contract of task `t`"
        ),
        "{reason}"
    );
    assert!(reason.contains("from"), "{reason}");
    // Evaluation fails.
    let reason = refused("\"${{ output.missing }}\"", "");
    assert!(
        reason.starts_with(
            "done: `a` succeeded: `a`: the mapping fails (EXPRESSION_ERROR): \
             migrations[0].outputs.first"
        ),
        "{reason}"
    );
    // Over the evaluation budget: refused before it runs.
    let big = "\"${{ {'value': {'n': [1,2,3,4,5,6,7,8,9,10].map(a, [1,2,3,4,5,6,7,8,9,10].map(b, \
               [1,2,3,4,5,6,7,8,9,10].map(c, [1,2,3,4,5,6,7,8,9,10].map(d, [1,2,3,4,5,6,7,8,9,10]\
               .map(e, [1,2,3,4,5,6,7,8,9,10].map(f, [1,2,3,4,5,6,7,8,9,10].map(g, \
               output)))))))}, 'from': 1} }}\"";
    let reason = refused(big, "");
    assert!(reason.contains("the mapping fails (EXPRESSION_LIMIT)"), "{reason}");
    // Over the workflow's payload limit.
    let reason = refused(
        "{ value: { n: 1, pad: \"0123456789012345678901234567890123456789\" }, from: 1 }",
        "limits: { max_payload_bytes: 40 }\n",
    );
    assert!(reason.contains("the mapped output"), "{reason}");
    assert!(reason.contains("40"), "{reason}");
}

/// A fan-out's recorded elements are mapped one by one, and a finished fan-out's list is
/// rebuilt from them; while it runs, the elements still in flight are left to the worker.
#[test]
fn fan_out_elements_are_mapped_and_the_list_rebuilt() {
    let v1 = wf(
        "1",
        "tasks: { t: {} }\nsteps:\n  - { id: f, task: t, for_each: [1, 2, 3], input: \"${{ item }}\" }\n\
         output: \"${{ steps.f.output }}\"\n",
    );
    let to = |version: &str| {
        wf(
            version,
            "tasks: { t: { output: { type: object, required: [v] } } }\n\
             steps:\n  - { id: f, task: t, for_each: [1, 2, 3], input: \"${{ item }}\" }\n\
             output: \"${{ steps.f.output.map(x, x.v) }}\"\n\
             migrations:\n  - { from: \"1\", outputs: { f: \"${{ {'v': output * 10.0} }}\" } }\n",
        )
    };
    // Running: two elements recorded, one in flight.
    let mut sim = started(&v1);
    complete(&mut sim, "f[0]", json!(1));
    complete(&mut sim, "f[1]", json!(2));
    let v2 = to("2");
    let p = sim.migrate("x", v2.clone()).unwrap();
    let mapped = change(&p, OutputMapped);
    assert!(mapped.safe && mapped.reason.starts_with("running: "), "{mapped:?}");
    assert!(mapped.reason.contains("2 recorded outputs replaced"), "{mapped:?}");
    assert_eq!(
        p.outputs,
        BTreeMap::from([("f[0]".to_string(), json!({"v": 10})), ("f[1]".into(), json!({"v": 20}))])
    );
    assert!(sim.run(100));
    complete(&mut sim, "f[2]", json!({"v": 30}));
    let e = exec(&sim, "x");
    assert_eq!(e.state.status(), Status::Completed);
    assert_eq!(e.state.output, Some(json!([10, 20, 30])));
    replay_defs(&defs(&[&v1, &v2]), &e.history, &no_limits()).unwrap();

    // Done: every element mapped and the step's own list rebuilt from them.
    let v1_wait = wf(
        "1",
        "tasks: { t: {} }\nsteps:\n  - { id: f, task: t, for_each: [1, 2, 3], input: \"${{ item }}\" }\n\
         \x20 - { id: g, await: go, needs: [f] }\noutput: \"${{ steps.f.output }}\"\n",
    );
    let mut sim = started(&v1_wait);
    for (i, n) in [(0, 1), (1, 2), (2, 3)] {
        complete(&mut sim, &format!("f[{i}]"), json!(n));
    }
    assert_eq!(output(&sim, "f"), Some(json!([1, 2, 3])));
    let v2_wait = wf(
        "2",
        "tasks: { t: { output: { type: object, required: [v] } } }\n\
         steps:\n  - { id: f, task: t, for_each: [1, 2, 3], input: \"${{ item }}\" }\n\
         \x20 - { id: g, await: go, needs: [f] }\noutput: \"${{ steps.f.output.map(x, x.v) }}\"\n\
         migrations:\n  - { from: \"1\", outputs: { f: \"${{ {'v': output * 10.0} }}\" } }\n",
    );
    let p = sim.migrate("x", v2_wait.clone()).unwrap();
    assert!(change(&p, OutputMapped).reason.contains("3 recorded outputs replaced"));
    assert_eq!(p.outputs["f"], json!([{"v": 10}, {"v": 20}, {"v": 30}]));
    assert!(sim.run(100));
    sim.signal("x", "go", json!(null)).unwrap();
    assert!(sim.run(100));
    let e = exec(&sim, "x");
    assert_eq!(e.state.output, Some(json!([10, 20, 30])));
    replay_defs(&defs(&[&v1_wait, &v2_wait]), &e.history, &no_limits()).unwrap();
}

#[test]
fn a_hint_on_a_step_with_nothing_recorded_maps_nothing() {
    let (sim, _) = a_done();
    // `b` is pending: nothing to map, and nothing recorded for it.
    let to = v2(&format!("{HINT}      b: \"${{{{ output }}}}\"\n"));
    let p = plan_to(&sim, &to);
    assert!(p.is_safe(), "{p:#?}");
    let b = p.changes.iter().find(|c| c.kind == OutputMapped && c.step == "b").expect("b judged");
    assert_eq!(b.reason, "pending: not started yet: no recorded output to map");
    assert_eq!(p.outputs.keys().collect::<Vec<_>>(), ["first"]);
}
