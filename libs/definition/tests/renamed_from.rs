//! `renamed_from`: a step's id in the previous version, read, kept in the normal form and the
//! hash, and refused with its path when it is malformed, names a step of the same list (its
//! own id included), or is claimed by two steps of one list.

use orbit_definition::{parse, to_document, ErrorCode};
use serde_json::json;

const HEAD: &str = "name: t\nversion: \"2\"\ntasks:\n  work: { version: \"1\" }\n";

fn errors_of(doc: &str) -> Vec<(ErrorCode, String)> {
    parse(doc).expect_err("should be rejected").into_iter().map(|e| (e.code, e.path)).collect()
}

#[test]
fn renamed_from_is_read_normalised_and_hashed() {
    let doc = format!(
        "{HEAD}signals: {{ note: null }}\nsteps:\n  - {{ id: a2, renamed_from: a, task: work }}\n  - {{ id: b, task: work }}\n\
         on:\n  failure: [ {{ id: alert2, renamed_from: alert, task: work }} ]\n\
         on_signal:\n  note: [ {{ id: n2, renamed_from: n, task: work }} ]\n\
         updates:\n  resize: {{ steps: [ {{ id: apply2, renamed_from: apply, task: work }} ] }}\n"
    );
    let d = parse(&doc).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(d.steps[0].renamed_from.as_deref(), Some("a"));
    assert_eq!(d.steps[1].renamed_from, None);
    assert_eq!(d.on.failure[0].renamed_from.as_deref(), Some("alert"));
    assert_eq!(d.on_signal["note"][0].renamed_from.as_deref(), Some("n"));
    assert_eq!(d.updates["resize"].steps[0].renamed_from.as_deref(), Some("apply"));
    let normal = to_document(&d);
    assert_eq!(normal["steps"][0]["renamed_from"], json!("a"));
    assert!(normal["steps"][1].get("renamed_from").is_none(), "absent stays absent");
    // The normal form parses back to the same definition.
    let again = parse(&normal.to_string()).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(again, d);
    // Part of the identity: the same document without it has another hash.
    let plain = parse(&format!(
        "{HEAD}signals: {{ note: null }}\nsteps:\n  - {{ id: a2, task: work }}\n  - {{ id: b, task: work }}\n\
         on:\n  failure: [ {{ id: alert2, renamed_from: alert, task: work }} ]\n\
         on_signal:\n  note: [ {{ id: n2, renamed_from: n, task: work }} ]\n\
         updates:\n  resize: {{ steps: [ {{ id: apply2, renamed_from: apply, task: work }} ] }}\n"
    ))
    .unwrap_or_else(|e| panic!("{e}"));
    assert_ne!(plain.hash, d.hash);
}

#[test]
fn a_malformed_renamed_from_is_an_invalid_id() {
    let doc = format!("{HEAD}steps:\n  - {{ id: a2, renamed_from: \"2a\", task: work }}\n");
    assert_eq!(errors_of(&doc), [(ErrorCode::InvalidId, "steps[0].renamed_from".into())]);
    let doc = format!("{HEAD}steps:\n  - {{ id: a2, renamed_from: [a], task: work }}\n");
    assert_eq!(errors_of(&doc), [(ErrorCode::InvalidType, "steps[0].renamed_from".into())]);
}

#[test]
fn renamed_from_must_not_name_a_step_of_the_same_list() {
    let doc = format!(
        "{HEAD}steps:\n  - {{ id: a, task: work }}\n  - {{ id: b, renamed_from: a, task: work }}\n"
    );
    assert_eq!(errors_of(&doc), [(ErrorCode::InvalidValue, "steps[1].renamed_from".into())]);
    let own = format!("{HEAD}steps:\n  - {{ id: a, renamed_from: a, task: work }}\n");
    assert_eq!(errors_of(&own), [(ErrorCode::InvalidValue, "steps[0].renamed_from".into())]);
    // Per list: a handler step may take an old id that a main step uses.
    let other_list = format!(
        "{HEAD}steps:\n  - {{ id: a, task: work }}\non:\n  failure: [ {{ id: h, renamed_from: a, task: work }} ]\n"
    );
    assert!(parse(&other_list).is_ok());
    let in_handler = format!(
        "{HEAD}steps:\n  - {{ id: a, task: work }}\non:\n  failure:\n    - {{ id: x, task: work }}\n    - {{ id: y, renamed_from: x, task: work }}\n"
    );
    assert_eq!(
        errors_of(&in_handler),
        [(ErrorCode::InvalidValue, "on.failure[1].renamed_from".into())]
    );
}

#[test]
fn two_steps_cannot_claim_the_same_old_id() {
    let doc = format!(
        "{HEAD}steps:\n  - {{ id: a2, renamed_from: a, task: work }}\n  - {{ id: a3, renamed_from: a, task: work }}\n"
    );
    let errors = parse(&doc).expect_err("rejected");
    let found: Vec<_> = errors.errors().iter().map(|e| (e.code, e.path.clone())).collect();
    assert_eq!(found, [(ErrorCode::DuplicateId, "steps[1].renamed_from".to_string())]);
    let message = &errors.errors()[0].message;
    assert!(message.contains("already claimed by steps[0]"), "{message}");
}
