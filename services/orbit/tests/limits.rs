//! Server-wide limits through the real `orbit dev` (`--max-*` flags): each one is hit, and
//! where a workflow sets its own, the stricter of the two applies (SEMANTICS.md "Limits").

mod common;

use common::*;
use orbit_api::v1 as pb;
use serde_json::{json, Value};
use std::time::Duration;

const WAIT: Duration = Duration::from_secs(60);

const HOLD: &str = r#"
name: hold
version: "1"
signals: { go: null }
steps:
  - { id: wait, await: go }
"#;

/// `n` compute steps in a chain: about two events per step.
fn chain(name: &str, n: usize, limits: &str) -> String {
    let mut doc =
        format!("name: {name}\nversion: \"1\"\n{limits}steps:\n  - {{ id: s0, compute: 0 }}\n");
    for i in 1..n {
        doc.push_str(&format!("  - {{ id: s{i}, needs: [s{}], compute: {i} }}\n", i - 1));
    }
    doc
}

const FAN: &str = r#"
name: fan
version: "1"
steps:
  - { id: each, for_each: "${{ input.items }}", compute: "${{ item + '!' }}" }
output: ${{ steps.each.output }}
"#;

const BIG: &str = r#"
name: big
version: "1"
steps:
  - { id: c, compute: "${{ input.n.map(i, input.n) }}" }
output: ${{ steps.c.output }}
"#;

fn error_code(result: &(pb::ExecutionStatus, Value)) -> String {
    result.1.as_str().unwrap_or_default().split(':').next().unwrap_or_default().to_string()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn max_active_executions_refuses_new_starts_until_one_closes() {
    let dir = TempDir::new("limit-active");
    let server = Server::start(&dir.0.join("orbit.db"), &["--max-active-executions", "2"]).await;
    let mut c = server.client().await;
    register(&mut c, HOLD).await;
    start(&mut c, "hold", "h1", json!({})).await.expect("first start");
    start(&mut c, "hold", "h2", json!({})).await.expect("second start");

    let refused = start(&mut c, "hold", "h3", json!({})).await.unwrap_err();
    assert_eq!(refused.code(), tonic::Code::ResourceExhausted, "{refused:?}");
    assert_eq!(code(&refused), "RESOURCE_EXHAUSTED");
    assert!(refused.message().contains("max_active_executions 2"), "{}", refused.message());
    let missing = c
        .describe_execution(pb::DescribeExecutionRequest {
            execution_id: "h3".into(),
            run: 0,
            at_seq: 0,
        })
        .await
        .unwrap_err();
    assert_eq!(code(&missing), "EXECUTION_NOT_FOUND", "a refused start creates nothing");
    // A retried start of an existing execution is not a new one: answered, not refused.
    let again = start(&mut c, "hold", "h1", json!({})).await.expect("idempotent retry");
    assert!(!again.created);

    // Once one closes there is room again.
    c.cancel_execution(pb::CancelExecutionRequest {
        execution_id: "h1".into(),
        reason: "make room".into(),
        request_id: String::new(),
    })
    .await
    .expect("cancel");
    assert_eq!(result(&mut c, "h1", WAIT).await.0, pb::ExecutionStatus::Cancelled);
    start(&mut c, "hold", "h3", json!({})).await.expect("room after a close");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn max_history_events_fails_a_run_and_the_stricter_limit_wins() {
    let dir = TempDir::new("limit-history");
    let server = Server::start(&dir.0.join("orbit.db"), &["--max-history-events", "12"]).await;
    let mut c = server.client().await;
    // Short enough for the server's limit.
    register(&mut c, &chain("short", 2, "")).await;
    start(&mut c, "short", "s", json!({})).await.unwrap();
    assert_eq!(result(&mut c, "s", WAIT).await.0, pb::ExecutionStatus::Completed);
    // Over the server's limit, although the workflow allows far more: the server's wins.
    register(&mut c, &chain("long", 12, "limits: { max_history_events: 100000 }\n")).await;
    start(&mut c, "long", "l", json!({})).await.unwrap();
    let r = result(&mut c, "l", WAIT).await;
    assert_eq!(r.0, pb::ExecutionStatus::Failed, "{r:?}");
    assert_eq!(error_code(&r), "LIMIT_EXCEEDED", "{r:?}");
    assert!(r.1.as_str().unwrap().contains("12"), "names the server's limit: {r:?}");
    // Stricter in the workflow than on the server: the workflow's wins.
    register(&mut c, &chain("tight", 2, "limits: { max_history_events: 3 }\n")).await;
    start(&mut c, "tight", "t", json!({})).await.unwrap();
    let r = result(&mut c, "t", WAIT).await;
    assert_eq!(error_code(&r), "LIMIT_EXCEEDED", "{r:?}");
    let events = history(&mut c, "l").await;
    assert!(events.len() <= 16, "stopped near the limit, not at the end: {}", events.len());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn max_fan_out_fails_a_wider_for_each() {
    let dir = TempDir::new("limit-fan-out");
    let server = Server::start(&dir.0.join("orbit.db"), &["--max-fan-out", "3"]).await;
    let mut c = server.client().await;
    register(&mut c, FAN).await;
    start(&mut c, "fan", "ok", json!({"items": ["a", "b", "c"]})).await.unwrap();
    let done = result(&mut c, "ok", WAIT).await;
    assert_eq!(done, (pb::ExecutionStatus::Completed, json!(["a!", "b!", "c!"])));
    start(&mut c, "fan", "wide", json!({"items": ["a", "b", "c", "d"]})).await.unwrap();
    let r = result(&mut c, "wide", WAIT).await;
    assert_eq!(r.0, pb::ExecutionStatus::Failed, "{r:?}");
    assert!(r.1.as_str().unwrap().contains("max_fan_out 3"), "{r:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn max_payload_bytes_refuses_inputs_and_fails_computed_values() {
    let dir = TempDir::new("limit-payload");
    let server = Server::start(&dir.0.join("orbit.db"), &["--max-payload-bytes", "1000"]).await;
    let mut c = server.client().await;
    register(&mut c, BIG).await;
    // An input over the flag's limit (well under the default 2 MiB) is refused.
    let refused =
        start(&mut c, "big", "in", json!({"n": [], "pad": "x".repeat(2000)})).await.unwrap_err();
    assert_eq!(code(&refused), "PAYLOAD_TOO_LARGE", "{refused:?}");
    // A small input whose computed value is over it fails the step.
    start(&mut c, "big", "small", json!({"n": [1, 2, 3]})).await.unwrap();
    assert_eq!(result(&mut c, "small", WAIT).await.0, pb::ExecutionStatus::Completed);
    let n: Vec<u32> = (0..40).collect();
    start(&mut c, "big", "out", json!({ "n": n })).await.unwrap();
    let r = result(&mut c, "out", WAIT).await;
    assert_eq!(r.0, pb::ExecutionStatus::Failed, "{r:?}");
    assert!(r.1.as_str().unwrap().contains("max_payload_bytes 1000"), "{r:?}");
}

/// `n` sleep steps in a chain: one durable timer each.
fn naps(name: &str, n: usize, limits: &str) -> String {
    let mut doc =
        format!("name: {name}\nversion: \"1\"\n{limits}steps:\n  - {{ id: n0, sleep: 10ms }}\n");
    for i in 1..n {
        doc.push_str(&format!("  - {{ id: n{i}, needs: [n{}], sleep: 10ms }}\n", i - 1));
    }
    doc
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn max_timers_fails_the_step_that_would_start_one_more_and_the_stricter_limit_wins() {
    let dir = TempDir::new("limit-timers");
    let server = Server::start(&dir.0.join("orbit.db"), &["--max-timers", "3"]).await;
    let mut c = server.client().await;
    register(&mut c, &naps("three", 3, "")).await;
    start(&mut c, "three", "three", json!({})).await.unwrap();
    assert_eq!(result(&mut c, "three", WAIT).await.0, pb::ExecutionStatus::Completed);

    // The fourth timer is over the server's limit, although the workflow allows more.
    register(&mut c, &naps("four", 4, "limits: { max_timers: 100 }\n")).await;
    start(&mut c, "four", "four", json!({})).await.unwrap();
    let r = result(&mut c, "four", WAIT).await;
    assert_eq!(r.0, pb::ExecutionStatus::Failed, "{r:?}");
    assert_eq!(error_code(&r), "LIMIT_EXCEEDED", "{r:?}");
    assert!(r.1.as_str().unwrap().contains("max_timers 3"), "{r:?}");
    let events = history(&mut c, "four").await;
    let timers = events.iter().filter(|e| e.event_type == "TimerStarted").count();
    assert_eq!(timers, 3, "no timer past the limit was started");
    let failed = events.iter().find(|e| e.event_type == "StepFailed").expect("a step failed");
    assert_eq!(failed.step, "n3", "the step that would have started the fourth");

    // Stricter in the workflow than on the server: the workflow's wins.
    register(&mut c, &naps("tight", 2, "limits: { max_timers: 1 }\n")).await;
    start(&mut c, "tight", "tight", json!({})).await.unwrap();
    let r = result(&mut c, "tight", WAIT).await;
    assert_eq!(error_code(&r), "LIMIT_EXCEEDED", "{r:?}");
    assert!(r.1.as_str().unwrap().contains("max_timers 1"), "{r:?}");
}
