//! Cancellation reaches the worker holding a task, and a worker that stops heartbeating a
//! task past the step's `heartbeat_timeout` loses it: the attempt fails with
//! `HEARTBEAT_TIMEOUT` and the step's retry policy offers attempt 2.

mod common;

use common::*;
use orbit_api::v1 as pb;
use orbit_worker::{TaskContext, TaskFailure, Worker};
use serde_json::{json, Value};
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Arc;
use std::time::Duration;
use tokio_util::sync::CancellationToken;

/// Sends `cancelled` when the handler's future is dropped before it finished.
struct OnDrop(tokio::sync::mpsc::UnboundedSender<&'static str>);

impl Drop for OnDrop {
    fn drop(&mut self) {
        let _ = self.0.send("cancelled");
    }
}

const WAITING: &str = r#"
name: waiting
version: "1"
tasks: { hold: {} }
steps:
  - { id: h, task: hold, heartbeat_timeout: 400ms, retry: { max_attempts: 1 } }
output: "${{ steps.h.output }}"
"#;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cancelling_an_execution_cancels_the_task_in_the_workers_hands() {
    let dir = TempDir::new("cancel");
    let server = Server::start(&dir.0.join("orbit.db"), &[]).await;
    let mut c = server.client().await;
    register(&mut c, &WAITING.replace("heartbeat_timeout: 400ms, ", "")).await;
    let (seen_tx, mut seen_rx) = tokio::sync::mpsc::unbounded_channel::<&'static str>();
    let stop = CancellationToken::new();
    let worker = Worker::builder(server.address())
        .worker_id("holder")
        .task("hold", "1", move |_ctx: TaskContext| {
            let seen = seen_tx.clone();
            async move {
                let _ = seen.send("started");
                // A handler that ignores the cancellation is dropped after the cancel grace
                // (5 s by default): the guard tells.
                let _guard = OnDrop(seen.clone());
                tokio::time::sleep(Duration::from_secs(30)).await;
                let _ = seen.send("timed out");
                Err::<Value, TaskFailure>(TaskFailure::fatal("SLOW", "never cancelled"))
            }
        })
        .build()
        .unwrap();
    let s = stop.clone();
    tokio::spawn(async move { worker.run(s).await });
    start(&mut c, "waiting", "w-1", json!({})).await.unwrap();
    let first = tokio::time::timeout(Duration::from_secs(10), seen_rx.recv()).await.unwrap();
    assert_eq!(first, Some("started"));
    c.cancel_execution(pb::CancelExecutionRequest {
        execution_id: "w-1".into(),
        reason: "test".into(),
        request_id: String::new(),
    })
    .await
    .unwrap();
    let next = tokio::time::timeout(Duration::from_secs(10), seen_rx.recv())
        .await
        .expect("the worker heard");
    assert_eq!(next, Some("cancelled"));
    assert_eq!(
        result(&mut c, "w-1", Duration::from_secs(10)).await.0,
        pb::ExecutionStatus::Cancelled
    );
    stop.cancel();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_task_without_heartbeats_fails_its_attempt_and_is_retried() {
    let dir = TempDir::new("heartbeat");
    let server = Server::start(&dir.0.join("orbit.db"), &[]).await;
    let mut c = server.client().await;
    let retried = WAITING.replace("max_attempts: 1", "max_attempts: 2, initial_interval: 100ms");
    register(&mut c, &retried).await;
    let deliveries = Arc::new(AtomicU32::new(0));
    let stop = CancellationToken::new();
    let d = deliveries.clone();
    // The worker heartbeats every 5 s (the server's interval): far slower than the step's
    // 400 ms heartbeat_timeout, so the first delivery goes silent for too long.
    let worker = Worker::builder(server.address())
        .worker_id("sleepy")
        .task("hold", "1", move |ctx: TaskContext| {
            let n = d.fetch_add(1, Ordering::SeqCst);
            async move {
                if n == 0 {
                    tokio::select! {
                        () = ctx.cancellation().cancelled() => {}
                        () = tokio::time::sleep(Duration::from_secs(30)) => {}
                    }
                    return Err(TaskFailure::fatal("CANCELLED", "stopped"));
                }
                Ok::<Value, TaskFailure>(
                    json!({"redelivery": ctx.redelivery(), "attempt": ctx.attempt()}),
                )
            }
        })
        .build()
        .unwrap();
    let s = stop.clone();
    tokio::spawn(async move { worker.run(s).await });
    start(&mut c, "waiting", "hb-1", json!({})).await.unwrap();
    let (status, output) = result(&mut c, "hb-1", Duration::from_secs(20)).await;
    assert_eq!(status, pb::ExecutionStatus::Completed, "{output}");
    assert_eq!(output, json!({"redelivery": false, "attempt": 2}), "the next attempt");
    let history = c
        .get_history(pb::GetHistoryRequest { execution_id: "hb-1".into(), ..Default::default() })
        .await
        .unwrap()
        .into_inner();
    let of = |t: &str| -> Vec<String> {
        let events = history.events.iter().filter(|e| e.event_type == t);
        events.map(|e| format!("{:?}", e.payload)).collect()
    };
    let failed = of("StepAttemptFailed");
    assert_eq!(failed.len(), 1, "{failed:?}");
    assert!(failed[0].contains("HEARTBEAT_TIMEOUT"), "{failed:?}");
    assert!(of("StepAttemptUncertain").is_empty(), "no redelivery of a silent attempt");
    assert_eq!(of("RetryScheduled").len(), 1);
    stop.cancel();
}
