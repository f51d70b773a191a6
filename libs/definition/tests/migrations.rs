//! `migrations:` hints: read, kept in the normal form and the hash, matched by version
//! pattern, and refused with their path and code when malformed.

use orbit_definition::{parse, to_document, ErrorCode, Template};
use serde_json::json;

const HEAD: &str = "name: t\nversion: \"2.0\"\ntasks:\n  work: { version: \"1\" }\n\
                    steps:\n  - { id: first, renamed_from: a, task: work }\n  \
                    - { id: c, compute: \"${{ steps.first.output }}\" }\n";

fn errors_of(doc: &str) -> Vec<(ErrorCode, String)> {
    parse(doc).expect_err("should be rejected").into_iter().map(|e| (e.code, e.path)).collect()
}

fn with(migrations: &str) -> String {
    format!("{HEAD}migrations:\n{migrations}")
}

#[test]
fn hints_are_read_normalised_hashed_and_matched() {
    let doc = with(
        "  - from: \"1.*\"\n    outputs:\n      first: \"${{ {'value': output, 'was': steps.a.status} }}\"\n\
         \x20 - from: [\"0.9\", 0.8]\n    outputs:\n      first: { value: \"${{ output }}\", n: 1 }\n",
    );
    let d = parse(&doc).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(d.migrations.len(), 2);
    assert_eq!(d.migrations[0].from, ["1.*"]);
    assert_eq!(d.migrations[1].from, ["0.9", "0.8"], "numbers are stringified");
    assert!(matches!(d.migrations[0].outputs["first"], Template::Expr(_)));
    assert!(matches!(d.migrations[1].outputs["first"], Template::Object(_)));

    assert_eq!(d.migration_hint("1.0").map(|(i, _)| i), Some(0));
    assert_eq!(d.migration_hint("1.2.3").map(|(i, _)| i), Some(0));
    assert_eq!(d.migration_hint("0.8").map(|(i, _)| i), Some(1));
    assert_eq!(d.migration_hint("1").map(|(i, _)| i), None, "`1.*` needs a dot");
    assert_eq!(d.migration_hint("2.0").map(|(i, _)| i), None);
    assert_eq!(d.migrations[1].matching("0.8"), Some("0.8"));

    let normal = to_document(&d);
    assert_eq!(
        normal["migrations"],
        json!([
            {"from": ["1.*"], "outputs": {"first": "${{ {'value': output, 'was': steps.a.status} }}"}},
            {"from": ["0.9", "0.8"], "outputs": {"first": {"value": "${{ output }}", "n": 1}}}
        ])
    );
    let again = parse(&normal.to_string()).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(again, d);
    assert_eq!(again.hash, d.hash);
    // Part of the identity; absent stays absent (and the hash of a document without
    // hints is what it was).
    let plain = parse(HEAD).unwrap_or_else(|e| panic!("{e}"));
    assert_ne!(plain.hash, d.hash);
    assert!(to_document(&plain).get("migrations").is_none());
    let other = parse(&with("  - from: \"1.*\"\n    outputs: { first: \"${{ output }}\" }\n"))
        .unwrap_or_else(|e| panic!("{e}"));
    assert_ne!(other.hash, d.hash);
}

#[test]
fn outputs_must_name_task_steps_of_the_main_body() {
    let doc = with("  - from: \"1\"\n    outputs: { nope: 1, c: 2, first: 3 }\n");
    assert_eq!(
        errors_of(&doc),
        [
            (ErrorCode::UnknownReference, "migrations[0].outputs.nope".into()),
            (ErrorCode::InvalidValue, "migrations[0].outputs.c".into()),
        ]
    );
    let e = parse(&doc).unwrap_err();
    assert!(e.errors()[0].message.contains("steps: c, first"), "{}", e.errors()[0].message);
    assert!(e.errors()[1].message.contains("compute step"), "{}", e.errors()[1].message);
    // A handler step is not a main-body step.
    let handler = format!(
        "{HEAD}on:\n  failure: [ {{ id: alert, task: work }} ]\n\
         migrations:\n  - {{ from: \"1\", outputs: {{ alert: 1 }} }}\n"
    );
    assert_eq!(
        errors_of(&handler),
        [(ErrorCode::UnknownReference, "migrations[0].outputs.alert".into())]
    );
    let empty = with("  - { from: \"1\", outputs: {} }\n");
    assert_eq!(errors_of(&empty), [(ErrorCode::InvalidValue, "migrations[0].outputs".into())]);
}

#[test]
fn from_must_be_version_patterns() {
    let doc = with(
        "  - { from: \"1.?\", outputs: { first: 1 } }\n\
         \x20 - { from: [\"1\", \"a b\", true], outputs: { first: 1 } }\n\
         \x20 - { from: [], outputs: { first: 1 } }\n\
         \x20 - { from: { v: 1 }, outputs: { first: 1 } }\n",
    );
    assert_eq!(
        errors_of(&doc),
        [
            (ErrorCode::InvalidValue, "migrations[0].from".into()),
            (ErrorCode::InvalidValue, "migrations[1].from[1]".into()),
            (ErrorCode::InvalidType, "migrations[1].from[2]".into()),
            (ErrorCode::InvalidValue, "migrations[2].from".into()),
            (ErrorCode::InvalidType, "migrations[3].from".into()),
        ]
    );
}

#[test]
fn the_shape_of_a_hint_is_checked() {
    assert_eq!(errors_of(&with("  x: 1\n")), [(ErrorCode::InvalidType, "migrations".into())]);
    let doc = with(
        "  - 3\n  - { outputs: { first: 1 } }\n  - { from: \"1\" }\n\
         \x20 - { from: \"1\", outputs: { first: 1 }, to: \"2\" }\n  - { from: \"1\", outputs: [1] }\n",
    );
    assert_eq!(
        errors_of(&doc),
        [
            (ErrorCode::InvalidType, "migrations[0]".into()),
            (ErrorCode::MissingField, "migrations[1]".into()),
            (ErrorCode::MissingField, "migrations[2]".into()),
            (ErrorCode::UnknownField, "migrations[3].to".into()),
            (ErrorCode::InvalidType, "migrations[4].outputs".into()),
        ]
    );
}

#[test]
fn mappings_are_checked_like_every_expression() {
    let doc = with("  - from: \"1\"\n    outputs:\n      first: { v: 1, w: \"${{ 1 + }}\" }\n");
    assert_eq!(
        errors_of(&doc),
        [(ErrorCode::InvalidExpression, "migrations[0].outputs.first.w".into())]
    );
    let doc = with("  - from: \"1\"\n    outputs:\n      first: { v: \"${{ item.x }}\" }\n");
    assert_eq!(
        errors_of(&doc),
        [(ErrorCode::InvalidExpression, "migrations[0].outputs.first.v".into())]
    );
    let e = parse(&doc).unwrap_err();
    let message = &e.errors()[0].message;
    assert!(message.contains("in scope here: input, steps, execution, output"), "{message}");
    // `steps.<id>` reads the old run: an id this version lacks is fine.
    assert!(parse(&with(
        "  - { from: \"1\", outputs: { first: \"${{ steps.gone.output }}\" } }\n"
    ))
    .is_ok());
    // The expression limits apply.
    let long = format!("{}0", "1 + ".repeat(3_000));
    let doc =
        with(&format!("  - {{ from: \"1\", outputs: {{ first: \"${{{{ {long} }}}}\" }} }}\n"));
    assert_eq!(
        errors_of(&doc),
        [(ErrorCode::ExpressionLimit, "migrations[0].outputs.first".into())]
    );
}
