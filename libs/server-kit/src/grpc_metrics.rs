//! The gRPC metrics layer: every call of every Orbit server counts in
//! `orbit_grpc_requests_total{method,code}` and `orbit_grpc_request_duration_seconds{method}`.
//!
//! - The method label is the call's path without its leading `/`
//!   (`orbit.v1.WorkflowService/StartExecution`) only when the path names a method of a
//!   served service (read from the descriptor sets at start); anything else is `unknown`,
//!   so a client sending random paths cannot grow the label set.
//! - The code is the `grpc-status` of the response: from the headers for a trailers-only
//!   answer (most errors), else from the trailers at the end of the body. A body dropped
//!   before its trailers (the client went away) counts as `CANCELLED`.
//! - The duration runs until the response body ends, so a stream counts for its life.
//!
//! Cost per call: one hash-set lookup, one boxed future and body wrapper (the idle layer
//! already does the same), and one counter increment and histogram observation at the end.

use std::collections::HashSet;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use tokio::time::Instant;

use prost::Message;
use tonic::body::Body;
use tonic::codegen::http;

/// The `/package.Service/Method` paths of `services`, found in `descriptor_sets`.
pub(crate) fn known_methods(descriptor_sets: &[&[u8]], services: &[&str]) -> Methods {
    let mut set = HashSet::new();
    for encoded in descriptor_sets {
        let Ok(files) = prost_types::FileDescriptorSet::decode(*encoded) else { continue };
        for file in files.file {
            let package = file.package.unwrap_or_default();
            for service in file.service {
                let full = if package.is_empty() {
                    service.name().to_string()
                } else {
                    format!("{package}.{}", service.name())
                };
                if !services.contains(&full.as_str()) {
                    continue;
                }
                for method in service.method {
                    set.insert(Arc::from(format!("{full}/{}", method.name())));
                }
            }
        }
    }
    Methods(Arc::new(set))
}

/// The method labels a server may use.
#[derive(Clone, Debug, Default)]
pub(crate) struct Methods(Arc<HashSet<Arc<str>>>);

impl Methods {
    fn label(&self, path: &str) -> Arc<str> {
        let name = path.strip_prefix('/').unwrap_or(path);
        self.0.get(name).cloned().unwrap_or_else(|| Arc::from("unknown"))
    }
}

/// Counts and times every call (see the module docs).
#[derive(Clone, Debug)]
pub(crate) struct MetricsLayer(pub(crate) Methods);

impl<S> tower_layer::Layer<S> for MetricsLayer {
    type Service = MetricsService<S>;

    fn layer(&self, inner: S) -> Self::Service {
        MetricsService { inner, methods: self.0.clone() }
    }
}

/// The service [`MetricsLayer`] makes.
#[derive(Clone, Debug)]
pub(crate) struct MetricsService<S> {
    inner: S,
    methods: Methods,
}

type BoxFuture<T, E> = Pin<Box<dyn std::future::Future<Output = Result<T, E>> + Send>>;

impl<S, B> tonic::codegen::Service<http::Request<B>> for MetricsService<S>
where
    S: tonic::codegen::Service<http::Request<B>, Response = http::Response<Body>>,
    S::Future: Send + 'static,
{
    type Response = http::Response<Body>;
    type Error = S::Error;
    type Future = BoxFuture<Self::Response, Self::Error>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, request: http::Request<B>) -> Self::Future {
        let method = self.methods.label(request.uri().path());
        let started = Instant::now();
        let response = self.inner.call(request);
        Box::pin(async move {
            let response = response.await?;
            // Trailers-only responses (most errors) carry the status in the headers.
            let code = response.headers().get("grpc-status").and_then(status_of);
            Ok(response.map(|inner| {
                Body::new(MetricsBody { inner, call: Some(Call { method, started, code }) })
            }))
        })
    }
}

struct Call {
    method: Arc<str>,
    started: Instant,
    code: Option<i32>,
}

impl Call {
    fn record(self, fallback: &'static str) {
        let m = orbit_metrics::get();
        let code = self.code.map_or(fallback, code_name);
        m.grpc_requests.with_label_values(&[&*self.method, code]).inc();
        m.grpc_duration
            .with_label_values(&[&*self.method])
            .observe(self.started.elapsed().as_secs_f64());
    }
}

/// A response body that records its call when it ends or is dropped.
struct MetricsBody {
    inner: Body,
    call: Option<Call>,
}

impl http_body::Body for MetricsBody {
    type Data = tonic::codegen::Bytes;
    type Error = tonic::Status;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<http_body::Frame<Self::Data>, Self::Error>>> {
        let polled = Pin::new(&mut self.inner).poll_frame(cx);
        match &polled {
            Poll::Ready(Some(Ok(frame))) => {
                if let Some(code) =
                    frame.trailers_ref().and_then(|t| t.get("grpc-status")).and_then(status_of)
                {
                    if let Some(call) = self.call.as_mut() {
                        call.code = Some(code);
                    }
                }
            }
            Poll::Ready(None) => {
                if let Some(call) = self.call.take() {
                    call.record("UNKNOWN");
                }
            }
            Poll::Ready(Some(Err(_))) => {
                if let Some(call) = self.call.take() {
                    call.record("INTERNAL");
                }
            }
            Poll::Pending => {}
        }
        polled
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> http_body::SizeHint {
        self.inner.size_hint()
    }
}

impl Drop for MetricsBody {
    fn drop(&mut self) {
        if let Some(call) = self.call.take() {
            // A status seen in the headers or trailers stands; otherwise the peer left.
            call.record("CANCELLED");
        }
    }
}

fn status_of(value: &http::HeaderValue) -> Option<i32> {
    value.to_str().ok()?.parse().ok()
}

/// The canonical name of a gRPC status code.
fn code_name(code: i32) -> &'static str {
    const NAMES: [&str; 17] = [
        "OK",
        "CANCELLED",
        "UNKNOWN",
        "INVALID_ARGUMENT",
        "DEADLINE_EXCEEDED",
        "NOT_FOUND",
        "ALREADY_EXISTS",
        "PERMISSION_DENIED",
        "RESOURCE_EXHAUSTED",
        "FAILED_PRECONDITION",
        "ABORTED",
        "OUT_OF_RANGE",
        "UNIMPLEMENTED",
        "INTERNAL",
        "UNAVAILABLE",
        "DATA_LOSS",
        "UNAUTHENTICATED",
    ];
    usize::try_from(code).ok().and_then(|i| NAMES.get(i).copied()).unwrap_or("UNKNOWN")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_methods_of_served_services_become_labels() {
        let methods =
            known_methods(&[orbit_api::FILE_DESCRIPTOR_SET], &["orbit.v1.WorkflowService"]);
        assert_eq!(
            &*methods.label("/orbit.v1.WorkflowService/StartExecution"),
            "orbit.v1.WorkflowService/StartExecution"
        );
        assert_eq!(&*methods.label("/orbit.v1.WorkflowService/NoSuchMethod"), "unknown");
        assert_eq!(&*methods.label("/orbit.v1.AdminService/ClusterStatus"), "unknown");
        assert_eq!(&*methods.label("/random/e1f0a9"), "unknown");
    }

    #[test]
    fn codes_have_their_canonical_names() {
        assert_eq!(code_name(0), "OK");
        assert_eq!(code_name(14), "UNAVAILABLE");
        assert_eq!(code_name(16), "UNAUTHENTICATED");
        assert_eq!(code_name(99), "UNKNOWN");
    }
}
