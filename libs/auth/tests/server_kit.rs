//! The identities as the gate of a real `ServerKit` server (the builder every Orbit server
//! uses): internal RPCs need a service identity, health stays open, and the handler sees the
//! caller.

use std::sync::Arc;

use orbit_api::internal::v1::scheduler_service_client::SchedulerServiceClient;
use orbit_api::internal::v1::scheduler_service_server::{SchedulerService, SchedulerServiceServer};
use orbit_api::internal::v1::{StatusRequest, StatusResponse};
use orbit_auth::token::hash_token_hex;
use orbit_auth::{Caller, Identities, IdentityStore};
use orbit_server_kit::{ErrorCode, OrbitError, ServerKit};
use tokio_util::sync::CancellationToken;
use tonic::transport::Channel;
use tonic::{Code, Request, Response, Status};

struct Scheduler;

#[tonic::async_trait]
impl SchedulerService for Scheduler {
    async fn status(
        &self,
        request: Request<StatusRequest>,
    ) -> Result<Response<StatusResponse>, Status> {
        let caller = request.extensions().get::<Caller>().expect("the gate sets the caller");
        let mut response = Response::new(StatusResponse::default());
        response.metadata_mut().insert("x-caller", caller.0.name.parse().unwrap());
        Ok(response)
    }
}

fn call(token: Option<&str>) -> Request<StatusRequest> {
    let mut request = Request::new(StatusRequest {});
    if let Some(token) = token {
        request.metadata_mut().insert("authorization", format!("Bearer {token}").parse().unwrap());
    }
    request
}

#[tokio::test]
async fn server_kit_with_the_identities_gate_refuses_and_admits() {
    let file = format!(
        "identities:\n  - name: ops\n    kind: admin\n    token_sha256: {}\n  - name: frontend\n    kind: service\n    token_sha256: {}\n",
        hash_token_hex("ops"),
        hash_token_hex("svc")
    );
    let store = IdentityStore::new(Identities::parse(&file).unwrap());
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let shutdown = CancellationToken::new();
    let kit =
        ServerKit::new().gate(Arc::new(store)).add_service(SchedulerServiceServer::new(Scheduler));
    let server = tokio::spawn(kit.serve(listener, shutdown.clone()));
    let channel = Channel::from_shared(format!("http://{addr}")).unwrap().connect().await.unwrap();
    let mut client = SchedulerServiceClient::new(channel.clone());

    let anonymous = client.status(call(None)).await.unwrap_err();
    assert_eq!(OrbitError::from_status(&anonymous).unwrap().code, ErrorCode::Unauthenticated);
    let admin = client.status(call(Some("ops"))).await.unwrap_err();
    assert_eq!(admin.code(), Code::PermissionDenied);
    assert_eq!(OrbitError::from_status(&admin).unwrap().code, ErrorCode::PermissionDenied);
    let response = client.status(call(Some("svc"))).await.unwrap();
    assert_eq!(response.metadata().get("x-caller").unwrap(), "frontend");

    let mut health = tonic_health::pb::health_client::HealthClient::new(channel);
    let request = tonic_health::pb::HealthCheckRequest { service: String::new() };
    health.check(request).await.expect("health stays open behind the gate");

    shutdown.cancel();
    server.await.unwrap().unwrap();
}
