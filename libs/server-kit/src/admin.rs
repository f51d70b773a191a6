//! The admin HTTP port every Orbit process serves beside its gRPC port (HTTP/1.1, plain
//! text; bind it to a private address):
//!
//! - `GET /metrics`: every `orbit_*` metric in the Prometheus text format;
//! - `GET /healthz`: 200 `{"status":"ok"}` while the process runs (liveness);
//! - `GET /readyz`: 200 `{"status":"ready"}` while [`Readiness`] is ready, else 503
//!   `{"status":"not_ready","check":…,"reason":…}` (`starting` before the first probe).
//!
//! `/readyz` answers from the cached state of the probes, so a busy load balancer adds no
//! database queries.

use std::convert::Infallible;

use http_body_util::Full;
use hyper::body::{Bytes, Incoming};
use hyper::{Method, Request, Response, StatusCode};
use hyper_util::rt::TokioIo;
use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;

use crate::readiness::{Readiness, ReadyState};

/// Serves the admin endpoints on `listener` until `shutdown`. Without `readiness`,
/// `/readyz` answers like `/healthz`.
pub async fn serve_admin(
    listener: TcpListener,
    readiness: Option<Readiness>,
    shutdown: CancellationToken,
) {
    let addr = listener.local_addr().ok();
    tracing::info!(?addr, "admin http serving");
    loop {
        let accepted = tokio::select! {
            () = shutdown.cancelled() => return,
            accepted = listener.accept() => accepted,
        };
        let stream = match accepted {
            Ok((stream, _)) => stream,
            Err(e) => {
                tracing::warn!(error = %e, "admin http accept failed");
                tokio::time::sleep(std::time::Duration::from_millis(50)).await;
                continue;
            }
        };
        let readiness = readiness.clone();
        let stop = shutdown.clone();
        tokio::spawn(async move {
            let service = hyper::service::service_fn(move |req| {
                let readiness = readiness.clone();
                async move { Ok::<_, Infallible>(route(&req, readiness.as_ref())) }
            });
            let conn = hyper::server::conn::http1::Builder::new()
                .serve_connection(TokioIo::new(stream), service);
            tokio::pin!(conn);
            tokio::select! {
                _ = conn.as_mut() => {}
                () = stop.cancelled() => conn.as_mut().graceful_shutdown(),
            }
        });
    }
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
