//! The web console: pages and a JSON gateway on the admin HTTP port under `/ui`.
//!
//! - `GET /ui`, `/ui/<page>…`: the one HTML shell ([`assets::INDEX`]); the page's script
//!   reads the path and query (the URL holds filters and ids, so links are shareable).
//! - `GET /ui/assets/<file>`: the embedded scripts and styles ([`assets`]), no CDN, no
//!   build step: plain ES modules compiled into the binary.
//! - `GET /ui/api/config`: `{"auth": bool}`, whether the pages must ask for a token.
//! - `POST /ui/api/<package.Service>/<Method>`: the [`gateway`] to the frontend's handlers.
//!
//! Served by `orbit dev` and `orbit frontend` (the processes holding a frontend); see
//! docs/console.md.

pub mod assets;
pub mod gateway;

use gateway::{Gateway, Refusal};
use http_body_util::Full;
use hyper::body::Bytes;
use hyper::{Method, Response, StatusCode};
use orbit_server_kit::{AdminRequest, AdminResponse, AdminRoutes};
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;

/// The console's routes, ready to put in the admin port's slot.
#[derive(Clone)]
pub struct Console {
    gateway: Arc<Gateway>,
}

impl Console {
    /// The console of `frontend`; `schedule_wake` as for `Frontend::schedule_api`, `gate`
    /// the gRPC server's own (`None`: no identities file).
    #[must_use]
    pub fn new(
        frontend: &orbit_frontend::Frontend,
        schedule_wake: Arc<tokio::sync::Notify>,
        gate: Option<Arc<dyn orbit_server_kit::RequestGate>>,
    ) -> Console {
        Console { gateway: Arc::new(Gateway::new(frontend, schedule_wake, gate)) }
    }

    async fn answer(self, request: AdminRequest) -> AdminResponse {
        let path = request.parts.uri.path();
        let method = &request.parts.method;
        if let Some(rpc) = path.strip_prefix("/ui/api/") {
            if rpc == "config" && *method == Method::GET {
                let auth = self.gateway.gate.is_some();
                return json(StatusCode::OK, &serde_json::json!({ "auth": auth }));
            }
            if *method != Method::POST {
                return text(StatusCode::METHOD_NOT_ALLOWED, "POST a JSON body\n");
            }
            // Only `application/json`: a cross-site form or `text/plain` fetch cannot send
            // it without a CORS preflight, which this port never grants, so another site
            // open in the operator's browser cannot act through a console left without
            // identities on loopback.
            if !is_json(&request.parts.headers) {
                return text(
                    StatusCode::UNSUPPORTED_MEDIA_TYPE,
                    "send Content-Type: application/json\n",
                );
            }
            let started = tokio::time::Instant::now();
            let answer =
                self.gateway.call(rpc, &request.parts.headers, request.peer, &request.body).await;
            tracing::debug!(rpc, elapsed = ?started.elapsed(), ok = answer.is_ok(), "console api");
            return match answer {
                Ok(body) => json(StatusCode::OK, &body),
                Err(Refusal { http, body }) => json(
                    StatusCode::from_u16(http).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR),
                    &body,
                ),
            };
        }
        if *method != Method::GET && *method != Method::HEAD {
            return text(StatusCode::METHOD_NOT_ALLOWED, "GET only\n");
        }
        if let Some(file) = path.strip_prefix("/ui/assets/") {
            return match assets::get(file) {
                Some((content_type, body)) => {
                    let mut r = reply(StatusCode::OK, content_type, Bytes::from_static(body));
                    r.headers_mut().insert(
                        hyper::header::CACHE_CONTROL,
                        hyper::header::HeaderValue::from_static("no-cache"),
                    );
                    r
                }
                None => text(StatusCode::NOT_FOUND, "no such asset\n"),
            };
        }
        // Every other path is a page: the shell routes on the client.
        reply(
            StatusCode::OK,
            "text/html; charset=utf-8",
            Bytes::from_static(assets::INDEX.as_bytes()),
        )
    }
}

impl AdminRoutes for Console {
    fn prefix(&self) -> &'static str {
        "/ui"
    }

    fn call(&self, request: AdminRequest) -> Pin<Box<dyn Future<Output = AdminResponse> + Send>> {
        Box::pin(self.clone().answer(request))
    }
}

fn is_json(headers: &hyper::HeaderMap) -> bool {
    headers
        .get(hyper::header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.split(';').next())
        .is_some_and(|v| v.trim().eq_ignore_ascii_case("application/json"))
}

fn json(status: StatusCode, body: &serde_json::Value) -> AdminResponse {
    reply(status, "application/json", Bytes::from(format!("{body}\n")))
}

fn text(status: StatusCode, body: &'static str) -> AdminResponse {
    reply(status, "text/plain; charset=utf-8", Bytes::from_static(body.as_bytes()))
}

fn reply(status: StatusCode, content_type: &'static str, body: Bytes) -> AdminResponse {
    let mut response = Response::new(Full::new(body));
    *response.status_mut() = status;
    let headers = response.headers_mut();
    headers
        .insert(hyper::header::CONTENT_TYPE, hyper::header::HeaderValue::from_static(content_type));
    // The pages load nothing from elsewhere and must not be framed by other sites.
    headers.insert(
        hyper::header::CONTENT_SECURITY_POLICY,
        hyper::header::HeaderValue::from_static(
            "default-src 'self'; style-src 'self'; img-src 'self' data:; frame-ancestors 'none'",
        ),
    );
    headers.insert(
        hyper::header::X_CONTENT_TYPE_OPTIONS,
        hyper::header::HeaderValue::from_static("nosniff"),
    );
    response
}

#[cfg(test)]
mod tests {
    use super::is_json;

    #[test]
    fn only_json_bodies_reach_the_gateway() {
        let with = |value: &'static str| {
            let mut headers = hyper::HeaderMap::new();
            headers.insert(
                hyper::header::CONTENT_TYPE,
                hyper::header::HeaderValue::from_static(value),
            );
            headers
        };
        assert!(is_json(&with("application/json")));
        assert!(is_json(&with("Application/JSON; charset=utf-8")));
        assert!(!is_json(&with("text/plain")));
        assert!(!is_json(&with("application/x-www-form-urlencoded")));
        assert!(!is_json(&hyper::HeaderMap::new()));
    }
}
