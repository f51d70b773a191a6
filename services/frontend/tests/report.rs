//! A worker's result handed to the owner (`OwnerService.ReportResult`) carries the typed
//! `result` only — `kind` and `payload` are left for frontends of an earlier release — and
//! the owner records it as the worker sent it. Real SQLite store, real owner behind a
//! recording `OwnerService`, the frontend's own server.

mod support;

use orbit_api::internal::v1 as pb;
use orbit_api::internal::v1::owner_service_server::OwnerService;
use orbit_api::internal::v1::report_result_request::Result as WireResult;
use orbit_api::v1::server_message::Kind as ServerKind;
use orbit_api::v1::worker_message::{Complete, Fail, Kind as WorkerKind};
use orbit_api::v1::worker_service_client::WorkerServiceClient;
use orbit_api::v1::workflow_service_client::WorkflowServiceClient;
use orbit_api::v1::*;
use orbit_engine::Event;
use orbit_frontend::{Frontend, FrontendConfig};
use orbit_owner::Owner;
use orbit_server_kit::payload::json_to_proto;
use orbit_store::Store;
use serde_json::json;
use std::sync::{Arc, Mutex};
use support::{next, next_task, open_session, say};
use tokio_util::sync::CancellationToken;
use tonic::transport::Channel;
use tonic::{Request, Response, Status};

const PAY: &str = r#"
name: pay
version: "1"
tasks:
  card.charge: { version: "1" }
steps:
  - id: charge
    task: card.charge
output: ${{ steps.charge.output }}
"#;

/// The real owner, remembering every `ReportResult` request and whether it was recorded.
struct Recording {
    owner: Owner,
    reports: Mutex<Vec<(pb::ReportResultRequest, bool)>>,
}

#[tonic::async_trait]
impl OwnerService for Recording {
    async fn start_execution(
        &self,
        request: Request<pb::StartExecutionRequest>,
    ) -> Result<Response<pb::StartExecutionResponse>, Status> {
        OwnerService::start_execution(&self.owner, request).await
    }

    async fn wake(
        &self,
        request: Request<pb::OwnerServiceWakeRequest>,
    ) -> Result<Response<pb::OwnerServiceWakeResponse>, Status> {
        OwnerService::wake(&self.owner, request).await
    }

    async fn report_result(
        &self,
        request: Request<pb::ReportResultRequest>,
    ) -> Result<Response<pb::ReportResultResponse>, Status> {
        let sent = request.get_ref().clone();
        let answer = OwnerService::report_result(&self.owner, request).await;
        let recorded = answer.as_ref().is_ok_and(|a| a.get_ref().recorded);
        self.reports.lock().unwrap().push((sent, recorded));
        answer
    }

    async fn query_execution(
        &self,
        request: Request<pb::QueryExecutionRequest>,
    ) -> Result<Response<pb::QueryExecutionResponse>, Status> {
        OwnerService::query_execution(&self.owner, request).await
    }

    async fn describe_execution(
        &self,
        request: Request<pb::DescribeExecutionRequest>,
    ) -> Result<Response<pb::DescribeExecutionResponse>, Status> {
        OwnerService::describe_execution(&self.owner, request).await
    }
}

struct Setup {
    _dir: tempfile::TempDir,
    store: Arc<dyn Store>,
    owner: Arc<Recording>,
    workflows: WorkflowServiceClient<Channel>,
    workers: WorkerServiceClient<Channel>,
}

async fn setup() -> Setup {
    let dir = tempfile::tempdir().unwrap();
    let (store, owner, ready, changes) = support::store_and_owner(&dir).await;
    let recording = Arc::new(Recording { owner, reports: Mutex::default() });
    let config = FrontendConfig { node_id: "fe-report".into(), ..FrontendConfig::default() };
    let frontend = Frontend::new(config, store.clone(), recording.clone(), ready, changes);
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(frontend.serve(listener, CancellationToken::new()));
    let channel = Channel::from_shared(format!("http://{addr}")).unwrap().connect().await.unwrap();
    Setup {
        _dir: dir,
        store,
        owner: recording,
        workflows: WorkflowServiceClient::new(channel.clone()),
        workers: WorkerServiceClient::new(channel),
    }
}

async fn start(s: &mut Setup, id: &str) {
    let req = StartExecutionRequest {
        workflow: "pay".into(),
        execution_id: id.into(),
        ..Default::default()
    };
    s.workflows.start_execution(req).await.unwrap();
}

async fn next_ack(inbound: &mut tonic::Streaming<ServerMessage>) -> server_message::Ack {
    match next(inbound).await {
        ServerKind::Ack(ack) => ack,
        other => panic!("expected an ack, got {other:?}"),
    }
}

#[tokio::test]
async fn results_reach_the_owner_typed_and_are_recorded_as_sent() {
    let mut s = setup().await;
    let req = RegisterWorkflowRequest { document: PAY.into(), format: 0 };
    s.workflows.register_workflow(req).await.unwrap();
    let (tx, mut inbound) = open_session(&mut s.workers, "w1", "card.charge", 4, 4).await;

    // A success.
    start(&mut s, "paid").await;
    let task = next_task(&mut inbound).await;
    let output = json_to_proto(json!({"paid": true, "cents": 1250}));
    let complete = Complete { token: task.token.clone(), output: Some(output.clone()) };
    tx.send(say(WorkerKind::Complete(complete))).await.unwrap();
    let ack = next_ack(&mut inbound).await;
    assert!(ack.accepted, "{ack:?}");

    // A failure, with details.
    start(&mut s, "declined").await;
    let task2 = next_task(&mut inbound).await;
    let details = json!({"card": "visa", "tries": [1, 2.5], "note": null});
    let error = TaskError {
        code: "CARD_DECLINED".into(),
        message: "the card was declined".into(),
        retryable: false,
        details: Some(json_to_proto(details.clone())),
    };
    let fail = Fail { token: task2.token.clone(), error: Some(error.clone()) };
    tx.send(say(WorkerKind::Fail(fail))).await.unwrap();
    let ack = next_ack(&mut inbound).await;
    assert!(ack.accepted, "{ack:?}");

    // Both went the direct route, typed only, and were recorded there.
    let reports = s.owner.reports.lock().unwrap().clone();
    assert_eq!(reports.len(), 2, "{reports:?}");
    for (sent, recorded) in &reports {
        assert!(sent.kind.is_empty() && sent.payload.is_empty(), "{sent:?}");
        assert!(recorded, "{sent:?}");
    }
    assert_eq!(reports[0].0.token, task.token);
    assert_eq!(reports[0].0.result, Some(WireResult::Output(output)));
    assert_eq!(reports[1].0.token, task2.token);
    assert_eq!(reports[1].0.result, Some(WireResult::Error(error)));

    // The owner recorded exactly what the worker reported.
    let history = s.store.load_history("paid", 1).await.unwrap();
    assert!(history.iter().any(|e| matches!(&e.event,
        Event::StepSucceeded { step, output, .. }
            if step == "charge" && *output == json!({"paid": true, "cents": 1250}))));
    let history = s.store.load_history("declined", 1).await.unwrap();
    let recorded = history
        .iter()
        .find_map(|e| match &e.event {
            Event::StepAttemptFailed { error, .. } => Some(error.clone()),
            _ => None,
        })
        .expect("the failed attempt is in the history");
    let expected = orbit_engine::TaskError {
        code: "CARD_DECLINED".into(),
        message: "the card was declined".into(),
        retryable: false,
        details: Some(details),
    };
    assert_eq!(recorded, expected);
}
