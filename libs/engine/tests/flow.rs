//! Flow control (issue 27): what the decider records in `StepScheduled.flow` and hands to
//! dispatch in `TaskOffer.flow` — literal and expression keys and priorities, `for_each`
//! elements, group scoping, precedence (step > start request > workflow), retries and
//! redeliveries keeping the flow, evaluation failures, and histories without flow control
//! staying exactly what they were.

mod common;

use common::flow_exec::Exec;
use common::*;
use orbit_definition::Limits;
use orbit_engine::event::Event;
use orbit_engine::flow::{ConcurrencyKey, Flow, RateKey, RateSource};
use orbit_engine::{start, Command, ErrorCode, TaskError};
use serde_json::json;

fn concurrency(key: &str, limit: u32) -> Option<ConcurrencyKey> {
    Some(ConcurrencyKey { key: key.into(), limit })
}

fn priority(p: u8) -> Option<Flow> {
    Some(Flow { priority: Some(p), ..Flow::default() })
}

const LITERAL: &str = r#"
name: billing
version: "1"
tasks: { charge: {} }
steps:
  - id: charge
    task: charge
    priority: 1
    concurrency: { key: all, limit: 2 }
    rate_limit: { key: "${{ input.api }}", limit: 100, per: 1m }
"#;

#[test]
fn literal_keys_and_priorities_are_recorded_scoped_by_workflow_and_step() {
    let e = Exec::begin(LITERAL, json!({"api": "stripe"}), None);
    let flow = e.flow("charge").expect("a flow");
    assert_eq!(
        flow,
        Flow {
            priority: Some(1),
            concurrency: concurrency("billing.charge/all", 2),
            rate: Some(RateKey {
                key: "billing.charge/stripe".into(),
                limit: RateSource::Inline { limit: 100, per_ms: 60_000 },
            }),
            fairness: None,
            ..Flow::default()
        }
    );
    e.assert_offers_carry_the_recorded_flow();
    assert_eq!(e.state.unit("charge").unwrap().flow, Some(flow));
}

#[test]
fn expression_keys_and_priorities_are_evaluated_over_the_input() {
    let yaml = r#"
name: w
version: "1"
tasks: { t: {} }
steps:
  - id: a
    task: t
    priority: "${{ input.vip ? 1 : 4 }}"
    concurrency: { key: "${{ input.account }}", limit: 1 }
    rate_limit: { key: "acct-${{ input.account }}", name: stripe }
  - id: b
    task: t
    priority: "${{ input.p }}"
    concurrency: { key: "${{ input.vip }}", limit: 1 }
"#;
    let e = Exec::begin(yaml, json!({"vip": true, "account": 42, "p": 5}), None);
    assert_eq!(
        e.flow("a"),
        Some(Flow {
            priority: Some(1),
            // A number counts as its JSON text.
            concurrency: concurrency("w.a/42", 1),
            rate: Some(RateKey {
                key: "stripe/acct-42".into(),
                limit: RateSource::Named("stripe".into())
            }),
            fairness: None,
            ..Flow::default()
        })
    );
    assert_eq!(
        e.flow("b"),
        Some(Flow {
            priority: Some(5),
            concurrency: concurrency("w.b/true", 1),
            rate: None,
            fairness: None,
            ..Flow::default()
        })
    );
    e.assert_offers_carry_the_recorded_flow();
}

#[test]
fn for_each_elements_get_their_own_keys() {
    let yaml = r#"
name: w
version: "1"
tasks: { t: {} }
steps:
  - id: notify
    for_each: "${{ input.contacts }}"
    as: c
    task: t
    input: "${{ c }}"
    priority: "${{ index == 0 ? 1 : 5 }}"
    concurrency: { key: "${{ c.domain }}", limit: 1 }
    rate_limit: { key: "${{ c.id }}", limit: 1, per: 1s, group: mail }
"#;
    let contacts = json!([{"domain": "a.eu", "id": 7}, {"domain": "b.eu", "id": 8}]);
    let e = Exec::begin(yaml, json!({ "contacts": contacts }), None);
    for (i, (p, domain, id)) in [(1, "a.eu", 7), (5, "b.eu", 8)].into_iter().enumerate() {
        assert_eq!(
            e.flow(&format!("notify[{i}]")),
            Some(Flow {
                priority: Some(p),
                // The base step id scopes the key, not the element's unit key.
                concurrency: concurrency(&format!("w.notify/{domain}"), 1),
                rate: Some(RateKey {
                    key: format!("mail/{id}"),
                    limit: RateSource::Inline { limit: 1, per_ms: 1_000 },
                }),
                fairness: None,
                ..Flow::default()
            })
        );
    }
    e.assert_offers_carry_the_recorded_flow();
}

#[test]
fn a_group_shares_keys_across_steps_and_workflows() {
    let yaml = |name: &str| {
        format!(
            r#"
name: {name}
version: "1"
tasks: {{ t: {{}} }}
steps:
  - {{ id: a, task: t, concurrency: {{ key: "${{{{ input.k }}}}", limit: 1, group: billing }} }}
  - {{ id: b, task: t, concurrency: {{ key: "${{{{ input.k }}}}", limit: 1 }} }}
  - {{ id: c, task: t, rate_limit: {{ name: api }} }}
  - {{ id: d, task: t, rate_limit: {{ limit: 5, per: 1s }} }}
"#
        )
    };
    let one = Exec::begin(&yaml("one"), json!({"k": "acct"}), None);
    let two = Exec::begin(&yaml("two"), json!({"k": "acct"}), None);
    let key = |e: &Exec, unit: &str| e.flow(unit).and_then(|f| f.concurrency).map(|c| c.key);
    let bucket = |e: &Exec, unit: &str| e.flow(unit).and_then(|f| f.rate).map(|r| r.key);
    assert_eq!(key(&one, "a").as_deref(), Some("billing/acct"));
    assert_eq!(key(&one, "a"), key(&two, "a"), "one group, one key");
    assert_eq!(key(&one, "b").as_deref(), Some("one.b/acct"));
    assert_eq!(key(&two, "b").as_deref(), Some("two.b/acct"), "the default group is per workflow");
    // Without a `key`, the bucket is the name or group itself.
    assert_eq!(bucket(&one, "c").as_deref(), Some("api"));
    assert_eq!(bucket(&two, "c").as_deref(), Some("api"));
    assert_eq!(bucket(&one, "d").as_deref(), Some("one.d"));
}

const LAYERS: &str = r#"
name: w
version: "1"
priority: 4
tasks: { t: {} }
steps:
  - { id: own, task: t, priority: 1 }
  - { id: plain, task: t }
  - { id: keyed, task: t, concurrency: { key: k, limit: 1 } }
"#;

#[test]
fn the_step_priority_beats_the_start_request_which_beats_the_workflow() {
    let e = Exec::begin(LAYERS, json!({}), None);
    assert_eq!(e.flow("own"), priority(1));
    assert_eq!(e.flow("plain"), priority(4), "the workflow's default");
    assert_eq!(e.flow("keyed").and_then(|f| f.priority), Some(4));

    let e = Exec::begin(LAYERS, json!({}), Some(2));
    assert_eq!(e.flow("own"), priority(1), "the step's own first");
    assert_eq!(e.flow("plain"), priority(2), "then the start request");
    assert_eq!(e.state.priority, Some(2));

    // The default priority is not recorded: dispatch takes 3 for a missing one.
    let e = Exec::begin(LAYERS, json!({}), Some(3));
    assert_eq!(e.flow("plain"), None);
    assert_eq!(
        e.flow("keyed"),
        Some(Flow {
            priority: None,
            concurrency: concurrency("w.keyed/k", 1),
            rate: None,
            fairness: None,
            ..Flow::default()
        })
    );
    e.assert_offers_carry_the_recorded_flow();
}

#[test]
fn a_compensation_runs_at_the_run_priority() {
    let yaml = r#"
name: w
version: "1"
tasks: { t: {}, undo: {} }
steps:
  - { id: a, task: t, priority: 1, concurrency: { key: k, limit: 1 }, compensate: { task: undo } }
  - { id: b, task: t, needs: [a], retry: { max_attempts: 1 } }
"#;
    let mut e = Exec::begin(yaml, json!({}), Some(2));
    e.dispatch("a", "t1");
    e.command(Command::Complete { token: "t1".into(), output: json!(1) });
    e.dispatch("b", "t2");
    e.command(Command::Fail { token: "t2".into(), error: TaskError::fatal("BOOM", "no") });
    assert_eq!(e.flow("compensate:a"), priority(2));
    e.assert_offers_carry_the_recorded_flow();
}

#[test]
fn a_retry_and_a_redelivery_keep_the_flow_of_the_first_attempt() {
    let mut e = Exec::begin(LITERAL, json!({"api": "stripe"}), Some(2));
    let first = e.flow("charge");
    assert!(first.is_some());
    e.dispatch("charge", "t1");
    e.command(Command::Uncertain { token: "t1".into(), reason: "SESSION_LOST".into() });
    e.dispatch("charge", "t2");
    e.command(Command::Fail { token: "t2".into(), error: TaskError::retryable("BUSY", "later") });
    e.wait(60_000);
    let all = e.scheduled("charge");
    let shape: Vec<(u32, bool)> = all.iter().map(|(a, r, _)| (*a, *r)).collect();
    assert_eq!(shape, [(1, false), (1, true), (2, false)]);
    assert!(all.iter().all(|(_, _, f)| *f == first), "{all:#?}");
    assert_eq!(e.offers.len(), 3);
    e.assert_offers_carry_the_recorded_flow();
}

#[test]
fn a_field_that_does_not_evaluate_fails_the_step_naming_it() {
    let cases = [
        (
            "concurrency: { key: \"${{ input.nope }}\", limit: 1 }",
            "EXPRESSION_ERROR",
            "concurrency.key: ",
        ),
        (
            "concurrency: { key: \"${{ input.obj }}\", limit: 1 }",
            "EXPRESSION_ERROR",
            "concurrency.key: expected a string, number or boolean, got object",
        ),
        (
            "concurrency: { key: \"${{ null }}\", limit: 1 }",
            "EXPRESSION_ERROR",
            "concurrency.key: expected a string, number or boolean, got null",
        ),
        (
            "rate_limit: { key: \"${{ [1] }}\", name: api }",
            "EXPRESSION_ERROR",
            "rate_limit.key: expected a string, number or boolean, got array",
        ),
        (
            "rate_limit: { key: \"${{ input.nope }}\", limit: 1, per: 1s }",
            "EXPRESSION_ERROR",
            "rate_limit.key: ",
        ),
        (
            "priority: \"${{ input.p }}\"",
            "EXPRESSION_ERROR",
            "priority: expected an integer from 1 to 5, got number 9",
        ),
        (
            "priority: \"${{ 2.5 }}\"",
            "EXPRESSION_ERROR",
            "priority: expected an integer from 1 to 5",
        ),
        (
            "priority: \"${{ 'high' }}\"",
            "EXPRESSION_ERROR",
            "priority: expected an integer from 1 to 5, got string",
        ),
        ("priority: \"${{ input.nope }}\"", "EXPRESSION_ERROR", "priority: "),
    ];
    for (field, code, message) in cases {
        let yaml = format!(
            "name: w\nversion: '1'\ntasks: {{ t: {{}} }}\nsteps:\n  - {{ id: a, task: t, {field} }}\n"
        );
        let e = Exec::begin(&yaml, json!({"obj": {"a": 1}, "p": 9}), None);
        let error = e.failure("a");
        assert_eq!(error.code, code, "{field}");
        assert!(!error.retryable, "{field}");
        let expected = format!("step `a` {message}");
        assert!(error.message.starts_with(&expected), "{field}: {}", error.message);
        assert!(e.scheduled("a").is_empty(), "{field}: nothing is offered");
        assert!(e.offers.is_empty(), "{field}");
    }
}

#[test]
fn without_flow_control_the_history_is_what_it_was() {
    let yaml =
        "name: w\nversion: '1'\ntasks: { t: {} }\nsteps:\n  - { id: a, task: t, input: 1 }\n";
    let e = Exec::begin(yaml, json!({}), None);
    assert_eq!(e.flow("a"), None);
    assert_eq!(e.state.unit("a").unwrap().flow, None);
    let created = serde_json::to_value(&e.history[0].event).unwrap();
    assert_eq!(created["type"], "WorkflowCreated");
    assert!(created.get("priority").is_none(), "{created}");
    let scheduled = e
        .history
        .iter()
        .find(|h| h.event.type_name() == "StepScheduled")
        .map(|h| serde_json::to_value(&h.event).unwrap())
        .unwrap();
    assert_eq!(
        scheduled,
        json!({"type": "StepScheduled", "step": "a", "attempt": 1, "input": 1,
               "idempotency_key": "x:1:a", "redelivery": false})
    );
    // And an event written before the field existed reads back without one.
    let old: Event = serde_json::from_value(scheduled).unwrap();
    assert!(matches!(old, Event::StepScheduled { flow: None, .. }));
    assert_eq!(e.offers[0].flow, None);
}

#[test]
fn the_recorded_flow_is_part_of_the_event_json() {
    let e = Exec::begin(LITERAL, json!({"api": "stripe"}), Some(2));
    let created = serde_json::to_value(&e.history[0].event).unwrap();
    assert_eq!(created["priority"], 2);
    let scheduled = e
        .history
        .iter()
        .find(|h| h.event.type_name() == "StepScheduled")
        .map(|h| serde_json::to_value(&h.event).unwrap())
        .unwrap();
    assert_eq!(
        scheduled["flow"],
        json!({
            "priority": 1,
            "concurrency": {"key": "billing.charge/all", "limit": 2},
            "rate": {"key": "billing.charge/stripe", "limit": {"inline": {"limit": 100, "per_ms": 60_000}}},
        })
    );
    let back: Event = serde_json::from_value(scheduled).unwrap();
    assert!(
        matches!(back, Event::StepScheduled { flow: Some(f), .. } if Some(f.clone()) == e.flow("charge"))
    );
}

#[test]
fn a_start_priority_out_of_range_is_refused() {
    let d = def(LITERAL);
    for bad in [0, 6, 255] {
        let err = start(&d, "x", json!({}), None, None, 1, &Limits::default(), Some(bad))
            .expect_err("refused");
        assert_eq!(err.code, ErrorCode::InvalidArgument, "{bad}");
        assert!(err.message.contains("priority"), "{}", err.message);
    }
    for good in 1..=5 {
        let created =
            start(&d, "x", json!({}), None, None, 1, &Limits::default(), Some(good)).unwrap();
        assert!(matches!(created, Event::WorkflowCreated { priority: Some(p), .. } if p == good));
    }
}

#[test]
fn continue_as_new_carries_the_run_priority() {
    let yaml = r#"
name: w
version: "1"
tasks: { t: {} }
steps:
  - { id: again, when: "${{ input.n < 1 }}", continue_as_new: { input: { n: 1 } } }
  - { id: work, task: t, needs: [again] }
"#;
    let e = Exec::begin(yaml, json!({"n": 0}), Some(1));
    let created: Vec<Option<u8>> = e
        .history
        .iter()
        .filter_map(|h| match &h.event {
            Event::WorkflowCreated { priority, run, .. } => Some((*run, *priority)),
            _ => None,
        })
        .map(|(run, p)| {
            assert!(run <= 2);
            p
        })
        .collect();
    assert_eq!(created, [Some(1), Some(1)]);
    assert_eq!(e.state.run, 2);
    assert_eq!(e.flow("work"), priority(1));
}
