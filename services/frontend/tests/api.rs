//! In-process gRPC tests of the frontend: real SQLite store in a temp dir, the frontend's
//! services on a loopback port, generated clients, and the real owner in the same process.

mod support;

use orbit_api::v1::server_message::Kind as ServerKind;
use orbit_api::v1::worker_message::{Complete, Credits, Hello, Kind as WorkerKind};
use orbit_api::v1::*;
use orbit_frontend::FrontendConfig;
use orbit_server_kit::payload::{json_to_proto, proto_to_json};
use orbit_server_kit::{ErrorCode, OrbitError};
use serde_json::json;
use std::time::Duration;
use support::{code, next, say, Harness, Outbound};
use tokio::sync::mpsc;
use tokio_stream::wrappers::ReceiverStream;
use tonic::Status;

const GREET: &str = r#"
name: greet
version: "1"
input:
  type: object
  required: [name]
  properties: { name: { type: string } }
tasks:
  hello.say: { version: "1" }
signals:
  poke: {}
queries:
  who: ${{ input.name }}
steps:
  - id: say
    task: hello.say
    input: { name: "${{ input.name }}" }
output: ${{ steps.say.output }}
"#;

async fn harness() -> Harness {
    support::harness(FrontendConfig {
        node_id: "fe-test".into(),
        max_payload_bytes: 10_000,
        ..FrontendConfig::default()
    })
    .await
}

async fn register(h: &mut Harness, doc: &str) -> Result<RegisterWorkflowResponse, Status> {
    let req = RegisterWorkflowRequest { document: doc.into(), format: 0 };
    h.workflows.register_workflow(req).await.map(tonic::Response::into_inner)
}

async fn start(h: &mut Harness, id: &str, name: &str) -> StartExecutionResponse {
    let req = StartExecutionRequest {
        workflow: "greet".into(),
        input: Some(json_to_proto(json!({"name": name}))),
        execution_id: id.into(),
        ..Default::default()
    };
    h.workflows.start_execution(req).await.unwrap().into_inner()
}

async fn describe(h: &mut Harness, id: &str) -> ExecutionDescription {
    let req = DescribeExecutionRequest { execution_id: id.into(), run: 0, at_seq: 0 };
    h.workflows.describe_execution(req).await.unwrap().into_inner().execution.unwrap()
}

#[tokio::test]
async fn register_is_idempotent_and_reports_conflicts_and_invalid_paths() {
    let mut h = harness().await;
    let first = register(&mut h, GREET).await.unwrap();
    assert!(first.created);
    assert_eq!((first.name.as_str(), first.version.as_str()), ("greet", "1"));
    assert!(first.definition_hash.starts_with("sha256:"));
    let again = register(&mut h, GREET).await.unwrap();
    assert!(!again.created);
    assert_eq!(again.definition_hash, first.definition_hash);

    let changed = GREET.replace("who: ${{ input.name }}", "who: ${{ 1 }}");
    let conflict = register(&mut h, &changed).await.unwrap_err();
    assert_eq!(code(&conflict), ErrorCode::DefinitionConflict);
    assert_eq!(conflict.code(), tonic::Code::AlreadyExists);

    let invalid = "name: bad\nversion: \"1\"\nsteps:\n  - id: a\n    task: nope\n  - id: 9x\n    compute: 1\n";
    let status = register(&mut h, invalid).await.unwrap_err();
    let error = OrbitError::from_status(&status).unwrap();
    assert_eq!(error.code, ErrorCode::InvalidDefinition);
    assert_eq!(status.metadata().get("orbit-error-code").unwrap(), "INVALID_DEFINITION");
    let paths: Vec<_> = error.details.iter().map(|v| (v.path.as_str(), v.code.as_str())).collect();
    assert!(paths.contains(&("steps[0].task", "UNKNOWN_TASK")), "{paths:?}");
    assert!(paths.iter().any(|(p, _)| p.starts_with("steps[1]")), "{paths:?}");

    let got = h
        .workflows
        .get_workflow(GetWorkflowRequest { name: "greet".into(), version: String::new() })
        .await
        .unwrap()
        .into_inner()
        .workflow
        .unwrap();
    assert_eq!(got.definition_hash, first.definition_hash);
    assert!(orbit_definition::parse(&got.document).is_ok());
    let missing = h
        .workflows
        .get_workflow(GetWorkflowRequest { name: "nope".into(), version: String::new() })
        .await
        .unwrap_err();
    assert_eq!(code(&missing), ErrorCode::WorkflowNotFound);
}

#[tokio::test]
async fn start_describe_query_and_history() {
    let mut h = harness().await;
    register(&mut h, GREET).await.unwrap();
    let started = start(&mut h, "e1", "ada").await;
    assert!(started.created);
    assert_eq!((started.execution_id.as_str(), started.run), ("e1", 1));
    assert!(!start(&mut h, "e1", "ada").await.created, "a start is idempotent by id");

    let generated = start(&mut h, "", "bob").await;
    assert_eq!(generated.execution_id.len(), 32);

    let d = describe(&mut h, "e1").await;
    let info = d.info.unwrap();
    assert_eq!(info.status(), ExecutionStatus::Running);
    assert_eq!(info.workflow, "greet");
    assert_eq!(d.pending_tasks.len(), 1);
    assert_eq!(d.pending_tasks[0].state(), PendingTaskState::Queued);
    assert_eq!(d.units[0].key, "say");

    let q = h
        .workflows
        .query_execution(QueryExecutionRequest {
            execution_id: "e1".into(),
            name: "who".into(),
            run: 0,
            at_seq: 0,
        })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(proto_to_json(q.result.unwrap()).unwrap(), json!("ada"));
    let unknown = h
        .workflows
        .query_execution(QueryExecutionRequest {
            execution_id: "e1".into(),
            name: "x".into(),
            run: 0,
            at_seq: 0,
        })
        .await
        .unwrap_err();
    assert_eq!(code(&unknown), ErrorCode::UnknownQuery);

    let page = h
        .workflows
        .get_history(GetHistoryRequest {
            execution_id: "e1".into(),
            run: 0,
            page_size: 2,
            page_token: String::new(),
        })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(page.run, 1);
    let types: Vec<_> = page.events.iter().map(|e| e.event_type.as_str()).collect();
    assert_eq!(types, ["WorkflowCreated", "WorkflowStarted"]);
    assert_eq!(page.next_page_token, "3");
    let rest = h
        .workflows
        .get_history(GetHistoryRequest {
            execution_id: "e1".into(),
            run: 0,
            page_size: 0,
            page_token: page.next_page_token,
        })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(rest.events[0].event_type, "StepScheduled");
    assert_eq!(rest.events[0].step, "say");
    assert!(rest.next_page_token.is_empty());

    let missing = h
        .workflows
        .describe_execution(DescribeExecutionRequest {
            execution_id: "nope".into(),
            run: 0,
            at_seq: 0,
        })
        .await
        .unwrap_err();
    assert_eq!(code(&missing), ErrorCode::ExecutionNotFound);
    let bad = h
        .workflows
        .start_execution(StartExecutionRequest {
            workflow: "greet".into(),
            execution_id: "a/b".into(),
            ..Default::default()
        })
        .await
        .unwrap_err();
    assert_eq!(code(&bad), ErrorCode::InvalidArgument);
    let big = h
        .workflows
        .start_execution(StartExecutionRequest {
            workflow: "greet".into(),
            input: Some(json_to_proto(json!({"name": "x".repeat(20_000)}))),
            ..Default::default()
        })
        .await
        .unwrap_err();
    assert_eq!(code(&big), ErrorCode::PayloadTooLarge);
    let no_workflow = h
        .workflows
        .start_execution(StartExecutionRequest { workflow: "nope".into(), ..Default::default() })
        .await
        .unwrap_err();
    assert_eq!(code(&no_workflow), ErrorCode::WorkflowNotFound);
}

#[tokio::test]
async fn list_executions_and_workflows_page() {
    let mut h = harness().await;
    register(&mut h, GREET).await.unwrap();
    for id in ["a", "b", "c"] {
        start(&mut h, id, id).await;
    }
    let first = h
        .workflows
        .list_executions(ListExecutionsRequest { page_size: 2, ..Default::default() })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(first.executions.len(), 2);
    assert!(!first.next_page_token.is_empty());
    let second = h
        .workflows
        .list_executions(ListExecutionsRequest {
            page_size: 2,
            page_token: first.next_page_token,
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(second.executions.len(), 1);
    assert!(second.next_page_token.is_empty());
    let mut ids: Vec<_> =
        first.executions.iter().chain(&second.executions).map(|e| e.execution_id.clone()).collect();
    ids.sort();
    assert_eq!(ids, ["a", "b", "c"]);
    let done = h
        .workflows
        .list_executions(ListExecutionsRequest {
            statuses: vec![ExecutionStatus::Completed.into()],
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner();
    assert!(done.executions.is_empty());

    register(&mut h, &GREET.replace("version: \"1\"", "version: \"2\"")).await.unwrap();
    let page = h
        .workflows
        .list_workflows(ListWorkflowsRequest { page_size: 1, ..Default::default() })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(page.workflows.len(), 1);
    assert!(page.workflows[0].document.is_empty());
    let next = h
        .workflows
        .list_workflows(ListWorkflowsRequest {
            page_size: 1,
            page_token: page.next_page_token,
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(next.workflows.len(), 1);
    assert!(next.next_page_token.is_empty());
}

#[tokio::test]
async fn signals_are_recorded_or_refused_with_codes() {
    let mut h = harness().await;
    register(&mut h, GREET).await.unwrap();
    start(&mut h, "s1", "ada").await;
    let signal = |id: &str, name: &str| SignalExecutionRequest {
        execution_id: id.into(),
        name: name.into(),
        payload: Some(json_to_proto(json!({"n": 1}))),
        request_id: String::new(),
    };
    let missing = h.workflows.signal_execution(signal("nope", "poke")).await.unwrap_err();
    assert_eq!(code(&missing), ErrorCode::ExecutionNotFound);
    let unknown = h.workflows.signal_execution(signal("s1", "nope")).await.unwrap_err();
    assert_eq!(code(&unknown), ErrorCode::UnknownSignal);
    assert_eq!(unknown.code(), tonic::Code::NotFound);
    let ok = h.workflows.signal_execution(signal("s1", "poke")).await.unwrap().into_inner();
    assert!(ok.seq > 0);
    assert_eq!(ok.run, 1);
    let d = describe(&mut h, "s1").await;
    assert_eq!(d.buffered_signals.get("poke"), Some(&1));
    let update = h
        .workflows
        .update_execution(UpdateExecutionRequest {
            execution_id: "s1".into(),
            name: "u".into(),
            ..Default::default()
        })
        .await
        .unwrap_err();
    // Updates are served now: an update the definition does not declare is refused.
    assert_eq!(code(&update), ErrorCode::UnknownUpdate);
    assert_eq!(update.code(), tonic::Code::NotFound);
    let cancelled = h
        .workflows
        .cancel_execution(CancelExecutionRequest {
            execution_id: "s1".into(),
            reason: "test".into(),
            request_id: String::new(),
        })
        .await
        .unwrap()
        .into_inner();
    assert!(cancelled.seq > 0);
    let d = describe(&mut h, "s1").await;
    assert_eq!(d.info.unwrap().status(), ExecutionStatus::Cancelled);
    let late = h.workflows.signal_execution(signal("s1", "poke")).await.unwrap_err();
    assert_eq!(code(&late), ErrorCode::ExecutionFinished);
}

async fn open_session(h: &mut Harness) -> (Outbound, tonic::Streaming<ServerMessage>) {
    let (tx, rx) = mpsc::channel(16);
    let response = h.workers.session(ReceiverStream::new(rx)).await.unwrap();
    (tx, response.into_inner())
}

#[tokio::test]
async fn a_worker_receives_a_task_and_completes_it() {
    let mut h = harness().await;
    register(&mut h, GREET).await.unwrap();
    let (tx, mut inbound) = open_session(&mut h).await;
    let hello = Hello {
        worker_id: "w1".into(),
        tasks: vec![TaskRef { name: "hello.say".into(), version: "1".into() }],
        max_concurrency: 4,
        ..Default::default()
    };
    tx.send(say(WorkerKind::Hello(hello))).await.unwrap();
    let ServerKind::Welcome(welcome) = next(&mut inbound).await else { panic!("welcome first") };
    assert!(!welcome.session_id.is_empty());
    assert_eq!(welcome.heartbeat_interval.unwrap().seconds, 5);
    tx.send(say(WorkerKind::Credits(Credits { n: 1 }))).await.unwrap();

    start(&mut h, "w-e1", "ada").await;
    let ServerKind::Task(task) = next(&mut inbound).await else { panic!("a task") };
    assert_eq!(task.execution_id, "w-e1");
    assert_eq!(
        (task.workflow.as_str(), task.step.as_str(), task.task.as_str()),
        ("greet", "say", "hello.say")
    );
    assert_eq!((task.attempt, task.redelivery), (1, false));
    assert_eq!(proto_to_json(task.input.unwrap()).unwrap(), json!({"name": "ada"}));
    assert!(!task.idempotency_key.is_empty());

    let output = json_to_proto(json!({"greeting": "hi ada"}));
    let complete = Complete { token: task.token.clone(), output: Some(output) };
    tx.send(say(WorkerKind::Complete(complete))).await.unwrap();
    let ServerKind::Ack(ack) = next(&mut inbound).await else { panic!("an ack") };
    assert_eq!((ack.token.as_str(), ack.accepted), (task.token.as_str(), true));

    // The result reaches the owner; the execution completes. Watch waits for it.
    let mut watch = h
        .workflows
        .watch_execution(WatchExecutionRequest {
            execution_id: "w-e1".into(),
            result_only: true,
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner();
    let message = tokio::time::timeout(Duration::from_secs(10), watch.message())
        .await
        .unwrap()
        .unwrap()
        .unwrap();
    let Some(watch_execution_response::Kind::Result(result)) = message.kind else {
        panic!("a result")
    };
    assert_eq!(result.status(), ExecutionStatus::Completed);
    assert_eq!(proto_to_json(result.output.unwrap()).unwrap(), json!({"greeting": "hi ada"}));
    assert!(watch.message().await.unwrap().is_none(), "the watch ends after the result");

    // A second result for the same token is recorded and not accepted.
    let again = h
        .workers
        .complete_task(CompleteTaskRequest {
            token: task.token.clone(),
            output: None,
            worker_id: "w1".into(),
        })
        .await
        .unwrap()
        .into_inner();
    assert!(!again.accepted);

    // The full event stream from the start ends with the terminal event and the result.
    let mut events = h
        .workflows
        .watch_execution(WatchExecutionRequest {
            execution_id: "w-e1".into(),
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner();
    let mut types = Vec::new();
    while let Some(m) = events.message().await.unwrap() {
        match m.kind.unwrap() {
            watch_execution_response::Kind::Event(e) => types.push(e.event_type),
            watch_execution_response::Kind::Result(_) => types.push("result".into()),
        }
    }
    assert!(types.contains(&"StepDispatched".to_string()), "{types:?}");
    // The stream ends with the result; after the terminal event only the late duplicate
    // above may appear (recorded as stale), whether or not the owner has applied it yet.
    assert_eq!(types.last().map(String::as_str), Some("result"), "{types:?}");
    let done = types.iter().position(|t| t == "WorkflowCompleted").expect("terminal event");
    assert!(
        types[done + 1..types.len() - 1].iter().all(|t| t == "StaleResultIgnored"),
        "{types:?}"
    );
}

#[tokio::test]
async fn unknown_tokens_are_not_accepted() {
    let mut h = harness().await;
    let unary = h
        .workers
        .complete_task(CompleteTaskRequest {
            token: "t999.1".into(),
            output: None,
            worker_id: "w1".into(),
        })
        .await
        .unwrap()
        .into_inner();
    assert!(!unary.accepted);
    assert_eq!(unary.reason, "UNKNOWN_TOKEN");
    let fail = h
        .workers
        .fail_task(FailTaskRequest { token: "t999.1".into(), error: None, worker_id: "w1".into() })
        .await
        .unwrap_err();
    assert_eq!(code(&fail), ErrorCode::InvalidArgument);

    let (tx, mut inbound) = open_session(&mut h).await;
    let hello = Hello {
        worker_id: "w1".into(),
        tasks: vec![TaskRef { name: "x".into(), version: "1".into() }],
        max_concurrency: 1,
        ..Default::default()
    };
    tx.send(say(WorkerKind::Hello(hello))).await.unwrap();
    let ServerKind::Welcome(_) = next(&mut inbound).await else { panic!("welcome") };
    let complete = Complete { token: "t42.1".into(), output: None };
    tx.send(say(WorkerKind::Complete(complete))).await.unwrap();
    let ServerKind::Ack(ack) = next(&mut inbound).await else { panic!("an ack") };
    assert_eq!((ack.accepted, ack.reason.as_str()), (false, "UNKNOWN_TOKEN"));
}

#[tokio::test]
async fn a_result_before_hello_is_invalid_argument() {
    let mut h = harness().await;
    let (tx, mut inbound) = open_session(&mut h).await;
    let complete = Complete { token: "t1.1".into(), output: None };
    tx.send(say(WorkerKind::Complete(complete))).await.unwrap();
    let status = inbound.message().await.unwrap_err();
    // What worker.proto documents for a first message that is not a valid hello.
    assert_eq!(code(&status), ErrorCode::InvalidArgument);
    assert_eq!(status.code(), tonic::Code::InvalidArgument);
}
