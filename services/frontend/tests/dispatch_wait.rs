//! The dispatcher's wait for a rate window (issue 27): a session whose queued task a rate
//! limit holds claims it when the next window opens, however often it is woken meanwhile
//! by something that claims nothing (credits arriving, results, a drained session's
//! lending). Real SQLite store, real owner, the frontend's own server, no sampler (the
//! session's own timer is the only thing that brings it back to the queue).

mod support;

use orbit_api::v1::worker_message::{Credits, Kind as WorkerKind};
use orbit_api::v1::*;
use orbit_frontend::FrontendConfig;
use orbit_server_kit::payload::json_to_proto;
use serde_json::json;
use std::time::Duration;
use support::{next_task, open_session, say};

/// The rate limit's window.
const PERIOD: Duration = Duration::from_secs(2);

const METERED: &str = r#"
name: metered
version: "1"
tasks: { m: { version: "1" } }
steps:
  - id: a
    task: m
    input: {}
    rate_limit: { limit: 1, per: 2s }
"#;

#[tokio::test]
async fn a_rate_limited_task_is_claimed_in_the_next_window_while_the_session_is_woken() {
    let config = FrontendConfig { node_id: "fe-dispatch-wait".into(), ..FrontendConfig::default() };
    let mut h = support::harness(config).await;
    let req = RegisterWorkflowRequest { document: METERED.into(), format: 0 };
    h.workflows.register_workflow(req).await.unwrap();
    let (tx, mut inbound) = open_session(&mut h.workers, "w-1", "m", 4, 4).await;
    for id in ["e-1", "e-2"] {
        let req = StartExecutionRequest {
            workflow: "metered".into(),
            input: Some(json_to_proto(json!({}))),
            execution_id: id.into(),
            ..Default::default()
        };
        h.workflows.start_execution(req).await.unwrap();
    }
    // One start per window: the first task now, the second one held until the next window.
    let first = tokio::time::timeout(PERIOD * 3, next_task(&mut inbound)).await.expect("a task");
    // Meanwhile the worker keeps sending credits (each wakes the session, which has free
    // credits and finds nothing to claim but the held row): the next window must still
    // bring the second task. Bounded by three windows: one to open the next, two spare.
    let nudges = async {
        loop {
            tokio::time::sleep(PERIOD / 10).await;
            if tx.send(say(WorkerKind::Credits(Credits { n: 1 }))).await.is_err() {
                return;
            }
        }
    };
    let second = tokio::select! {
        t = tokio::time::timeout(PERIOD * 3, next_task(&mut inbound)) => t,
        () = nudges => panic!("the stream ended"),
    };
    let second = second.expect("the held task was not claimed in the next window");
    assert_ne!(first.execution_id, second.execution_id);
}
