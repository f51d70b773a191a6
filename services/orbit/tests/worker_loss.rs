//! A worker lost mid-task: its `Session` stream ends while it holds a task. The server
//! reports the attempt uncertain, redelivers the task to another worker (same idempotency
//! key and attempt number, `redelivery = true`), and a late result from the lost worker
//! does not change the outcome once the unit is resolved (docs/events.md, rule 4).

// Tests read their environment (ORBIT_PYTHON, the database URL) and the wall clock
// (unique names, deadlines of real processes) directly.
#![allow(clippy::disallowed_methods)]

mod common;

use common::*;
use orbit_api::v1 as pb;
use orbit_server_kit::payload::json_to_proto;
use orbit_worker::{TaskContext, TaskFailure, Worker};
use serde_json::{json, Value};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tokio_util::sync::CancellationToken;

const WORKFLOW: &str = r#"
name: lossy
version: "1"
tasks: { work: {} }
steps:
  - { id: a, task: work, input: "${{ input }}" }
output: "${{ steps.a.output }}"
"#;

const STEP: Duration = Duration::from_secs(15);

/// What a worker saw of a delivered task.
#[derive(Clone, Debug, PartialEq)]
struct Seen {
    token: String,
    step: String,
    idempotency_key: String,
    attempt: u32,
    redelivery: bool,
}

fn count(events: &[pb::HistoryEvent], event_type: &str, step: &str) -> usize {
    events.iter().filter(|e| e.event_type == event_type && e.step == step).count()
}

fn types(events: &[pb::HistoryEvent]) -> Vec<String> {
    events.iter().map(|e| format!("{}({})", e.event_type, e.step)).collect()
}

/// Heartbeats a raw session (an empty heartbeat every 300 ms) while the guard lives, so
/// the short session timeouts here end only the sessions a test drops.
fn keep_alive(session: &RawSession) -> AbortOnDrop {
    let tx = session.tx.clone();
    AbortOnDrop(tokio::spawn(async move {
        let empty = pb::WorkerMessage {
            kind: Some(pb::worker_message::Kind::Heartbeat(
                pb::worker_message::Heartbeat::default(),
            )),
        };
        while tx.send(empty.clone()).await.is_ok() {
            tokio::time::sleep(Duration::from_millis(300)).await;
        }
    }))
}

struct AbortOnDrop(tokio::task::JoinHandle<()>);

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        self.0.abort();
    }
}

/// The lost worker (`worker-one`, the task's dispatched worker) reports through the unary
/// call.
async fn late_complete(address: &str, token: &str, output: Value) -> pb::CompleteTaskResponse {
    let mut wc = worker_client(address).await;
    tokio::time::timeout(
        STEP,
        wc.complete_task(pb::CompleteTaskRequest {
            token: token.into(),
            output: Some(json_to_proto(output)),
            worker_id: "worker-one".into(),
        }),
    )
    .await
    .expect("CompleteTask did not answer in time")
    .expect("CompleteTask with a stale token must answer (not accepted), not fail")
    .into_inner()
}

/// The first worker (a raw stream) takes the task and vanishes; an SDK worker started
/// afterwards gets the redelivery and completes it; the lost worker's late result loses.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lost_worker_task_is_redelivered_and_its_late_result_is_ignored() {
    let dir = TempDir::new("worker-loss");
    // A lost session's attempts are kept for its worker's return until the session timeout
    // (worker.proto); a short one makes the loss show soon.
    let server = Server::start(&dir.0.join("orbit.db"), &["--session-timeout-ms", "3000"]).await;
    let address = server.address();
    let mut c = server.client().await;
    register(&mut c, WORKFLOW).await;
    start(&mut c, "lossy", "loss-1", json!({"n": 1})).await.expect("start");

    // Worker 1: Hello → Credits → Task, then it is "killed" (stream aborted).
    let mut first = RawSession::start(&address, "worker-one", &[("work", "1")], 1).await;
    let task1 = first.next_task(STEP).await;
    assert_eq!(task1.execution_id, "loss-1");
    assert_eq!(task1.step, "a");
    assert_eq!(task1.attempt, 1);
    assert!(!task1.redelivery, "the first delivery is not a redelivery: {task1:?}");
    assert!(!task1.idempotency_key.is_empty());
    history_until(&mut c, "loss-1", STEP, |h| count(h, "StepDispatched", "a") == 1).await;
    let killed_at = Instant::now();
    drop(first); // drops the sender (request stream ends) and the response stream

    // The server notices the stream end, keeps the attempt for the worker's return until
    // the session timeout (3 s), then records it uncertain.
    let h =
        history_until(&mut c, "loss-1", STEP, |h| count(h, "StepAttemptUncertain", "a") == 1).await;
    let noticed = killed_at.elapsed();
    assert!(
        noticed < Duration::from_secs(10),
        "the lost session was noticed only after {noticed:?}: {:?}",
        types(&h)
    );

    // Worker 2: an SDK worker started after the loss.
    let seen: Arc<Mutex<Vec<Seen>>> = Arc::default();
    let stop = CancellationToken::new();
    let worker = {
        let seen = seen.clone();
        Worker::builder(address.clone())
            .worker_id("worker-two")
            .max_concurrency(2)
            .task("work", "1", move |ctx: TaskContext| {
                let seen = seen.clone();
                async move {
                    seen.lock().unwrap().push(Seen {
                        token: ctx.token().to_string(),
                        step: ctx.step().to_string(),
                        idempotency_key: ctx.idempotency_key().to_string(),
                        attempt: ctx.attempt(),
                        redelivery: ctx.redelivery(),
                    });
                    Ok::<Value, TaskFailure>(json!({"by": "worker-two"}))
                }
            })
            .build()
            .expect("worker")
    };
    let s = stop.clone();
    let worker_task = tokio::spawn(async move { worker.run(s).await });

    let (status, output) = result(&mut c, "loss-1", STEP).await;
    assert_eq!(status, pb::ExecutionStatus::Completed, "{output}");
    assert_eq!(output, json!({"by": "worker-two"}));
    let redelivered = seen.lock().unwrap().clone();
    assert_eq!(redelivered.len(), 1, "the task ran once on worker two: {redelivered:?}");
    let r = &redelivered[0];
    assert_eq!(r.step, "a");
    assert_eq!(r.idempotency_key, task1.idempotency_key, "same idempotency key");
    assert_eq!(r.attempt, task1.attempt, "same attempt number");
    assert!(r.redelivery, "the redelivered task must say redelivery = true: {r:?}");
    assert_ne!(r.token, task1.token, "a redelivery gets its own token");

    // The lost worker comes back with a late, different result for its old token.
    let late = late_complete(&address, &task1.token, json!({"by": "worker-one"})).await;

    let (status, output) = result(&mut c, "loss-1", STEP).await;
    assert_eq!(status, pb::ExecutionStatus::Completed);
    assert_eq!(output, json!({"by": "worker-two"}), "the late result must not change the output");
    let h = if late.accepted {
        // Recorded by the frontend: the owner must ignore it as stale.
        history_until(&mut c, "loss-1", STEP, |h| {
            h.iter().any(|e| e.event_type == "StaleResultIgnored")
        })
        .await
    } else {
        tokio::time::sleep(Duration::from_millis(300)).await;
        history(&mut c, "loss-1").await
    };
    assert!(
        !late.accepted || h.iter().any(|e| e.event_type == "StaleResultIgnored"),
        "late result: {late:?}; history: {:?}",
        types(&h)
    );
    assert_eq!(count(&h, "StepSucceeded", "a"), 1, "one success for the unit: {:?}", types(&h));
    assert_eq!(count(&h, "StepAttemptUncertain", "a"), 1, "{:?}", types(&h));
    assert_eq!(count(&h, "WorkflowCompleted", ""), 1, "{:?}", types(&h));
    eprintln!("late CompleteTask answered {late:?}; history {:?}", types(&h));

    stop.cancel();
    let _ = tokio::time::timeout(Duration::from_secs(10), worker_task).await;
}

/// docs/events.md rule 4: "a success for any token ever issued to an unresolved unit is
/// accepted (the work happened)". The lost worker's success arrives after the redelivery
/// but before the second worker reports: it resolves the unit, and the second worker's
/// result is the stale one.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lost_worker_success_before_redelivered_result_wins() {
    let dir = TempDir::new("worker-loss-rule4");
    // The lost session's attempt is handed back at the session timeout: a short one.
    let server = Server::start(&dir.0.join("orbit.db"), &["--session-timeout-ms", "3000"]).await;
    let address = server.address();
    let mut c = server.client().await;
    register(&mut c, WORKFLOW).await;
    start(&mut c, "lossy", "loss-2", json!({"n": 2})).await.expect("start");

    let mut first = RawSession::start(&address, "worker-one", &[("work", "1")], 1).await;
    let task1 = first.next_task(STEP).await;
    history_until(&mut c, "loss-2", STEP, |h| count(h, "StepDispatched", "a") == 1).await;
    drop(first);
    history_until(&mut c, "loss-2", STEP, |h| count(h, "StepAttemptUncertain", "a") == 1).await;

    // Worker 2 (raw) takes the redelivery and holds it.
    let mut second = RawSession::start(&address, "worker-two", &[("work", "1")], 1).await;
    let _beating = keep_alive(&second);
    let task2 = second.next_task(STEP).await;
    assert!(task2.redelivery, "{task2:?}");
    assert_eq!(task2.idempotency_key, task1.idempotency_key);
    assert_eq!(task2.attempt, task1.attempt);
    assert_ne!(task2.token, task1.token);

    // The lost worker's success (the work happened) comes in first.
    let late = late_complete(&address, &task1.token, json!({"by": "worker-one"})).await;
    let (status, output) = result(&mut c, "loss-2", STEP).await;
    assert_eq!(
        (status, output.clone()),
        (pb::ExecutionStatus::Completed, json!({"by": "worker-one"})),
        "rule 4: a success for a token issued to the unresolved unit is accepted; \
         CompleteTask answered {late:?}"
    );
    assert!(late.accepted, "the first token's success was applied, so it is accepted: {late:?}");

    // Now worker 2 reports: recorded and ignored.
    second.complete(&task2.token, json!({"by": "worker-two"})).await;
    let ack = loop {
        match second.next(STEP).await {
            Some(pb::server_message::Kind::Ack(a)) => break a,
            Some(pb::server_message::Kind::Cancel(_)) => continue,
            other => panic!("expected an ack, got {other:?}"),
        }
    };
    assert_eq!(ack.token, task2.token);
    let h = if ack.accepted {
        history_until(&mut c, "loss-2", STEP, |h| {
            h.iter().any(|e| e.event_type == "StaleResultIgnored")
        })
        .await
    } else {
        tokio::time::sleep(Duration::from_millis(300)).await;
        history(&mut c, "loss-2").await
    };
    eprintln!("second worker's ack {ack:?}; history {:?}", types(&h));
    assert_eq!(count(&h, "StepSucceeded", "a"), 1, "{:?}", types(&h));
    let (_, output) = result(&mut c, "loss-2", STEP).await;
    assert_eq!(output, json!({"by": "worker-one"}));
    drop(second);
}

/// `worker.proto`: `CompleteTaskResponse.accepted` is "true when the result was applied;
/// false when it was recorded and ignored", and `Ack.accepted` is false for "the unit
/// already resolved". A late result from a lost worker, after the redelivered attempt
/// resolved the unit, is recorded as `StaleResultIgnored`, so it must be answered
/// `accepted = false`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn late_result_for_a_resolved_unit_is_answered_not_accepted() {
    let dir = TempDir::new("worker-loss-ack");
    // The lost session's attempt is handed back at the session timeout: a short one.
    let server = Server::start(&dir.0.join("orbit.db"), &["--session-timeout-ms", "3000"]).await;
    let address = server.address();
    let mut c = server.client().await;
    register(&mut c, WORKFLOW).await;
    start(&mut c, "lossy", "loss-3", json!({"n": 3})).await.expect("start");

    let mut first = RawSession::start(&address, "worker-one", &[("work", "1")], 1).await;
    let task1 = first.next_task(STEP).await;
    history_until(&mut c, "loss-3", STEP, |h| count(h, "StepDispatched", "a") == 1).await;
    drop(first);
    history_until(&mut c, "loss-3", STEP, |h| count(h, "StepAttemptUncertain", "a") == 1).await;

    let mut second = RawSession::start(&address, "worker-two", &[("work", "1")], 1).await;
    let _beating = keep_alive(&second);
    let task2 = second.next_task(STEP).await;
    assert!(task2.redelivery);
    second.complete(&task2.token, json!({"by": "worker-two"})).await;
    match second.next(STEP).await {
        Some(pb::server_message::Kind::Ack(a)) => assert!(a.accepted, "{a:?}"),
        other => panic!("expected an ack, got {other:?}"),
    }
    let (status, output) = result(&mut c, "loss-3", STEP).await;
    assert_eq!((status, output), (pb::ExecutionStatus::Completed, json!({"by": "worker-two"})));

    let late = late_complete(&address, &task1.token, json!({"by": "worker-one"})).await;
    let h = history_until(&mut c, "loss-3", STEP, |h| {
        h.iter().any(|e| e.event_type == "StaleResultIgnored")
    })
    .await;
    assert_eq!(count(&h, "StepSucceeded", "a"), 1, "{:?}", types(&h));
    assert!(
        !late.accepted,
        "the late result was recorded and ignored (StaleResultIgnored in {:?}), but \
         CompleteTask answered {late:?}",
        types(&h)
    );
    drop(second);
}

/// A task whose worker is always lost is not redelivered forever (issue 30, item 1): after
/// `retry.max_redeliveries` redeliveries of the attempt, the next loss fails it with
/// `WORKER_LOST`, which the retry policy then treats as any failure (here: no attempt left).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_task_that_keeps_losing_its_worker_fails_with_worker_lost() {
    let dir = TempDir::new("worker-lost");
    let admin_addr = format!("127.0.0.1:{}", free_port());
    let flags = ["--session-timeout-ms", "1000", "--admin-listen", admin_addr.as_str()];
    let server = Server::start(&dir.0.join("orbit.db"), &flags).await;
    let address = server.address();
    let mut c = server.client().await;
    let bounded = WORKFLOW
        .replace("name: lossy", "name: doomed")
        .replace("input: \"${{ input }}\"", "retry: { max_attempts: 1, max_redeliveries: 1 }");
    register(&mut c, &bounded).await;
    start(&mut c, "doomed", "doomed-1", json!({})).await.expect("start");
    for (i, redelivery) in [false, true].into_iter().enumerate() {
        let mut session =
            RawSession::start(&address, &format!("dies-{i}"), &[("work", "1")], 1).await;
        let task = session.next_task(STEP).await;
        assert_eq!((task.attempt, task.redelivery), (1, redelivery), "{task:?}");
        drop(session);
        history_until(&mut c, "doomed-1", STEP, |h| count(h, "StepAttemptUncertain", "a") > i)
            .await;
    }
    let (status, error) = result(&mut c, "doomed-1", STEP).await;
    assert_eq!(status, pb::ExecutionStatus::Failed, "{error}");
    assert!(error.as_str().is_some_and(|e| e.starts_with("WORKER_LOST")), "{error}");
    let h = history(&mut c, "doomed-1").await;
    assert_eq!(count(&h, "StepAttemptUncertain", "a"), 2, "{:?}", types(&h));
    assert_eq!(count(&h, "StepDispatched", "a"), 2, "never offered a third time: {:?}", types(&h));
    let (_, metrics) = common::admin::get(&admin_addr, "/metrics").await.expect("metrics");
    for (reason, n) in [("SESSION_LOST", 2), ("WORKER_LOST", 1)] {
        let line =
            format!("orbit_attempts_lost_total{{reason=\"{reason}\",workflow=\"doomed\"}} {n}");
        assert!(metrics.contains(&line), "{line} not in:\n{metrics}");
    }
}
