//! Debounce and singleton starts (issue 27 item 6): the workflow's `dedupe: {key, window,
//! keep?}` — accepted shapes, the normal form, the key's scope and every refusal with its
//! path and code.

use orbit_definition::dedupe::{MAX_DEDUPE_WINDOW_MS, MIN_DEDUPE_WINDOW_MS};
use orbit_definition::{parse, parse_value, to_document, ErrorCode, Keep};
use serde_json::{json, Value};

mod common;
use common::errors_of;

fn doc(dedupe: Value) -> Value {
    json!({
        "name": "shop",
        "version": "1",
        "dedupe": dedupe,
        "tasks": {"work": null},
        "steps": [{"id": "a", "task": "work"}],
    })
}

#[test]
fn dedupe_is_accepted_and_round_trips_with_keep_written() {
    let d = parse(&doc(json!({"key": "${{ input.account }}", "window": "30s"})).to_string())
        .expect("valid");
    let dedupe = d.dedupe.as_ref().expect("declared");
    assert_eq!((dedupe.window_ms, dedupe.keep), (30_000, Keep::First));
    let normal = to_document(&d);
    assert_eq!(
        normal["dedupe"],
        json!({"key": "${{ input.account }}", "window": "30s", "keep": "first"})
    );
    assert_eq!(parse_value(&normal).expect("normal form parses"), d);
    let explicit = parse(
        &doc(json!({"key": "${{ input.account }}", "window": "30s", "keep": "first"})).to_string(),
    )
    .unwrap();
    assert_eq!(explicit.hash, d.hash, "one spelling per meaning");

    let last =
        parse(&doc(json!({"key": "k-${{ input.n }}", "window": "1s", "keep": "last"})).to_string())
            .unwrap();
    assert_eq!(last.dedupe.as_ref().map(|d| d.keep), Some(Keep::Last));
    assert_ne!(last.hash, d.hash);
    let without = parse(
        &json!({"name": "shop", "version": "1", "tasks": {"work": null},
        "steps": [{"id": "a", "task": "work"}]})
        .to_string(),
    )
    .unwrap();
    assert!(without.dedupe.is_none() && to_document(&without).get("dedupe").is_none());
}

#[test]
fn windows_are_bounded() {
    assert_eq!((MIN_DEDUPE_WINDOW_MS, MAX_DEDUPE_WINDOW_MS), (1_000, 86_400_000));
    for ok in ["1s", "24h"] {
        assert!(parse(&doc(json!({"key": "k", "window": ok})).to_string()).is_ok(), "{ok}");
    }
    for bad in ["999ms", "24h1s"] {
        assert_eq!(
            errors_of(&doc(json!({"key": "k", "window": bad}))),
            vec![(ErrorCode::InvalidValue, "dedupe.window".to_string())],
            "{bad}"
        );
    }
}

#[test]
fn refusals_name_the_field() {
    assert_eq!(
        errors_of(&doc(json!({"window": "1s"}))),
        vec![(ErrorCode::MissingField, "dedupe".to_string())]
    );
    assert_eq!(
        errors_of(&doc(json!({"key": "k"}))),
        vec![(ErrorCode::MissingField, "dedupe".to_string())]
    );
    assert_eq!(
        errors_of(&doc(json!({"key": "${{ execution.id }}", "window": "1s"}))),
        vec![(ErrorCode::InvalidExpression, "dedupe.key".to_string())]
    );
    assert_eq!(
        errors_of(&doc(json!({"key": 3, "window": "1s"}))),
        vec![(ErrorCode::InvalidType, "dedupe.key".to_string())]
    );
    assert_eq!(
        errors_of(&doc(json!({"key": "", "window": "1s"}))),
        vec![(ErrorCode::InvalidValue, "dedupe.key".to_string())]
    );
    assert_eq!(
        errors_of(&doc(json!({"key": "k", "window": "1s", "keep": "newest"}))),
        vec![(ErrorCode::InvalidValue, "dedupe.keep".to_string())]
    );
    assert_eq!(errors_of(&doc(json!("k"))), vec![(ErrorCode::InvalidType, "dedupe".to_string())]);
}
