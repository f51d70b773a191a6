//! In-process gRPC tests of `AdminService`: real SQLite store in a temp dir, the frontend's
//! services on a loopback port, generated clients, and the real owner in the same process.

mod support;

use orbit_api::v1::server_message::Kind as ServerKind;
use orbit_api::v1::worker_message::{Complete, Credits, Hello, Kind as WorkerKind};
use orbit_api::v1::*;
use orbit_frontend::FrontendConfig;
use orbit_server_kit::payload::json_to_proto;
use orbit_server_kit::ErrorCode;
use serde_json::json;
use std::time::Duration;
use support::{code, next, say, Harness, Outbound};
use tokio::sync::mpsc;
use tokio_stream::wrappers::ReceiverStream;

const GREET: &str = r#"
name: greet
version: "1"
input:
  type: object
  required: [name]
  properties: { name: { type: string } }
tasks:
  hello.say: { version: "1" }
steps:
  - id: say
    task: hello.say
    input: { name: "${{ input.name }}" }
output: ${{ steps.say.output }}
"#;

async fn harness() -> Harness {
    support::harness(FrontendConfig { node_id: "fe-test".into(), ..FrontendConfig::default() })
        .await
}

async fn register(h: &mut Harness) {
    let req = RegisterWorkflowRequest { document: GREET.into(), format: 0 };
    h.workflows.register_workflow(req).await.unwrap();
}

async fn start(h: &mut Harness, id: &str) {
    let req = StartExecutionRequest {
        workflow: "greet".into(),
        input: Some(json_to_proto(json!({"name": id}))),
        execution_id: id.into(),
        ..Default::default()
    };
    h.workflows.start_execution(req).await.unwrap();
}

/// Opens a session of worker `w1` offering `hello.say@1`, up to its welcome.
async fn open_worker(h: &mut Harness) -> (Outbound, tonic::Streaming<ServerMessage>, String) {
    let (tx, rx) = mpsc::channel(16);
    let mut inbound = h.workers.session(ReceiverStream::new(rx)).await.unwrap().into_inner();
    let hello = Hello {
        worker_id: "w1".into(),
        runtime: "rust".into(),
        sdk: "test".into(),
        tasks: vec![TaskRef { name: "hello.say".into(), version: "1".into() }],
        max_concurrency: 4,
        labels: [("zone".to_string(), "a".to_string())].into(),
    };
    tx.send(say(WorkerKind::Hello(hello))).await.unwrap();
    let ServerKind::Welcome(welcome) = next(&mut inbound).await else { panic!("welcome first") };
    (tx, inbound, welcome.session_id)
}

async fn list_workers(h: &mut Harness, req: ListWorkersRequest) -> ListWorkersResponse {
    h.admin.list_workers(req).await.unwrap().into_inner()
}

#[tokio::test]
async fn an_open_session_is_listed_until_its_stream_ends() {
    let mut h = harness().await;
    assert!(list_workers(&mut h, ListWorkersRequest::default()).await.workers.is_empty());
    let (tx, _inbound, session_id) = open_worker(&mut h).await;
    tx.send(say(WorkerKind::Credits(Credits { n: 2 }))).await.unwrap();

    // Credits are applied asynchronously: wait until they show.
    let mut listed = None;
    for _ in 0..100 {
        let page = list_workers(&mut h, ListWorkersRequest::default()).await;
        if page.workers.first().and_then(|w| w.sessions.first()).is_some_and(|s| s.credits == 2) {
            listed = Some(page);
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let page = listed.expect("the worker with its credits");
    assert!(page.next_page_token.is_empty());
    let worker = &page.workers[0];
    assert_eq!(worker.worker_id, "w1");
    assert!(worker.online);
    assert_eq!((worker.runtime.as_str(), worker.sdk.as_str()), ("rust", "test"));
    assert_eq!(worker.max_concurrency, 4);
    assert_eq!(worker.labels.get("zone").map(String::as_str), Some("a"));
    assert_eq!(worker.tasks, [TaskRef { name: "hello.say".into(), version: "1".into() }]);
    assert_eq!(worker.in_flight, 0);
    let session = &worker.sessions[0];
    assert_eq!(session.session_id, session_id);
    assert_eq!(session.frontend_node_id, "fe-test");
    assert!(!session.draining);
    assert!(session.connected_at.is_some() && worker.last_seen_at.is_some());

    let filtered = ListWorkersRequest { task: "other".into(), ..Default::default() };
    assert!(list_workers(&mut h, filtered).await.workers.is_empty());
    let online = ListWorkersRequest {
        online_only: true,
        task: "hello.say".into(),
        page_size: 1,
        ..Default::default()
    };
    assert_eq!(list_workers(&mut h, online).await.workers.len(), 1);
    let bad = ListWorkersRequest { page_token: "nope".into(), ..Default::default() };
    assert_eq!(code(&h.admin.list_workers(bad).await.unwrap_err()), ErrorCode::InvalidArgument);

    drop(tx);
    for _ in 0..100 {
        if list_workers(&mut h, ListWorkersRequest::default()).await.workers.is_empty() {
            return;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    panic!("the worker is still listed after its stream ended");
}

#[tokio::test]
async fn cluster_status_reports_this_node_for_every_service() {
    let mut h = harness().await;
    register(&mut h).await;
    start(&mut h, "c1").await;
    start(&mut h, "c2").await;
    let status =
        h.admin.cluster_status(ClusterStatusRequest::default()).await.unwrap().into_inner();
    let services: Vec<_> = status.nodes.iter().map(Node::service).collect();
    assert_eq!(services, [ServiceKind::Frontend, ServiceKind::Owner, ServiceKind::Scheduler]);
    for node in &status.nodes {
        assert_eq!(node.node_id, "fe-test");
        assert!(node.live);
        assert!(node.started_at.is_some() && node.heartbeat_at.is_some());
    }
    let owned: Vec<_> = status.nodes.iter().map(|n| n.owned_executions).collect();
    assert_eq!(owned, [0, 2, 0]);
    assert_eq!(status.orphaned_executions, 0);
}

#[tokio::test]
async fn describe_task_queue_shows_a_queued_task() {
    let mut h = harness().await;
    register(&mut h).await;
    start(&mut h, "q1").await;
    let req = DescribeTaskQueueRequest { task: "hello.say".into(), ..Default::default() };
    let page = h.admin.describe_task_queue(req).await.unwrap().into_inner();
    assert!(page.next_page_token.is_empty());
    let [queue] = page.queues.as_slice() else { panic!("one queue: {page:?}") };
    assert_eq!(queue.task, Some(TaskRef { name: "hello.say".into(), version: "1".into() }));
    assert_eq!((queue.backlog, queue.in_flight, queue.online_workers), (1, 0, 0));
    assert!(queue.oldest_age.is_some());

    let other = DescribeTaskQueueRequest { task: "other".into(), ..Default::default() };
    assert!(h.admin.describe_task_queue(other).await.unwrap().into_inner().queues.is_empty());
}

#[tokio::test]
async fn replay_checks_a_completed_execution_and_refuses_an_unknown_one() {
    let mut h = harness().await;
    register(&mut h).await;
    let (tx, mut inbound, _) = open_worker(&mut h).await;
    tx.send(say(WorkerKind::Credits(Credits { n: 1 }))).await.unwrap();
    start(&mut h, "r1").await;
    let ServerKind::Task(task) = next(&mut inbound).await else { panic!("a task") };
    let output = json_to_proto(json!({"greeting": "hi"}));
    tx.send(say(WorkerKind::Complete(Complete { token: task.token, output: Some(output) })))
        .await
        .unwrap();
    let ServerKind::Ack(ack) = next(&mut inbound).await else { panic!("an ack") };
    assert!(ack.accepted);

    let watch = WatchExecutionRequest {
        execution_id: "r1".into(),
        result_only: true,
        ..Default::default()
    };
    let mut watch = h.workflows.watch_execution(watch).await.unwrap().into_inner();
    let message = tokio::time::timeout(Duration::from_secs(10), watch.message()).await.unwrap();
    let Some(watch_execution_response::Kind::Result(result)) = message.unwrap().unwrap().kind
    else {
        panic!("a result")
    };
    assert_eq!(result.status(), ExecutionStatus::Completed);

    let replay = h
        .admin
        .replay(ReplayRequest { execution_id: "r1".into(), run: 0 })
        .await
        .unwrap()
        .into_inner();
    assert!(replay.ok, "{replay:?}");
    assert_eq!(replay.run, 1);
    assert!(replay.divergence.is_none());
    assert!(replay.events_checked >= 4, "{replay:?}");

    let missing =
        h.admin.replay(ReplayRequest { execution_id: "nope".into(), run: 0 }).await.unwrap_err();
    assert_eq!(code(&missing), ErrorCode::ExecutionNotFound);
    assert_eq!(missing.code(), tonic::Code::NotFound);
    let no_run =
        h.admin.replay(ReplayRequest { execution_id: "r1".into(), run: 7 }).await.unwrap_err();
    assert_eq!(code(&no_run), ErrorCode::ExecutionNotFound);
}
