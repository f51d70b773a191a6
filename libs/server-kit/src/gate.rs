//! The hook through which authentication plugs into every [`ServerKit`](crate::ServerKit)
//! server: a [`RequestGate`] sees each request before its handler and either lets it
//! through (possibly adding extensions, such as the caller's identity) or answers it with
//! a status. `orbit-auth` implements it; without a gate every request passes, as before.
//!
//! A refusal is answered once the request's first message has arrived ([`refuse`]), not
//! at its headers. A gRPC-core client (Python's `grpc.aio`, among others) that is still
//! sending its first message when the status arrives reports `INTERNAL: Internal error
//! from Core` instead of the status: a worker with a wrong token would see a transient
//! error and reconnect, never learning it was refused.

use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use tonic::body::Body;
use tonic::codegen::http;
use tonic::Status;

/// Decides whether a request may reach its handler.
pub trait RequestGate: Send + Sync + 'static {
    /// `Ok` lets the request through (the gate may add extensions); `Err` answers it.
    ///
    /// # Errors
    /// The status the caller receives instead of the handler's answer.
    fn admit(&self, request: &mut http::Request<Body>) -> Result<(), Status>;
}

/// How long a refusal waits for the request's first message before it is sent anyway: a
/// client sends its first message right after its headers, and a refused stream is not
/// held open for long.
pub const REFUSAL_WAIT: Duration = Duration::from_secs(2);

/// `status` as the answer to a request with `body`, sent once the body's first frame (or
/// its end, or an error) has arrived, or after [`REFUSAL_WAIT`]. Nothing of the body is
/// looked at.
pub async fn refuse<B, R>(mut body: B, status: Status) -> http::Response<R>
where
    B: http_body::Body + Unpin,
    R: Default,
{
    let first = std::future::poll_fn(|cx| Pin::new(&mut body).poll_frame(cx));
    let _ = tokio::time::timeout(REFUSAL_WAIT, first).await;
    status.into_http()
}

/// Applies an optional [`RequestGate`] to every request. [`ServerKit`](crate::ServerKit)
/// adds it itself; a bare tonic server can add it with `Server::builder().layer(..)`.
#[derive(Clone, Default)]
pub struct GateLayer(pub(crate) Option<Arc<dyn RequestGate>>);

impl GateLayer {
    /// A layer that sends every request through `gate`.
    #[must_use]
    pub fn new(gate: Arc<dyn RequestGate>) -> Self {
        Self(Some(gate))
    }
}

impl std::fmt::Debug for GateLayer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(if self.0.is_some() { "GateLayer(gate)" } else { "GateLayer(none)" })
    }
}

impl<S> tower_layer::Layer<S> for GateLayer {
    type Service = GateService<S>;

    fn layer(&self, inner: S) -> GateService<S> {
        GateService { inner, gate: self.0.clone() }
    }
}

/// See [`GateLayer`].
#[derive(Clone)]
pub struct GateService<S> {
    inner: S,
    gate: Option<Arc<dyn RequestGate>>,
}

impl<S, R> tonic::codegen::Service<http::Request<Body>> for GateService<S>
where
    S: tonic::codegen::Service<http::Request<Body>, Response = http::Response<R>>,
    S::Error: Send + 'static,
    R: Default + Send + 'static,
{
    type Response = http::Response<R>;
    type Error = S::Error;
    type Future = futures_util::future::Either<
        futures_util::future::BoxFuture<'static, Result<Self::Response, S::Error>>,
        S::Future,
    >;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), S::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, mut request: http::Request<Body>) -> Self::Future {
        use futures_util::future::Either;
        if let Some(gate) = &self.gate {
            if let Err(status) = gate.admit(&mut request) {
                let answer = refuse(request.into_body(), status);
                return Either::Left(Box::pin(async move { Ok(answer.await) }));
            }
        }
        Either::Right(self.inner.call(request))
    }
}
