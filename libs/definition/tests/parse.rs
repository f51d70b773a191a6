//! Behaviour of `parse` beyond single errors: scopes, defaults, dependencies, normal forms,
//! and collecting every error at once.

use orbit_definition::{parse, Body, ErrorCode, Outcome, RetryPolicy, StepKind, Template};
use serde_json::json;

fn errors_of(doc: &str) -> Vec<(ErrorCode, String)> {
    parse(doc).expect_err("should be rejected").into_iter().map(|e| (e.code, e.path)).collect()
}

const HEAD: &str = "name: t\nversion: \"1\"\ntasks:\n  work: { version: \"1\" }\n";

#[test]
fn scopes_follow_where_an_expression_is_evaluated() {
    // The element and index are visible per element (input, compute, compensate), not in
    // `when` or `for_each`; `event` only in on_signal handlers, `failure` only in on handlers.
    let ok = format!(
        "{HEAD}signals: {{ note: null }}\nsteps:\n\
         - id: a\n  for_each: ${{{{ input.xs }}}}\n  as: x\n  task: work\n\
         \x20 input: {{ v: \"${{{{ x }}}}\", i: \"${{{{ index }}}}\", e: \"${{{{ execution.id }}}}\" }}\n\
         \x20 compensate: {{ task: work, input: \"${{{{ [x, index] }}}}\" }}\n\
         - id: b\n  for_each: [1, 2]\n  compute: ${{{{ item * 2.0 }}}}\n\
         on:\n  failure: [ {{ id: f, task: work, input: \"${{{{ failure.code }}}}\" }} ]\n\
         on_signal:\n  note: [ {{ id: n, task: work, when: \"${{{{ event != null }}}}\", input: \"${{{{ event }}}}\" }} ]\n"
    );
    let d = parse(&ok).unwrap_or_else(|e| panic!("{e}\n{ok}"));
    assert_eq!(d.steps[0].for_each.as_ref().unwrap().as_name, "x");
    assert_eq!(d.steps[1].for_each.as_ref().unwrap().as_name, "item");

    let bad = format!(
        "{HEAD}signals: {{ note: null }}\nsteps:\n\
         - {{ id: a, for_each: \"${{{{ input.xs }}}}\", task: work, when: \"${{{{ index > 0 }}}}\" }}\n\
         - {{ id: b, task: work, compensate: {{ task: work, input: \"${{{{ item }}}}\" }} }}\n\
         on:\n  cancel: [ {{ id: c, task: work, input: \"${{{{ event }}}}\" }} ]\n\
         on_signal:\n  note: [ {{ id: n, compute: \"${{{{ failure }}}}\" }} ]\n\
         output: ${{{{ item }}}}\n"
    );
    assert_eq!(
        errors_of(&bad),
        [
            (ErrorCode::InvalidExpression, "steps[0].when".into()),
            (ErrorCode::InvalidExpression, "steps[1].compensate.input".into()),
            (ErrorCode::InvalidExpression, "output".into()),
            (ErrorCode::InvalidExpression, "on.cancel[0].input".into()),
            (ErrorCode::InvalidExpression, "on_signal.note[0].compute".into()),
        ]
    );
}

#[test]
fn dependencies_come_from_needs_and_same_body_references() {
    let doc = format!(
        "{HEAD}signals: {{ go: null }}\nsteps:\n\
         - {{ id: a, task: work }}\n\
         - {{ id: b, needs: a, compute: \"${{{{ steps.a.output }}}}\" }}\n\
         - {{ id: c, task: work, when: \"${{{{ steps.b.output != null }}}}\", compensate: {{ task: work, input: \"${{{{ steps.c.output }}}}\" }} }}\n\
         - {{ id: d, task: work, compensate: {{ task: work, input: \"${{{{ steps.a.output }}}}\" }} }}\n\
         on:\n  failure:\n    - {{ id: x, task: work, input: \"${{{{ steps.a.output }}}}\" }}\n    - {{ id: y, task: work, input: \"${{{{ steps.x.output }}}}\" }}\n"
    );
    let d = parse(&doc).unwrap_or_else(|e| panic!("{e}"));
    let deps = |body: &[orbit_definition::Step], i: usize| {
        body[i].deps.iter().cloned().collect::<Vec<_>>()
    };
    assert_eq!(deps(&d.steps, 0), Vec::<String>::new());
    assert_eq!(deps(&d.steps, 1), ["a"]);
    assert_eq!(d.steps[1].needs, ["a"]);
    assert_eq!(deps(&d.steps, 2), ["b"], "compensation reads order nothing, self never");
    assert_eq!(deps(&d.steps, 3), Vec::<String>::new());
    let failure = d.body(&Body::On(Outcome::Failure));
    assert_eq!(deps(failure, 0), Vec::<String>::new(), "handlers read main steps freely");
    assert_eq!(deps(failure, 1), ["x"]);
}

#[test]
fn defaults_and_normal_forms() {
    let doc = "name: t\nversion: 1.5\ntasks:\n  work:\nsignals:\n  go:\n\
               steps:\n  - { id: a, task: work, when: true }\n  - { id: b, sleep: 1m30s, when: false }\n\
               \x20 - { id: c, workflow: other }\n  - id: h\n    http: { method: post, url: \"https://x.test/${{ input.id }}\", body: { a: 1 } }\n";
    let d = parse(doc).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(d.version, "1.5", "a YAML number is stringified");
    assert_eq!(d.tasks["work"].version, "1");
    assert_eq!(d.signals["go"], None);
    assert_eq!(d.steps[0].retry, RetryPolicy::default());
    assert_eq!(d.steps[0].when.as_ref().unwrap().source(), "true");
    assert_eq!(d.steps[1].kind, StepKind::Sleep { duration_ms: 90_000 });
    assert_eq!(d.steps[2].kind, StepKind::Workflow { workflow: "other".into(), version: None });
    let StepKind::Http { request } = &d.steps[3].kind else { panic!() };
    let Template::Object(fields) = request else { panic!("{request:?}") };
    let keys: Vec<&str> = fields.iter().map(|(k, _)| k.as_str()).collect();
    assert_eq!(keys, ["method", "url", "body"]);
    assert_eq!(request.to_json()["method"], json!("POST"));
}

#[test]
fn a_long_initial_interval_raises_the_default_cap() {
    let doc =
        format!("{HEAD}steps:\n  - {{ id: a, task: work, retry: {{ initial_interval: 2m }} }}\n");
    let d = parse(&doc).unwrap();
    assert_eq!(
        (d.steps[0].retry.initial_interval_ms, d.steps[0].retry.max_interval_ms),
        (120_000, 120_000)
    );
}

#[test]
fn every_error_is_reported_not_just_the_first() {
    let doc = "name: \"a b\"\nversion: \"1\"\ntimeout: 5\nsteps:\n\
               \x20 - { id: a, task: nope }\n  - { id: a, sleep: 1s, retry: {} }\n  - { id: c, compute: \"${{ steps.zz }}\" }\n";
    let errors = errors_of(doc);
    assert_eq!(
        errors,
        [
            (ErrorCode::InvalidValue, "name".into()),
            (ErrorCode::InvalidDuration, "timeout".into()),
            (ErrorCode::UnknownTask, "steps[0].task".into()),
            (ErrorCode::UnknownField, "steps[1].retry".into()),
            (ErrorCode::DuplicateId, "steps[1].id".into()),
            (ErrorCode::UnknownReference, "steps[2].compute".into()),
        ]
    );
}

#[test]
fn json_documents_and_schema_keys_are_accepted() {
    let doc = json!({
        "$schema": "../../libs/definition/schema/workflow-definition.schema.json",
        "name": "j", "version": "1",
        "steps": [{"id": "a", "until": "${{ input.at }}"}, {"id": "b", "until": "2030-01-01T00:00:00Z"}]
    });
    let d = parse(&doc.to_string()).unwrap_or_else(|e| panic!("{e}"));
    assert!(matches!(d.steps[0].kind, StepKind::Until { at: Template::Expr(_) }));
    // `$schema` is editor metadata, not part of the definition's identity.
    let mut without = doc.clone();
    without.as_object_mut().unwrap().remove("$schema");
    assert_eq!(parse(&without.to_string()).unwrap().hash, d.hash);
}

#[test]
fn errors_display_one_per_line_with_paths() {
    let err = parse("name: t\nversion: \"1\"\nsteps:\n  - { id: a, sleep: 30 }\n  - { id: b }\n")
        .unwrap_err();
    let text = err.to_string();
    assert_eq!(text.lines().count(), 2, "{text}");
    assert!(text.starts_with("steps[0].sleep: a bare number has no unit"), "{text}");
}

#[test]
fn empty_and_scalar_documents_are_parse_errors() {
    for doc in ["", "42", "just text", "[1, 2]", "null"] {
        assert_eq!(errors_of(doc), [(ErrorCode::ParseError, String::new())], "{doc:?}");
    }
}

#[test]
fn a_step_without_a_kind_still_counts_for_references() {
    let doc = "name: t\nversion: \"1\"\nsteps:\n  - { id: a, tsk: work }\n  - { id: b, sleep: 1s, needs: [a] }\n";
    let errors = parse(doc).unwrap_err();
    let found: Vec<_> = errors.errors().iter().map(|e| (e.code, e.path.as_str())).collect();
    assert_eq!(
        found,
        [(ErrorCode::StepKind, "steps[0]"), (ErrorCode::UnknownField, "steps[0].tsk")]
    );
    assert!(errors.errors()[1].message.contains("did you mean `task`"), "{errors}");
}

/// A document stored before the expression limits existed still loads; the expression over
/// them fails every evaluation with `EXPRESSION_LIMIT` instead of overflowing a stack.
#[test]
fn stored_documents_over_the_limits_load_and_fail_evaluation() {
    let sum = vec!["1"; 3_000].join("+");
    let doc = format!(
        "name: legacy\nversion: \"1\"\nsteps:\n  - id: a\n    compute: \"${{{{ {sum} }}}}\"\n  - {{ id: b, needs: [a], compute: \"${{{{ steps.a.output }}}}\" }}\n"
    );
    let errors = orbit_definition::parse(&doc).unwrap_err();
    assert!(
        errors.contains(orbit_definition::ErrorCode::ExpressionLimit, "steps[0].compute"),
        "{errors}"
    );
    let def = orbit_definition::parse_stored(&doc).expect("a stored document loads");
    let orbit_definition::StepKind::Compute { value } = &def.steps[0].kind else { panic!() };
    let err = value.render(&orbit_definition::Scope::new()).unwrap_err();
    assert!(err.is_limit() && err.code() == "EXPRESSION_LIMIT", "{err}");
    // The stored form hashes and re-reads the same.
    let again = orbit_definition::parse_stored(&orbit_definition::canonical_json(
        &orbit_definition::to_document(&def),
    ));
    assert_eq!(again.unwrap().hash, def.hash);
}

#[test]
fn retention_is_a_duration_kept_in_the_normal_form() {
    let doc = format!("{HEAD}retention: 1d12h\nsteps:\n  - {{ id: a, task: work }}\n");
    let d = parse(&doc).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(d.retention_ms, Some(36 * 3_600_000));
    let normal = orbit_definition::to_document(&d);
    assert_eq!(normal["retention"], json!("1d12h"));
    let without = parse(&format!("{HEAD}steps:\n  - {{ id: a, task: work }}\n")).unwrap();
    assert_eq!(without.retention_ms, None);
    assert_ne!(without.hash, d.hash, "the retention is part of the definition's identity");
    let zero = format!("{HEAD}retention: 0s\nsteps:\n  - {{ id: a, task: work }}\n");
    assert_eq!(errors_of(&zero), [(ErrorCode::InvalidDuration, "retention".to_string())]);
}

#[test]
fn names_under_orbit_are_reserved_except_the_built_in_http_task() {
    let built_in = "name: uses-http\nversion: \"1\"\ntasks: { orbit.http: {} }\nsteps:\n  - { id: a, task: orbit.http }\n";
    assert!(parse(built_in).is_ok(), "orbit.http is the built-in task a definition may name");
    // `orbitx` and `my.orbit.task` are not under the prefix.
    let near = "name: orbitx.flow\nversion: \"1\"\ntasks: { my.orbit.task: {} }\nsteps:\n  - { id: a, task: my.orbit.task }\n";
    assert!(parse(near).is_ok());
    let reserved = "name: orbit.http\nversion: \"1\"\ntasks: { orbit.queue: {} }\nsteps:\n  - { id: a, task: orbit.queue }\n";
    let errors = errors_of(reserved);
    assert!(errors.contains(&(ErrorCode::ReservedName, "name".into())), "{errors:?}");
    assert!(
        errors.contains(&(ErrorCode::ReservedName, r#"tasks["orbit.queue"]"#.into())),
        "{errors:?}"
    );
}
