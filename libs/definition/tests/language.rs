//! The definition language's second round (issue 29): `continue_on_failure` and groups —
//! accepted shapes, the normal form (and hash) and every refusal with its path and code.

use orbit_definition::limits::{MAX_GROUP_DEPTH, MAX_STEPS};
use orbit_definition::{caught_output, parse, parse_value, to_document, ErrorCode, StepKind};
use serde_json::{json, Value};

mod common;
use common::{errors_of, has};

fn doc(step: Value) -> Value {
    json!({
        "name": "shop",
        "version": "1",
        "tasks": {"work": null},
        "steps": [step, {"id": "z", "needs": ["a"], "compute": "${{ steps.a.output }}"}],
    })
}

#[test]
fn continue_on_failure_is_accepted_on_every_kind_but_continue_as_new_and_round_trips() {
    for step in [
        json!({"id": "a", "task": "work", "continue_on_failure": true}),
        json!({"id": "a", "compute": "${{ input.x }}", "continue_on_failure": true}),
        json!({"id": "a", "sleep": "1s", "continue_on_failure": true}),
        json!({"id": "a", "task": "work", "for_each": [1, 2], "continue_on_failure": true}),
    ] {
        let d = parse(&doc(step.clone()).to_string()).unwrap_or_else(|e| panic!("{step}: {e}"));
        assert!(d.steps[0].continue_on_failure, "{step}");
        assert!(!d.steps[1].continue_on_failure);
        let normal = to_document(&d);
        assert_eq!(normal["steps"][0]["continue_on_failure"], json!(true));
        assert!(normal["steps"][1].get("continue_on_failure").is_none());
        assert_eq!(parse_value(&normal).expect("normal form parses"), d);
    }
}

#[test]
fn false_is_the_default_and_keeps_the_hash() {
    let without = parse(&doc(json!({"id": "a", "task": "work"})).to_string()).unwrap();
    let off =
        parse(&doc(json!({"id": "a", "task": "work", "continue_on_failure": false})).to_string())
            .unwrap();
    assert_eq!(without.hash, off.hash);
    let on =
        parse(&doc(json!({"id": "a", "task": "work", "continue_on_failure": true})).to_string())
            .unwrap();
    assert_ne!(without.hash, on.hash);
}

#[test]
fn refusals_have_a_path_and_a_code() {
    let cases = [
        (
            json!({"id": "a", "task": "work", "continue_on_failure": "yes"}),
            (ErrorCode::InvalidType, "steps[0].continue_on_failure"),
        ),
        (
            json!({"id": "a", "continue_as_new": {"input": 1}, "continue_on_failure": true}),
            (ErrorCode::UnknownField, "steps[0].continue_on_failure"),
        ),
    ];
    for (step, (code, path)) in cases {
        let errors = errors_of(&doc(step.clone()));
        assert!(has(&errors, code, path), "{step}: expected {code:?} at {path}, got {errors:?}");
    }
}

#[test]
fn the_caught_output_has_the_documented_shape() {
    assert_eq!(
        caught_output("DECLINED", "no", None),
        json!({"failed": true, "error": {"code": "DECLINED", "message": "no"}})
    );
    assert_eq!(
        caught_output("DECLINED", "no", Some(&json!({"left": 3}))),
        json!({"failed": true, "error": {"code": "DECLINED", "message": "no", "details": {"left": 3}}})
    );
}

fn grouped(group: Value) -> Value {
    json!({
        "name": "shop",
        "version": "1",
        "tasks": {"work": null},
        "steps": [
            {"id": "a", "task": "work"},
            {"id": "g", "group": group},
            {"id": "z", "compute": "${{ steps.g.output }}"},
        ],
    })
}

#[test]
fn a_group_reads_its_steps_and_outer_steps_and_round_trips() {
    let doc = grouped(json!({
        "steps": [
            {"id": "a", "task": "work", "input": "${{ steps.b.output }}"},
            {"id": "b", "task": "work", "compensate": {"task": "work"}},
            {"id": "c", "needs": "a", "compute": "${{ steps.a.output }}", "continue_on_failure": true},
        ],
        "output": "${{ steps.c.output }}",
    }));
    // `a` inside the group shadows the outer `a`; the group reads nothing outside.
    let d = parse(&doc.to_string()).unwrap_or_else(|e| panic!("{e}"));
    let g = d.step("g").expect("group");
    let StepKind::Group { steps, output } = &g.kind else { panic!("{:?}", g.kind) };
    assert!(output.is_some());
    assert_eq!(steps.len(), 3);
    assert!(g.deps.is_empty(), "{:?}", g.deps);
    assert_eq!(d.step("g.a").unwrap().deps.iter().collect::<Vec<_>>(), ["b"]);
    assert_eq!(d.step("g.c").unwrap().deps.iter().collect::<Vec<_>>(), ["a"]);
    assert_eq!(d.step("z").unwrap().deps.iter().collect::<Vec<_>>(), ["g"]);
    let normal = to_document(&d);
    assert_eq!(normal["steps"][1]["group"]["steps"][2]["continue_on_failure"], json!(true));
    assert_eq!(parse_value(&normal).expect("normal form parses"), d);

    // Reading an outer step orders the whole group after it.
    let doc = grouped(json!({"steps": [
        {"id": "x", "group": {"steps": [{"id": "y", "compute": "${{ steps.a.output }}"}]}}
    ]}));
    let d = parse(&doc.to_string()).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(d.step("g").unwrap().deps.iter().collect::<Vec<_>>(), ["a"]);
    assert!(d.step("g.x").unwrap().deps.is_empty());
}

#[test]
fn group_refusals_have_a_path_and_a_code() {
    let at = "steps[1].group";
    let cases = [
        (
            json!({"steps": [{"id": "a", "task": "work"}, {"id": "a", "task": "work"}]}),
            ErrorCode::DuplicateId,
            format!("{at}.steps[1].id"),
        ),
        (
            json!({"steps": [{"id": "b", "needs": ["z"], "task": "work"}]}),
            ErrorCode::UnknownReference,
            format!("{at}.steps[0].needs[0]"),
        ),
        (
            json!({"steps": [{"id": "b", "compute": "${{ steps.nowhere.output }}"}]}),
            ErrorCode::UnknownReference,
            format!("{at}.steps[0].compute"),
        ),
        (
            json!({"steps": [{"id": "b", "needs": "c", "task": "work"}, {"id": "c", "needs": "b", "task": "work"}]}),
            ErrorCode::Cycle,
            format!("{at}.steps[0]"),
        ),
        (json!({"steps": []}), ErrorCode::InvalidValue, format!("{at}.steps")),
        (json!({"output": 1}), ErrorCode::MissingField, at.to_string()),
        (
            json!({"steps": [{"id": "b", "task": "work"}], "outptu": 1}),
            ErrorCode::UnknownField,
            format!("{at}.outptu"),
        ),
        (
            json!({"steps": [{"id": "b", "continue_as_new": {"input": 1}}]}),
            ErrorCode::InvalidValue,
            format!("{at}.steps[0].continue_as_new"),
        ),
    ];
    for (group, code, path) in cases {
        let errors = errors_of(&grouped(group.clone()));
        assert!(has(&errors, code, &path), "{group}: expected {code:?} at {path}, got {errors:?}");
    }
    // Fields a group does not take (`for_each` it does: `tests/loops.rs`).
    for (field, value) in
        [("compensate", json!({"task": "work"})), ("retry", json!({})), ("input", json!(1))]
    {
        let mut doc = grouped(json!({"steps": [{"id": "b", "task": "work"}]}));
        doc["steps"][1][field] = value;
        let errors = errors_of(&doc);
        let path = format!("steps[1].{field}");
        assert!(has(&errors, ErrorCode::UnknownField, &path), "{field}: {errors:?}");
    }
}

#[test]
fn groups_nest_up_to_the_limit() {
    let nest = |levels: usize| {
        let mut inner = json!({"steps": [{"id": "leaf", "task": "work"}]});
        for _ in 1..levels {
            inner = json!({"steps": [{"id": "n", "group": inner}]});
        }
        grouped(inner)
    };
    let d = parse(&nest(MAX_GROUP_DEPTH).to_string()).unwrap_or_else(|e| panic!("{e}"));
    let path = format!("g{}.leaf", ".n".repeat(MAX_GROUP_DEPTH - 1));
    assert!(d.step(&path).is_some(), "{path}");
    let errors = errors_of(&nest(MAX_GROUP_DEPTH + 1));
    let deepest = format!("steps[1].group{}", ".steps[0].group".repeat(MAX_GROUP_DEPTH));
    assert_eq!(errors, [(ErrorCode::DocumentLimit, deepest)]);
}

#[test]
fn steps_inside_groups_count_against_the_step_limit() {
    let many: Vec<Value> =
        (0..=MAX_STEPS / 2).map(|i| json!({"id": format!("s{i}"), "sleep": "1s"})).collect();
    let doc = json!({
        "name": "big", "version": "1",
        "steps": [
            {"id": "g1", "group": {"steps": many.clone()}},
            {"id": "g2", "group": {"steps": many}},
        ],
    });
    let errors = errors_of(&doc);
    assert_eq!(errors.len(), 1, "{errors:?}");
    assert_eq!(errors[0].0, ErrorCode::DocumentLimit);
}

fn switched(branches: Value) -> Value {
    json!({
        "name": "shop",
        "version": "1",
        "tasks": {"work": null},
        "steps": [
            {"id": "a", "task": "work"},
            {"id": "sw", "switch": branches},
            {"id": "z", "compute": "${{ steps.sw.output.branch }}"},
        ],
    })
}

#[test]
fn a_switch_reads_its_conditions_and_branches_and_round_trips() {
    let doc = switched(json!([
        {"when": "${{ steps.a.output > 1.0 }}", "steps": [{"id": "x", "task": "work"}]},
        {"when": false, "steps": [{"id": "x", "task": "work"}, {"id": "y", "needs": "x", "compute": 1}], "output": "${{ steps.y.output }}"},
        {"default": [{"id": "d", "compute": "${{ input }}"}]},
    ]));
    let d = parse(&doc.to_string()).unwrap_or_else(|e| panic!("{e}"));
    let sw = d.step("sw").unwrap();
    let StepKind::Switch { branches } = &sw.kind else { panic!("{:?}", sw.kind) };
    assert_eq!(branches.len(), 3);
    assert!(branches[2].when.is_none() && branches[1].output.is_some());
    // The condition reads `a`: the switch runs after it.
    assert_eq!(sw.deps.iter().collect::<Vec<_>>(), ["a"]);
    assert_eq!(d.step("sw.1.y").unwrap().deps.iter().collect::<Vec<_>>(), ["x"]);
    assert!(d.step("sw.2.d").is_some() && d.step("sw.3.d").is_none());
    let normal = to_document(&d);
    assert_eq!(normal["steps"][1]["switch"][2]["default"][0]["id"], json!("d"));
    assert_eq!(parse_value(&normal).expect("normal form parses"), d);
}

#[test]
fn switch_refusals_have_a_path_and_a_code() {
    let step = json!([{"id": "b", "task": "work"}]);
    let cases = [
        (json!([]), ErrorCode::InvalidValue, "steps[1].switch"),
        (json!({"when": true}), ErrorCode::InvalidType, "steps[1].switch"),
        (json!([{"steps": step}]), ErrorCode::MissingField, "steps[1].switch[0]"),
        (json!([{"when": true}]), ErrorCode::MissingField, "steps[1].switch[0]"),
        (
            json!([{"default": step}, {"when": true, "steps": step}]),
            ErrorCode::InvalidValue,
            "steps[1].switch[0]",
        ),
        (
            json!([{"when": true, "steps": step, "default": step}]),
            ErrorCode::InvalidValue,
            "steps[1].switch[0]",
        ),
        (
            json!([{"when": "x ${{ 1 }}", "steps": step}]),
            ErrorCode::InvalidExpression,
            "steps[1].switch[0].when",
        ),
        (json!([{"when": true, "steps": []}]), ErrorCode::InvalidValue, "steps[1].switch[0].steps"),
        (
            json!([{"when": true, "steps": step, "els": 1}]),
            ErrorCode::UnknownField,
            "steps[1].switch[0].els",
        ),
        (
            json!([{"when": true, "steps": [{"id": "b", "needs": "a", "task": "work"}]}]),
            ErrorCode::UnknownReference,
            "steps[1].switch[0].steps[0].needs",
        ),
    ];
    for (branches, code, path) in cases {
        let errors = errors_of(&switched(branches.clone()));
        assert!(
            has(&errors, code, path),
            "{branches}: expected {code:?} at {path}, got {errors:?}"
        );
    }
    let mut doc = switched(json!([{"default": step}]));
    doc["steps"][1]["compensate"] = json!({"task": "work"});
    assert!(errors_of(&doc).contains(&(ErrorCode::UnknownField, "steps[1].compensate".into())));
}
