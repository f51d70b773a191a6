//! Loops (issue 29 items 1 and 2): `for_each` over a group and `repeat` — accepted shapes,
//! what their steps' expressions see, the normal form (and hash) and every refusal with its
//! path and code.

use orbit_definition::limits::{MAX_GROUP_DEPTH, MAX_REPEAT_ITERATIONS};
use orbit_definition::{parse, parse_value, to_document, ErrorCode, StepKind};
use serde_json::{json, Value};

mod common;
use common::{errors_of, has};

fn with(step: Value) -> Value {
    json!({
        "name": "loops",
        "version": "1",
        "tasks": {"work": null},
        "steps": [
            {"id": "a", "task": "work"},
            step,
            {"id": "z", "compute": "${{ steps.l.output }}"},
        ],
    })
}

fn repeat(body: Value) -> Value {
    with(json!({"id": "l", "repeat": body}))
}

#[test]
fn a_for_each_group_sees_its_element_and_round_trips() {
    let doc = with(json!({
        "id": "l",
        "for_each": "${{ steps.a.output.orders }}",
        "as": "order",
        "max_concurrency": 2,
        "group": {
            "steps": [
                {"id": "charge", "task": "work", "input": {"order": "${{ order }}", "i": "${{ index }}"}},
                {"id": "ship", "task": "work", "input": "${{ steps.charge.output }}"},
            ],
            "output": "${{ {'order': order.id, 'shipped': steps.ship.output} }}",
        },
    }));
    let d = parse(&doc.to_string()).unwrap_or_else(|e| panic!("{e}"));
    let l = d.step("l").expect("the group");
    assert!(matches!(l.kind, StepKind::Group { .. }));
    let each = l.for_each.as_ref().expect("for_each");
    assert_eq!((each.as_name.as_str(), each.max_concurrency), ("order", Some(2)));
    assert_eq!(l.deps.iter().collect::<Vec<_>>(), ["a"]);
    // Units of element i are `l[i].<id>`: the path finds the step whatever the index.
    assert!(d.step("l[3].ship").is_some_and(|s| s.id == "ship"));
    assert_eq!(d.step("l.ship").unwrap().deps.iter().collect::<Vec<_>>(), ["charge"]);
    let normal = to_document(&d);
    assert_eq!(normal["steps"][1]["as"], json!("order"));
    assert_eq!(parse_value(&normal).expect("normal form parses"), d);

    // Outside the group the element is not in scope.
    let mut bad = doc.clone();
    bad["steps"][2]["compute"] = json!("${{ order }}");
    let errors = errors_of(&bad);
    assert!(
        errors.iter().any(|(c, p)| *c == ErrorCode::InvalidExpression && p == "steps[2].compute"),
        "{errors:?}"
    );
}

#[test]
fn a_repeat_reads_iteration_previous_and_its_steps_and_round_trips() {
    let doc = repeat(json!({
        "steps": [
            {"id": "poll", "task": "work", "input": {"n": "${{ iteration }}", "last": "${{ previous }}", "a": "${{ steps.a.output }}"}},
            {"id": "wait", "needs": "poll", "sleep": "1s"},
        ],
        "until": "${{ steps.poll.output.done || output.count > 3 || iteration >= 5 }}",
        "max_iterations": 20,
        "output": "${{ {'count': iteration, 'state': steps.poll.output} }}",
    }));
    let d = parse(&doc.to_string()).unwrap_or_else(|e| panic!("{e}"));
    let l = d.step("l").expect("the repeat");
    let StepKind::Repeat(r) = &l.kind else { panic!("{:?}", l.kind) };
    assert_eq!((r.max_iterations, r.steps.len()), (20, 2));
    assert!(r.output.is_some());
    // Reading an outer step (`a`) orders the whole repeat after it; `poll` is its own.
    assert_eq!(l.deps.iter().collect::<Vec<_>>(), ["a"]);
    assert!(d.step("l[7].wait").is_some());
    let normal = to_document(&d);
    assert_eq!(normal["steps"][1]["repeat"]["max_iterations"], json!(20));
    assert_eq!(parse_value(&normal).expect("normal form parses"), d);

    // A repeat continues as new near the history limit unless it opts out; only the
    // opt-out is written in the normal form (a document without it keeps its hash).
    assert!(r.continue_as_new);
    assert!(normal["steps"][1]["repeat"].get("continue_as_new").is_none());
    let mut off = doc.clone();
    off["steps"][1]["repeat"]["continue_as_new"] = json!(false);
    let d2 = parse(&off.to_string()).unwrap_or_else(|e| panic!("{e}"));
    let StepKind::Repeat(r2) = &d2.step("l").unwrap().kind else { panic!("a repeat") };
    assert!(!r2.continue_as_new);
    let normal2 = to_document(&d2);
    assert_eq!(normal2["steps"][1]["repeat"]["continue_as_new"], json!(false));
    assert_eq!(parse_value(&normal2).expect("normal form parses"), d2);
    assert_ne!(d2.hash, d.hash);
    let mut on = doc.clone();
    on["steps"][1]["repeat"]["continue_as_new"] = json!(true);
    assert_eq!(parse(&on.to_string()).unwrap().hash, d.hash);

    // `until` reading an outer step orders the repeat after it too.
    let doc = repeat(json!({
        "steps": [{"id": "p", "task": "work"}],
        "until": "${{ steps.a.output == steps.p.output }}",
        "max_iterations": 2,
    }));
    let d = parse(&doc.to_string()).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(d.step("l").unwrap().deps.iter().collect::<Vec<_>>(), ["a"]);
}

#[test]
fn repeat_refusals_have_a_path_and_a_code() {
    let at = "steps[1].repeat";
    let one = json!([{"id": "p", "task": "work"}]);
    let cases = [
        (
            json!({"steps": one, "until": "${{ true }}"}),
            ErrorCode::MissingField,
            format!("{at}.max_iterations"),
        ),
        (
            json!({"steps": one, "until": "${{ true }}", "max_iterations": MAX_REPEAT_ITERATIONS + 1}),
            ErrorCode::DocumentLimit,
            format!("{at}.max_iterations"),
        ),
        (
            json!({"steps": one, "until": "${{ true }}", "max_iterations": 0}),
            ErrorCode::InvalidValue,
            format!("{at}.max_iterations"),
        ),
        (
            json!({"steps": one, "until": "${{ true }}", "max_iterations": "3"}),
            ErrorCode::InvalidType,
            format!("{at}.max_iterations"),
        ),
        (json!({"steps": one, "max_iterations": 3}), ErrorCode::MissingField, at.to_string()),
        (
            json!({"steps": one, "until": "done", "max_iterations": 3}),
            ErrorCode::InvalidExpression,
            format!("{at}.until"),
        ),
        (
            json!({"steps": one, "until": "${{ steps.nowhere.output }}", "max_iterations": 3}),
            ErrorCode::UnknownReference,
            format!("{at}.until"),
        ),
        (
            json!({"steps": [], "until": "${{ true }}", "max_iterations": 3}),
            ErrorCode::InvalidValue,
            format!("{at}.steps"),
        ),
        (
            json!({"steps": one, "until": "${{ true }}", "max_iterations": 3, "whilst": 1}),
            ErrorCode::UnknownField,
            format!("{at}.whilst"),
        ),
        (
            json!({"steps": one, "until": "${{ true }}", "max_iterations": 3, "continue_as_new": "no"}),
            ErrorCode::InvalidType,
            format!("{at}.continue_as_new"),
        ),
        (
            json!({"steps": [{"id": "p", "continue_as_new": {"input": 1}}], "until": "${{ true }}", "max_iterations": 3}),
            ErrorCode::InvalidValue,
            format!("{at}.steps[0].continue_as_new"),
        ),
    ];
    for (body, code, path) in cases {
        let errors = errors_of(&repeat(body.clone()));
        assert!(has(&errors, code, &path), "{body}: expected {code:?} at {path}, got {errors:?}");
    }
    // The limit is named in the message.
    let doc = repeat(json!({"steps": one, "until": "${{ true }}", "max_iterations": 10_001}));
    let e = parse(&doc.to_string()).unwrap_err().to_string();
    assert!(e.contains("10000") && e.contains("MAX_REPEAT_ITERATIONS"), "{e}");
    // Fields a repeat does not take.
    for (field, value) in [("for_each", json!([1, 2])), ("compensate", json!({"task": "work"}))] {
        let mut doc = repeat(json!({"steps": one, "until": "${{ true }}", "max_iterations": 3}));
        doc["steps"][1][field] = value;
        let errors = errors_of(&doc);
        let path = format!("steps[1].{field}");
        assert!(has(&errors, ErrorCode::UnknownField, &path), "{field}: {errors:?}");
    }
    // `iteration` and `previous` exist inside the repeat only.
    let doc = with(json!({"id": "l", "compute": "${{ iteration }}"}));
    let errors = errors_of(&doc);
    assert!(errors.iter().any(|(c, _)| *c == ErrorCode::InvalidExpression), "{errors:?}");
}

#[test]
fn loops_count_as_nesting_levels() {
    // `levels` nested lists, alternately a repeat and a `for_each` group.
    let nest = |levels: usize| {
        let mut step = json!({"id": "leaf", "task": "work"});
        for i in 0..levels {
            let id = if i + 1 == levels { "l" } else { "n" };
            step = if i % 2 == 0 {
                json!({"id": id, "repeat": {"steps": [step], "until": "${{ true }}", "max_iterations": 2}})
            } else {
                json!({"id": id, "for_each": [1], "group": {"steps": [step]}})
            };
        }
        with(step)
    };
    let d = parse(&nest(MAX_GROUP_DEPTH).to_string()).unwrap_or_else(|e| panic!("{e}"));
    let path = format!("l[0]{}.leaf", ".n[0]".repeat(MAX_GROUP_DEPTH - 1));
    assert!(d.step(&path).is_some(), "{path}");
    let errors = errors_of(&nest(MAX_GROUP_DEPTH + 1));
    assert_eq!(errors.len(), 1, "{errors:?}");
    assert_eq!(errors[0].0, ErrorCode::DocumentLimit);
    assert!(errors[0].1.ends_with(".repeat") || errors[0].1.ends_with(".group"), "{errors:?}");
}
