//! The task span: when the server sends a W3C `traceparent` (traces on, see
//! docs/operations.md), each handler runs inside a span `task <name>` whose parent is the
//! step attempt's span in the execution's trace, so the worker's work shows in the same
//! trace. The span is opened on the global OpenTelemetry tracer provider: the worker's
//! process exports it once it installs one (`orbit_telemetry::init`, or any OTLP setup);
//! without one, or without a `traceparent`, nothing is built.

use opentelemetry::trace::{
    SpanContext, SpanId, SpanKind, Status, TraceContextExt, TraceFlags, TraceId, TraceState,
    Tracer as _,
};
use opentelemetry::{Context, KeyValue};
use std::str::FromStr as _;

use crate::task::{Outcome, TaskContext};

/// The trace context the handler runs in, with the task span open; `None` when the task
/// came without a (valid) `traceparent`.
pub(crate) fn task_context(ctx: &TaskContext) -> Option<Context> {
    if ctx.traceparent().is_empty() {
        return None;
    }
    let (trace, span, flags) = parse_traceparent(ctx.traceparent())?;
    let state = TraceState::from_str(ctx.tracestate()).unwrap_or_default();
    let parent =
        Context::new().with_remote_span_context(SpanContext::new(trace, span, flags, true, state));
    let tracer = opentelemetry::global::tracer("orbit-worker");
    let span = tracer
        .span_builder(format!("task {}", ctx.task()))
        .with_kind(SpanKind::Consumer)
        .with_attributes([
            KeyValue::new("orbit.execution_id", ctx.execution_id().to_owned()),
            KeyValue::new("orbit.workflow", ctx.workflow().to_owned()),
            KeyValue::new("orbit.step", ctx.step().to_owned()),
            KeyValue::new("orbit.attempt", i64::from(ctx.attempt())),
            KeyValue::new("orbit.task", ctx.task().to_owned()),
        ])
        .start_with_context(&tracer, &parent);
    Some(parent.with_span(span))
}

/// Ends the task span with how the handler ended.
pub(crate) fn finish(cx: &Context, outcome: &Outcome) {
    let span = cx.span();
    let error = match outcome {
        Outcome::Returned(Ok(_)) => None,
        Outcome::Returned(Err(f)) => Some(format!("{}: {}", f.code, f.message)),
        Outcome::Panicked(m) => Some(format!("panicked: {m}")),
        Outcome::Cancelled => Some("cancelled".to_owned()),
    };
    if let Some(e) = error {
        span.set_status(Status::error(e));
    }
    span.end();
}

/// Parses `00-<32 hex>-<16 hex>-<2 hex>`; `None` for anything else or all-zero ids.
fn parse_traceparent(value: &str) -> Option<(TraceId, SpanId, TraceFlags)> {
    let mut parts = value.trim().split('-');
    let (version, trace, span, flags) =
        (parts.next()?, parts.next()?, parts.next()?, parts.next()?);
    if version.len() != 2 || version == "ff" || trace.len() != 32 || span.len() != 16 {
        return None;
    }
    let trace = TraceId::from_hex(trace).ok().filter(|t| *t != TraceId::INVALID)?;
    let span = SpanId::from_hex(span).ok().filter(|s| *s != SpanId::INVALID)?;
    Some((trace, span, TraceFlags::new(u8::from_str_radix(flags, 16).ok()?)))
}

#[cfg(test)]
mod tests {
    use super::parse_traceparent;

    #[test]
    fn parses_w3c_traceparent() {
        let (t, s, f) =
            parse_traceparent("00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01").unwrap();
        assert_eq!(t.to_string(), "4bf92f3577b34da6a3ce929d0e0e4736");
        assert_eq!(s.to_string(), "00f067aa0ba902b7");
        assert!(f.is_sampled());
        assert!(
            parse_traceparent("00-00000000000000000000000000000000-00f067aa0ba902b7-01").is_none()
        );
        assert!(parse_traceparent("garbage").is_none());
    }
}
