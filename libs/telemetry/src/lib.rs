//! OpenTelemetry traces for Orbit (issue 11).
//!
//! Off unless [`init`] is given an OTLP endpoint (`--otlp-endpoint` /
//! `OTEL_EXPORTER_OTLP_ENDPOINT`). While off, [`enabled`] is one atomic load and every span
//! point returns before building anything, so an untraced server does no tracing work per
//! step.
//!
//! One trace per execution tree: its ids are derived from the execution id (see [`ids`]),
//! so the spans of every process and of every restart join the same trace, and a child's
//! spans join its root's (its `workflow` span under its parent's). Spans are emitted after
//! the fact with explicit times taken from the history (see [`emit`]), so a span that began
//! in a process that has since died (a step attempt scheduled before a restart) is still
//! emitted, whole, by whoever records its end.

pub mod ids;
mod setup;

pub use ids::{attempt_span_id, root_span_id, trace_id};
pub use setup::{init, layer, Guard, TelemetryError, TraceConfig};

use opentelemetry::trace::{
    Span as _, SpanContext, SpanId, SpanKind, Status, TraceContextExt, TraceState, Tracer as _,
};
use opentelemetry::{Context, KeyValue};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// Whether traces are on in this process (an OTLP endpoint was configured).
#[inline]
#[must_use]
pub fn enabled() -> bool {
    setup::GLOBAL.get().is_some()
}

/// Whether this execution's spans are recorded here: traces on and its trace sampled. The
/// owner asks once per execution and pass before gathering anything for spans.
#[must_use]
pub fn traced(execution_id: &str) -> bool {
    setup::GLOBAL.get().is_some_and(|g| ids::sampled(trace_id(execution_id), g.ratio))
}

/// The `traceparent` a worker receives for a step attempt: the attempt's span as parent,
/// flagged sampled when the execution's trace is. `None` while traces are off.
#[must_use]
pub fn traceparent(execution_id: &str, step: &str, attempt: u32) -> Option<String> {
    let g = setup::GLOBAL.get()?;
    let t = trace_id(execution_id);
    Some(ids::format_traceparent(
        t,
        attempt_span_id(execution_id, step, attempt),
        ids::flags(t, g.ratio),
    ))
}

/// Which span of an execution's trace a span is, or hangs under.
#[derive(Debug, Clone, Copy)]
pub enum SpanRef<'a> {
    /// The execution's root span (`workflow <name>`).
    Root,
    /// One step attempt.
    Attempt {
        /// The unit key.
        step: &'a str,
        /// The attempt number (1-based).
        attempt: u32,
    },
    /// The root span of another execution of the same trace: a child's `workflow` span
    /// hangs under its parent's.
    Execution(&'a str),
}

impl SpanRef<'_> {
    fn id(self, execution_id: &str) -> SpanId {
        match self {
            SpanRef::Root => root_span_id(execution_id),
            SpanRef::Attempt { step, attempt } => attempt_span_id(execution_id, step, attempt),
            SpanRef::Execution(other) => root_span_id(other),
        }
    }
}

/// One span of an execution, emitted whole.
#[derive(Debug)]
pub struct SpanSpec<'a> {
    /// The execution whose trace it joins.
    pub execution_id: &'a str,
    /// Span name.
    pub name: String,
    /// `Some` for the spans others point at (the root, an attempt); `None` = a fresh id.
    pub id: Option<SpanRef<'a>>,
    /// Its parent; `None` only for the root span.
    pub parent: Option<SpanRef<'a>>,
    /// Start and end, epoch milliseconds.
    pub start_ms: u64,
    /// End, epoch milliseconds (at least `start_ms`).
    pub end_ms: u64,
    /// Attributes (`orbit.workflow`, `orbit.step`, …).
    pub attributes: Vec<KeyValue>,
    /// Timestamped events inside the span, epoch milliseconds.
    pub events: Vec<(String, u64, Vec<KeyValue>)>,
    /// An error description marks the span failed.
    pub error: Option<String>,
}

fn at(ms: u64) -> SystemTime {
    UNIX_EPOCH + Duration::from_millis(ms)
}

/// Exports one span of an execution's trace (no-op while traces are off).
pub fn emit(spec: SpanSpec<'_>) {
    let Some(g) = setup::GLOBAL.get() else { return };
    let t = trace_id(spec.execution_id);
    let parent = match spec.parent {
        Some(p) => Context::new().with_remote_span_context(SpanContext::new(
            t,
            p.id(spec.execution_id),
            ids::flags(t, g.ratio),
            true,
            TraceState::default(),
        )),
        None => Context::new(),
    };
    let own = spec.id.map(|r| r.id(spec.execution_id));
    let builder = g
        .tracer
        .span_builder(spec.name)
        .with_kind(SpanKind::Internal)
        .with_start_time(at(spec.start_ms))
        .with_attributes(spec.attributes);
    let mut span = setup::with_ids(t, own, || g.tracer.build_with_context(builder, &parent));
    for (name, ms, attrs) in spec.events {
        span.add_event_with_timestamp(name, at(ms), attrs);
    }
    if let Some(e) = spec.error {
        span.set_status(Status::error(e));
    }
    span.end_with_timestamp(at(spec.end_ms.max(spec.start_ms)));
}

/// The current time in epoch milliseconds (span times of the process's own work).
#[must_use]
pub fn now_ms() -> u64 {
    orbit_clock::system_clock()
}
