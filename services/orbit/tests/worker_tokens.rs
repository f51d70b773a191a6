//! Task tokens are unguessable and bound to the worker they were dispatched to (issue 8,
//! item 5): a token carries ≥ 128 random bits, and a result for it is accepted only from
//! the worker id it was dispatched to — on any stream of that worker (a reconnect counts),
//! through any frontend, or through the unary calls naming that worker — never from another
//! worker's stream or an anonymous `CompleteTask`, which are refused (`WORKER_MISMATCH`,
//! PERMISSION_DENIED) without recording anything.

mod common;

use common::split::{Split, PLAIN};
use common::*;
use orbit_api::v1 as pb;
use orbit_api::v1::workflow_service_client::WorkflowServiceClient;
use orbit_server_kit::payload::json_to_proto;
use serde_json::{json, Value};
use std::time::Duration;
use tonic::transport::Channel;

const WORKFLOW: &str = r#"
name: bound
version: "1"
tasks: { work: {}, other: {} }
steps:
  - { id: a, task: work, input: "${{ input }}" }
output: "${{ steps.a.output }}"
"#;

const STEP: Duration = Duration::from_secs(20);

fn count(events: &[pb::HistoryEvent], event_type: &str) -> usize {
    events.iter().filter(|e| e.event_type == event_type).count()
}

fn types(events: &[pb::HistoryEvent]) -> Vec<String> {
    events.iter().map(|e| format!("{}({})", e.event_type, e.step)).collect()
}

/// Starts one execution on `address` and hands its task to a raw session of `worker_id`.
async fn dispatched(
    address: &str,
    id: &str,
    worker_id: &str,
) -> (RawSession, pb::server_message::Task) {
    let mut c = client_at(address).await;
    register(&mut c, WORKFLOW).await;
    start(&mut c, "bound", id, json!({"n": 1})).await.expect("start");
    let mut session = RawSession::start(address, worker_id, &[("work", "1")], 1).await;
    let task = session.next_task(STEP).await;
    assert_eq!(task.execution_id, id);
    history_until(&mut c, id, STEP, |h| count(h, "StepDispatched") == 1).await;
    (session, task)
}

async fn client_at(address: &str) -> WorkflowServiceClient<Channel> {
    WorkflowServiceClient::new(channel_to(address).await)
}

/// The next ack on a session, bounded.
async fn ack(session: &mut RawSession) -> pb::server_message::Ack {
    match session.next(STEP).await {
        Some(pb::server_message::Kind::Ack(a)) => a,
        other => panic!("expected an ack, got {other:?}"),
    }
}

async fn unary_complete(
    address: &str,
    token: &str,
    worker_id: &str,
    output: Value,
) -> Result<pb::CompleteTaskResponse, tonic::Status> {
    let mut wc = worker_client(address).await;
    let request = pb::CompleteTaskRequest {
        token: token.into(),
        output: Some(json_to_proto(output)),
        worker_id: worker_id.into(),
    };
    tokio::time::timeout(STEP, wc.complete_task(request))
        .await
        .expect("CompleteTask did not answer in time")
        .map(tonic::Response::into_inner)
}

async fn unary_fail(
    address: &str,
    token: &str,
    worker_id: &str,
) -> Result<pb::FailTaskResponse, tonic::Status> {
    let mut wc = worker_client(address).await;
    let request = pb::FailTaskRequest {
        token: token.into(),
        error: Some(pb::TaskError {
            code: "BOOM".into(),
            message: "forged".into(),
            retryable: false,
            ..Default::default()
        }),
        worker_id: worker_id.into(),
    };
    tokio::time::timeout(STEP, wc.fail_task(request))
        .await
        .expect("FailTask did not answer in time")
        .map(tonic::Response::into_inner)
}

fn assert_refused<T: std::fmt::Debug>(what: &str, answer: Result<T, tonic::Status>) {
    let status = answer.expect_err(&format!("{what} must be refused"));
    assert_eq!(status.code(), tonic::Code::PermissionDenied, "{what}: {status:?}");
    assert_eq!(code(&status), "WORKER_MISMATCH", "{what}: {status:?}");
}

/// A token is 32 lowercase hex digits (128 random bits), and two servers started the same
/// way hand out different tokens for the same first task.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tokens_are_random_with_128_bits() {
    let mut tokens = Vec::new();
    for run in 0..2 {
        let dir = TempDir::new(&format!("tokens-{run}"));
        let server = Server::start(&dir.0.join("orbit.db"), &[]).await;
        let (_session, task) = dispatched(&server.address(), "same-id", "worker-a").await;
        let token = task.token;
        assert_eq!(token.len(), 32, "128 bits as hex: {token:?}");
        assert!(
            token.chars().all(|c| c.is_ascii_hexdigit() && !c.is_ascii_uppercase()),
            "lowercase hex: {token:?}"
        );
        tokens.push(token);
    }
    assert_ne!(tokens[0], tokens[1], "two runs must not hand out the same token");
}

/// `orbit dev`: another worker's stream, an anonymous `CompleteTask`, and unary calls
/// naming another worker are refused and leave no trace in the history; the dispatched
/// worker reconnecting on a new stream completes its task.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn only_the_dispatched_worker_completes_its_task() {
    let dir = TempDir::new("tokens-bound");
    let server = Server::start(&dir.0.join("orbit.db"), &[]).await;
    let address = server.address();
    let mut c = server.client().await;
    let (first, task) = dispatched(&address, "bound-1", "worker-a").await;

    refused_everywhere(&address, &task.token, &mut c, "bound-1").await;

    // The dispatched worker reconnects (new stream, same worker id; the old stream ended)
    // and reports the result it still holds: accepted (rule 4: the work happened). Within
    // the session timeout the attempt was kept for it: never handed back (issue 13).
    drop(first);
    let mut again = RawSession::start(&address, "worker-a", &[("work", "1")], 0).await;
    again.complete(&task.token, json!({"by": "worker-a"})).await;
    let a = ack(&mut again).await;
    assert!(a.accepted, "the same worker on a new stream: {a:?}");
    let (status, output) = result(&mut c, "bound-1", STEP).await;
    assert_eq!((status, output), (pb::ExecutionStatus::Completed, json!({"by": "worker-a"})));
    let h = history(&mut c, "bound-1").await;
    assert_eq!(count(&h, "StepAttemptUncertain"), 0, "kept for the returning worker: {h:?}");
}

/// A FailTask naming the dispatched worker is accepted through the unary call too.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_unary_calls_accept_the_dispatched_worker() {
    let dir = TempDir::new("tokens-unary");
    let server = Server::start(&dir.0.join("orbit.db"), &[]).await;
    let address = server.address();
    let mut c = server.client().await;
    let (_session, task) = dispatched(&address, "bound-2", "worker-a").await;
    let answer = unary_fail(&address, &task.token, "worker-a").await.expect("FailTask");
    assert!(answer.accepted, "{answer:?}");
    let (status, _) = result(&mut c, "bound-2", STEP).await;
    assert_eq!(status, pb::ExecutionStatus::Failed);
}

/// The split services on one SQLite file: the token was handed out by frontend-1; the
/// forgeries come through frontend-2; the dispatched worker's result through frontend-2
/// (it moved) is accepted.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn split_results_are_bound_across_frontends() {
    let mut s = Split::new("tokens-split");
    s.spawn("owner", "owner-1", PLAIN);
    s.spawn("frontend", "frontend-1", PLAIN);
    s.spawn("frontend", "frontend-2", PLAIN);
    let (one, two) = (s.url("frontend-1"), s.url("frontend-2"));
    let mut c = s.client("frontend-1").await;
    let (first, task) = dispatched(&one, "bound-3", "worker-a").await;

    refused_everywhere(&two, &task.token, &mut c, "bound-3").await;

    let mut moved = RawSession::start(&two, "worker-a", &[("work", "1")], 0).await;
    moved.complete(&task.token, json!({"by": "worker-a"})).await;
    let a = ack(&mut moved).await;
    assert!(a.accepted, "the dispatched worker through another frontend: {a:?}");
    let (status, output) = result(&mut c, "bound-3", STEP).await;
    assert_eq!((status, output), (pb::ExecutionStatus::Completed, json!({"by": "worker-a"})));
    drop(first);
}

/// The production topology on PostgreSQL (two frontends, one owner; mutual TLS and
/// identities, every session and call as the admin by its client certificate): the same
/// rules — authentication admits the caller, the task token's binding still refuses.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_results_are_bound_across_frontends() {
    let topo = common::cluster::Topology::start("tokens", 2, 1, 1, common::cluster::FAST);
    let fe = topo.frontends();
    let mut c = topo.client(0).await;
    let (first, task) = dispatched(&fe[0], "bound-4", "worker-a").await;
    assert_eq!(task.token.len(), 32, "{task:?}");

    refused_everywhere(&fe[1], &task.token, &mut c, "bound-4").await;

    let mut moved = RawSession::start(&fe[1], "worker-a", &[("work", "1")], 0).await;
    moved.complete(&task.token, json!({"by": "worker-a"})).await;
    let a = ack(&mut moved).await;
    assert!(a.accepted, "the dispatched worker through another frontend: {a:?}");
    let (status, output) = result(&mut c, "bound-4", STEP).await;
    assert_eq!((status, output), (pb::ExecutionStatus::Completed, json!({"by": "worker-a"})));
    drop(first);
}

/// Every forgery of `token` through `via` is refused and recorded nowhere.
async fn refused_everywhere(
    via: &str,
    token: &str,
    c: &mut WorkflowServiceClient<Channel>,
    id: &str,
) {
    // Another worker, on its own stream.
    let mut other = RawSession::start(via, "worker-b", &[("other", "1")], 1).await;
    other.complete(token, json!({"by": "worker-b"})).await;
    let a = ack(&mut other).await;
    assert!(!a.accepted, "another worker's stream must not complete the task: {a:?}");
    assert!(a.reason.starts_with("WORKER_MISMATCH"), "{a:?}");
    // Its heartbeat details for the token are dropped, not recorded.
    let beat = pb::WorkerMessage {
        kind: Some(pb::worker_message::Kind::Heartbeat(pb::worker_message::Heartbeat {
            tokens: vec![token.to_string()],
            details: Some(json_to_proto(json!({"forged": true}))),
            complete: false,
        })),
    };
    other.tx.send(beat).await.expect("send heartbeat");

    // Anonymous and foreign unary calls.
    assert_refused("anonymous CompleteTask", unary_complete(via, token, "", json!(1)).await);
    assert_refused(
        "CompleteTask as worker-b",
        unary_complete(via, token, "worker-b", json!(1)).await,
    );
    assert_refused("anonymous FailTask", unary_fail(via, token, "").await);

    // Nothing was recorded: no result, no stale result, the execution still runs.
    tokio::time::sleep(Duration::from_millis(500)).await;
    let h = history(c, id).await;
    for event in [
        "StepSucceeded",
        "StepAttemptFailed",
        "StaleResultIgnored",
        "StepHeartbeat",
        "WorkflowCompleted",
    ] {
        assert_eq!(count(&h, event), 0, "{event} after forgeries: {:?}", types(&h));
    }
}
