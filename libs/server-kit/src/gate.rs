//! The hook through which authentication plugs into every [`ServerKit`](crate::ServerKit)
//! server: a [`RequestGate`] sees each request before its handler and either lets it
//! through (possibly adding extensions, such as the caller's identity) or answers it with
//! a status. `orbit-auth` implements it; without a gate every request passes, as before.

use std::sync::Arc;
use std::task::{Context, Poll};

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

/// Applies an optional [`RequestGate`] to every request.
#[derive(Clone, Default)]
pub(crate) struct GateLayer(pub(crate) Option<Arc<dyn RequestGate>>);

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
pub(crate) struct GateService<S> {
    inner: S,
    gate: Option<Arc<dyn RequestGate>>,
}

impl<S, R> tonic::codegen::Service<http::Request<Body>> for GateService<S>
where
    S: tonic::codegen::Service<http::Request<Body>, Response = http::Response<R>>,
    R: Default,
{
    type Response = http::Response<R>;
    type Error = S::Error;
    type Future = futures_util::future::Either<
        std::future::Ready<Result<Self::Response, S::Error>>,
        S::Future,
    >;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), S::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, mut request: http::Request<Body>) -> Self::Future {
        use futures_util::future::Either;
        if let Some(gate) = &self.gate {
            if let Err(status) = gate.admit(&mut request) {
                return Either::Left(std::future::ready(Ok(status.into_http())));
            }
        }
        Either::Right(self.inner.call(request))
    }
}
