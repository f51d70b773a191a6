//! The admin HTTP port every Orbit process serves beside its gRPC port (HTTP/1.1, plain
//! text by default, bind it to a private address; or HTTPS with the gRPC port's reloading
//! certificate, see [`serve_admin_tls`]):
//!
//! - `GET /metrics`: every `orbit_*` metric in the Prometheus text format;
//! - `GET /healthz`: 200 `{"status":"ok"}` while the process runs (liveness);
//! - `GET /readyz`: 200 `{"status":"ready"}` while [`Readiness`] is ready, else 503
//!   `{"status":"not_ready","check":…,"reason":…}` (`starting` before the first probe).
//!
//! `/readyz` answers from the cached state of the probes, so a busy load balancer adds no
//! database queries.
//!
//! A process may add routes under a prefix ([`AdminRoutes`], e.g. the frontend's web
//! console under `/ui`) through an [`AdminSlot`], filled once the process has built what
//! the routes need; until then those paths answer 503.

use std::convert::Infallible;
use std::future::Future;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::{Arc, OnceLock};

use http_body_util::{BodyExt, Full, Limited};
use hyper::body::{Bytes, Incoming};
use hyper::{Method, Request, Response, StatusCode};
use hyper_util::rt::TokioIo;
use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;

use crate::readiness::{Readiness, ReadyState};
use crate::tls::{ReloadingConfig, HANDSHAKE_TIMEOUT};

/// The largest request body extra routes receive (a bigger one is answered 413).
pub const MAX_ADMIN_BODY: usize = 4 << 20;

/// How long a connection may take to send a request's headers, and how long a kept-alive
/// connection may stay idle between requests: past it the connection is closed, so idle,
/// half-sent and trickling connections (slowloris) do not pile up.
pub const ADMIN_HEADER_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(5);

/// Connections the admin port serves at once; one more is closed at accept. The port shares
/// the process's file descriptors with the gRPC port: this bounds its share.
pub const MAX_ADMIN_CONNECTIONS: usize = 256;

/// A request for extra admin routes, with its body read.
#[derive(Debug)]
pub struct AdminRequest {
    /// The request line and headers.
    pub parts: hyper::http::request::Parts,
    /// The whole body (at most [`MAX_ADMIN_BODY`]).
    pub body: Bytes,
    /// The peer address, for logs.
    pub peer: Option<SocketAddr>,
}

/// The answer of an extra route.
pub type AdminResponse = Response<Full<Bytes>>;

/// Routes a process adds to its admin port, under [`AdminRoutes::prefix`].
pub trait AdminRoutes: Send + Sync + 'static {
    /// The path prefix served (`/ui`): that path and every path below it.
    fn prefix(&self) -> &'static str;
    /// Answers one request under the prefix (any method).
    fn call(&self, request: AdminRequest) -> Pin<Box<dyn Future<Output = AdminResponse> + Send>>;
}

/// Where a process puts its extra routes once they can be built (the admin port starts
/// before the services it would show).
pub type AdminSlot = Arc<OnceLock<Arc<dyn AdminRoutes>>>;

/// Serves the admin endpoints on `listener` until `shutdown`. Without `readiness`,
/// `/readyz` answers like `/healthz`.
pub async fn serve_admin(
    listener: TcpListener,
    readiness: Option<Readiness>,
    shutdown: CancellationToken,
) {
    serve_admin_with(listener, readiness, AdminSlot::default(), shutdown).await;
}

/// [`serve_admin`], plus the routes put in `extra` (see [`AdminRoutes`]).
pub async fn serve_admin_with(
    listener: TcpListener,
    readiness: Option<Readiness>,
    extra: AdminSlot,
    shutdown: CancellationToken,
) {
    serve_admin_tls(listener, readiness, extra, None, shutdown).await;
}

/// [`serve_admin_with`], over TLS when `tls` is given: each connection's handshake takes the
/// config current at that moment (a reloaded certificate applies to new connections) and
/// runs in the connection's own task, bounded by [`HANDSHAKE_TIMEOUT`], so a slow or
/// plain-text client never holds up the accept loop.
pub async fn serve_admin_tls(
    listener: TcpListener,
    readiness: Option<Readiness>,
    extra: AdminSlot,
    tls: Option<Arc<ReloadingConfig>>,
    shutdown: CancellationToken,
) {
    let addr = listener.local_addr().ok();
    tracing::info!(?addr, tls = tls.is_some(), "admin http serving");
    let slots = Arc::new(tokio::sync::Semaphore::new(MAX_ADMIN_CONNECTIONS));
    loop {
        let accepted = tokio::select! {
            () = shutdown.cancelled() => return,
            accepted = listener.accept() => accepted,
        };
        let (stream, peer) = match accepted {
            Ok((stream, peer)) => (stream, peer),
            Err(e) => {
                tracing::warn!(error = %e, "admin http accept failed");
                tokio::time::sleep(std::time::Duration::from_millis(50)).await;
                continue;
            }
        };
        let Ok(slot) = slots.clone().try_acquire_owned() else {
            tracing::warn!(%peer, max = MAX_ADMIN_CONNECTIONS, "admin http connection refused: at the connection limit");
            drop(stream);
            continue;
        };
        let readiness = readiness.clone();
        let extra = extra.clone();
        let stop = shutdown.clone();
        let acceptor = tls.as_ref().map(|t| tokio_rustls::TlsAcceptor::from(t.current()));
        tokio::spawn(async move {
            let _slot = slot;
            let service = hyper::service::service_fn(move |req: Request<Incoming>| {
                let readiness = readiness.clone();
                let extra = extra.clone();
                async move {
                    let path = req.uri().path();
                    let routes = match extra.get() {
                        Some(r) if under(path, r.prefix()) => Some(r.clone()),
                        _ => None,
                    };
                    Ok::<_, Infallible>(match routes {
                        Some(routes) => call_extra(routes.as_ref(), req, peer).await,
                        None => route(&req, readiness.as_ref()),
                    })
                }
            });
            match acceptor {
                None => serve_connection(stream, service, stop).await,
                Some(acceptor) => {
                    match tokio::time::timeout(HANDSHAKE_TIMEOUT, acceptor.accept(stream)).await {
                        Ok(Ok(tls)) => serve_connection(tls, service, stop).await,
                        Ok(Err(e)) => {
                            tracing::info!(%peer, error = %e, "admin tls handshake refused");
                        }
                        Err(_) => tracing::info!(%peer, "admin tls handshake timed out"),
                    }
                }
            }
        });
    }
}

/// Serves HTTP/1.1 on one connection until it ends or `stop` (then gracefully), closing it
/// when a request's headers (or the next request, on a kept-alive connection) do not
/// arrive within [`ADMIN_HEADER_TIMEOUT`].
async fn serve_connection<I, S>(io: I, service: S, stop: CancellationToken)
where
    I: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send + 'static,
    S: hyper::service::HttpService<Incoming, ResBody = Full<Bytes>>,
    S::Error: Into<Box<dyn std::error::Error + Send + Sync>>,
{
    let conn = hyper::server::conn::http1::Builder::new()
        .timer(hyper_util::rt::TokioTimer::new())
        .header_read_timeout(ADMIN_HEADER_TIMEOUT)
        .serve_connection(TokioIo::new(io), service);
    tokio::pin!(conn);
    tokio::select! {
        _ = conn.as_mut() => {}
        () = stop.cancelled() => conn.as_mut().graceful_shutdown(),
    }
}

/// Whether `path` is `prefix` or below it.
fn under(path: &str, prefix: &str) -> bool {
    path.strip_prefix(prefix).is_some_and(|rest| rest.is_empty() || rest.starts_with('/'))
}

async fn call_extra(
    routes: &dyn AdminRoutes,
    req: Request<Incoming>,
    peer: SocketAddr,
) -> AdminResponse {
    let (parts, body) = req.into_parts();
    let Ok(body) = Limited::new(body, MAX_ADMIN_BODY).collect().await else {
        return reply(
            StatusCode::PAYLOAD_TOO_LARGE,
            "text/plain",
            "request body too large\n".into(),
        );
    };
    routes.call(AdminRequest { parts, body: body.to_bytes(), peer: Some(peer) }).await
}

fn route(req: &Request<Incoming>, readiness: Option<&Readiness>) -> Response<Full<Bytes>> {
    if req.method() != Method::GET && req.method() != Method::HEAD {
        return reply(StatusCode::METHOD_NOT_ALLOWED, "text/plain", "GET only\n".into());
    }
    match req.uri().path() {
        "/metrics" => reply(StatusCode::OK, orbit_metrics::CONTENT_TYPE, orbit_metrics::render()),
        "/healthz" => json(StatusCode::OK, &serde_json::json!({"status": "ok"})),
        "/readyz" => {
            let state = readiness.map_or(ReadyState::Ready, Readiness::state);
            match state {
                ReadyState::Ready => json(StatusCode::OK, &serde_json::json!({"status": "ready"})),
                ReadyState::Starting => json(
                    StatusCode::SERVICE_UNAVAILABLE,
                    &serde_json::json!({"status": "not_ready", "check": "starting", "reason": "no readiness check has run yet"}),
                ),
                ReadyState::NotReady { check, reason } => json(
                    StatusCode::SERVICE_UNAVAILABLE,
                    &serde_json::json!({"status": "not_ready", "check": check, "reason": reason}),
                ),
            }
        }
        _ => reply(
            StatusCode::NOT_FOUND,
            "text/plain",
            "not found: /metrics, /healthz, /readyz\n".into(),
        ),
    }
}

fn json(status: StatusCode, body: &serde_json::Value) -> Response<Full<Bytes>> {
    reply(status, "application/json", format!("{body}\n"))
}

fn reply(status: StatusCode, content_type: &str, body: String) -> Response<Full<Bytes>> {
    let mut response = Response::new(Full::new(Bytes::from(body)));
    *response.status_mut() = status;
    if let Ok(value) = hyper::header::HeaderValue::from_str(content_type) {
        response.headers_mut().insert(hyper::header::CONTENT_TYPE, value);
    }
    response
}
