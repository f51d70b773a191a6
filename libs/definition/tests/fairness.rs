//! Fair queues (issue 27): `fairness: {key, weight?, group?}` on task steps and as the
//! workflow's default — the accepted shapes, their normal form, the scope of their
//! expressions, and every refusal with its path and code.

use orbit_definition::{parse, parse_value, to_document, ErrorCode, Fairness, Template, Weight};
use serde_json::{json, Value};

mod common;
use common::errors_of;

fn doc(steps: Value) -> Value {
    json!({
        "name": "shop",
        "version": "1",
        "tasks": {"work": null},
        "steps": steps,
    })
}

fn task(fairness: Value) -> Value {
    json!({"id": "a", "task": "work", "fairness": fairness})
}

fn round_trips(document: &Value) -> orbit_definition::Definition {
    let d = parse(&document.to_string()).unwrap_or_else(|e| panic!("{e}\n{document}"));
    let again = parse_value(&to_document(&d)).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(again, d, "the normalised document parses back to the same definition");
    d
}

/// Every error of `document`, as (code, path).
#[test]
fn step_fairness_is_accepted_and_round_trips_with_its_weight_written() {
    let d = round_trips(&doc(json!([task(json!({"key": "${{ input.tenant }}"}))])));
    let f = d.steps[0].flow.fairness.as_ref().expect("declared");
    assert!(matches!(f.key, Template::Expr(_)));
    assert_eq!((&f.weight, f.group.as_deref()), (&Weight::Fixed(1), None));
    // The normal form writes the default weight: one spelling per meaning.
    let normal = to_document(&d);
    assert_eq!(normal["steps"][0]["fairness"], json!({"key": "${{ input.tenant }}", "weight": 1}));
    let explicit =
        round_trips(&doc(json!([task(json!({"key": "${{ input.tenant }}", "weight": 1}))])));
    assert_eq!((explicit.clone(), explicit.hash), (d.clone(), d.hash));

    let d = round_trips(&doc(json!([task(
        json!({"key": "t-${{ input.tenant }}", "weight": 250, "group": "tenants"})
    )])));
    let f = d.steps[0].flow.fairness.as_ref().unwrap();
    assert!(matches!(f.key, Template::Interpolated(_)));
    assert_eq!((&f.weight, f.group.as_deref()), (&Weight::Fixed(250), Some("tenants")));

    let d = round_trips(&doc(json!([task(
        json!({"key": "all", "weight": "${{ input.vip ? 10 : 1 }}"})
    )])));
    let f = d.steps[0].flow.fairness.as_ref().unwrap();
    assert_eq!(f.key, Template::Literal(json!("all")));
    assert!(matches!(&f.weight, Weight::Expr(e) if e.source() == "input.vip ? 10 : 1"));
}

#[test]
fn step_fairness_sees_the_element_and_orders_the_step_after_what_it_reads() {
    let d = round_trips(&doc(json!([
        {"id": "first", "task": "work"},
        {"id": "each", "task": "work", "for_each": "${{ input.xs }}",
         "fairness": {"key": "${{ item.tenant }}", "weight": "${{ steps.first.output.w }}"}},
    ])));
    assert_eq!(d.steps[1].deps.iter().collect::<Vec<_>>(), ["first"]);
    // Outside a fan-out the element is not in scope.
    assert_eq!(
        errors_of(&doc(json!([task(json!({"key": "${{ item }}"}))]))),
        [(ErrorCode::InvalidExpression, "steps[0].fairness.key".to_string())]
    );
}

#[test]
fn the_workflow_s_fairness_is_a_default_reading_input_and_execution_only() {
    let mut document = doc(json!([{"id": "a", "task": "work"}]));
    document["fairness"] = json!({"key": "${{ input.tenant }}", "weight": "${{ input.w }}"});
    let d = round_trips(&document);
    let f: &Fairness = d.fairness.as_ref().expect("declared");
    assert!(matches!(f.weight, Weight::Expr(_)));
    assert_eq!(to_document(&d)["fairness"]["key"], json!("${{ input.tenant }}"));
    document["fairness"] = json!({"key": "${{ execution.id }}", "group": "tenants"});
    round_trips(&document);

    // A step reference: evaluated for every task step, it could read a step not run yet.
    document["fairness"] = json!({"key": "${{ steps.a.output }}"});
    let errors = parse(&document.to_string()).expect_err("refused");
    let e = &errors.errors()[0];
    assert_eq!((e.code, e.path.as_str()), (ErrorCode::InvalidExpression, "fairness.key"));
    assert!(e.message.contains("not `steps.a`"), "{}", e.message);
    assert_eq!(errors.errors().len(), 1, "{errors}");
    document["fairness"] = json!({"key": "k", "weight": "${{ item.w }}"});
    assert_eq!(errors_of(&document), [(ErrorCode::InvalidExpression, "fairness.weight".into())]);
    document["fairness"] = json!("tenant");
    assert_eq!(errors_of(&document), [(ErrorCode::InvalidType, "fairness".into())]);
}

#[test]
fn without_fairness_the_normal_form_has_none() {
    let d = round_trips(&doc(json!([{"id": "a", "task": "work"}])));
    assert_eq!((d.fairness.as_ref(), d.steps[0].flow.fairness.as_ref()), (None, None));
    let normal = to_document(&d);
    assert!(normal.get("fairness").is_none() && normal["steps"][0].get("fairness").is_none());
}

#[test]
fn fairness_refusals() {
    let at = |field: &str| {
        if field.is_empty() {
            "steps[0].fairness".to_string()
        } else {
            format!("steps[0].fairness.{field}")
        }
    };
    let cases = [
        (json!({}), ErrorCode::MissingField, at("")),
        (json!({"weight": 2}), ErrorCode::MissingField, at("")),
        (json!({"key": ""}), ErrorCode::InvalidValue, at("key")),
        (json!({"key": 7}), ErrorCode::InvalidType, at("key")),
        (json!({"key": "${{ 1 + }}"}), ErrorCode::InvalidExpression, at("key")),
        (json!({"key": "k", "weight": 0}), ErrorCode::InvalidValue, at("weight")),
        (json!({"key": "k", "weight": 1001}), ErrorCode::InvalidValue, at("weight")),
        (json!({"key": "k", "weight": 1.5}), ErrorCode::InvalidValue, at("weight")),
        (json!({"key": "k", "weight": -1}), ErrorCode::InvalidValue, at("weight")),
        (json!({"key": "k", "weight": true}), ErrorCode::InvalidType, at("weight")),
        (json!({"key": "k", "weight": "heavy"}), ErrorCode::InvalidExpression, at("weight")),
        (json!({"key": "k", "weight": "w ${{ 2 }}"}), ErrorCode::InvalidExpression, at("weight")),
        (json!({"key": "k", "weight": "${{ nope }}"}), ErrorCode::InvalidExpression, at("weight")),
        (json!({"key": "k", "group": "a/b"}), ErrorCode::InvalidValue, at("group")),
        (json!({"key": "k", "group": ""}), ErrorCode::InvalidValue, at("group")),
        (json!({"key": "k", "limit": 1}), ErrorCode::UnknownField, at("limit")),
        (json!("k"), ErrorCode::InvalidType, at("")),
        (json!([{"key": "k"}]), ErrorCode::InvalidType, at("")),
    ];
    for (bad, code, path) in cases {
        assert_eq!(errors_of(&doc(json!([task(bad.clone())]))), [(code, path)], "{bad}");
    }
    // Every problem at once.
    let paths: Vec<String> =
        errors_of(&doc(json!([task(json!({"key": 1, "weight": 0, "group": "a b"}))])))
            .into_iter()
            .map(|(_, p)| p)
            .collect();
    assert_eq!(paths, [at("key"), at("weight"), at("group")]);
}

#[test]
fn fairness_applies_to_task_steps_only() {
    for step in [
        json!({"id": "a", "compute": 1, "fairness": {"key": "k"}}),
        json!({"id": "a", "sleep": "1s", "fairness": {"key": "k"}}),
        json!({"id": "a", "workflow": "child", "fairness": {"key": "k"}}),
    ] {
        let errors = parse(&doc(json!([step.clone()])).to_string()).expect_err("refused");
        let e = &errors.errors()[0];
        assert_eq!((e.code, e.path.as_str()), (ErrorCode::UnknownField, "steps[0].fairness"));
        assert!(e.message.contains("applies to task steps"), "{step}: {}", e.message);
    }
    let step = json!({"id": "a", "task": "work", "compensate": {"task": "work", "fairness": {"key": "k"}}});
    assert_eq!(
        errors_of(&doc(json!([step]))),
        [(ErrorCode::UnknownField, "steps[0].compensate.fairness".to_string())]
    );
}

#[test]
fn the_fuzz_seed_with_fairness_parses() {
    let dir =
        std::path::PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../fuzz/corpus/definition");
    let text = std::fs::read_to_string(dir.join("fairness.yaml")).unwrap();
    let d = parse(&text).unwrap_or_else(|e| panic!("fairness.yaml: {e}"));
    assert!(d.fairness.is_some());
    assert!(d.steps.iter().any(|s| s.flow.fairness.is_some()));
    round_trips(&serde_norway::from_str::<Value>(&text).unwrap());
}
