//! Search attributes (issue 28 item 1): `search_attributes`, the workflow's `search` and a
//! main step's `search` — accepted shapes, the normal form, and every refusal with its path
//! and code.

use orbit_definition::search::MAX_SEARCH_ATTRIBUTES;
use orbit_definition::{parse, parse_value, to_document, ErrorCode, SearchType};
use serde_json::{json, Value};

mod common;
use common::{errors_of, has};

fn doc(extra: Value) -> Value {
    let mut d = json!({
        "name": "billing",
        "version": "1",
        "tasks": {"quote": null},
        "search_attributes": {
            "customer": "keyword", "note": "text", "count": "int", "amount": "double",
            "vip": "bool", "due": "datetime", "tags": "keyword_list",
        },
        "search": {"customer": "${{ input.customer }}"},
        "steps": [{
            "id": "quote",
            "task": "quote",
            "search": {"amount": "${{ steps.quote.output.total }}"},
        }],
    });
    d.as_object_mut().unwrap().extend(extra.as_object().unwrap().clone());
    d
}

#[test]
fn declarations_and_values_are_read_and_round_trip() {
    let d = parse(&doc(json!({})).to_string()).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(d.search_attributes.len(), 7);
    assert_eq!(d.search_attributes["tags"], SearchType::KeywordList);
    assert_eq!(d.search_attributes["due"], SearchType::Datetime);
    assert!(d.search.contains_key("customer"));
    assert!(d.steps[0].search.contains_key("amount"));
    // A step's search reading its own output adds no dependency (no self-cycle).
    assert!(d.steps[0].deps.is_empty());
    let again = parse_value(&to_document(&d)).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(again, d);
    // Declaring attributes changes the definition's identity.
    let mut plain = doc(json!({}));
    let o = plain.as_object_mut().unwrap();
    o.remove("search_attributes");
    o.remove("search");
    o["steps"][0].as_object_mut().unwrap().remove("search");
    let plain = parse(&plain.to_string()).unwrap();
    assert_ne!(plain.hash, d.hash);
    assert!(plain.search_attributes.is_empty() && to_document(&plain).get("search").is_none());
}

#[test]
fn every_refusal_has_its_path_and_code() {
    let cases = [
        (
            json!({"search_attributes": {"a": "string"}}),
            ErrorCode::InvalidValue,
            "search_attributes.a",
        ),
        (json!({"search_attributes": {"a": 5}}), ErrorCode::InvalidType, "search_attributes.a"),
        (
            json!({"search_attributes": {"a-b": "keyword"}}),
            ErrorCode::InvalidId,
            "search_attributes[\"a-b\"]",
        ),
        (
            json!({"search_attributes": {"status": "keyword"}}),
            ErrorCode::ReservedName,
            "search_attributes.status",
        ),
        (
            json!({"search_attributes": {"failed_step": "keyword"}}),
            ErrorCode::ReservedName,
            "search_attributes.failed_step",
        ),
        (json!({"search": {"nope": "x"}}), ErrorCode::UnknownReference, "search.nope"),
        (
            json!({"search": {"amount": "${{ steps.quote.output.total }}"}}),
            ErrorCode::InvalidExpression,
            "search.amount",
        ),
        (
            json!({"search": {"customer": "${{ nope }}"}}),
            ErrorCode::InvalidExpression,
            "search.customer",
        ),
        (
            json!({"steps": [{"id": "q", "task": "quote", "search": {"x": 1}}]}),
            ErrorCode::UnknownReference,
            "steps[0].search.x",
        ),
        (
            json!({"steps": [{"id": "q", "task": "quote"}], "on": {"failure": [
                {"id": "h", "task": "quote", "search": {"customer": "x"}}
            ]}}),
            ErrorCode::UnknownField,
            "on.failure[0].search",
        ),
        (
            json!({"steps": [{"id": "g", "group": {"steps": [
                {"id": "q", "task": "quote", "search": {"customer": "x"}}
            ]}}]}),
            ErrorCode::UnknownField,
            "steps[0].group.steps[0].search",
        ),
    ];
    for (extra, code, path) in cases {
        let errors = errors_of(&doc(extra.clone()));
        assert!(has(&errors, code, path), "{extra}: want {code} at {path}, got {errors:?}");
    }
    let many: serde_json::Map<String, Value> =
        (0..=MAX_SEARCH_ATTRIBUTES).map(|i| (format!("a{i}"), json!("int"))).collect();
    let errors = errors_of(&doc(json!({"search_attributes": many})));
    assert!(errors.contains(&(ErrorCode::DocumentLimit, "search_attributes".into())), "{errors:?}");
}

#[test]
fn the_editor_schema_accepts_search_attributes_and_rejects_a_bad_type() {
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/schema/workflow-definition.schema.json");
    let schema: Value = serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap();
    let v = jsonschema::validator_for(&schema).expect("the schema compiles");
    let written = doc(json!({}));
    assert!(
        v.is_valid(&written),
        "{:?}",
        v.iter_errors(&written).map(|e| e.to_string()).collect::<Vec<_>>()
    );
    let normalised = to_document(&parse(&written.to_string()).unwrap());
    assert!(v.is_valid(&normalised));
    assert!(!v.is_valid(&doc(json!({"search_attributes": {"a": "string"}}))));
}
