//! Worker pools and sticky workers (issue 27 item 5): `on: {label: value}` and `sticky:` on
//! task steps, `worker_labels:` and `sticky:` as the workflow's defaults — the accepted
//! shapes, their normal form, the scope of their expressions, and every refusal with its
//! path and code.

use orbit_definition::flow::{DEFAULT_STICKY_TIMEOUT_MS, MAX_LABELS};
use orbit_definition::{parse, parse_value, to_document, ErrorCode, Sticky, Template};
use serde_json::{json, Value};

mod common;
use common::errors_of;

fn doc(steps: Value) -> Value {
    json!({"name": "gpu", "version": "1", "tasks": {"work": null}, "steps": steps})
}

fn round_trips(document: &Value) -> orbit_definition::Definition {
    let d = parse(&document.to_string()).unwrap_or_else(|e| panic!("{e}\n{document}"));
    let again = parse_value(&to_document(&d)).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(again, d, "the normalised document parses back to the same definition");
    d
}

#[test]
fn labels_and_sticky_on_a_step_are_accepted_and_round_trip() {
    let d = round_trips(&doc(json!([{
        "id": "a", "task": "work",
        "on": {"pool": "gpu", "region": "${{ input.region }}"},
        "sticky": {"timeout": "2s"},
    }])));
    let labels = d.steps[0].flow.labels.as_ref().expect("declared");
    assert_eq!(labels["pool"], Template::Literal(json!("gpu")));
    assert!(matches!(labels["region"], Template::Expr(_)));
    assert_eq!(d.steps[0].flow.sticky, Some(Sticky::On { timeout_ms: 2_000 }));
    let normal = to_document(&d);
    assert_eq!(normal["steps"][0]["on"], json!({"pool": "gpu", "region": "${{ input.region }}"}));
    assert_eq!(normal["steps"][0]["sticky"], json!({"timeout": "2s"}));

    // `sticky: true` is the default timeout, written out in the normal form.
    let d = round_trips(&doc(json!([{"id": "a", "task": "work", "sticky": true}])));
    assert_eq!(d.steps[0].flow.sticky, Some(Sticky::On { timeout_ms: DEFAULT_STICKY_TIMEOUT_MS }));
    assert_eq!(to_document(&d)["steps"][0]["sticky"], json!({"timeout": "5s"}));
    let d = round_trips(&doc(json!([{"id": "a", "task": "work", "sticky": false}])));
    assert_eq!(d.steps[0].flow.sticky, Some(Sticky::Off));

    // Nothing declared: the normal form is what it was before.
    let plain = round_trips(&doc(json!([{"id": "a", "task": "work"}])));
    assert!(plain.steps[0].flow.is_empty());
    assert!(to_document(&plain)["steps"][0].get("on").is_none());
}

#[test]
fn the_workflow_defaults_read_only_the_input() {
    let mut d = doc(json!([{"id": "a", "task": "work"}]));
    d["worker_labels"] = json!({"pool": "${{ input.pool }}"});
    d["sticky"] = json!(true);
    let def = round_trips(&d);
    assert!(def.worker_labels.as_ref().is_some_and(|l| l.contains_key("pool")));
    assert_eq!(def.sticky, Some(Sticky::On { timeout_ms: DEFAULT_STICKY_TIMEOUT_MS }));

    d["worker_labels"] = json!({"pool": "${{ steps.a.output }}"});
    assert_eq!(errors_of(&d), [(ErrorCode::InvalidExpression, "worker_labels.pool".to_string())]);
}

#[test]
fn step_labels_see_the_element_and_order_the_step_after_what_it_reads() {
    let d = round_trips(&doc(json!([
        {"id": "first", "task": "work"},
        {"id": "each", "task": "work", "for_each": "${{ input.xs }}",
         "on": {"zone": "${{ item.zone }}", "pool": "${{ steps.first.output.pool }}"}},
    ])));
    assert_eq!(d.steps[1].deps.iter().collect::<Vec<_>>(), ["first"]);
    assert_eq!(
        errors_of(&doc(json!([{"id": "a", "task": "work", "on": {"zone": "${{ item }}"}}]))),
        [(ErrorCode::InvalidExpression, "steps[0].on.zone".to_string())]
    );
}

#[test]
fn bad_labels_and_timeouts_are_refused_at_their_paths() {
    let step = |extra: Value| {
        let mut s = json!({"id": "a", "task": "work"});
        for (k, v) in extra.as_object().unwrap() {
            s[k] = v.clone();
        }
        doc(json!([s]))
    };
    let cases = [
        (json!({"on": {"a b": "x"}}), ErrorCode::InvalidValue, r#"steps[0].on["a b"]"#),
        (json!({"on": {"pool": ""}}), ErrorCode::InvalidValue, "steps[0].on.pool"),
        (json!({"on": {"pool": "x".repeat(257)}}), ErrorCode::InvalidValue, "steps[0].on.pool"),
        (json!({"on": {"pool": 3}}), ErrorCode::InvalidType, "steps[0].on.pool"),
        (json!({"on": "gpu"}), ErrorCode::InvalidType, "steps[0].on"),
        (json!({"sticky": {"timeout": "2h"}}), ErrorCode::InvalidValue, "steps[0].sticky.timeout"),
        (
            json!({"sticky": {"timeout": "0s"}}),
            ErrorCode::InvalidDuration,
            "steps[0].sticky.timeout",
        ),
        (json!({"sticky": {"after": "1s"}}), ErrorCode::UnknownField, "steps[0].sticky.after"),
        (json!({"sticky": "yes"}), ErrorCode::InvalidType, "steps[0].sticky"),
    ];
    for (extra, code, path) in cases {
        let got = errors_of(&step(extra.clone()));
        assert!(got.contains(&(code, path.to_string())), "{extra}: {got:?}");
    }
    let many: serde_json::Map<String, Value> =
        (0..=MAX_LABELS).map(|i| (format!("l{i}"), json!("v"))).collect();
    let got = errors_of(&step(json!({"on": many})));
    assert_eq!(got, [(ErrorCode::InvalidValue, "steps[0].on".to_string())]);
    // Task steps only.
    let got = errors_of(&doc(json!([{"id": "s", "sleep": "1s", "on": {"pool": "gpu"}}])));
    assert_eq!(got, [(ErrorCode::UnknownField, "steps[0].on".to_string())]);
}

#[test]
fn the_fuzz_seed_with_worker_pools_parses() {
    let dir =
        std::path::PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../fuzz/corpus/definition");
    let text = std::fs::read_to_string(dir.join("worker-pools.yaml")).unwrap();
    let d = parse(&text).unwrap_or_else(|e| panic!("worker-pools.yaml: {e}"));
    assert!(d.worker_labels.is_some() && d.sticky.is_some());
    assert!(d.steps.iter().all(|s| s.flow.sticky.is_some() || s.id == "fetch"));
    round_trips(&serde_norway::from_str::<Value>(&text).unwrap());
}
