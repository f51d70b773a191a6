//! A worker identity limited to `billing.*` behind the real auth layer and the frontend's
//! real `WorkerService`: announcing `shipping.pack` is refused with PERMISSION_DENIED naming
//! the identity and task; announcing billing tasks opens the session; no token is refused
//! before the session starts.

mod support;

use orbit_api::v1::server_message::Kind as ServerKind;
use orbit_api::v1::worker_message::{Hello, Kind as WorkerKind};
use orbit_api::v1::worker_service_client::WorkerServiceClient;
use orbit_api::v1::{TaskRef, WorkerMessage};
use orbit_auth::token::hash_token_hex;
use orbit_auth::{AuthLayer, Identities, IdentityStore};
use orbit_frontend::FrontendConfig;
use orbit_server_kit::ErrorCode;
use support::{code, next, say};
use tokio::sync::mpsc;
use tokio_stream::wrappers::ReceiverStream;
use tonic::transport::Channel;
use tonic::Request;

async fn workers_behind_auth(dir: &tempfile::TempDir) -> WorkerServiceClient<Channel> {
    let frontend = support::frontend(dir, FrontendConfig::default()).await;
    let (_, workers) = frontend.services();
    let file = format!(
        "identities:\n  - name: billing-workers\n    kind: worker\n    token_sha256: {}\n    tasks: ['billing.*']\n",
        hash_token_hex("billing-token")
    );
    let identities = IdentityStore::new(Identities::parse(&file).unwrap());
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let server = tonic::transport::Server::builder()
        .layer(AuthLayer::new(identities))
        .add_service(workers)
        .serve_with_incoming(tokio_stream::wrappers::TcpListenerStream::new(listener));
    tokio::spawn(server);
    let channel = Channel::from_shared(format!("http://{addr}")).unwrap().connect().await.unwrap();
    WorkerServiceClient::new(channel)
}

fn hello(worker_id: &str, task: &str) -> WorkerMessage {
    say(WorkerKind::Hello(Hello {
        worker_id: worker_id.into(),
        tasks: vec![TaskRef { name: task.into(), version: "1".into() }],
        max_concurrency: 1,
        ..Hello::default()
    }))
}

fn session_request(
    token: Option<&str>,
    rx: mpsc::Receiver<WorkerMessage>,
) -> Request<ReceiverStream<WorkerMessage>> {
    let mut request = Request::new(ReceiverStream::new(rx));
    if let Some(token) = token {
        request.metadata_mut().insert("authorization", format!("Bearer {token}").parse().unwrap());
    }
    request
}

#[tokio::test]
async fn a_billing_worker_cannot_announce_shipping_tasks() {
    let dir = tempfile::tempdir().unwrap();
    let mut workers = workers_behind_auth(&dir).await;

    let (tx, rx) = mpsc::channel(4);
    tx.send(hello("w-ship", "shipping.pack")).await.unwrap();
    let mut inbound =
        workers.session(session_request(Some("billing-token"), rx)).await.unwrap().into_inner();
    let status = tokio::time::timeout(std::time::Duration::from_secs(10), inbound.message())
        .await
        .expect("an answer in time")
        .expect_err("the hello is refused");
    assert_eq!(code(&status), ErrorCode::PermissionDenied);
    assert!(
        status.message().contains("billing-workers") && status.message().contains("shipping.pack")
    );

    let (tx, rx) = mpsc::channel(4);
    tx.send(hello("w-bill", "billing.charge")).await.unwrap();
    let mut inbound =
        workers.session(session_request(Some("billing-token"), rx)).await.unwrap().into_inner();
    assert!(
        matches!(next(&mut inbound).await, ServerKind::Welcome(_)),
        "billing tasks are admitted"
    );

    let (_tx, rx) = mpsc::channel(4);
    let anonymous = workers.session(session_request(None, rx)).await.unwrap_err();
    assert_eq!(code(&anonymous), ErrorCode::Unauthenticated);
}
