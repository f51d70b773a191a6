//! Installing the OTLP/gRPC exporter, the sampler and the id generator that lets
//! [`crate::emit`] give a span its derived id.

use crate::ids;
use opentelemetry::trace::{SpanId, SpanKind, TraceId, TracerProvider as _};
use opentelemetry::{Context, KeyValue};
use opentelemetry_otlp::WithExportConfig;
use opentelemetry_sdk::trace::{
    BatchConfigBuilder, BatchSpanProcessor, IdGenerator, RandomIdGenerator, SamplingDecision,
    SamplingResult, SdkTracer, SdkTracerProvider, ShouldSample,
};
use opentelemetry_sdk::Resource;
use std::cell::Cell;
use std::sync::OnceLock;
use std::time::Duration;

pub(crate) struct Global {
    pub(crate) tracer: SdkTracer,
    pub(crate) ratio: f64,
}

pub(crate) static GLOBAL: OnceLock<Global> = OnceLock::new();

/// How to export traces.
#[derive(Debug, Clone)]
pub struct TraceConfig {
    /// OTLP/gRPC endpoint (`http://host:4317`); `None` = traces off.
    pub endpoint: Option<String>,
    /// Fraction of executions traced, 0.0 ..= 1.0, decided on the trace id.
    pub sample_ratio: f64,
    /// `service.name` of this process (`orbit-dev`, `orbit-frontend`, a worker's name).
    pub service_name: String,
}

/// Why traces could not be set up.
#[derive(Debug, thiserror::Error)]
pub enum TelemetryError {
    /// The exporter could not be built (a malformed endpoint).
    #[error("cannot build the OTLP exporter for `{endpoint}`: {message}")]
    Exporter {
        /// The endpoint given.
        endpoint: String,
        /// The exporter's error.
        message: String,
    },
    /// A ratio outside 0..=1.
    #[error("the trace sample ratio must be between 0 and 1, not {0}")]
    Ratio(f64),
}

/// Flushes and stops the exporter when dropped (at the end of `main`).
pub struct Guard(SdkTracerProvider);

impl Drop for Guard {
    fn drop(&mut self) {
        if let Err(e) = self.0.shutdown_with_timeout(Duration::from_secs(5)) {
            eprintln!("warning: flushing traces failed: {e}");
        }
    }
}

/// Turns traces on for this process when `config.endpoint` is set: spans are batched and
/// exported over OTLP/gRPC, and the provider becomes the global one (the worker library
/// opens its task spans on it). Call inside the tokio runtime, once, before serving.
/// `Ok(None)` when no endpoint is configured (traces stay off).
///
/// # Errors
/// A sample ratio outside 0..=1 or an exporter that cannot be built.
pub fn init(config: &TraceConfig) -> Result<Option<Guard>, TelemetryError> {
    let Some(endpoint) = config.endpoint.clone().filter(|e| !e.trim().is_empty()) else {
        return Ok(None);
    };
    if !(0.0..=1.0).contains(&config.sample_ratio) {
        return Err(TelemetryError::Ratio(config.sample_ratio));
    }
    let exporter = opentelemetry_otlp::SpanExporter::builder()
        .with_tonic()
        .with_endpoint(endpoint.clone())
        .build()
        .map_err(|e| TelemetryError::Exporter { endpoint, message: e.to_string() })?;
    // Half a second between exports (the spec's default is 5 s): a trace shows up while
    // the operator still looks; OTEL_BSP_* variables tune the rest.
    let batch = BatchConfigBuilder::default().with_scheduled_delay(Duration::from_millis(500));
    let processor = BatchSpanProcessor::builder(exporter).with_batch_config(batch.build()).build();
    let provider = SdkTracerProvider::builder()
        .with_span_processor(processor)
        .with_sampler(RatioOfTraceId(config.sample_ratio))
        .with_id_generator(DerivedIds)
        .with_resource(Resource::builder().with_service_name(config.service_name.clone()).build())
        .build();
    let tracer = provider.tracer("orbit");
    opentelemetry::global::set_tracer_provider(provider.clone());
    let _ = GLOBAL.set(Global { tracer, ratio: config.sample_ratio });
    Ok(Some(Guard(provider)))
}

/// A `tracing` layer exporting this process's `tracing` spans (and the log events inside
/// them, as span events) over the same exporter; `None` while traces are off (call after
/// [`init`]). The server kit's per-request `grpc` span is left out: every call (each
/// worker stream, each poll) would become a one-span trace of its own, noise beside the
/// execution traces and a cost on every request.
#[must_use]
pub fn layer<S>() -> Option<impl tracing_subscriber::Layer<S>>
where
    S: tracing::Subscriber + for<'a> tracing_subscriber::registry::LookupSpan<'a>,
{
    use tracing_subscriber::Layer as _;
    let g = GLOBAL.get()?;
    let not_per_request = tracing_subscriber::filter::filter_fn(|meta| {
        !(meta.is_span() && meta.name() == "grpc" && meta.target().starts_with("orbit_server_kit"))
    });
    Some(tracing_opentelemetry::layer().with_tracer(g.tracer.clone()).with_filter(not_per_request))
}

/// Samples on the trace id alone at a fixed ratio (`ids::sampled`), parent or not: the
/// decision for an execution is the same in every process and every restart, and matches
/// the sampled flag of the `traceparent` handed to workers.
#[derive(Debug, Clone)]
struct RatioOfTraceId(f64);

impl ShouldSample for RatioOfTraceId {
    fn should_sample(
        &self,
        parent_context: Option<&Context>,
        trace_id: TraceId,
        _name: &str,
        _span_kind: &SpanKind,
        _attributes: &[KeyValue],
        _links: &[opentelemetry::trace::Link],
    ) -> SamplingResult {
        use opentelemetry::trace::TraceContextExt;
        let decision = if ids::sampled(trace_id, self.0) {
            SamplingDecision::RecordAndSample
        } else {
            SamplingDecision::Drop
        };
        let trace_state = parent_context
            .map(|c| c.span().span_context().trace_state().clone())
            .unwrap_or_default();
        SamplingResult { decision, attributes: Vec::new(), trace_state }
    }
}

thread_local! {
    /// The ids the next span built on this thread takes (set by `with_ids` around one
    /// synchronous `build_with_context`).
    static NEXT: Cell<Option<(TraceId, Option<SpanId>)>> = const { Cell::new(None) };
}

/// Runs `build` with the next span's trace id (used when it has no parent) and span id
/// (when `Some`) fixed.
pub(crate) fn with_ids<T>(trace: TraceId, span: Option<SpanId>, build: impl FnOnce() -> T) -> T {
    NEXT.with(|n| n.set(Some((trace, span))));
    let out = build();
    NEXT.with(|n| n.set(None));
    out
}

/// Random ids, except for a span built inside `with_ids`.
#[derive(Debug)]
struct DerivedIds;

impl IdGenerator for DerivedIds {
    fn new_trace_id(&self) -> TraceId {
        NEXT.with(Cell::get).map_or_else(|| RandomIdGenerator::default().new_trace_id(), |n| n.0)
    }

    fn new_span_id(&self) -> SpanId {
        NEXT.with(Cell::get)
            .and_then(|n| n.1)
            .unwrap_or_else(|| RandomIdGenerator::default().new_span_id())
    }
}
