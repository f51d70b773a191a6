//! Workflow-level `concurrency:` (issue 27 item 1): the accepted shapes, the normal form
//! (always a list, `on_limit` written) and every refusal with its path and code.

use orbit_definition::{parse, parse_value, to_document, ErrorCode, OnLimit};
use serde_json::{json, Value};

mod common;
use common::errors_of;

fn doc(concurrency: Value) -> Value {
    json!({
        "name": "billing",
        "version": "1",
        "concurrency": concurrency,
        "tasks": {"charge": null},
        "steps": [{"id": "a", "task": "charge"}],
    })
}

#[test]
fn a_list_or_one_object_parses_and_round_trips() {
    let d = parse(
        &doc(json!([
            {"key": "${{ input.account }}", "limit": 1},
            {"key": "all", "limit": 10, "on_limit": "cancel_newest"},
        ]))
        .to_string(),
    )
    .unwrap();
    assert_eq!(d.concurrency.len(), 2);
    assert_eq!(d.concurrency[0].on_limit, OnLimit::Queue);
    assert_eq!(d.concurrency[1].on_limit, OnLimit::CancelNewest);
    assert_eq!(d.concurrency[1].limit, 10);
    let normal = to_document(&d);
    assert_eq!(normal["concurrency"][0]["on_limit"], "queue", "{normal}");
    assert_eq!(parse_value(&normal).unwrap(), d);

    let one = json!({"key": "${{ input.a }}", "limit": 2, "on_limit": "cancel_in_progress"});
    let d = parse(&doc(one).to_string()).unwrap();
    assert_eq!(d.concurrency[0].on_limit, OnLimit::CancelInProgress);
    assert!(to_document(&d)["concurrency"].is_array());
}

#[test]
fn a_definition_without_it_keeps_its_normal_form() {
    let mut plain = doc(Value::Null);
    plain.as_object_mut().unwrap().remove("concurrency");
    let d = parse(&plain.to_string()).unwrap();
    assert!(d.concurrency.is_empty());
    assert!(to_document(&d).get("concurrency").is_none());
}

#[test]
fn refusals_name_the_field() {
    let cases = [
        (json!([]), ErrorCode::InvalidValue, "concurrency"),
        (json!([{"limit": 1}]), ErrorCode::MissingField, "concurrency[0]"),
        (json!([{"key": "k"}]), ErrorCode::MissingField, "concurrency[0]"),
        (json!([{"key": "k", "limit": 0}]), ErrorCode::InvalidValue, "concurrency[0].limit"),
        (
            json!([{"key": "k", "limit": 1, "on_limit": "drop"}]),
            ErrorCode::InvalidValue,
            "concurrency[0].on_limit",
        ),
        (json!([{"key": "", "limit": 1}]), ErrorCode::InvalidValue, "concurrency[0].key"),
        (
            json!([{"key": "k", "limit": 1, "group": "g"}]),
            ErrorCode::UnknownField,
            "concurrency[0].group",
        ),
        (
            json!([{"key": "${{ steps.a.output }}", "limit": 1}]),
            ErrorCode::InvalidExpression,
            "concurrency[0].key",
        ),
    ];
    for (value, code, path) in cases {
        let errors = errors_of(&doc(value.clone()));
        assert!(
            errors.iter().any(|(c, p)| *c == code && p == path),
            "{value}: expected {code:?} at {path}, got {errors:?}"
        );
    }
    let many: Vec<Value> = (0..9).map(|i| json!({"key": format!("k{i}"), "limit": 1})).collect();
    let errors = errors_of(&doc(Value::Array(many)));
    assert!(errors.iter().any(|(c, p)| *c == ErrorCode::InvalidValue && p == "concurrency"));
}

#[test]
fn the_json_schema_takes_the_normal_form_and_refuses_a_bad_on_limit() {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("schema/workflow-definition.schema.json");
    let schema: Value = serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap();
    let v = jsonschema::validator_for(&schema).expect("the schema compiles");
    let good = doc(json!([{"key": "${{ input.a }}", "limit": 1, "on_limit": "cancel_newest"}]));
    let d = parse(&good.to_string()).unwrap();
    assert!(v.is_valid(&good) && v.is_valid(&to_document(&d)));
    assert!(!v.is_valid(&doc(json!([{"key": "k", "limit": 1, "on_limit": "drop"}]))));
    assert!(!v.is_valid(&doc(json!([{"key": "k", "limit": 0}]))));
}
