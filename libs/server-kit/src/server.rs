//! The one place an Orbit gRPC server is assembled.
//!
//! [`ServerKit`] collects the caller's tonic services, then [`ServerKit::serve`] adds
//! `grpc.health.v1.Health` and server reflection (v1 and v1alpha), builds the request stack
//! and serves on a bound listener until a [`CancellationToken`] fires.
//!
//! Invariants:
//! - Health reports NOT_SERVING for `""` and every added service until the server is
//!   accepting connections, then SERVING, and NOT_SERVING again as soon as shutdown
//!   begins (so load balancers stop sending work before connections drain). With
//!   [`ConnectionOptions::readiness`], every status follows it in between: SERVING only
//!   while the process is ready (see [`crate::readiness`]). Callers may also flip statuses
//!   through [`ServerKit::health_reporter`].
//! - Every call counts in `orbit_grpc_requests_total{method,code}` and
//!   `orbit_grpc_request_duration_seconds{method}` (see `crate::grpc_metrics`).
//! - Reflection lists exactly the services being served; their descriptors come from
//!   [`orbit_api::FILE_DESCRIPTOR_SET`] plus any set registered with
//!   [`ServerKit::register_file_descriptor_set`], and the `google.rpc` status and error
//!   detail types (so reflection clients such as grpcurl decode every error's details).
//! - Every added service gets the same message size limits ([`MessageLimits`]).
//! - Shutdown drains in-flight calls for at most the grace period, then drops the rest
//!   (long-lived worker streams would otherwise hold shutdown forever).
//! - Every connection gets the [`ConnectionOptions`]: HTTP/2 keepalive pings (a peer that
//!   stops answering them is dropped), TCP keepalive, and the idle timeout (a connection
//!   with no open call for that long is closed; see [`crate::idle`]).
//! - With [`ConnectionOptions::tls`], every connection is TLS (mutual TLS with a client
//!   CA), the certificates reload on SIGHUP or file change, and the client's verified
//!   chain is in each request's extensions as [`crate::tls::PeerCertificates`]; see
//!   [`crate::tls`]. Without it the server speaks plain text.

use std::convert::Infallible;
use std::future::Future;
use std::pin::Pin;
use std::time::Duration;

use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;
use tonic::body::Body;
use tonic::codegen::http;
use tonic::codegen::tokio_stream::StreamExt;
use tonic::server::NamedService;
use tonic::service::Routes;
use tonic::transport::server::TcpIncoming;
use tonic::transport::Server;
use tonic_health::server::{HealthReporter, HealthService};
use tonic_health::ServingStatus;

use crate::gate::{GateLayer, RequestGate};
use crate::grpc_metrics::{known_methods, MetricsLayer};
use crate::idle::{IdleLayer, Tracker};
use crate::peer::PeerLayer;
use crate::readiness::Readiness;
use crate::tls::{ReloadingConfig, TlsFiles, TlsIncoming};

/// The gRPC name of the health service.
pub const HEALTH_SERVICE_NAME: &str = "grpc.health.v1.Health";
/// The gRPC name of the v1 reflection service.
pub const REFLECTION_V1_SERVICE_NAME: &str = "grpc.reflection.v1.ServerReflection";
/// The gRPC name of the v1alpha reflection service.
pub const REFLECTION_V1ALPHA_SERVICE_NAME: &str = "grpc.reflection.v1alpha.ServerReflection";

/// Default cap on a decoded (received) or encoded (sent) message: 4 MiB, tonic's default
/// for decoding.
pub const DEFAULT_MAX_MESSAGE_BYTES: usize = 4 * 1024 * 1024;
/// Default time in-flight calls get to finish after shutdown begins.
pub const DEFAULT_GRACE_PERIOD: Duration = Duration::from_secs(10);

/// How long accepted connections live and how dead peers are found. `None` turns a
/// setting off.
#[derive(Clone)]
pub struct ConnectionOptions {
    /// A connection with no open call for this long is closed. Default 5 minutes: long
    /// enough that a client between calls keeps its connection, short enough that
    /// abandoned ones do not pile up. A worker's session stream is an open call.
    pub idle_timeout: Option<Duration>,
    /// How often the server pings a connection over HTTP/2 (default 30 s), so dead peers
    /// and broken middleboxes are noticed even on a quiet worker stream.
    pub http2_keepalive_interval: Option<Duration>,
    /// How long a keepalive ping may stay unanswered before the connection is closed
    /// (default 20 s).
    pub http2_keepalive_timeout: Option<Duration>,
    /// TCP keepalive idle time set on accepted sockets (default 60 s).
    pub tcp_keepalive: Option<Duration>,
    /// Serve TLS with these files (mutual TLS when they name a client CA). Default: none,
    /// plain text.
    pub tls: Option<TlsFiles>,
    /// Authentication of every request (see [`ServerKit::gate`]). Default: none, every
    /// request passes. Carried here so the services that build their own server take it
    /// with the rest of the connection settings.
    pub gate: Option<std::sync::Arc<dyn RequestGate>>,
    /// The process's readiness (see [`crate::readiness`]): when set, gRPC health says
    /// SERVING only while it is ready. Default: none, SERVING while the server serves.
    pub readiness: Option<Readiness>,
}

impl std::fmt::Debug for ConnectionOptions {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ConnectionOptions")
            .field("idle_timeout", &self.idle_timeout)
            .field("http2_keepalive_interval", &self.http2_keepalive_interval)
            .field("http2_keepalive_timeout", &self.http2_keepalive_timeout)
            .field("tcp_keepalive", &self.tcp_keepalive)
            .field("tls", &self.tls)
            .field("gate", &self.gate.is_some())
            .field("readiness", &self.readiness)
            .finish()
    }
}

/// Default [`ConnectionOptions::idle_timeout`].
pub const DEFAULT_IDLE_TIMEOUT: Duration = Duration::from_secs(300);
/// Default [`ConnectionOptions::http2_keepalive_interval`].
pub const DEFAULT_HTTP2_KEEPALIVE_INTERVAL: Duration = Duration::from_secs(30);
/// Default [`ConnectionOptions::http2_keepalive_timeout`].
pub const DEFAULT_HTTP2_KEEPALIVE_TIMEOUT: Duration = Duration::from_secs(20);
/// Default [`ConnectionOptions::tcp_keepalive`].
pub const DEFAULT_TCP_KEEPALIVE: Duration = Duration::from_secs(60);

impl Default for ConnectionOptions {
    fn default() -> Self {
        Self {
            idle_timeout: Some(DEFAULT_IDLE_TIMEOUT),
            http2_keepalive_interval: Some(DEFAULT_HTTP2_KEEPALIVE_INTERVAL),
            http2_keepalive_timeout: Some(DEFAULT_HTTP2_KEEPALIVE_TIMEOUT),
            tcp_keepalive: Some(DEFAULT_TCP_KEEPALIVE),
            tls: None,
            gate: None,
            readiness: None,
        }
    }
}

/// Why a server stopped with an error.
#[derive(Debug, thiserror::Error)]
pub enum ServeError {
    /// The listener's local address could not be read.
    #[error("listener: {0}")]
    Listener(#[from] std::io::Error),
    /// A registered descriptor set is invalid.
    #[error("reflection: {0}")]
    Reflection(#[from] tonic_reflection::server::Error),
    /// The TLS files are unusable.
    #[error("tls: {0}")]
    Tls(#[from] crate::tls::TlsError),
    /// The transport failed while serving.
    #[error("transport: {0}")]
    Transport(#[from] tonic::transport::Error),
}

/// Caps on the size of one gRPC message, applied to every service of a server.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct MessageLimits {
    /// The largest message the server accepts, in bytes.
    pub max_decoding_message_size: usize,
    /// The largest message the server sends, in bytes.
    pub max_encoding_message_size: usize,
}

impl Default for MessageLimits {
    fn default() -> Self {
        Self {
            max_decoding_message_size: DEFAULT_MAX_MESSAGE_BYTES,
            max_encoding_message_size: DEFAULT_MAX_MESSAGE_BYTES,
        }
    }
}

/// A generated tonic server whose message sizes can be capped. Implemented for every
/// Orbit service server, health and reflection; implement it for other generated servers
/// by forwarding to their `max_*_message_size` methods.
pub trait WithMessageLimits: Sized {
    /// Returns the server with `limits` applied.
    #[must_use]
    fn with_message_limits(self, limits: MessageLimits) -> Self;
}

macro_rules! impl_with_message_limits {
    ($($server:path),+ $(,)?) => {$(
        impl<T> WithMessageLimits for $server {
            fn with_message_limits(self, limits: MessageLimits) -> Self {
                self.max_decoding_message_size(limits.max_decoding_message_size)
                    .max_encoding_message_size(limits.max_encoding_message_size)
            }
        }
    )+};
}

impl_with_message_limits!(
    orbit_api::v1::workflow_service_server::WorkflowServiceServer<T>,
    orbit_api::v1::worker_service_server::WorkerServiceServer<T>,
    orbit_api::v1::schedule_service_server::ScheduleServiceServer<T>,
    orbit_api::v1::admin_service_server::AdminServiceServer<T>,
    orbit_api::internal::v1::owner_service_server::OwnerServiceServer<T>,
    orbit_api::internal::v1::scheduler_service_server::SchedulerServiceServer<T>,
    orbit_api::internal::v1::handoff_service_server::HandoffServiceServer<T>,
    tonic_health::pb::health_server::HealthServer<T>,
    tonic_reflection::pb::v1::server_reflection_server::ServerReflectionServer<T>,
    tonic_reflection::pb::v1alpha::server_reflection_server::ServerReflectionServer<T>,
);

/// Builds and serves one Orbit gRPC server. See the module docs for its invariants.
#[derive(Debug)]
pub struct ServerKit {
    /// Names of the added services, for health and reflection.
    services: Vec<&'static str>,
    routes: Routes,
    descriptor_sets: Vec<&'static [u8]>,
    limits: MessageLimits,
    grace_period: Duration,
    request_timeout: Option<Duration>,
    concurrency_limit_per_connection: Option<usize>,
    connections: ConnectionOptions,
    health: HealthReporter,
    gate: GateLayer,
}

impl Default for ServerKit {
    fn default() -> Self {
        Self::new()
    }
}

impl ServerKit {
    /// A server with no services yet, default limits and grace period.
    #[must_use]
    pub fn new() -> Self {
        Self {
            services: Vec::new(),
            routes: Routes::default(),
            descriptor_sets: vec![orbit_api::FILE_DESCRIPTOR_SET],
            limits: MessageLimits::default(),
            grace_period: DEFAULT_GRACE_PERIOD,
            request_timeout: None,
            concurrency_limit_per_connection: None,
            connections: ConnectionOptions::default(),
            health: HealthReporter::new(),
            gate: GateLayer::default(),
        }
    }

    /// Sends every request through `gate` before its handler (authentication).
    #[must_use]
    pub fn gate(mut self, gate: std::sync::Arc<dyn RequestGate>) -> Self {
        self.gate = GateLayer::new(gate);
        self
    }

    /// Sets the message size limits of services added after this call (and of health and
    /// reflection), so call it before [`ServerKit::add_service`].
    #[must_use]
    pub fn message_limits(mut self, limits: MessageLimits) -> Self {
        self.limits = limits;
        self
    }

    /// The message size limits services are served with.
    #[must_use]
    pub fn limits(&self) -> MessageLimits {
        self.limits
    }

    /// Sets how long in-flight calls may run after shutdown begins.
    #[must_use]
    pub fn grace_period(mut self, grace_period: Duration) -> Self {
        self.grace_period = grace_period;
        self
    }

    /// Fails unary calls that take longer than `timeout` with DEADLINE_EXCEEDED (in
    /// addition to any `grpc-timeout` the client sends). Off by default, because streams
    /// are long-lived.
    #[must_use]
    pub fn request_timeout(mut self, timeout: Duration) -> Self {
        self.request_timeout = Some(timeout);
        self
    }

    /// Sets the keepalive, idle and TLS settings of accepted connections, and the gate
    /// when the options carry one.
    #[must_use]
    pub fn connections(mut self, options: ConnectionOptions) -> Self {
        if let Some(gate) = options.gate.clone() {
            self.gate = GateLayer::new(gate);
        }
        self.connections = options;
        self
    }

    /// Caps concurrent calls per connection; calls over the cap are shed with UNAVAILABLE.
    #[must_use]
    pub fn concurrency_limit_per_connection(mut self, limit: usize) -> Self {
        self.concurrency_limit_per_connection = Some(limit);
        self
    }

    /// Registers an extra encoded `FileDescriptorSet` with reflection, for services that
    /// are not in [`orbit_api::FILE_DESCRIPTOR_SET`].
    #[must_use]
    pub fn register_file_descriptor_set(mut self, encoded: &'static [u8]) -> Self {
        self.descriptor_sets.push(encoded);
        self
    }

    /// Adds a generated tonic service: it is served, gets the message limits, a health
    /// status under its name and an entry in reflection.
    #[must_use]
    pub fn add_service<S>(mut self, service: S) -> Self
    where
        S: tonic::codegen::Service<
                http::Request<Body>,
                Response = http::Response<Body>,
                Error = Infallible,
            > + NamedService
            + WithMessageLimits
            + Clone
            + Send
            + Sync
            + 'static,
        S::Future: Send + 'static,
    {
        self.services.push(S::NAME);
        self.routes = self.routes.add_service(service.with_message_limits(self.limits));
        self
    }

    /// The names of the added services, in the order they were added.
    #[must_use]
    pub fn services(&self) -> &[&'static str] {
        &self.services
    }

    /// A handle to the health statuses, for flipping them while serving (for example to
    /// NOT_SERVING while the database is unreachable).
    #[must_use]
    pub fn health_reporter(&self) -> HealthReporter {
        self.health.clone()
    }

    /// Serves on `listener` until `shutdown` is cancelled, then drains for at most the
    /// grace period. Returns once the server has stopped.
    ///
    /// # Errors
    ///
    /// An invalid descriptor set, or a transport failure while serving.
    pub async fn serve(
        self,
        listener: TcpListener,
        shutdown: CancellationToken,
    ) -> Result<(), ServeError> {
        let addr = listener.local_addr()?;
        // Load TLS first: unusable files fail the start before anything is served.
        let tls = self.connections.tls.clone().map(ReloadingConfig::new).transpose()?;
        let health = self.health.clone();
        let health_names: Vec<&str> =
            std::iter::once("").chain(self.services.iter().copied()).collect();
        set_all(&health, &health_names, ServingStatus::NotServing).await;

        let mut routes = self.routes;
        // Health: `grpc.health.v1.Health`, backed by the shared reporter.
        routes = routes.add_service(
            tonic_health::pb::health_server::HealthServer::new(
                HealthService::from_health_reporter(health.clone()),
            )
            .with_message_limits(self.limits),
        );
        // Reflection v1 and v1alpha: grpcurl and buf curl still speak either.
        let served: Vec<&str> = self
            .services
            .iter()
            .copied()
            .chain([
                HEALTH_SERVICE_NAME,
                REFLECTION_V1_SERVICE_NAME,
                REFLECTION_V1ALPHA_SERVICE_NAME,
            ])
            .collect();
        routes = routes
            .add_service(
                reflection(&self.descriptor_sets, &served)
                    .build_v1()?
                    .with_message_limits(self.limits),
            )
            .add_service(
                reflection(&self.descriptor_sets, &served)
                    .build_v1alpha()?
                    .with_message_limits(self.limits),
            );

        // The request stack, outer to inner. tonic applies these around every call.
        let options = self.connections;
        let mut server = Server::builder()
            // Keepalive: ping every connection, drop the ones whose peer stopped answering.
            .http2_keepalive_interval(options.http2_keepalive_interval)
            .http2_keepalive_timeout(options.http2_keepalive_timeout)
            // Trace: one span per call, named by its gRPC path, so handler logs carry it.
            .trace_fn(|request| tracing::info_span!("grpc", path = %request.uri().path()));
        if let Some(timeout) = self.request_timeout {
            // Timeout: bound each call's duration server-side.
            server = server.timeout(timeout);
        }
        if let Some(limit) = self.concurrency_limit_per_connection {
            // Concurrency limit + load shed: at most `limit` calls in flight per
            // connection; excess calls fail fast with UNAVAILABLE instead of queueing.
            server = server.concurrency_limit_per_connection(limit).load_shed(true);
        }
        // Metrics: every call by method and code, refused ones included (see
        // `crate::grpc_metrics`); method labels only from the served services.
        let mut described: Vec<&[u8]> = self.descriptor_sets.clone();
        described.push(tonic_health::pb::FILE_DESCRIPTOR_SET);
        described.push(tonic_reflection::pb::v1::FILE_DESCRIPTOR_SET);
        described.push(tonic_reflection::pb::v1alpha::FILE_DESCRIPTOR_SET);
        let metrics = MetricsLayer(known_methods(&described, &served));
        // Idle tracking: counts the calls open on each connection (so a call counts until
        // its response body is done), then the gate (auth), innermost: a refused call
        // still counts as activity, and is traced and timed like any other.
        let tracker = Tracker::new(options.idle_timeout);
        // Outermost of ours: a TLS connection's info is unpacked into the certificates and
        // their names (`crate::peer`), which the idle tracking and the gate read.
        let mut server = server
            .layer(PeerLayer)
            .layer(metrics)
            .layer(IdleLayer::new(tracker.clone()))
            .layer(self.gate);

        // The listener's stream of connections; TCP_NODELAY because gRPC frames are small.
        // Each accepted socket is wrapped so an idle connection can end itself.
        let tcp = TcpIncoming::from(listener)
            .with_nodelay(Some(true))
            .with_keepalive(options.tcp_keepalive);
        // `drain` is cancelled only after health flipped, so clients see NOT_SERVING first.
        let drain = CancellationToken::new();
        let router = server.add_routes(routes);
        let signal = drain.clone().cancelled_owned();
        // Reloads stop when this function returns or its future is dropped.
        let reloads = CancellationToken::new();
        let _stop_reloads = reloads.clone().drop_guard();
        let serving: Pin<Box<dyn Future<Output = Result<(), tonic::transport::Error>> + Send>> =
            match &tls {
                None => {
                    let incoming =
                        tcp.map(move |accepted| accepted.map(|stream| tracker.accept(stream)));
                    Box::pin(router.serve_with_incoming_shutdown(incoming, signal))
                }
                Some(config) => {
                    config.spawn_reloader(reloads);
                    let incoming = TlsIncoming::new(tcp, tracker, config.clone());
                    Box::pin(router.serve_with_incoming_shutdown(incoming, signal))
                }
            };
        tokio::pin!(serving);

        // Health follows readiness when the process has one, else says SERVING now.
        let follower = match options.readiness.clone() {
            None => {
                set_all(&health, &health_names, ServingStatus::Serving).await;
                None
            }
            Some(readiness) => {
                let (health, names) =
                    (health.clone(), health_names.iter().map(|n| n.to_string()).collect());
                Some(tokio::spawn(follow_readiness(readiness, health, names)))
            }
        };
        tracing::info!(%addr, services = ?self.services, tls = tls.is_some(), "grpc server serving");

        let outcome = tokio::select! {
            result = &mut serving => Some(result),
            () = shutdown.cancelled() => None,
        };
        if let Some(follower) = follower {
            follower.abort();
            let _ = follower.await;
        }
        if let Some(result) = outcome {
            set_all(&health, &health_names, ServingStatus::NotServing).await;
            return result.map_err(ServeError::from);
        }

        set_all(&health, &health_names, ServingStatus::NotServing).await;
        drain.cancel();
        tracing::info!(%addr, grace_period = ?self.grace_period, "grpc server draining");
        match tokio::time::timeout(self.grace_period, serving).await {
            Ok(result) => result?,
            Err(_) => tracing::warn!(%addr, "grpc server grace period over, dropping calls"),
        }
        tracing::info!(%addr, "grpc server stopped");
        Ok(())
    }
}

/// A reflection builder over every descriptor set, listing exactly `served`.
fn reflection<'a>(
    descriptor_sets: &[&'a [u8]],
    served: &[&str],
) -> tonic_reflection::server::Builder<'a> {
    let mut builder = tonic_reflection::server::Builder::configure()
        .register_encoded_file_descriptor_set(tonic_health::pb::FILE_DESCRIPTOR_SET)
        .register_encoded_file_descriptor_set(tonic_reflection::pb::v1::FILE_DESCRIPTOR_SET)
        .register_encoded_file_descriptor_set(tonic_reflection::pb::v1alpha::FILE_DESCRIPTOR_SET)
        // google/rpc/status.proto and error_details.proto: every Orbit error carries a
        // `google.rpc.ErrorInfo` detail, and grpcurl only decodes details whose types
        // reflection describes (otherwise: "google.rpc.ErrorInfo is not recognized").
        .register_encoded_file_descriptor_set(tonic_types::pb::FILE_DESCRIPTOR_SET);
    for set in descriptor_sets {
        builder = builder.register_encoded_file_descriptor_set(set);
    }
    for name in served {
        builder = builder.with_service_name(*name);
    }
    builder
}

/// Keeps every health status at SERVING while `readiness` is ready, NOT_SERVING otherwise.
async fn follow_readiness(readiness: Readiness, health: HealthReporter, names: Vec<String>) {
    let names: Vec<&str> = names.iter().map(String::as_str).collect();
    let mut states = readiness.subscribe();
    loop {
        let ready = states.borrow_and_update().is_ready();
        let status = if ready { ServingStatus::Serving } else { ServingStatus::NotServing };
        set_all(&health, &names, status).await;
        if states.changed().await.is_err() {
            return;
        }
    }
}

async fn set_all(health: &HealthReporter, names: &[&str], status: ServingStatus) {
    for name in names {
        health.set_service_status(name, status).await;
    }
}
