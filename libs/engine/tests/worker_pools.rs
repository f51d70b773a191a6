//! Worker pools and sticky workers (issue 27 item 5): the labels an attempt requires and
//! the worker it sticks to, as recorded in its `StepScheduled.flow`.

mod common;

use common::flow_exec::Exec;
use orbit_engine::flow::{Flow, StickyWorker};
use orbit_engine::{Command, TaskError};
use serde_json::json;
use std::collections::BTreeMap;

fn labels(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
    pairs.iter().map(|(k, v)| ((*k).to_string(), (*v).to_string())).collect()
}

fn ran_on(e: &mut Exec, unit: &str, token: &str, worker: &str) {
    e.command(Command::Dispatched {
        step: unit.into(),
        token: token.into(),
        worker_id: worker.into(),
        session: format!("s-{worker}"),
    });
    e.command(Command::Complete { token: token.into(), output: json!(1) });
}

const LABELLED: &str = r#"
name: render
version: "1"
worker_labels: { pool: cpu }
tasks: { t: {} }
steps:
  - { id: plain, task: t }
  - id: gpu
    task: t
    on: { pool: gpu, region: "${{ input.region }}", n: "${{ input.n }}" }
  - id: each
    task: t
    for_each: "${{ input.zones }}"
    on: { zone: "${{ item }}" }
"#;

#[test]
fn labels_are_evaluated_and_the_step_map_replaces_the_workflow_default() {
    let e = Exec::begin(LABELLED, json!({"region": "eu", "n": 2, "zones": ["a", "b"]}), None);
    let only = |pairs: &[(&str, &str)]| Some(Flow { labels: labels(pairs), ..Flow::default() });
    assert_eq!(e.flow("plain"), only(&[("pool", "cpu")]), "the workflow's default");
    assert_eq!(e.flow("gpu"), only(&[("pool", "gpu"), ("region", "eu"), ("n", "2")]));
    assert_eq!(e.flow("each[0]"), only(&[("zone", "a")]), "replaced, not merged");
    assert_eq!(e.flow("each[1]"), only(&[("zone", "b")]));
    assert!(!e.flow("gpu").unwrap().is_limited(), "labels alone do not make a limited row");
    e.assert_offers_carry_the_recorded_flow();
}

#[test]
fn a_label_that_does_not_evaluate_to_text_fails_the_step_naming_it() {
    let e = Exec::begin(LABELLED, json!({"region": ["eu"], "n": 2, "zones": []}), None);
    let error = e.failure("gpu");
    assert_eq!(error.code, "EXPRESSION_ERROR");
    assert!(error.message.contains("on.region"), "{}", error.message);
}

const STICKY: &str = r#"
name: pipeline
version: "1"
sticky: true
tasks: { t: {} }
steps:
  - { id: a, task: t }
  - { id: b, task: t, needs: [a] }
  - { id: c, task: t, needs: [b], sticky: { timeout: 2s } }
  - { id: d, task: t, needs: [c], sticky: false }
"#;

#[test]
fn a_sticky_attempt_names_the_worker_of_the_previous_attempt() {
    let mut e = Exec::begin(STICKY, json!({}), None);
    assert_eq!(e.flow("a"), None, "no previous worker: nothing is sticky");
    ran_on(&mut e, "a", "t1", "w1");
    let stuck = |worker: &str, timeout_ms| {
        Some(Flow {
            sticky: Some(StickyWorker { worker: worker.into(), timeout_ms }),
            ..Flow::default()
        })
    };
    assert_eq!(e.flow("b"), stuck("w1", 5_000), "the workflow's default, 5 s");
    ran_on(&mut e, "b", "t2", "w2");
    assert_eq!(e.flow("c"), stuck("w2", 2_000), "the latest dispatch, the step's timeout");
    ran_on(&mut e, "c", "t3", "w2");
    assert_eq!(e.flow("d"), None, "`sticky: false` turns the default off");
    e.assert_offers_carry_the_recorded_flow();
}

#[test]
fn a_retry_keeps_the_sticky_worker_and_a_redelivery_drops_it() {
    let mut e = Exec::begin(STICKY, json!({}), None);
    ran_on(&mut e, "a", "t1", "w1");
    let dispatch = |e: &mut Exec, token: &str, worker: &str| {
        e.command(Command::Dispatched {
            step: "b".into(),
            token: token.into(),
            worker_id: worker.into(),
            session: "s".into(),
        });
    };
    dispatch(&mut e, "t2", "w1");
    e.command(Command::Fail { token: "t2".into(), error: TaskError::retryable("BUSY", "later") });
    e.wait(60_000);
    dispatch(&mut e, "t3", "w1");
    e.command(Command::Uncertain { token: "t3".into(), reason: "SESSION_LOST".into() });
    let flows = e.scheduled("b");
    assert_eq!(flows.len(), 3, "{flows:?}");
    let sticky = Some(StickyWorker { worker: "w1".into(), timeout_ms: 5_000 });
    assert_eq!(flows[0].2.as_ref().and_then(|f| f.sticky.clone()), sticky);
    assert_eq!(flows[1].2.as_ref().and_then(|f| f.sticky.clone()), sticky, "a retry keeps it");
    assert!(flows[2].1, "the third is the redelivery");
    assert_eq!(flows[2].2, None, "a redelivery no longer waits for the lost worker");
    // The offers carry what their `StepScheduled` recorded (two offers of attempt 2).
    let offered: Vec<_> = e.offers.iter().filter(|o| o.unit == "b").map(|o| &o.flow).collect();
    let recorded: Vec<_> = flows.iter().map(|(_, _, f)| f).collect();
    assert_eq!(offered, recorded);
}
