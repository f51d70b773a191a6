//! An in-process server: health and reflection answer, and cancelling the token stops it.

use std::time::Duration;

use orbit_api::internal::v1::scheduler_service_server::{SchedulerService, SchedulerServiceServer};
use orbit_api::internal::v1::{StatusRequest, StatusResponse};
use orbit_server_kit::server::DEFAULT_MAX_MESSAGE_BYTES;
use orbit_server_kit::server::{
    HEALTH_SERVICE_NAME, REFLECTION_V1ALPHA_SERVICE_NAME, REFLECTION_V1_SERVICE_NAME,
};
use orbit_server_kit::{ErrorCode, MessageLimits, OrbitError, ServerKit};
use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;
use tonic::codegen::tokio_stream;
use tonic::transport::Channel;
use tonic::{Code, Request, Response, Status};
use tonic_health::pb::health_check_response::ServingStatus;
use tonic_health::pb::health_client::HealthClient;
use tonic_health::pb::HealthCheckRequest;
use tonic_reflection::pb::v1::server_reflection_client::ServerReflectionClient;
use tonic_reflection::pb::v1::server_reflection_request::MessageRequest;
use tonic_reflection::pb::v1::server_reflection_response::MessageResponse;
use tonic_reflection::pb::v1::ServerReflectionRequest;

async fn health_of(channel: Channel, service: &str) -> Result<ServingStatus, tonic::Status> {
    let response = HealthClient::new(channel)
        .check(HealthCheckRequest { service: service.to_owned() })
        .await?;
    Ok(response.into_inner().status())
}

async fn reflection_request(channel: Channel, request: MessageRequest) -> MessageResponse {
    let outbound = tokio_stream::once(ServerReflectionRequest {
        host: String::new(),
        message_request: Some(request),
    });
    let mut inbound = ServerReflectionClient::new(channel)
        .server_reflection_info(outbound)
        .await
        .unwrap()
        .into_inner();
    inbound.message().await.unwrap().unwrap().message_response.unwrap()
}

/// A real Orbit service whose every call fails with an Orbit error.
struct Unavailable;

#[tonic::async_trait]
impl SchedulerService for Unavailable {
    async fn status(&self, _: Request<StatusRequest>) -> Result<Response<StatusResponse>, Status> {
        Err(OrbitError::new(ErrorCode::Unavailable, "no scheduler here").into())
    }
}

const SCHEDULER: &str = "orbit.internal.v1.SchedulerService";
const MAX_DECODING: usize = 1024;
const GRACE: Duration = Duration::from_millis(300);

#[tokio::test]
async fn serves_health_and_reflection_then_shuts_down() {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let shutdown = CancellationToken::new();
    let kit = ServerKit::new()
        .message_limits(MessageLimits {
            max_decoding_message_size: MAX_DECODING,
            max_encoding_message_size: DEFAULT_MAX_MESSAGE_BYTES,
        })
        .grace_period(GRACE)
        .add_service(SchedulerServiceServer::new(Unavailable));
    assert_eq!(kit.services(), [SCHEDULER]);
    let health = kit.health_reporter();
    let server = tokio::spawn(kit.serve(listener, shutdown.clone()));

    let channel = Channel::from_shared(format!("http://{addr}")).unwrap().connect().await.unwrap();

    // The server flips "" to SERVING once it is accepting; poll briefly for that.
    let mut status = health_of(channel.clone(), "").await.unwrap();
    for _ in 0..50 {
        if status == ServingStatus::Serving {
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
        status = health_of(channel.clone(), "").await.unwrap();
    }
    assert_eq!(status, ServingStatus::Serving);
    assert_eq!(health_of(channel.clone(), SCHEDULER).await.unwrap(), ServingStatus::Serving);

    // Orbit errors cross the wire with their code intact.
    let status = orbit_api::internal::v1::scheduler_service_client::SchedulerServiceClient::new(
        channel.clone(),
    )
    .status(StatusRequest {})
    .await
    .unwrap_err();
    assert_eq!(status.code(), Code::Unavailable);
    assert_eq!(OrbitError::from_status(&status).map(|e| e.code), Some(ErrorCode::Unavailable));

    // The message limit applies to the kit's own services too.
    let oversized = health_of(channel.clone(), &"x".repeat(MAX_DECODING * 2)).await.unwrap_err();
    assert_eq!(oversized.code(), Code::OutOfRange, "{oversized:?}");

    let MessageResponse::ListServicesResponse(list) =
        reflection_request(channel.clone(), MessageRequest::ListServices(String::new())).await
    else {
        panic!("expected a list_services response");
    };
    let mut names: Vec<String> = list.service.into_iter().map(|s| s.name).collect();
    names.sort();
    println!("reflection lists: {names:?}");
    assert_eq!(
        names,
        [
            HEALTH_SERVICE_NAME,
            REFLECTION_V1_SERVICE_NAME,
            REFLECTION_V1ALPHA_SERVICE_NAME,
            SCHEDULER
        ]
    );

    // v1alpha answers too, with the same list.
    let mut alpha = tonic_reflection::pb::v1alpha::server_reflection_client::ServerReflectionClient::new(
        channel.clone(),
    )
    .server_reflection_info(tokio_stream::once(
        tonic_reflection::pb::v1alpha::ServerReflectionRequest {
            host: String::new(),
            message_request: Some(
                tonic_reflection::pb::v1alpha::server_reflection_request::MessageRequest::ListServices(
                    String::new(),
                ),
            ),
        },
    ))
    .await
    .unwrap()
    .into_inner();
    let alpha = alpha.message().await.unwrap().unwrap().message_response.unwrap();
    let tonic_reflection::pb::v1alpha::server_reflection_response::MessageResponse::ListServicesResponse(alpha) = alpha else {
        panic!("expected a v1alpha list_services response");
    };
    let mut alpha_names: Vec<String> = alpha.service.into_iter().map(|s| s.name).collect();
    alpha_names.sort();
    assert_eq!(alpha_names, names);

    // Reflection describes Orbit symbols from `orbit_api::FILE_DESCRIPTOR_SET`.
    let response = reflection_request(
        channel.clone(),
        MessageRequest::FileContainingSymbol("orbit.v1.TaskError".to_owned()),
    )
    .await;
    assert!(matches!(response, MessageResponse::FileDescriptorResponse(_)), "{response:?}");

    // ... and the google.rpc error detail types every Orbit error carries, so reflection
    // clients (grpcurl, buf curl) decode `ErrorInfo` instead of "not recognized".
    for symbol in ["google.rpc.ErrorInfo", "google.rpc.BadRequest", "google.rpc.Status"] {
        let response = reflection_request(
            channel.clone(),
            MessageRequest::FileContainingSymbol(symbol.to_owned()),
        )
        .await;
        assert!(
            matches!(response, MessageResponse::FileDescriptorResponse(_)),
            "{symbol}: {response:?}"
        );
    }

    // A caller can flip a status while serving, and watchers see it.
    let mut watch = HealthClient::new(channel.clone())
        .watch(HealthCheckRequest { service: String::new() })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(watch.message().await.unwrap().unwrap().status(), ServingStatus::Serving);
    health.set_service_status("", tonic_health::ServingStatus::NotServing).await;
    assert_eq!(watch.message().await.unwrap().unwrap().status(), ServingStatus::NotServing);
    health.set_service_status("", tonic_health::ServingStatus::Serving).await;
    assert_eq!(watch.message().await.unwrap().unwrap().status(), ServingStatus::Serving);

    // Shutdown: health flips to NOT_SERVING first, then the server drains. The open watch
    // stream never ends by itself, so the server stops when the grace period is over.
    let started = tokio::time::Instant::now();
    shutdown.cancel();
    assert_eq!(watch.message().await.unwrap().unwrap().status(), ServingStatus::NotServing);
    tokio::time::timeout(Duration::from_secs(5), server)
        .await
        .expect("server stops within the grace period")
        .unwrap()
        .unwrap();
    assert!(started.elapsed() >= GRACE, "drained for the grace period");
    assert!(health_of(channel, "").await.is_err(), "server no longer answers");
}
