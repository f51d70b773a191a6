//! An OTLP trace receiver for tests: the real OTLP/gRPC `TraceService` (the
//! `opentelemetry-proto` service definitions) served with tonic on a loopback port,
//! keeping every span it is sent with its resource's `service.name`.

use opentelemetry_proto::tonic::collector::trace::v1::trace_service_server::{
    TraceService, TraceServiceServer,
};
use opentelemetry_proto::tonic::collector::trace::v1::{
    ExportTraceServiceRequest, ExportTraceServiceResponse,
};
use opentelemetry_proto::tonic::common::v1::any_value::Value as AnyValue;
use opentelemetry_proto::tonic::common::v1::KeyValue;
use opentelemetry_proto::tonic::trace::v1::Span;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::sync::Notify;
use tokio_util::sync::CancellationToken;

/// One received span and the service that sent it.
#[derive(Debug, Clone)]
pub struct Received {
    pub service: String,
    pub span: Span,
}

impl Received {
    pub fn trace_id(&self) -> String {
        hex(&self.span.trace_id)
    }
    pub fn span_id(&self) -> String {
        hex(&self.span.span_id)
    }
    pub fn parent_id(&self) -> String {
        hex(&self.span.parent_span_id)
    }
    /// A string (or integer, as text) attribute.
    pub fn attr(&self, key: &str) -> Option<String> {
        attr(&self.span.attributes, key)
    }
}

fn hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}

fn attr(attrs: &[KeyValue], key: &str) -> Option<String> {
    let v = attrs.iter().find(|kv| kv.key == key)?.value.as_ref()?.value.as_ref()?;
    match v {
        AnyValue::StringValue(s) => Some(s.clone()),
        AnyValue::IntValue(i) => Some(i.to_string()),
        other => Some(format!("{other:?}")),
    }
}

/// The spans received, and a wake-up for whoever waits on them (see [`Receiver::wait_for`]).
#[derive(Clone, Default)]
struct Sink(Arc<Mutex<Vec<Received>>>, Arc<Notify>);

#[tonic::async_trait]
impl TraceService for Sink {
    async fn export(
        &self,
        request: tonic::Request<ExportTraceServiceRequest>,
    ) -> Result<tonic::Response<ExportTraceServiceResponse>, tonic::Status> {
        let mut got = self.0.lock().unwrap();
        for rs in request.into_inner().resource_spans {
            let service = rs
                .resource
                .as_ref()
                .and_then(|r| attr(&r.attributes, "service.name"))
                .unwrap_or_default();
            for ss in rs.scope_spans {
                for span in ss.spans {
                    got.push(Received { service: service.clone(), span });
                }
            }
        }
        drop(got);
        self.1.notify_waiters();
        Ok(tonic::Response::new(ExportTraceServiceResponse { partial_success: None }))
    }
}

/// A running receiver; stops when dropped.
pub struct Receiver {
    pub port: u16,
    spans: Arc<Mutex<Vec<Received>>>,
    arrived: Arc<Notify>,
    stop: CancellationToken,
}

impl Receiver {
    pub async fn start() -> Receiver {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let port = listener.local_addr().expect("addr").port();
        let sink = Sink::default();
        let (spans, arrived) = (sink.0.clone(), sink.1.clone());
        let stop = CancellationToken::new();
        let s = stop.clone();
        tokio::spawn(async move {
            tonic::transport::Server::builder()
                .add_service(TraceServiceServer::new(sink))
                .serve_with_incoming_shutdown(
                    tokio_stream::wrappers::TcpListenerStream::new(listener),
                    s.cancelled_owned(),
                )
                .await
                .expect("OTLP receiver");
        });
        Receiver { port, spans, arrived, stop }
    }

    pub fn endpoint(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }

    /// Every span received so far.
    pub fn spans(&self) -> Vec<Received> {
        self.spans.lock().unwrap().clone()
    }

    /// Waits until `done` holds for the spans received so far, looking again at each
    /// export (no polling), for at most `within`: `Ok` with the spans, or `Err` with what
    /// had arrived by then.
    pub async fn wait_for(
        &self,
        within: Duration,
        done: impl Fn(&[Received]) -> bool,
    ) -> Result<Vec<Received>, Vec<Received>> {
        let deadline = tokio::time::Instant::now() + within;
        loop {
            // Registered before the check, so an export between the two is not missed.
            let arrived = self.arrived.notified();
            tokio::pin!(arrived);
            arrived.as_mut().enable();
            let spans = self.spans();
            if done(&spans) {
                return Ok(spans);
            }
            if tokio::time::timeout_at(deadline, arrived).await.is_err() {
                return Err(self.spans());
            }
        }
    }
}

impl Drop for Receiver {
    fn drop(&mut self) {
        self.stop.cancel();
    }
}
