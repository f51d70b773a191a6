//! Failure branches (`on_failure`) and races (issue 29): accepted shapes, the normal form
//! (and hash), paths into the branches, and every refusal with its path and code.

use orbit_definition::limits::MAX_GROUP_DEPTH;
use orbit_definition::{parse, parse_value, to_document, Body, ErrorCode, StepKind};
use serde_json::{json, Value};

mod common;
use common::{errors_of, has};

fn doc(steps: Value) -> Value {
    json!({
        "name": "shop",
        "version": "1",
        "tasks": {"work": null, "undo": null},
        "signals": {"go": null},
        "steps": steps,
    })
}

fn recovering() -> Value {
    json!({
        "id": "pay",
        "needs": ["a"],
        "task": "work",
        "compensate": {"task": "undo"},
        "on_failure": {
            "steps": [
                {"id": "n", "task": "work", "input": "${{ failure.code + steps.a.output }}"},
                {"id": "m", "needs": ["n"], "compute": "${{ steps.n.output }}"},
            ],
            "output": "${{ {'code': failure.code, 'n': steps.n.output} }}",
        },
    })
}

#[test]
fn on_failure_reads_failure_and_outer_steps_and_round_trips() {
    let d = doc(json!([
        {"id": "a", "task": "work"},
        recovering(),
        {"id": "z", "compute": "${{ steps.pay.output }}"},
    ]));
    let d = parse(&d.to_string()).unwrap_or_else(|e| panic!("{e}"));
    let pay = d.step("pay").expect("pay");
    let branch = pay.on_failure.as_ref().expect("on_failure");
    assert_eq!(branch.steps.len(), 2);
    assert!(branch.output.is_some());
    // Paths into the branch, as unit keys name them.
    assert_eq!(d.step("pay.on_failure.m").unwrap().deps.iter().collect::<Vec<_>>(), ["n"]);
    assert_eq!(d.list_at(&Body::Main, "pay.on_failure.").len(), 2);
    assert!(d.step("pay.on_failure").is_none() && d.step("a.on_failure.n").is_none());
    let normal = to_document(&d);
    assert_eq!(normal["steps"][1]["on_failure"]["steps"][1]["id"], json!("m"));
    assert_eq!(parse_value(&normal).expect("normal form parses"), d);
}

#[test]
fn a_race_runs_branches_with_unique_ids_and_round_trips() {
    let d = doc(json!([
        {"id": "a", "task": "work"},
        {"id": "r", "race": [
            {"steps": [{"id": "w", "await": "go"}], "output": "${{ steps.w.output }}"},
            {"steps": [
                {"id": "s", "sleep": "1m"},
                {"id": "t", "needs": ["s"], "compute": "${{ steps.a.output }}"},
            ]},
        ]},
        {"id": "z", "compute": "${{ steps.r.output.winner }}"},
    ]));
    let d = parse(&d.to_string()).unwrap_or_else(|e| panic!("{e}"));
    let r = d.step("r").expect("race");
    let StepKind::Race { branches } = &r.kind else { panic!("{:?}", r.kind) };
    assert_eq!(branches.len(), 2);
    assert!(branches.iter().all(|b| b.when.is_none()));
    // Reading `a` inside a branch orders the race after `a`.
    assert_eq!(r.deps.iter().collect::<Vec<_>>(), ["a"]);
    assert_eq!(d.step("r.1.t").unwrap().deps.iter().collect::<Vec<_>>(), ["s"]);
    assert_eq!(d.list_at(&Body::Main, "r.0.").len(), 1);
    let normal = to_document(&d);
    assert_eq!(normal["steps"][1]["race"][1]["steps"][0]["sleep"], json!("1m"));
    assert_eq!(parse_value(&normal).expect("normal form parses"), d);
}

#[test]
fn a_step_without_a_branch_keeps_its_hash() {
    let plain = doc(json!([{"id": "a", "task": "work"}]));
    let with = doc(json!([{"id": "a", "task": "work", "on_failure": {"steps": [
        {"id": "b", "compute": 1}
    ]}}]));
    let (plain, with) = (parse(&plain.to_string()).unwrap(), parse(&with.to_string()).unwrap());
    assert!(to_document(&plain)["steps"][0].get("on_failure").is_none());
    assert_ne!(plain.hash, with.hash);
}

#[test]
fn on_failure_refusals_have_a_path_and_a_code() {
    let branch = json!({"steps": [{"id": "b", "compute": 1}]});
    let cases = [
        (
            json!({"id": "a", "task": "work", "on_failure": []}),
            ErrorCode::InvalidType,
            "steps[0].on_failure",
        ),
        (
            json!({"id": "a", "task": "work", "on_failure": {"steps": []}}),
            ErrorCode::InvalidValue,
            "steps[0].on_failure.steps",
        ),
        (
            json!({"id": "a", "task": "work", "on_failure": {"steps": [{"id": "b", "compute": 1}], "outptu": 1}}),
            ErrorCode::UnknownField,
            "steps[0].on_failure.outptu",
        ),
        (
            json!({"id": "a", "task": "work", "continue_on_failure": true, "on_failure": branch}),
            ErrorCode::InvalidValue,
            "steps[0].on_failure",
        ),
        (
            json!({"id": "a", "task": "work", "for_each": [1], "on_failure": branch}),
            ErrorCode::UnknownField,
            "steps[0].on_failure",
        ),
        (
            json!({"id": "a", "group": {"steps": [{"id": "b", "compute": 1}]}, "on_failure": branch}),
            ErrorCode::UnknownField,
            "steps[0].on_failure",
        ),
        (
            json!({"id": "a", "task": "work", "on_failure": {"steps": [
                {"id": "b", "compute": 1}, {"id": "b", "compute": 2}
            ]}}),
            ErrorCode::DuplicateId,
            "steps[0].on_failure.steps[1].id",
        ),
        (
            json!({"id": "a", "task": "work", "on_failure": {"steps": [
                {"id": "b", "needs": ["a"], "compute": 1}
            ]}}),
            ErrorCode::UnknownReference,
            "steps[0].on_failure.steps[0].needs[0]",
        ),
        // `failure` is only in sight inside a branch (and in `on` handlers).
        (
            json!({"id": "a", "compute": "${{ failure.code }}"}),
            ErrorCode::InvalidExpression,
            "steps[0].compute",
        ),
    ];
    for (step, code, path) in cases {
        let errors = errors_of(&doc(json!([step.clone()])));
        assert!(has(&errors, code, path), "{step}: expected {code:?} at {path}, got {errors:?}");
    }
}

#[test]
fn race_refusals_have_a_path_and_a_code() {
    let one = json!([{"id": "a", "compute": 1}]);
    let cases = [
        (
            json!({"id": "r", "race": {"steps": one}}),
            ErrorCode::InvalidType,
            "steps[0].race".to_string(),
        ),
        (
            json!({"id": "r", "race": [{"steps": one}]}),
            ErrorCode::InvalidValue,
            "steps[0].race".into(),
        ),
        (
            json!({"id": "r", "race": [{"steps": one}, {"steps": [{"id": "b", "compute": 1}, {"id": "a", "compute": 2}]}]}),
            ErrorCode::DuplicateId,
            "steps[0].race[1].steps[1].id".into(),
        ),
        (
            json!({"id": "r", "race": [{"steps": one}, {"steps": []}]}),
            ErrorCode::InvalidValue,
            "steps[0].race[1].steps".into(),
        ),
        (
            json!({"id": "r", "race": [{"steps": one}, {"when": true, "steps": one}]}),
            ErrorCode::UnknownField,
            "steps[0].race[1].when".into(),
        ),
        (
            json!({"id": "r", "race": [{"steps": one}, {"steps": one}], "compensate": {"task": "undo"}}),
            ErrorCode::UnknownField,
            "steps[0].compensate".into(),
        ),
    ];
    for (step, code, path) in cases {
        let errors = errors_of(&doc(json!([step.clone()])));
        assert!(has(&errors, code, &path), "{step}: expected {code:?} at {path}, got {errors:?}");
    }
    // No step outside may need (or read) a branch's step.
    let errors = errors_of(&doc(json!([
        {"id": "r", "race": [{"steps": one}, {"steps": [{"id": "b", "compute": 1}]}]},
        {"id": "z", "needs": ["b"], "compute": "${{ steps.a.output }}"},
    ])));
    assert!(has(&errors, ErrorCode::UnknownReference, "steps[1].needs[0]"), "{errors:?}");
    assert!(has(&errors, ErrorCode::UnknownReference, "steps[1].compute"), "{errors:?}");
}

#[test]
fn branches_count_toward_the_nesting_limit() {
    // A failure branch at the deepest list is one level too deep.
    let mut inner =
        json!({"id": "x", "task": "work", "on_failure": {"steps": [{"id": "y", "compute": 1}]}});
    for _ in 0..MAX_GROUP_DEPTH {
        inner = json!({"id": "g", "group": {"steps": [inner]}});
    }
    let errors = errors_of(&doc(json!([inner])));
    assert!(
        errors.iter().any(|(c, p)| *c == ErrorCode::DocumentLimit && p.ends_with(".on_failure")),
        "{errors:?}"
    );
}
