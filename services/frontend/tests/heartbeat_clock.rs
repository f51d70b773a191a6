//! A step's heartbeat timeout runs on the frontend's clock (`FrontendConfig::clock`): with
//! a manual clock, a one-hour `heartbeat_timeout` is tested without waiting an hour. The
//! supervisor notices on its next tick (at most `TICK`, 5 s, for a timeout this long), the
//! worker is told to stop with `HEARTBEAT_TIMEOUT`, and the engine records the attempt's
//! retryable failure.

mod support;

use orbit_api::v1::server_message::Kind as ServerKind;
use orbit_api::v1::*;
use orbit_clock::ManualClock;
use orbit_frontend::FrontendConfig;
use orbit_server_kit::payload::{json_to_proto, struct_to_json_object};
use serde_json::json;
use support::{next, next_task, open_session};

const T0: u64 = 1_800_000_000_000;
const HOUR_MS: u64 = 3_600_000;

const SILENT: &str = r#"
name: silent
version: "1"
tasks:
  hang: { version: "1" }
steps:
  - id: a
    task: hang
    input: {}
    heartbeat_timeout: 1h
    retry: { max_attempts: 2, initial_interval: 1ms }
"#;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_one_hour_heartbeat_timeout_fires_when_the_frontends_clock_passes_it() {
    let manual = ManualClock::new(T0);
    let config = FrontendConfig {
        node_id: "fe-clock".into(),
        clock: manual.clock(),
        // The session itself stays alive across the jump (its liveness is on the same
        // clock): only the attempt's heartbeat timeout is under test.
        session_timeout_ms: 10 * HOUR_MS,
        ..FrontendConfig::default()
    };
    let mut h = support::harness(config).await;
    let req = RegisterWorkflowRequest { document: SILENT.into(), format: 0 };
    h.workflows.register_workflow(req).await.unwrap();
    let start = StartExecutionRequest {
        workflow: "silent".into(),
        input: Some(json_to_proto(json!({}))),
        execution_id: "silent-1".into(),
        ..Default::default()
    };
    h.workflows.start_execution(start).await.unwrap();

    let (_tx, mut inbound) = open_session(&mut h.workers, "w-silent", "hang", 1, 2).await;
    let first = next_task(&mut inbound).await;
    assert_eq!(first.attempt, 1);

    // The worker stays silent; only the frontend's clock moves past the hour.
    manual.advance(HOUR_MS + 1_000);
    // Pings keep the stream busy, so the wait is bounded as a whole: the supervisor looks
    // at least every `TICK` (5 s); four of them is plenty on a busy machine.
    let cancel = tokio::time::timeout(std::time::Duration::from_secs(20), async {
        loop {
            match next(&mut inbound).await {
                ServerKind::Cancel(c) if c.token == first.token => return c.reason,
                ServerKind::Ack(_) => {}
                other => panic!("expected the cancel of the silent attempt, got {other:?}"),
            }
        }
    });
    let reason = cancel.await.expect("the silent attempt is cancelled on the frontend's clock");
    assert_eq!(reason, "HEARTBEAT_TIMEOUT");
    // The engine recorded the attempt's retryable failure (this harness runs no scheduler,
    // so the retry's backoff timer is not fired here).
    // Watched, not polled: the stream sends each event as it is committed.
    let watch = WatchExecutionRequest { execution_id: "silent-1".into(), ..Default::default() };
    let mut events = h.workflows.watch_execution(watch).await.unwrap().into_inner();
    let failed = tokio::time::timeout(std::time::Duration::from_secs(10), async {
        loop {
            let message = events.message().await.unwrap().expect("the watch stays open");
            if let Some(watch_execution_response::Kind::Event(e)) = message.kind {
                if e.event_type == "StepAttemptFailed" {
                    return e;
                }
            }
        }
    });
    let e = failed.await.expect("StepAttemptFailed recorded");
    let payload = struct_to_json_object(e.payload.unwrap()).unwrap();
    let error = &payload["error"];
    assert_eq!(error["code"], "HEARTBEAT_TIMEOUT", "{payload:?}");
    assert_eq!(error["retryable"], true, "{payload:?}");
}
