//! Search attributes (issue 28 item 1): the decider records `SearchAttributesUpserted`
//! right after `WorkflowStarted` (the workflow's `search:`) and once a main step with
//! `search:` succeeded (before the run completes, even when it is the last step); a value
//! of the wrong type is left out and named in `errors` while the run goes on; `null`
//! unsets; the state folds the current values; the replay check decides the same events.

mod common;

use common::{assert_replays, def, events_of, exec, types};
use orbit_definition::SearchValue;
use orbit_engine::sim::{Sim, TaskOutcome};
use orbit_engine::state::Status;
use orbit_engine::Event;
use serde_json::json;
use std::collections::BTreeMap;

const DEF: &str = r#"
name: billing
version: "1"
search_attributes:
  customer: keyword
  amount: double
  count: int
  tags: keyword_list
  note: text
tasks:
  quote: {}
search:
  customer: ${{ input.customer }}
  count: ${{ input.count }}
steps:
  - id: quote
    task: quote
    search:
      amount: ${{ steps.quote.output.total }}
      tags: ${{ steps.quote.output.tags }}
  - id: done
    needs: [quote]
    compute: ${{ 'ok' }}
    search:
      note: ${{ 'quoted ' + string(steps.quote.output.total) }}
      count: ${{ null }}
"#;

fn run(input: serde_json::Value, output: serde_json::Value) -> Sim {
    let mut sim = Sim::new();
    sim.register(def(DEF));
    sim.on_task("quote", move |_| TaskOutcome::Complete(output.clone()));
    sim.start("billing", "x", input).unwrap();
    sim.run(20);
    sim
}

fn upserts(sim: &Sim) -> Vec<Event> {
    events_of(&exec(sim, "x").history, "SearchAttributesUpserted").into_iter().cloned().collect()
}

#[test]
fn upserts_are_decided_at_start_and_after_each_step_and_replay() {
    let sim =
        run(json!({"customer": "acme", "count": 3}), json!({"total": 12.5, "tags": ["eu", "vip"]}));
    let e = exec(&sim, "x");
    assert_eq!(e.state.status(), Status::Completed);
    let t = types(&e.history);
    assert_eq!(&t[..3], &["WorkflowCreated", "WorkflowStarted", "SearchAttributesUpserted"]);
    let ups = upserts(&sim);
    assert_eq!(ups.len(), 3, "{ups:#?}");
    let start = BTreeMap::from([
        ("count".to_string(), SearchValue::Int(3)),
        ("customer".to_string(), SearchValue::Keyword("acme".into())),
    ]);
    assert_eq!(
        ups[0],
        Event::SearchAttributesUpserted { step: None, values: start, errors: BTreeMap::new() }
    );
    let quote = BTreeMap::from([
        ("amount".to_string(), SearchValue::Double(12.5)),
        ("tags".to_string(), SearchValue::KeywordList(vec!["eu".into(), "vip".into()])),
    ]);
    assert_eq!(
        ups[1],
        Event::SearchAttributesUpserted {
            step: Some("quote".into()),
            values: quote,
            errors: BTreeMap::new()
        }
    );
    // The last step's upsert comes before the completion; null unsets `count`.
    let last = t.iter().rposition(|n| *n == "SearchAttributesUpserted").unwrap();
    assert!(last < t.iter().position(|n| *n == "WorkflowCompleted").unwrap());
    assert!(matches!(&ups[2], Event::SearchAttributesUpserted { step: Some(s), values, .. }
        if s == "done" && values["count"] == SearchValue::Unset
            && values["note"] == SearchValue::Text("quoted 12.5".into())));
    let current: Vec<&str> = e.state.search.keys().map(String::as_str).collect();
    assert_eq!(current, ["amount", "customer", "note", "tags"]);
    assert_replays(&sim);
}

#[test]
fn a_value_of_the_wrong_type_is_recorded_as_an_error_and_the_run_goes_on() {
    let sim = run(json!({"customer": 7, "count": "three"}), json!({"total": "n/a", "tags": []}));
    let e = exec(&sim, "x");
    assert_eq!(e.state.status(), Status::Completed);
    let ups = upserts(&sim);
    let Event::SearchAttributesUpserted { values, errors, .. } = &ups[0] else { unreachable!() };
    assert!(values.is_empty(), "{values:?}");
    assert!(errors["customer"].contains("`keyword`"), "{errors:?}");
    assert!(errors["count"].contains("an integer"), "{errors:?}");
    let Event::SearchAttributesUpserted { values, errors, .. } = &ups[1] else { unreachable!() };
    assert_eq!(values["tags"], SearchValue::KeywordList(vec![]));
    assert!(errors["amount"].contains("`double`"), "{errors:?}");
    assert!(!e.state.search.contains_key("amount"));
    assert_replays(&sim);
}

#[test]
fn a_workflow_without_search_attributes_records_none() {
    let mut sim = Sim::new();
    sim.register(def("name: plain\nversion: '1'\nsteps:\n  - { id: a, compute: '${{ 1 }}' }\n"));
    sim.start("plain", "x", json!({})).unwrap();
    sim.run(10);
    assert!(upserts(&sim).is_empty());
    assert_eq!(exec(&sim, "x").state.status(), Status::Completed);
}
