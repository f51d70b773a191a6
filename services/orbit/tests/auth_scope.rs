//! The identities file's name patterns through the real `orbit dev --identities`: a client
//! limited to `billing.*` workflows and a worker limited to `billing.*` tasks, against an
//! admin's `shipping.pack` executions and tasks.
//!
//! - starting, registering, getting or listing a workflow outside the patterns is
//!   PERMISSION_DENIED naming the identity, the action and the workflow;
//! - an execution of such a workflow, addressed by id, answers exactly like a missing one
//!   (EXECUTION_NOT_FOUND), and nothing happens to it;
//! - ListExecutions shows only the allowed workflows' executions, page by page, and a query
//!   (the list language) only narrows that: it never reaches another workflow's execution;
//! - a worker's result for a task outside its patterns (unary, or on a session that did not
//!   claim it) is refused and not recorded: the real claimer's result still counts.

// Tests read their environment (ORBIT_PYTHON, the database URL) and the wall clock
// (unique names, deadlines of real processes) directly.
#![allow(clippy::disallowed_methods)]

mod common;

use common::bearer::Bearer;

use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use common::{free_port, Server, TempDir};
use orbit_api::v1 as pb;
use orbit_api::v1::worker_message::Kind as WorkerKind;
use orbit_api::v1::worker_service_client::WorkerServiceClient;
use orbit_api::v1::workflow_service_client::WorkflowServiceClient;
use orbit_auth::token::hash_token_hex;
use orbit_server_kit::payload::{json_to_proto, proto_to_json};
use serde_json::json;
use tonic::codegen::tokio_stream::wrappers::ReceiverStream;
use tonic::service::interceptor::InterceptedService;
use tonic::transport::Channel;
use tonic::{Code, Status};

type Workflows = WorkflowServiceClient<InterceptedService<Channel, Bearer>>;
type Workers = WorkerServiceClient<InterceptedService<Channel, Bearer>>;

fn token(name: &str) -> String {
    format!("token-of-{name}")
}

fn identities_file() -> String {
    let entry = |name: &str, kind: &str, extra: &str| {
        format!(
            "  - name: {name}\n    kind: {kind}\n    token_sha256: {}\n{extra}",
            hash_token_hex(&token(name))
        )
    };
    [
        "identities:\n".to_owned(),
        entry("ops", "admin", ""),
        entry(
            "billing-app",
            "client",
            "    actions: [start, signal, query, read, cancel]\n    workflows: ['billing.*']\n",
        ),
        entry(
            "billing-registrar",
            "client",
            "    actions: [register, read]\n    workflows: ['billing.*']\n",
        ),
        entry("billing-workers", "worker", "    tasks: ['billing.*']\n"),
    ]
    .concat()
}

/// A workflow `name` that waits for signal `go`, then runs task `task` once.
fn definition(name: &str, task: &str) -> String {
    format!(
        "name: {name}\nversion: \"1\"\ntasks:\n  {task}: {{ version: \"1\" }}\nsignals:\n  go: null\n\
         queries:\n  stage: ${{{{ 1 }}}}\nsteps:\n  - id: wait\n    await: go\n  - id: work\n\
         \x20   needs: [wait]\n    task: {task}\n    input: {{ n: 1 }}\noutput: ${{{{ steps.work.output }}}}\n"
    )
}

async fn channel(port: u16) -> Channel {
    Channel::from_shared(format!("http://127.0.0.1:{port}")).unwrap().connect().await.unwrap()
}

async fn workflows(port: u16, who: &str) -> Workflows {
    WorkflowServiceClient::with_interceptor(channel(port).await, Bearer(token(who)))
}

async fn workers(port: u16, who: &str) -> Workers {
    WorkerServiceClient::with_interceptor(channel(port).await, Bearer(token(who)))
}

/// `orbit dev --identities`, ready once the admin can list workflows.
async fn start_dev(dir: &TempDir) -> Server {
    let file = dir.0.join("identities.yaml");
    std::fs::write(&file, identities_file()).unwrap();
    let port = free_port();
    let child = Command::new(env!("CARGO_BIN_EXE_orbit"))
        .args(["dev", "--db"])
        .arg(dir.0.join("orbit.db"))
        .args(["--listen", &format!("127.0.0.1:{port}"), "--log", "warn", "--identities"])
        .arg(&file)
        .stdout(Stdio::null())
        .stderr(Stdio::inherit())
        .spawn()
        .expect("spawn orbit dev");
    let server = Server { child, port, db: dir.0.join("orbit.db") };
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        if let Ok(c) =
            Channel::from_shared(format!("http://127.0.0.1:{port}")).unwrap().connect().await
        {
            let mut ops = WorkflowServiceClient::with_interceptor(c, Bearer(token("ops")));
            if ops.list_workflows(pb::ListWorkflowsRequest::default()).await.is_ok() {
                return server;
            }
        }
        assert!(Instant::now() < deadline, "orbit dev --identities did not become ready");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

fn code(status: &Status) -> String {
    common::code(status)
}

async fn start(
    client: &mut Workflows,
    workflow: &str,
    id: &str,
) -> Result<pb::StartExecutionResponse, Status> {
    let request = pb::StartExecutionRequest {
        workflow: workflow.into(),
        execution_id: id.into(),
        input: Some(json_to_proto(json!({}))),
        ..Default::default()
    };
    client.start_execution(request).await.map(tonic::Response::into_inner)
}

/// Every execution-addressed RPC billing-app holds the action of, on `id`: the first error.
async fn address(client: &mut Workflows, id: &str) -> Vec<(&'static str, Result<(), Status>)> {
    let id = id.to_owned();
    let signal = pb::SignalExecutionRequest {
        execution_id: id.clone(),
        name: "go".into(),
        ..Default::default()
    };
    let query = pb::QueryExecutionRequest {
        execution_id: id.clone(),
        name: "stage".into(),
        ..Default::default()
    };
    let describe = pb::DescribeExecutionRequest { execution_id: id.clone(), ..Default::default() };
    let history = pb::GetHistoryRequest { execution_id: id.clone(), ..Default::default() };
    let watch = pb::WatchExecutionRequest { execution_id: id.clone(), ..Default::default() };
    vec![
        ("query", client.query_execution(query).await.map(drop)),
        ("describe", client.describe_execution(describe).await.map(drop)),
        ("history", client.get_history(history).await.map(drop)),
        ("watch", client.watch_execution(watch).await.map(drop)),
        ("signal", client.signal_execution(signal).await.map(drop)),
    ]
}

async fn cancel(client: &mut Workflows, id: &str) -> Result<(), Status> {
    let request = pb::CancelExecutionRequest {
        execution_id: id.into(),
        reason: "test".into(),
        ..Default::default()
    };
    client.cancel_execution(request).await.map(drop)
}

async fn status_of(client: &mut Workflows, id: &str) -> pb::ExecutionStatus {
    let request = pb::DescribeExecutionRequest { execution_id: id.into(), ..Default::default() };
    let info = client.describe_execution(request).await.expect("describe").into_inner();
    let status = info.execution.and_then(|e| e.info).map_or(0, |i| i.status);
    pb::ExecutionStatus::try_from(status).unwrap()
}

/// Every execution id `client` lists, following the tokens with pages of `size`.
async fn list_all(client: &mut Workflows, size: u32) -> Vec<String> {
    let mut ids = Vec::new();
    let mut page_token = String::new();
    loop {
        let request =
            pb::ListExecutionsRequest { page_size: size, page_token, ..Default::default() };
        let page = client.list_executions(request).await.expect("list").into_inner();
        ids.extend(page.executions.into_iter().map(|e| e.execution_id));
        if page.next_page_token.is_empty() {
            return ids;
        }
        page_token = page.next_page_token;
    }
}

#[tokio::test]
async fn a_billing_client_acts_only_on_billing_workflows() {
    let dir = TempDir::new("auth-scope-client");
    let server = start_dev(&dir).await;
    let mut ops = workflows(server.port, "ops").await;
    let mut billing = workflows(server.port, "billing-app").await;
    for (name, task) in [("billing.invoice", "billing.charge"), ("shipping.pack", "shipping.pack")]
    {
        let request = pb::RegisterWorkflowRequest { document: definition(name, task), format: 0 };
        ops.register_workflow(request).await.expect("the admin registers");
    }

    // Start: allowed on billing.*, refused on shipping.pack naming identity, action, workflow.
    start(&mut billing, "billing.invoice", "b-1").await.expect("billing starts billing.invoice");
    start(&mut billing, "billing.invoice", "b-2").await.expect("billing starts billing.invoice");
    let refused = start(&mut billing, "shipping.pack", "s-mine").await.unwrap_err();
    assert_eq!(refused.code(), Code::PermissionDenied, "{refused:?}");
    assert_eq!(code(&refused), "PERMISSION_DENIED");
    for part in ["billing-app", "start", "shipping.pack"] {
        assert!(refused.message().contains(part), "{part} in {}", refused.message());
    }
    // Refused whether the workflow is registered or not.
    let unknown = start(&mut billing, "shipping.unknown", "s-x").await.unwrap_err();
    assert_eq!(code(&unknown), "PERMISSION_DENIED", "{unknown:?}");

    start(&mut ops, "shipping.pack", "s-1").await.expect("the admin starts shipping.pack");
    start(&mut ops, "shipping.pack", "s-2").await.expect("the admin starts shipping.pack");

    // A shipping execution answers exactly like a missing one; a billing one is served.
    let missing = address(&mut billing, "no-such-execution").await;
    for ((what, hidden), (_, absent)) in address(&mut billing, "s-1").await.into_iter().zip(missing)
    {
        let (hidden, absent) = (hidden.unwrap_err(), absent.unwrap_err());
        assert_eq!(code(&hidden), "EXECUTION_NOT_FOUND", "{what} on s-1: {hidden:?}");
        assert_eq!(code(&absent), "EXECUTION_NOT_FOUND", "{what} on a missing id: {absent:?}");
        assert_eq!(
            hidden.message().replace("s-1", "ID"),
            absent.message().replace("no-such-execution", "ID"),
            "{what}: forbidden and missing look the same"
        );
    }
    let hidden = cancel(&mut billing, "s-1").await.unwrap_err();
    assert_eq!(code(&hidden), "EXECUTION_NOT_FOUND", "cancel on s-1: {hidden:?}");
    // Nothing happened to it: no signal (it still waits), no cancel.
    assert_eq!(status_of(&mut ops, "s-1").await, pb::ExecutionStatus::Running);
    let history = pb::GetHistoryRequest { execution_id: "s-1".into(), ..Default::default() };
    let events = ops.get_history(history).await.expect("history").into_inner().events;
    assert!(
        !format!("{events:?}").contains("SignalReceived")
            && !format!("{events:?}").contains("Cancel"),
        "the refused signal and cancel left no trace: {events:?}"
    );
    for (what, result) in address(&mut billing, "b-1").await {
        result.unwrap_or_else(|e| panic!("{what} on billing-app's own b-1: {e:?}"));
    }
    cancel(&mut billing, "b-2").await.expect("billing cancels its own execution");

    // A start reusing the id of a shipping execution learns only that the id is taken.
    let taken = start(&mut billing, "billing.invoice", "s-1").await.unwrap_err();
    assert_eq!(code(&taken), "EXECUTION_EXISTS", "{taken:?}");
    assert!(!taken.message().contains("shipping"), "{}", taken.message());

    // Lists: only billing executions, every one exactly once across pages of one.
    for size in [1, 100] {
        let mut ids = list_all(&mut billing, size).await;
        ids.sort();
        assert_eq!(ids, ["b-1", "b-2"], "billing-app's list with pages of {size}");
    }
    let mut all = list_all(&mut ops, 100).await;
    all.sort();
    assert_eq!(all, ["b-1", "b-2", "s-1", "s-2"], "the admin sees everything");
    // A query is ANDed with the caller's patterns: it can narrow, never widen.
    for (query, expected) in [
        ("workflow = 'shipping.pack'", vec![]),
        ("execution_id IN ('s-1', 's-2', 'b-1')", vec!["b-1"]),
        ("workflow STARTS_WITH 'ship' OR status != 'PENDING'", vec!["b-1", "b-2"]),
        ("NOT workflow = 'billing.invoice'", vec![]),
    ] {
        let request = pb::ListExecutionsRequest { query: query.into(), ..Default::default() };
        let page = billing.list_executions(request).await.expect("list").into_inner();
        let mut ids: Vec<String> = page.executions.into_iter().map(|e| e.execution_id).collect();
        ids.sort();
        assert_eq!(ids, expected, "billing-app's list of `{query}`");
    }
    let filtered =
        pb::ListExecutionsRequest { workflow: "shipping.pack".into(), ..Default::default() };
    let refused = billing.list_executions(filtered).await.unwrap_err();
    assert_eq!(code(&refused), "PERMISSION_DENIED", "{refused:?}");
    assert!(refused.message().contains("read") && refused.message().contains("shipping.pack"));

    let listed = billing.list_workflows(pb::ListWorkflowsRequest::default()).await.unwrap();
    let names: Vec<_> = listed.into_inner().workflows.into_iter().map(|w| w.name).collect();
    assert_eq!(names, ["billing.invoice"]);
    let get = pb::GetWorkflowRequest { name: "shipping.pack".into(), ..Default::default() };
    let refused = billing.get_workflow(get).await.unwrap_err();
    assert_eq!(code(&refused), "PERMISSION_DENIED", "{refused:?}");

    // Register: a client with `register` but billing.* patterns cannot add shipping.*.
    let mut registrar = workflows(server.port, "billing-registrar").await;
    let request = pb::RegisterWorkflowRequest {
        document: definition("shipping.label", "shipping.label"),
        format: 0,
    };
    let refused = registrar.register_workflow(request).await.unwrap_err();
    assert_eq!(code(&refused), "PERMISSION_DENIED", "{refused:?}");
    for part in ["billing-registrar", "register", "shipping.label"] {
        assert!(refused.message().contains(part), "{part} in {}", refused.message());
    }
    let get = pb::GetWorkflowRequest { name: "shipping.label".into(), ..Default::default() };
    assert_eq!(
        code(&ops.get_workflow(get).await.unwrap_err()),
        "WORKFLOW_NOT_FOUND",
        "nothing stored"
    );
    let request = pb::RegisterWorkflowRequest {
        document: definition("billing.refund", "billing.refund"),
        format: 0,
    };
    registrar.register_workflow(request).await.expect("billing.* may be registered");
}

/// Opens a worker session as `who` and waits for its welcome.
async fn session(
    port: u16,
    who: &str,
    worker_id: &str,
    task: &str,
) -> (tokio::sync::mpsc::Sender<pb::WorkerMessage>, tonic::Streaming<pb::ServerMessage>) {
    let mut client = workers(port, who).await;
    let (tx, rx) = tokio::sync::mpsc::channel(16);
    tx.send(common::hello(worker_id, &[(task, "1")], 1)).await.unwrap();
    tx.send(common::credits(1)).await.unwrap();
    let mut inbound = client.session(ReceiverStream::new(rx)).await.expect("session").into_inner();
    match next(&mut inbound).await {
        pb::server_message::Kind::Welcome(_) => {}
        other => panic!("expected welcome, got {other:?}"),
    }
    (tx, inbound)
}

/// The next server message other than a ping (bounded by the default session timeout).
async fn next(inbound: &mut tonic::Streaming<pb::ServerMessage>) -> pb::server_message::Kind {
    loop {
        let message = tokio::time::timeout(Duration::from_secs(30), inbound.message())
            .await
            .expect("a server message in time")
            .expect("the session stream")
            .expect("the session is open");
        match message.kind {
            Some(pb::server_message::Kind::Ping(_)) | None => continue,
            Some(kind) => return kind,
        }
    }
}

fn complete(token: &str, output: serde_json::Value) -> pb::WorkerMessage {
    pb::WorkerMessage {
        kind: Some(WorkerKind::Complete(pb::worker_message::Complete {
            token: token.into(),
            output: Some(json_to_proto(output)),
        })),
    }
}

#[tokio::test]
async fn a_billing_worker_cannot_report_a_shipping_task() {
    let dir = TempDir::new("auth-scope-worker");
    let server = start_dev(&dir).await;
    let mut ops = workflows(server.port, "ops").await;
    let request = pb::RegisterWorkflowRequest {
        document: definition("shipping.pack", "shipping.pack"),
        format: 0,
    };
    ops.register_workflow(request).await.expect("register");
    start(&mut ops, "shipping.pack", "s-1").await.expect("start");
    let signal = pb::SignalExecutionRequest {
        execution_id: "s-1".into(),
        name: "go".into(),
        ..Default::default()
    };
    ops.signal_execution(signal).await.expect("signal");

    // The admin's worker claims the shipping task: a real token.
    let (ship_tx, mut ship_rx) = session(server.port, "ops", "ship-w", "shipping.pack").await;
    let task = match next(&mut ship_rx).await {
        pb::server_message::Kind::Task(task) => task,
        other => panic!("expected the shipping task, got {other:?}"),
    };
    assert_eq!(task.task, "shipping.pack");

    // Unary results from the billing worker, naming the claimer's worker id (which alone
    // would pass the worker-id check): refused by task name, nothing recorded.
    let mut billing = workers(server.port, "billing-workers").await;
    let request = pb::CompleteTaskRequest {
        token: task.token.clone(),
        output: Some(json_to_proto(json!({"by": "billing"}))),
        worker_id: "ship-w".into(),
    };
    let refused = billing.complete_task(request).await.unwrap_err();
    assert_eq!(refused.code(), Code::PermissionDenied, "{refused:?}");
    assert_eq!(code(&refused), "PERMISSION_DENIED", "not WORKER_MISMATCH: {refused:?}");
    for part in ["billing-workers", "shipping.pack"] {
        assert!(refused.message().contains(part), "{part} in {}", refused.message());
    }
    let error =
        pb::TaskError { code: "NOPE".into(), message: "by billing".into(), ..Default::default() };
    let request = pb::FailTaskRequest {
        token: task.token.clone(),
        error: Some(error),
        worker_id: "ship-w".into(),
    };
    let refused = billing.fail_task(request).await.unwrap_err();
    assert_eq!(code(&refused), "PERMISSION_DENIED", "{refused:?}");

    // On a billing session under the same worker id, the result of a task that session did
    // not claim is refused in its ack.
    let (bill_tx, mut bill_rx) =
        session(server.port, "billing-workers", "ship-w", "billing.charge").await;
    bill_tx.send(complete(&task.token, json!({"by": "billing"}))).await.unwrap();
    match next(&mut bill_rx).await {
        pb::server_message::Kind::Ack(ack) => {
            assert!(!ack.accepted, "{ack:?}");
            assert!(
                ack.reason.starts_with("PERMISSION_DENIED") && ack.reason.contains("shipping.pack"),
                "{ack:?}"
            );
        }
        other => panic!("expected an ack, got {other:?}"),
    }

    // The task was not completed: the claimer's own result counts and is the output.
    ship_tx.send(complete(&task.token, json!({"by": "ops"}))).await.unwrap();
    match next(&mut ship_rx).await {
        pb::server_message::Kind::Ack(ack) => assert!(ack.accepted, "{ack:?}"),
        other => panic!("expected an ack, got {other:?}"),
    }
    let watch = pb::WatchExecutionRequest {
        execution_id: "s-1".into(),
        result_only: true,
        ..Default::default()
    };
    let mut stream = ops.watch_execution(watch).await.expect("watch").into_inner();
    let result = loop {
        let message = tokio::time::timeout(Duration::from_secs(60), stream.message())
            .await
            .expect("a result in time")
            .expect("watch")
            .expect("a result before the end");
        if let Some(pb::watch_execution_response::Kind::Result(result)) = message.kind {
            break result;
        }
    };
    assert_eq!(result.status, pb::ExecutionStatus::Completed as i32, "{result:?}");
    assert_eq!(proto_to_json(result.output.unwrap()).unwrap(), json!({"by": "ops"}));
    drop((bill_tx, ship_tx));
}
