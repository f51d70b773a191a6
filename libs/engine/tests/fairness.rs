//! Fair queues (issue 27; docs/flow-control.md, "Fair queues"): what the decider records in
//! `StepScheduled.flow.fairness` — literal and expression keys and weights, the default
//! weight, group scoping, the workflow's default and the step's own coming first, a
//! `for_each` element's own key, evaluation failures naming the field, and the JSON of the
//! recorded flow.

mod common;

use common::flow_exec::Exec;
use orbit_engine::flow::{ConcurrencyKey, FairKey, Flow};
use orbit_engine::Command;
use serde_json::json;

fn fair(key: &str, weight: u32) -> Option<FairKey> {
    Some(FairKey { key: key.into(), weight })
}

#[test]
fn a_step_s_fair_key_is_scoped_by_workflow_and_step_with_weight_1_by_default() {
    let yaml = r#"
name: w
version: "1"
tasks: { t: {} }
steps:
  - { id: plain, task: t, fairness: { key: "${{ input.tenant }}" } }
  - { id: heavy, task: t, fairness: { key: "${{ input.tenant }}", weight: 5, group: tenants } }
  - id: both
    task: t
    priority: 2
    concurrency: { key: all, limit: 4 }
    fairness: { key: "t-${{ input.tenant }}", weight: "${{ input.vip ? 10 : 1 }}" }
"#;
    let e = Exec::begin(yaml, json!({"tenant": "acme", "vip": true}), None);
    let only = |key, weight| Some(Flow { fairness: fair(key, weight), ..Flow::default() });
    assert_eq!(e.flow("plain"), only("w.plain/acme", 1));
    assert_eq!(e.flow("heavy"), only("tenants/acme", 5));
    assert_eq!(
        e.flow("both"),
        Some(Flow {
            priority: Some(2),
            concurrency: Some(ConcurrencyKey { key: "w.both/all".into(), limit: 4 }),
            rate: None,
            fairness: fair("w.both/t-acme", 10),
            ..Flow::default()
        })
    );
    assert!(e.flow("plain").unwrap().is_limited(), "a fair row goes through the flow claim");
    e.assert_offers_carry_the_recorded_flow();
}

const WORKFLOW_DEFAULT: &str = r#"
name: shop
version: "1"
fairness: { key: "${{ input.tenant }}", weight: "${{ input.weight }}" }
tasks: { t: {}, undo: {} }
steps:
  - { id: a, task: t, compensate: { task: undo } }
  - { id: own, task: t, fairness: { key: solo } }
  - id: each
    for_each: "${{ input.items }}"
    task: t
    fairness: { key: "${{ item }}", group: items }
  - { id: fails, task: t, needs: [a, own, each], retry: { max_attempts: 1 } }
"#;

#[test]
fn the_workflow_s_fairness_is_the_default_and_a_step_s_own_comes_first() {
    let mut e = Exec::begin(
        WORKFLOW_DEFAULT,
        json!({"tenant": "acme", "weight": 3, "items": ["x", "y"]}),
        None,
    );
    let only = |key, weight| Some(Flow { fairness: fair(key, weight), ..Flow::default() });
    // The workflow's default group is the workflow's name: every step shares the key.
    assert_eq!(e.flow("a"), only("shop/acme", 3));
    assert_eq!(e.flow("own"), only("shop.own/solo", 1));
    assert_eq!(e.flow("each[0]"), only("items/x", 1));
    assert_eq!(e.flow("each[1]"), only("items/y", 1));

    // A compensation task is not a task step: no fair key (as it has no other key).
    for (unit, token) in [("a", "t1"), ("own", "t2"), ("each[0]", "t3"), ("each[1]", "t4")] {
        e.dispatch(unit, token);
        e.command(Command::Complete { token: token.into(), output: json!(1) });
    }
    assert_eq!(e.flow("fails"), only("shop/acme", 3));
    e.dispatch("fails", "t5");
    let error = orbit_engine::TaskError::fatal("BOOM", "no");
    e.command(Command::Fail { token: "t5".into(), error });
    assert_eq!(e.flow("compensate:a"), None);
    e.assert_offers_carry_the_recorded_flow();
}

#[test]
fn a_fair_key_or_weight_that_does_not_evaluate_fails_the_step_naming_it() {
    let cases = [
        ("fairness: { key: \"${{ input.nope }}\" }", "fairness.key: "),
        (
            "fairness: { key: \"${{ null }}\" }",
            "fairness.key: expected a string, number or boolean, got null",
        ),
        ("fairness: { key: \"${{ input.long }}\" }", "fairness.key: 257 bytes"),
        ("fairness: { key: k, weight: \"${{ input.nope }}\" }", "fairness.weight: "),
        (
            "fairness: { key: k, weight: \"${{ 0 }}\" }",
            "fairness.weight: expected an integer from 1 to 1000, got number 0",
        ),
        (
            "fairness: { key: k, weight: \"${{ 1001 }}\" }",
            "fairness.weight: expected an integer from 1 to 1000, got number 1001",
        ),
        (
            "fairness: { key: k, weight: \"${{ 1.5 }}\" }",
            "fairness.weight: expected an integer from 1 to 1000",
        ),
        (
            "fairness: { key: k, weight: \"${{ 'x' }}\" }",
            "fairness.weight: expected an integer from 1 to 1000, got string",
        ),
    ];
    for (field, message) in cases {
        let yaml = format!(
            "name: w\nversion: '1'\ntasks: {{ t: {{}} }}\nsteps:\n  - {{ id: a, task: t, {field} }}\n"
        );
        let e = Exec::begin(&yaml, json!({"long": "k".repeat(257)}), None);
        let error = e.failure("a");
        assert_eq!(error.code, "EXPRESSION_ERROR", "{field}");
        assert!(!error.retryable, "{field}");
        let expected = format!("step `a` {message}");
        assert!(error.message.starts_with(&expected), "{field}: {}", error.message);
        assert!(e.scheduled("a").is_empty() && e.offers.is_empty(), "{field}: nothing offered");
    }
    // The workflow's default fails each task step the same way.
    let yaml = "name: w\nversion: '1'\nfairness: { key: \"${{ input.nope }}\" }\n\
                tasks: { t: {} }\nsteps:\n  - { id: a, task: t }\n";
    let error = Exec::begin(yaml, json!({}), None).failure("a");
    assert!(error.message.starts_with("step `a` fairness.key: "), "{}", error.message);
}

#[test]
fn the_recorded_fair_key_is_part_of_the_event_json() {
    let yaml = "name: w\nversion: '1'\ntasks: { t: {} }\nsteps:\n  \
                - { id: a, task: t, fairness: { key: \"${{ input.t }}\", weight: 2 } }\n";
    let e = Exec::begin(yaml, json!({"t": 7}), None);
    let scheduled = e
        .history
        .iter()
        .find(|h| h.event.type_name() == "StepScheduled")
        .map(|h| serde_json::to_value(&h.event).unwrap())
        .unwrap();
    assert_eq!(scheduled["flow"], json!({"fairness": {"key": "w.a/7", "weight": 2}}));
    let back: orbit_engine::event::Event = serde_json::from_value(scheduled).unwrap();
    assert!(matches!(
        back,
        orbit_engine::event::Event::StepScheduled { flow: Some(f), .. } if Some(f.clone()) == e.flow("a")
    ));
    // A flow recorded before fair keys existed reads back without one.
    let old: Flow = serde_json::from_value(json!({"priority": 2})).unwrap();
    assert_eq!(old.fairness, None);
    assert!(!old.is_limited());
}

#[test]
fn a_migration_reports_fairness_changes_as_safe() {
    let v1 = "name: w\nversion: '1'\ntasks: { t: {} }\nsteps:\n  \
              - { id: a, task: t, fairness: { key: k } }\n";
    let v2 = "name: w\nversion: '2'\nfairness: { key: \"${{ input.t }}\" }\n\
              tasks: { t: {} }\nsteps:\n  - { id: a, task: t, fairness: { key: k, weight: 3 } }\n";
    let e = Exec::begin(v1, json!({"t": 1}), None);
    let plan = orbit_engine::migrate::plan(&e.def, &common::def(v2), &e.state);
    let found: Vec<(&str, &str, bool)> =
        plan.changes.iter().map(|c| (c.step.as_str(), c.detail.as_str(), c.safe)).collect();
    assert!(found.contains(&("", "fairness added", true)), "{found:#?}");
    assert!(
        found.iter().any(|(s, d, safe)| *s == "a" && d.contains("fairness") && *safe),
        "{found:#?}"
    );
}
