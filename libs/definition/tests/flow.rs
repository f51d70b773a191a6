//! Flow control fields (issue 27): `priority`, `concurrency` and `rate_limit` on task steps
//! and the workflow's default `priority` — the accepted shapes, their normal form, and
//! every refusal with its path and code.

use orbit_definition::{
    parse, parse_value, to_document, Concurrency, ErrorCode, Priority, RateLimit, RateLimitKind,
    StepFlow, Template,
};
use serde_json::{json, Value};

fn doc(steps: Value) -> Value {
    json!({
        "name": "billing",
        "version": "1",
        "tasks": {"charge": null},
        "signals": {"go": null},
        "steps": steps,
    })
}

fn errors_of(document: &Value) -> Vec<(ErrorCode, String, String)> {
    parse(&document.to_string())
        .expect_err("should be rejected")
        .into_iter()
        .map(|e| (e.code, e.path, e.message))
        .collect()
}

/// The one error of `document`, as (code, path).
fn one_error(document: &Value) -> (ErrorCode, String) {
    let errors = errors_of(document);
    assert_eq!(errors.len(), 1, "{errors:#?}");
    (errors[0].0, errors[0].1.clone())
}

fn task(extra: Value) -> Value {
    let mut step = json!({"id": "a", "task": "charge"});
    step.as_object_mut().unwrap().extend(extra.as_object().unwrap().clone());
    step
}

fn round_trips(document: &Value) -> orbit_definition::Definition {
    let d = parse(&document.to_string()).unwrap_or_else(|e| panic!("{e}\n{document}"));
    let again = parse_value(&to_document(&d)).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(again, d, "the normalised document parses back to the same definition");
    d
}

#[test]
fn literal_and_expression_fields_are_accepted_and_round_trip() {
    let d = round_trips(&doc(json!([task(json!({
        "priority": 1,
        "concurrency": {"key": "${{ input.account }}", "limit": 2, "group": "billing.eu"},
        "rate_limit": {"key": "api-${{ input.api }}", "limit": 100, "per": "1m", "group": "g"},
    }))])));
    let flow = &d.steps[0].flow;
    assert_eq!(flow.priority, Some(Priority::Fixed(1)));
    let c = flow.concurrency.as_ref().unwrap();
    assert_eq!((c.limit, c.group.as_deref()), (2, Some("billing.eu")));
    assert!(matches!(c.key, Template::Expr(_)));
    let r = flow.rate_limit.as_ref().unwrap();
    assert_eq!(r.limit, RateLimitKind::Inline { limit: 100, per_ms: 60_000 });
    assert!(matches!(r.key, Some(Template::Interpolated(_))));
    assert_eq!(r.group.as_deref(), Some("g"));

    let d = round_trips(&doc(json!([task(json!({
        "priority": "${{ input.vip ? 1 : 4 }}",
        "concurrency": {"key": "all", "limit": 1},
        "rate_limit": {"name": "stripe"},
    }))])));
    let flow = &d.steps[0].flow;
    assert!(matches!(&flow.priority, Some(Priority::Expr(e)) if e.source() == "input.vip ? 1 : 4"));
    assert_eq!(
        flow.concurrency,
        Some(Concurrency { key: Template::Literal(json!("all")), limit: 1, group: None })
    );
    assert_eq!(
        flow.rate_limit,
        Some(RateLimit { key: None, limit: RateLimitKind::Named("stripe".into()), group: None })
    );
}

#[test]
fn a_one_element_concurrency_list_is_the_same_declaration() {
    let key = json!({"key": "${{ input.account }}", "limit": 1});
    let listed = round_trips(&doc(json!([task(json!({"concurrency": [key.clone()]}))])));
    let single = round_trips(&doc(json!([task(json!({"concurrency": key}))])));
    assert_eq!(listed, single);
    assert_eq!(listed.hash, single.hash);
    let normal = to_document(&listed);
    assert!(normal["steps"][0]["concurrency"].is_object(), "{normal}");
}

#[test]
fn the_workflow_priority_is_a_default_number() {
    let mut document = doc(json!([task(json!({}))]));
    document["priority"] = json!(2);
    let d = round_trips(&document);
    assert_eq!(d.priority, Some(2));
    assert_eq!(to_document(&d)["priority"], json!(2));

    for (bad, code) in [
        (json!(0), ErrorCode::InvalidValue),
        (json!(6), ErrorCode::InvalidValue),
        (json!(2.5), ErrorCode::InvalidValue),
        (json!("${{ input.p }}"), ErrorCode::InvalidType),
        (json!([1]), ErrorCode::InvalidType),
    ] {
        document["priority"] = bad.clone();
        assert_eq!(one_error(&document), (code, "priority".to_string()), "{bad}");
    }
}

#[test]
fn a_definition_without_flow_control_keeps_its_normal_form() {
    let d = round_trips(&doc(json!([task(json!({})), {"id": "b", "sleep": "1s"}])));
    assert_eq!(d.priority, None);
    assert!(d.steps.iter().all(|s| s.flow == StepFlow::default()));
    let normal = to_document(&d);
    for field in ["priority", "concurrency", "rate_limit", "fairness"] {
        assert!(normal.get(field).is_none(), "{normal}");
        assert!(normal["steps"][0].get(field).is_none(), "{normal}");
    }
}

#[test]
fn keys_see_the_element_and_order_the_step_after_what_they_read() {
    let d = round_trips(&doc(json!([
        {"id": "first", "task": "charge"},
        task(json!({
            "for_each": "${{ input.accounts }}",
            "as": "acct",
            "priority": "${{ index < 2 ? 1 : 5 }}",
            "concurrency": {"key": "${{ acct.id }}", "limit": 1},
            "rate_limit": {"key": "${{ steps.first.output.region }}", "name": "api"},
        }))
    ])));
    assert_eq!(d.steps[1].deps.iter().collect::<Vec<_>>(), ["first"]);

    // Outside a fan-out the element is not in scope.
    let (code, path) =
        one_error(&doc(json!([task(json!({"concurrency": {"key": "${{ item }}", "limit": 1}}))])));
    assert_eq!((code, path.as_str()), (ErrorCode::InvalidExpression, "steps[0].concurrency.key"));
}

#[test]
fn the_fields_apply_to_task_steps_only() {
    let cases = [
        (json!({"id": "a", "compute": 1, "priority": 1}), "steps[0].priority"),
        (
            json!({"id": "a", "sleep": "1s", "concurrency": {"key": "k", "limit": 1}}),
            "steps[0].concurrency",
        ),
        (
            json!({"id": "a", "http": {"method": "GET", "url": "https://x"}, "rate_limit": {"name": "n"}}),
            "steps[0].rate_limit",
        ),
        (json!({"id": "a", "await": "go", "priority": 2}), "steps[0].priority"),
        (json!({"id": "a", "workflow": "child", "priority": 2}), "steps[0].priority"),
    ];
    for (step, path) in cases {
        let errors = errors_of(&doc(json!([step])));
        assert_eq!(errors.len(), 1, "{errors:#?}");
        let (code, at, message) = &errors[0];
        assert_eq!((*code, at.as_str()), (ErrorCode::UnknownField, path));
        assert!(message.contains("applies to task steps"), "{message}");
    }
    // In a compensation call too: it is not a step.
    let step = task(json!({"compensate": {"task": "charge", "priority": 1}}));
    assert_eq!(
        one_error(&doc(json!([step]))),
        (ErrorCode::UnknownField, "steps[0].compensate.priority".into())
    );
    // Handler bodies hold task steps like any body.
    let mut document = doc(json!([task(json!({}))]));
    document["on"] = json!({"failure": [{"id": "alert", "task": "charge", "priority": 1}]});
    round_trips(&document);
}

#[test]
fn step_priority_refusals() {
    for (bad, code) in [
        (json!(0), ErrorCode::InvalidValue),
        (json!(6), ErrorCode::InvalidValue),
        (json!(-1), ErrorCode::InvalidValue),
        (json!(1.5), ErrorCode::InvalidValue),
        (json!(true), ErrorCode::InvalidType),
        (json!("high"), ErrorCode::InvalidExpression),
        (json!("p ${{ input.p }}"), ErrorCode::InvalidExpression),
        (json!("${{ nope }}"), ErrorCode::InvalidExpression),
    ] {
        let document = doc(json!([task(json!({ "priority": bad.clone() }))]));
        assert_eq!(one_error(&document), (code, "steps[0].priority".into()), "{bad}");
    }
}

#[test]
fn concurrency_refusals() {
    let at = |field: &str| {
        if field.is_empty() {
            "steps[0].concurrency".to_string()
        } else {
            format!("steps[0].concurrency.{field}")
        }
    };
    let cases = [
        (json!({"limit": 1}), ErrorCode::MissingField, at("")),
        (json!({"key": "k"}), ErrorCode::MissingField, at("")),
        (json!({"key": "k", "limit": 0}), ErrorCode::InvalidValue, at("limit")),
        (json!({"key": "k", "limit": 1.5}), ErrorCode::InvalidValue, at("limit")),
        (json!({"key": "k", "limit": 4_294_967_296_u64}), ErrorCode::InvalidValue, at("limit")),
        (json!({"key": "k", "limit": "1"}), ErrorCode::InvalidType, at("limit")),
        (json!({"key": 5, "limit": 1}), ErrorCode::InvalidType, at("key")),
        (json!({"key": "", "limit": 1}), ErrorCode::InvalidValue, at("key")),
        (json!({"key": "${{ 1 + }}", "limit": 1}), ErrorCode::InvalidExpression, at("key")),
        (json!({"key": "k", "limit": 1, "group": "a/b"}), ErrorCode::InvalidValue, at("group")),
        (
            json!({"key": "k", "limit": 1, "group": "g".repeat(129)}),
            ErrorCode::InvalidValue,
            at("group"),
        ),
        (json!({"key": "k", "limit": 1, "keys": 1}), ErrorCode::UnknownField, at("keys")),
        (json!("k"), ErrorCode::InvalidType, at("")),
        (json!([]), ErrorCode::InvalidValue, at("")),
    ];
    for (bad, code, path) in cases {
        let document = doc(json!([task(json!({ "concurrency": bad.clone() }))]));
        assert_eq!(one_error(&document), (code, path), "{bad}");
    }
}

#[test]
fn a_second_concurrency_key_is_refused_for_now() {
    let key = json!({"key": "k", "limit": 1});
    let document = doc(json!([task(json!({ "concurrency": [key.clone(), key] }))]));
    let errors = errors_of(&document);
    assert_eq!(errors.len(), 1, "{errors:#?}");
    let (code, path, message) = &errors[0];
    assert_eq!((*code, path.as_str()), (ErrorCode::InvalidValue, "steps[0].concurrency[1]"));
    assert_eq!(message, "one concurrency key per step for now");
    // The first one is still checked, at its own path.
    let document = doc(json!([task(json!({ "concurrency": [{"key": "k"}] }))]));
    assert_eq!(one_error(&document), (ErrorCode::MissingField, "steps[0].concurrency[0]".into()));
}

#[test]
fn rate_limit_refusals() {
    let at = |field: &str| {
        if field.is_empty() {
            "steps[0].rate_limit".to_string()
        } else {
            format!("steps[0].rate_limit.{field}")
        }
    };
    let cases = [
        (json!({}), ErrorCode::MissingField, at("")),
        (json!({"key": "k"}), ErrorCode::MissingField, at("")),
        (json!({"limit": 10}), ErrorCode::MissingField, at("")),
        (json!({"per": "1s"}), ErrorCode::MissingField, at("")),
        (json!({"limit": 0, "per": "1s"}), ErrorCode::InvalidValue, at("limit")),
        (json!({"limit": 10, "per": "0s"}), ErrorCode::InvalidDuration, at("per")),
        (json!({"limit": 10, "per": 60}), ErrorCode::InvalidDuration, at("per")),
        (json!({"limit": 10, "per": "1x"}), ErrorCode::InvalidDuration, at("per")),
        (json!({"name": "stripe", "limit": 10, "per": "1s"}), ErrorCode::InvalidValue, at("")),
        (json!({"name": "stripe", "limit": 10}), ErrorCode::InvalidValue, at("")),
        (json!({"name": "stripe", "group": "g"}), ErrorCode::InvalidValue, at("group")),
        (json!({"name": "a b"}), ErrorCode::InvalidValue, at("name")),
        (json!({"name": 3}), ErrorCode::InvalidType, at("name")),
        (json!({"name": "n", "key": 1}), ErrorCode::InvalidType, at("key")),
        (json!({"name": "n", "key": "${{ item }}"}), ErrorCode::InvalidExpression, at("key")),
        (json!({"limit": 1, "per": "1s", "group": ""}), ErrorCode::InvalidValue, at("group")),
        (json!({"limit": 1, "per": "1s", "burst": 2}), ErrorCode::UnknownField, at("burst")),
        (json!([{"name": "n"}]), ErrorCode::InvalidType, at("")),
    ];
    for (bad, code, path) in cases {
        let document = doc(json!([task(json!({ "rate_limit": bad.clone() }))]));
        assert_eq!(one_error(&document), (code, path), "{bad}");
    }
}

#[test]
fn every_problem_is_reported_at_once() {
    let document = doc(json!([task(json!({
        "priority": 9,
        "concurrency": {"key": 1, "limit": 0, "group": "a b"},
        "rate_limit": {"limit": 0, "per": "0s"},
    }))]));
    let paths: Vec<String> = errors_of(&document).into_iter().map(|(_, p, _)| p).collect();
    assert_eq!(
        paths,
        [
            "steps[0].priority",
            "steps[0].concurrency.key",
            "steps[0].concurrency.limit",
            "steps[0].concurrency.group",
            "steps[0].rate_limit.limit",
            "steps[0].rate_limit.per",
        ]
    );
}

#[test]
fn the_fuzz_seeds_with_flow_control_parse() {
    let dir =
        std::path::PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../fuzz/corpus/definition");
    for name in ["flow-control.yaml", "flow-control.json"] {
        let text = std::fs::read_to_string(dir.join(name)).unwrap();
        let d = parse(&text).unwrap_or_else(|e| panic!("{name}: {e}"));
        assert!(d.steps.iter().all(|s| !s.flow.is_empty()), "{name}");
        assert!(d.priority.is_some(), "{name}");
    }
}
