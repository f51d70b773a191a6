//! The auth layer on a real tonic server over loopback: the admin service and the internal
//! scheduler service behind it, called by a real gRPC client with and without credentials,
//! and the identities file reloaded while the server runs.

// Tests read their environment (ORBIT_PYTHON, the database URL) and the wall clock
// (unique names, deadlines of real processes) directly.
#![allow(clippy::disallowed_methods)]

use std::net::SocketAddr;
use std::path::Path;
use std::time::{Duration, Instant};

use orbit_api::internal::v1::scheduler_service_client::SchedulerServiceClient;
use orbit_api::internal::v1::scheduler_service_server::{SchedulerService, SchedulerServiceServer};
use orbit_api::internal::v1::{StatusRequest, StatusResponse};
use orbit_api::v1::admin_service_client::AdminServiceClient;
use orbit_api::v1::admin_service_server::{AdminService, AdminServiceServer};
use orbit_api::v1::*;
use orbit_auth::token::hash_token_hex;
use orbit_auth::{AuthLayer, Caller, IdentityStore, PeerCertNames};
use tonic::transport::Channel;
use tonic::{Code, Request, Response, Status};

/// Answers every admin RPC with an empty response and the caller's identity name (from the
/// layer's [`Caller`] extension) in the `x-caller` response metadata.
struct Admin;

fn echo_caller<T>(request: &Request<()>, body: T) -> Result<Response<T>, Status> {
    let name = request.extensions().get::<Caller>().map(|c| c.0.name.clone()).unwrap_or_default();
    let mut response = Response::new(body);
    response.metadata_mut().insert("x-caller", name.parse().unwrap());
    Ok(response)
}

fn strip<T>(request: Request<T>) -> Request<()> {
    let (metadata, extensions, _) = request.into_parts();
    Request::from_parts(metadata, extensions, ())
}

#[tonic::async_trait]
impl AdminService for Admin {
    async fn cluster_status(
        &self,
        request: Request<ClusterStatusRequest>,
    ) -> Result<Response<ClusterStatusResponse>, Status> {
        echo_caller(&strip(request), ClusterStatusResponse::default())
    }
    async fn list_workers(
        &self,
        request: Request<ListWorkersRequest>,
    ) -> Result<Response<ListWorkersResponse>, Status> {
        echo_caller(&strip(request), ListWorkersResponse::default())
    }
    async fn describe_task_queue(
        &self,
        request: Request<DescribeTaskQueueRequest>,
    ) -> Result<Response<DescribeTaskQueueResponse>, Status> {
        echo_caller(&strip(request), DescribeTaskQueueResponse::default())
    }
    async fn replay(
        &self,
        request: Request<ReplayRequest>,
    ) -> Result<Response<ReplayResponse>, Status> {
        echo_caller(&strip(request), ReplayResponse::default())
    }
    async fn set_rate_limit(
        &self,
        request: Request<SetRateLimitRequest>,
    ) -> Result<Response<SetRateLimitResponse>, Status> {
        echo_caller(&strip(request), SetRateLimitResponse::default())
    }
    async fn list_rate_limits(
        &self,
        request: Request<ListRateLimitsRequest>,
    ) -> Result<Response<ListRateLimitsResponse>, Status> {
        echo_caller(&strip(request), ListRateLimitsResponse::default())
    }
    async fn delete_rate_limit(
        &self,
        request: Request<DeleteRateLimitRequest>,
    ) -> Result<Response<DeleteRateLimitResponse>, Status> {
        echo_caller(&strip(request), DeleteRateLimitResponse::default())
    }
}

struct Scheduler;

#[tonic::async_trait]
impl SchedulerService for Scheduler {
    async fn status(
        &self,
        request: Request<StatusRequest>,
    ) -> Result<Response<StatusResponse>, Status> {
        echo_caller(&strip(request), StatusResponse::default())
    }
}

/// Stands in for the TLS acceptor: puts the `x-test-cert` header's value into the request
/// extensions as the verified certificate name (real TLS derives it from the handshake).
#[derive(Clone)]
struct FakeTls;

impl<S> tower_layer::Layer<S> for FakeTls {
    type Service = FakeTlsService<S>;
    fn layer(&self, inner: S) -> FakeTlsService<S> {
        FakeTlsService(inner)
    }
}

#[derive(Clone)]
struct FakeTlsService<S>(S);

impl<S, B> tower_service::Service<http::Request<B>> for FakeTlsService<S>
where
    S: tower_service::Service<http::Request<B>>,
{
    type Response = S::Response;
    type Error = S::Error;
    type Future = S::Future;
    fn poll_ready(
        &mut self,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Result<(), S::Error>> {
        self.0.poll_ready(cx)
    }
    fn call(&mut self, mut request: http::Request<B>) -> S::Future {
        if let Some(name) = request.headers().get("x-test-cert").and_then(|v| v.to_str().ok()) {
            let names = PeerCertNames(vec![name.to_owned()]);
            request.extensions_mut().insert(names);
        }
        self.0.call(request)
    }
}

async fn serve(store: IdentityStore) -> SocketAddr {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let (_reporter, health) = tonic_health::server::health_reporter();
    let router = tonic::transport::Server::builder()
        .layer(FakeTls)
        .layer(AuthLayer::new(store))
        .add_service(health)
        .add_service(AdminServiceServer::new(Admin))
        .add_service(SchedulerServiceServer::new(Scheduler));
    let incoming = tokio_stream::wrappers::TcpListenerStream::new(listener);
    tokio::spawn(router.serve_with_incoming(incoming));
    addr
}

async fn channel(addr: SocketAddr) -> Channel {
    Channel::from_shared(format!("http://{addr}")).unwrap().connect().await.unwrap()
}

fn with<T>(body: T, token: Option<&str>, cert: Option<&str>) -> Request<T> {
    let mut request = Request::new(body);
    if let Some(token) = token {
        request.metadata_mut().insert("authorization", format!("Bearer {token}").parse().unwrap());
    }
    if let Some(cert) = cert {
        request.metadata_mut().insert("x-test-cert", cert.parse().unwrap());
    }
    request
}

/// The Orbit code of a refusal (the `orbit-error-code` metadata of the one error mapping).
fn orbit_code(status: &Status) -> String {
    let code = status.metadata().get("orbit-error-code").expect("orbit-error-code metadata");
    code.to_str().unwrap().to_owned()
}

fn write_identities(path: &Path, extra: &str) {
    let text = format!(
        "identities:\n  - name: ops\n    kind: admin\n    token_sha256: {}\n  - name: reader\n    kind: client\n    token_sha256: {}\n    actions: [read]\n    workflows: ['*']\n  - name: frontend\n    kind: service\n    cert_names: [frontend.orbit.internal]\n{extra}",
        hash_token_hex("ops-token"),
        hash_token_hex("reader-token"),
    );
    std::fs::write(path, text).unwrap();
}

#[tokio::test]
async fn anonymous_is_unauthenticated_wrong_identity_denied_right_one_passes() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("identities.yaml");
    write_identities(&file, "");
    let addr = serve(IdentityStore::load(&file).unwrap()).await;
    let mut admin = AdminServiceClient::new(channel(addr).await);
    let mut scheduler = SchedulerServiceClient::new(channel(addr).await);

    for (token, cert) in [(None, None), (Some("wrong-token"), None), (None, Some("stranger"))] {
        let status = admin
            .cluster_status(with(ClusterStatusRequest::default(), token, cert))
            .await
            .unwrap_err();
        assert_eq!(
            (status.code(), orbit_code(&status).as_str()),
            (Code::Unauthenticated, "UNAUTHENTICATED")
        );
        assert!(
            !status.message().contains("wrong-token"),
            "the token is never echoed: {}",
            status.message()
        );
    }
    let mut bad = Request::new(ClusterStatusRequest::default());
    bad.metadata_mut().insert("authorization", "Basic b3BzOnB3".parse().unwrap());
    assert_eq!(admin.cluster_status(bad).await.unwrap_err().code(), Code::Unauthenticated);

    // A client with only `read` may not call an admin RPC; the refusal names both.
    let status = admin
        .cluster_status(with(ClusterStatusRequest::default(), Some("reader-token"), None))
        .await
        .unwrap_err();
    assert_eq!(
        (status.code(), orbit_code(&status).as_str()),
        (Code::PermissionDenied, "PERMISSION_DENIED")
    );
    assert!(
        status.message().contains("\"reader\"") && status.message().contains("admin"),
        "{}",
        status.message()
    );

    // The admin passes, and the handler sees who called.
    let response = admin
        .cluster_status(with(ClusterStatusRequest::default(), Some("ops-token"), None))
        .await
        .unwrap();
    assert_eq!(response.metadata().get("x-caller").unwrap(), "ops");

    // Internal RPCs: only the service identity (here by certificate name), not even admin.
    let status =
        scheduler.status(with(StatusRequest {}, Some("ops-token"), None)).await.unwrap_err();
    assert_eq!(status.code(), Code::PermissionDenied);
    assert!(
        status.message().contains("\"ops\"") && status.message().contains("service"),
        "{}",
        status.message()
    );
    let anonymous = scheduler.status(with(StatusRequest {}, None, None)).await.unwrap_err();
    assert_eq!(anonymous.code(), Code::Unauthenticated);
    let response = scheduler
        .status(with(StatusRequest {}, None, Some("frontend.orbit.internal")))
        .await
        .unwrap();
    assert_eq!(response.metadata().get("x-caller").unwrap(), "frontend");

    // Health is open to anonymous callers.
    let mut health = tonic_health::pb::health_client::HealthClient::new(channel(addr).await);
    let request = tonic_health::pb::HealthCheckRequest { service: String::new() };
    health.check(request).await.expect("health is open");
}

#[tokio::test]
async fn identities_are_reloaded_when_the_file_changes_and_a_bad_edit_keeps_the_old_ones() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("identities.yaml");
    write_identities(&file, "");
    let store = IdentityStore::load(&file).unwrap();
    let watcher = store.watch(file.clone(), Duration::from_millis(100));
    let addr = serve(store.clone()).await;
    let mut admin = AdminServiceClient::new(channel(addr).await);
    let call = |token: &'static str| with(ListWorkersRequest::default(), Some(token), None);
    assert_eq!(
        admin.list_workers(call("new-token")).await.unwrap_err().code(),
        Code::Unauthenticated
    );

    let extra = format!(
        "  - name: newcomer\n    kind: admin\n    token_sha256: {}\n",
        hash_token_hex("new-token")
    );
    write_identities(&file, &extra);
    // Generous bound for a loaded machine; the watcher checks every 100 ms.
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        match admin.list_workers(call("new-token")).await {
            Ok(response) => {
                assert_eq!(response.metadata().get("x-caller").unwrap(), "newcomer");
                break;
            }
            Err(status) => assert_eq!(status.code(), Code::Unauthenticated),
        }
        assert!(Instant::now() < deadline, "the new identity was never loaded");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }

    // A file that no longer parses is not applied: after several poll intervals the
    // identities in force are still the same value.
    std::fs::write(&file, "identities: [ {name: broken").unwrap();
    let before = store.current();
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert!(
        std::sync::Arc::ptr_eq(&before, &store.current()),
        "a bad file replaced the identities"
    );
    admin.list_workers(call("new-token")).await.expect("previous identities still in force");
    watcher.abort();
}
