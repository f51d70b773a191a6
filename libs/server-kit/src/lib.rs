//! The shared pieces of every Orbit gRPC server.
//!
//! - [`error`]: the closed [`ErrorCode`] enum and its one mapping to [`tonic::Status`]
//!   (and back, for clients).
//! - [`payload`]: `google.protobuf.Value` ⇄ JSON and `Timestamp`/`Duration` ⇄ milliseconds,
//!   the conversions done once at the edge.
//! - [`server`]: [`ServerKit`], which assembles a server with health, reflection, message
//!   limits, connection keepalive and idle timeout, and graceful shutdown on a bound
//!   listener.
//! - [`admin`]: the admin HTTP port (`/metrics`, `/healthz`, `/readyz`) and
//!   [`readiness`], the cached probe results that `/readyz` and gRPC health both follow.
//!   Every server also counts its calls by method and code (`grpc_metrics`).
//! - [`gate`]: [`RequestGate`], the hook authentication plugs into (see `orbit-auth`).
//! - [`tls`]: TLS and mutual TLS with certificate reload; [`tls::PeerCertificates`] is
//!   where handlers find a client's verified certificate chain.
//! - [`peer`]: the names of that chain's leaf ([`peer::PeerCertNames`]), parsed once per
//!   connection, for authentication.
//! - [`validate`]: the request field rules (ids, payload sizes) every server applies.
//! - [`shutdown`]: a [`CancellationToken`](tokio_util::sync::CancellationToken) cancelled
//!   by SIGINT/SIGTERM.

pub mod admin;
pub mod error;
pub mod gate;
mod grpc_metrics;
mod idle;
pub mod payload;
pub mod peer;
pub mod readiness;
pub mod retry;
pub mod server;
pub mod shutdown;
pub mod tls;
pub mod validate;

pub use admin::{
    serve_admin, serve_admin_tls, serve_admin_with, AdminRequest, AdminResponse, AdminRoutes,
    AdminSlot,
};
pub use error::{ErrorCode, FieldViolation, GrpcCode, OrbitError, UnknownErrorCode};
pub use gate::RequestGate;
pub use payload::PayloadError;
pub use readiness::{Probe, Readiness, ReadyState};
pub use retry::while_unavailable;
pub use server::{ConnectionOptions, MessageLimits, ServeError, ServerKit, WithMessageLimits};
pub use shutdown::signal_token;
