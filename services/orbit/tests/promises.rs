//! Promises the API makes, kept (issue 13, item 2), each through the real `orbit dev`:
//! idempotent `request_id` on signal and cancel, `EXECUTION_EXISTS` for an id taken by
//! another workflow, the dispatched worker's id in history and `DescribeExecution`, and a
//! worker reconnecting within the session timeout keeping its in-flight attempts, and a
//! worker restarted under the same id getting its lost attempts redelivered at once, and
//! (issue 25) a handler that describes its own execution already named as its worker. (The
//! Session's first-message code is checked in `bad_input.rs`.)

mod common;

use common::*;
use orbit_api::v1 as pb;
use orbit_api::v1::workflow_service_client::WorkflowServiceClient;
use orbit_server_kit::payload::json_to_proto;
use serde_json::json;
use std::time::Duration;
use tonic::transport::Channel;

const STEP: Duration = Duration::from_secs(20);

/// One task, a cancel handler with a task of its own (so a cancelled run winds down while
/// `cleanup` is queued), and a signal it buffers.
const WORKFLOW: &str = r#"
name: promised
version: "1"
tasks: { work: {}, cleanup: {} }
signals: { poke: null }
steps:
  - { id: a, task: work }
on:
  cancel:
    - { id: tidy, task: cleanup }
"#;

const OTHER: &str = r#"
name: elsewhere
version: "7"
tasks: { work: {} }
steps:
  - { id: a, task: work }
"#;

fn count(events: &[pb::HistoryEvent], event_type: &str) -> usize {
    events.iter().filter(|e| e.event_type == event_type).count()
}

async fn signal(
    c: &mut WorkflowServiceClient<Channel>,
    id: &str,
    request_id: &str,
) -> Result<pb::SignalExecutionResponse, tonic::Status> {
    c.signal_execution(pb::SignalExecutionRequest {
        execution_id: id.into(),
        name: "poke".into(),
        payload: Some(json_to_proto(json!({"n": 1}))),
        request_id: request_id.into(),
    })
    .await
    .map(tonic::Response::into_inner)
}

async fn cancel(
    c: &mut WorkflowServiceClient<Channel>,
    id: &str,
    request_id: &str,
) -> Result<u64, tonic::Status> {
    let request = pb::CancelExecutionRequest {
        execution_id: id.into(),
        reason: "test".into(),
        request_id: request_id.into(),
    };
    c.cancel_execution(request).await.map(|r| r.into_inner().seq)
}

async fn describe(c: &mut WorkflowServiceClient<Channel>, id: &str) -> pb::ExecutionDescription {
    let request = pb::DescribeExecutionRequest { execution_id: id.into(), run: 0, at_seq: 0 };
    let response = c.describe_execution(request).await.expect("describe").into_inner();
    response.execution.expect("a description")
}

/// A retried signal or cancel (same `request_id`) records nothing new and answers the
/// original seq: while running, while winding down, and after the execution finished.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn retried_signals_and_cancels_record_once_and_answer_the_original_seq() {
    let dir = TempDir::new("promises-request-id");
    let server = Server::start(&dir.0.join("orbit.db"), &[]).await;
    let mut c = server.client().await;
    register(&mut c, WORKFLOW).await;
    start(&mut c, "promised", "idem-1", json!({})).await.expect("start");

    let first = signal(&mut c, "idem-1", "sig-1").await.expect("signal");
    assert!(first.seq > 0);
    let retry = signal(&mut c, "idem-1", "sig-1").await.expect("retried signal");
    assert_eq!((retry.seq, retry.run), (first.seq, first.run), "the original seq");
    let plain = signal(&mut c, "idem-1", "").await.expect("a signal without request id");
    assert!(plain.seq > first.seq, "no request id, no deduplication");
    let h = history(&mut c, "idem-1").await;
    assert_eq!(count(&h, "SignalReceived"), 2, "the retry recorded nothing");

    // The same request id for another request: refused, nothing recorded (issue 30, 10).
    let other = pb::SignalExecutionRequest {
        execution_id: "idem-1".into(),
        name: "poke".into(),
        payload: Some(json_to_proto(json!({"n": 2}))),
        request_id: "sig-1".into(),
    };
    let reused = c.signal_execution(other).await.expect_err("another payload, same request id");
    assert_eq!(code(&reused), "REQUEST_ID_REUSED", "{reused:?}");
    assert_eq!(reused.code(), tonic::Code::AlreadyExists);
    let reordered = pb::SignalExecutionRequest {
        execution_id: "idem-1".into(),
        name: "poke".into(),
        payload: Some(json_to_proto(json!({"n": 1}))),
        request_id: "sig-1".into(),
    };
    let same = c.signal_execution(reordered).await.expect("the same request again").into_inner();
    assert_eq!(same.seq, first.seq);
    let h = history(&mut c, "idem-1").await;
    assert_eq!(count(&h, "SignalReceived"), 2, "the reused id recorded nothing");

    // Cancel: the run winds down (the cancel handler's task is queued, no worker runs it).
    let cancelled = cancel(&mut c, "idem-1", "cancel-1").await.expect("cancel");
    assert!(cancelled > plain.seq);
    let h = history_until(&mut c, "idem-1", STEP, |h| count(h, "StepScheduled") >= 2).await;
    let moved = h.last().map_or(0, |e| e.seq);
    assert!(moved > cancelled, "the run went on after the cancel: {moved} > {cancelled}");
    assert_eq!(cancel(&mut c, "idem-1", "cancel-1").await.expect("retry"), cancelled);
    let other_reason = pb::CancelExecutionRequest {
        execution_id: "idem-1".into(),
        reason: "another reason".into(),
        request_id: "cancel-1".into(),
    };
    let reused = c.cancel_execution(other_reason).await.expect_err("same id, other reason");
    assert_eq!(code(&reused), "REQUEST_ID_REUSED", "{reused:?}");
    assert_eq!(
        cancel(&mut c, "idem-1", "").await.expect("another cancel while winding down"),
        0,
        "nothing recorded: seq 0 (CancelExecutionResponse.seq)"
    );
    let h = history(&mut c, "idem-1").await;
    assert_eq!(count(&h, "CancelRequested"), 1, "{h:?}");

    // The handler's task runs; the execution ends CANCELLED.
    let mut worker = RawSession::start(&server.address(), "cleaner", &[("cleanup", "1")], 1).await;
    let task = worker.next_task(STEP).await;
    assert_eq!(task.step, "on:cancel:tidy");
    worker.complete(&task.token, json!({})).await;
    let (status, _) = result(&mut c, "idem-1", STEP).await;
    assert_eq!(status, pb::ExecutionStatus::Cancelled);

    // After the end: the retries still answer the original seqs and record nothing.
    assert_eq!(cancel(&mut c, "idem-1", "cancel-1").await.expect("late retry"), cancelled);
    let late = signal(&mut c, "idem-1", "sig-1").await.expect("late signal retry");
    assert_eq!((late.seq, late.run), (first.seq, first.run));
    let refused = signal(&mut c, "idem-1", "sig-new").await.expect_err("a new signal");
    assert_eq!(code(&refused), "EXECUTION_FINISHED", "{refused:?}");
    let h = history(&mut c, "idem-1").await;
    assert_eq!((count(&h, "SignalReceived"), count(&h, "CancelRequested")), (2, 1));
}

/// Execution ids are unique across workflows: a start of another workflow under a taken id
/// is `EXECUTION_EXISTS`, not `created: false` with the other workflow's version.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_taken_id_under_another_workflow_is_execution_exists() {
    let dir = TempDir::new("promises-exists");
    let server = Server::start(&dir.0.join("orbit.db"), &[]).await;
    let mut c = server.client().await;
    register(&mut c, WORKFLOW).await;
    register(&mut c, OTHER).await;
    let created = start(&mut c, "elsewhere", "taken-1", json!({})).await.expect("start");
    assert!(created.created);
    assert_eq!(created.version, "7");

    let refused = start(&mut c, "promised", "taken-1", json!({})).await.expect_err("taken");
    assert_eq!(code(&refused), "EXECUTION_EXISTS", "{refused:?}");
    assert!(!refused.message().contains("elsewhere"), "{}", refused.message());
    // The same workflow again is the idempotent start it always was.
    let again = start(&mut c, "elsewhere", "taken-1", json!({})).await.expect("idempotent start");
    assert_eq!((again.created, again.version.as_str()), (false, "7"));
    assert_eq!(again.definition_hash, created.definition_hash);
    let info = describe(&mut c, "taken-1").await.info.expect("info");
    assert_eq!(info.workflow, "elsewhere", "the execution is untouched");
}

/// `StepDispatched.worker_id` and `DescribeExecution.pending_tasks[].worker_id` name the
/// worker from its hello, and only while the attempt is dispatched.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dispatched_attempts_name_the_worker_from_its_hello() {
    let dir = TempDir::new("promises-worker-id");
    let server = Server::start(&dir.0.join("orbit.db"), &[]).await;
    let mut c = server.client().await;
    register(&mut c, WORKFLOW).await;
    start(&mut c, "promised", "named-1", json!({})).await.expect("start");
    let queued = describe(&mut c, "named-1").await.pending_tasks;
    assert_eq!(queued.len(), 1, "{queued:?}");
    assert_eq!(queued[0].state(), pb::PendingTaskState::Queued);
    assert_eq!(queued[0].worker_id, "", "no worker while queued");

    let mut worker =
        RawSession::start(&server.address(), "hello-worker-7", &[("work", "1")], 1).await;
    let task = worker.next_task(STEP).await;
    let h = history_until(&mut c, "named-1", STEP, |h| count(h, "StepDispatched") == 1).await;
    let dispatched = h.iter().find(|e| e.event_type == "StepDispatched").expect("dispatched");
    assert_eq!(event_payload(dispatched)["worker_id"], json!("hello-worker-7"), "{dispatched:?}");
    let pending = describe(&mut c, "named-1").await.pending_tasks;
    assert_eq!(pending.len(), 1, "{pending:?}");
    assert_eq!(pending[0].state(), pb::PendingTaskState::Dispatched);
    assert_eq!(pending[0].token, task.token);
    assert_eq!(pending[0].worker_id, "hello-worker-7");

    worker.complete(&task.token, json!({"ok": true})).await;
    let (status, _) = result(&mut c, "named-1", STEP).await;
    assert_eq!(status, pb::ExecutionStatus::Completed);
    assert!(describe(&mut c, "named-1").await.pending_tasks.is_empty());
}

/// Issue 25: a task handed off to a worker is recorded `StepDispatched` in the commit that
/// queued it, so a `DescribeExecution` made by the handler while it holds the task names
/// the worker (before, the dispatch was recorded by a later pass, up to 50 ms on, and the
/// describe said `""`).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_handler_describing_its_execution_sees_itself_named() {
    let dir = TempDir::new("promises-describe-self");
    let server = Server::start(&dir.0.join("orbit.db"), &[]).await;
    let mut c = server.client().await;
    register(&mut c, DESCRIBED).await;
    let stop = tokio_util::sync::CancellationToken::new();
    let builder = orbit_worker::Worker::builder(server.address()).worker_id("self-7");
    describing_worker(builder, c.clone(), &stop);
    assert_described_from_the_handler(&mut c, "self", "self-7", 5, STEP).await;
    stop.cancel();
}

/// A worker whose stream breaks and that comes back with the same `worker_id` within the
/// session timeout keeps its attempt: nothing is handed back as uncertain, nothing is
/// redelivered, and its result on the new stream is applied.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reconnecting_worker_keeps_its_in_flight_attempts() {
    let dir = TempDir::new("promises-reconnect");
    // The default 30 s session timeout: far longer than the pause below.
    let server = Server::start(&dir.0.join("orbit.db"), &[]).await;
    let address = server.address();
    let mut c = server.client().await;
    register(&mut c, WORKFLOW).await;
    start(&mut c, "promised", "back-1", json!({})).await.expect("start");

    let mut first = RawSession::start(&address, "returning", &[("work", "1")], 1).await;
    let task = first.next_task(STEP).await;
    history_until(&mut c, "back-1", STEP, |h| count(h, "StepDispatched") == 1).await;
    drop(first);

    // Before issue 13 the stream end made the attempt uncertain at once; now it stays in
    // flight. A second worker of the task, ready for a redelivery, gets nothing.
    let mut bystander = RawSession::start(&address, "bystander", &[("work", "1")], 1).await;
    tokio::time::sleep(Duration::from_secs(2)).await;
    let h = history(&mut c, "back-1").await;
    assert_eq!(count(&h, "StepAttemptUncertain"), 0, "the attempt stays in flight: {h:?}");

    // The worker is back: it heartbeats its old token and reports the result it holds.
    let again = RawSession::start(&address, "returning", &[("work", "1")], 0).await;
    let heartbeat = pb::WorkerMessage {
        kind: Some(pb::worker_message::Kind::Heartbeat(pb::worker_message::Heartbeat {
            tokens: vec![task.token.clone()],
            details: None,
            complete: true,
        })),
    };
    again.tx.send(heartbeat).await.expect("heartbeat");
    let mut again = again;
    again.complete(&task.token, json!({"by": "returning"})).await;
    match again.next(STEP).await {
        Some(pb::server_message::Kind::Ack(ack)) => {
            assert!(ack.accepted, "the result of the kept attempt is applied: {ack:?}");
        }
        other => panic!("expected an ack, got {other:?}"),
    }
    let (status, _) = result(&mut c, "back-1", STEP).await;
    assert_eq!(status, pb::ExecutionStatus::Completed);
    let h = history(&mut c, "back-1").await;
    assert_eq!(count(&h, "StepAttemptUncertain"), 0, "{h:?}");
    assert_eq!(count(&h, "StepDispatched"), 1, "never redelivered: {h:?}");
    let succeeded = h.iter().find(|e| e.event_type == "StepSucceeded").expect("succeeded");
    assert_eq!(event_payload(succeeded)["output"], json!({"by": "returning"}));
    // The bystander never got the task.
    bystander.tx.send(credits(1)).await.expect("credits");
    let no_task = tokio::time::timeout(Duration::from_millis(500), bystander.next(STEP)).await;
    assert!(
        !matches!(no_task, Ok(Some(pb::server_message::Kind::Task(_)))),
        "the attempt was not redelivered: {no_task:?}"
    );
}

/// Without a reconnect, the attempt is handed back once the session timeout passes and is
/// redelivered to another worker with the same idempotency key.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_attempt_is_handed_back_when_its_worker_does_not_return_in_time() {
    let dir = TempDir::new("promises-no-return");
    // Short, so the test does not wait long; the server tells workers to heartbeat at a
    // third of it, as the successor's loop below does.
    let server = Server::start(&dir.0.join("orbit.db"), &["--session-timeout-ms", "3000"]).await;
    let address = server.address();
    let mut c = server.client().await;
    register(&mut c, WORKFLOW).await;
    start(&mut c, "promised", "gone-1", json!({})).await.expect("start");
    let mut first = RawSession::start(&address, "vanishing", &[("work", "1")], 1).await;
    let task = first.next_task(STEP).await;
    history_until(&mut c, "gone-1", STEP, |h| count(h, "StepDispatched") == 1).await;
    drop(first);

    let h = history_until(&mut c, "gone-1", STEP, |h| count(h, "StepAttemptUncertain") == 1).await;
    let uncertain = h.iter().find(|e| e.event_type == "StepAttemptUncertain").expect("uncertain");
    assert_eq!(event_payload(uncertain)["reason"], json!("SESSION_LOST"), "{uncertain:?}");
    let mut other = RawSession::start(&address, "successor", &[("work", "1")], 1).await;
    let beats = other.tx.clone();
    let beating = tokio::spawn(async move {
        let empty = pb::WorkerMessage {
            kind: Some(pb::worker_message::Kind::Heartbeat(
                pb::worker_message::Heartbeat::default(),
            )),
        };
        while beats.send(empty.clone()).await.is_ok() {
            tokio::time::sleep(Duration::from_millis(300)).await;
        }
    });
    let again = other.next_task(STEP).await;
    assert!(again.redelivery);
    assert_eq!(again.idempotency_key, task.idempotency_key);
    other.complete(&again.token, json!({})).await;
    let (status, _) = result(&mut c, "gone-1", STEP).await;
    assert_eq!(status, pb::ExecutionStatus::Completed);
    beating.abort();
}

/// A worker process that restarted under the same `worker_id` (its previous life killed
/// mid-task) says in its complete heartbeat that it holds nothing: the attempt its new
/// session adopted is handed back at once (`SESSION_LOST`) and redelivered with the same
/// idempotency key, not after the session timeout.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_restarted_worker_gets_the_attempts_its_previous_life_left_redelivered_at_once() {
    let dir = TempDir::new("promises-restart");
    // Long: without the complete heartbeat the attempt would come back only after a minute,
    // three times the wait below.
    let server = Server::start(&dir.0.join("orbit.db"), &["--session-timeout-ms", "60000"]).await;
    let address = server.address();
    let mut c = server.client().await;
    register(&mut c, WORKFLOW).await;
    start(&mut c, "promised", "restart-1", json!({})).await.expect("start");
    let mut first = RawSession::start(&address, "restarting", &[("work", "1")], 1).await;
    let task = first.next_task(STEP).await;
    history_until(&mut c, "restart-1", STEP, |h| count(h, "StepDispatched") == 1).await;
    drop(first);

    // The new process: same worker id, nothing held. It heartbeats as the SDKs do, right
    // away and then periodically, so the adoption is seen whenever the server notices
    // that the old stream ended.
    let mut reborn = RawSession::start(&address, "restarting", &[("work", "1")], 1).await;
    let beats = reborn.tx.clone();
    let beating = tokio::spawn(async move {
        let holding_nothing = pb::WorkerMessage {
            kind: Some(pb::worker_message::Kind::Heartbeat(pb::worker_message::Heartbeat {
                tokens: vec![],
                details: None,
                complete: true,
            })),
        };
        while beats.send(holding_nothing.clone()).await.is_ok() {
            tokio::time::sleep(Duration::from_millis(300)).await;
        }
    });
    let again = reborn.next_task(STEP).await;
    assert!(again.redelivery, "{again:?}");
    assert_eq!(again.idempotency_key, task.idempotency_key);
    assert_ne!(again.token, task.token, "a new attempt");
    let h = history(&mut c, "restart-1").await;
    let uncertain = h.iter().find(|e| e.event_type == "StepAttemptUncertain").expect("uncertain");
    assert_eq!(event_payload(uncertain)["reason"], json!("SESSION_LOST"), "{uncertain:?}");
    reborn.complete(&again.token, json!({})).await;
    let (status, _) = result(&mut c, "restart-1", STEP).await;
    assert_eq!(status, pb::ExecutionStatus::Completed);
    let h = history(&mut c, "restart-1").await;
    assert_eq!(count(&h, "StepAttemptUncertain"), 1, "handed back once: {h:?}");
    assert_eq!(count(&h, "StepSucceeded"), 1, "{h:?}");
    beating.abort();
}
