//! Deterministic trace and span ids, W3C `traceparent`, and the sampling decision.
//!
//! Every id an execution's spans use is derived from its execution id with SHA-256, so any
//! process (an owner after a takeover, a restarted `orbit dev`, a frontend that hands a task
//! to a worker) joins the same trace without asking anybody: the trace id is the first 16
//! bytes of `SHA-256(root id)`, the execution's root span id bytes 16..24 of
//! `SHA-256(execution_id)`, and a step attempt's span id the first 8 bytes of
//! `SHA-256(execution_id \0 step \0 attempt)`. The root id is the execution id up to its
//! first `/` (a child's id is `<parent>/<unit>`, and a root's id has no `/`), so a child and
//! all its descendants are spans of their root's trace: a saga with children is one trace.

use opentelemetry::trace::{SpanId, TraceFlags, TraceId};
use sha2::{Digest, Sha256};

fn digest(execution_id: &str) -> [u8; 32] {
    Sha256::digest(execution_id.as_bytes()).into()
}

fn nonzero_span(bytes: [u8; 8]) -> SpanId {
    // An all-zero id is invalid in W3C trace context; one in 2^64, but never emit it.
    if bytes == [0; 8] {
        SpanId::from_bytes([0, 0, 0, 0, 0, 0, 0, 1])
    } else {
        SpanId::from_bytes(bytes)
    }
}

/// The trace id of an execution: the first 16 bytes of `SHA-256(root id)`, the root id
/// being the execution id up to its first `/` (see the module docs): children share their
/// root's trace.
#[must_use]
pub fn trace_id(execution_id: &str) -> TraceId {
    let root = execution_id.split('/').next().unwrap_or(execution_id);
    let d = digest(root);
    let mut b = [0u8; 16];
    b.copy_from_slice(&d[..16]);
    TraceId::from_bytes(b)
}

/// The span id of the execution's root span (`workflow …`): bytes 16..24 of the digest.
#[must_use]
pub fn root_span_id(execution_id: &str) -> SpanId {
    let d = digest(execution_id);
    let mut b = [0u8; 8];
    b.copy_from_slice(&d[16..24]);
    nonzero_span(b)
}

/// The span id of one step attempt (`attempt …`), the parent of the worker's task span.
#[must_use]
pub fn attempt_span_id(execution_id: &str, step: &str, attempt: u32) -> SpanId {
    let mut h = Sha256::new();
    h.update(execution_id.as_bytes());
    h.update([0]);
    h.update(step.as_bytes());
    h.update([0]);
    h.update(attempt.to_be_bytes());
    let d: [u8; 32] = h.finalize().into();
    let mut b = [0u8; 8];
    b.copy_from_slice(&d[..8]);
    nonzero_span(b)
}

/// Whether a trace is sampled at `ratio`: decided on the trace id alone (the
/// `TraceIdRatioBased` rule of the OpenTelemetry SDK), so every process agrees.
#[must_use]
pub fn sampled(trace_id: TraceId, ratio: f64) -> bool {
    if ratio >= 1.0 {
        return true;
    }
    let bound = (ratio.max(0.0) * (1u64 << 63) as f64) as u64;
    let bytes = trace_id.to_bytes();
    let mut low = [0u8; 8];
    low.copy_from_slice(&bytes[8..]);
    (u64::from_be_bytes(low) >> 1) < bound
}

/// The trace flags for a trace at `ratio`.
#[must_use]
pub fn flags(trace_id: TraceId, ratio: f64) -> TraceFlags {
    if sampled(trace_id, ratio) {
        TraceFlags::SAMPLED
    } else {
        TraceFlags::default()
    }
}

/// A W3C `traceparent` value: `00-<trace id>-<span id>-<flags>`.
#[must_use]
pub fn format_traceparent(trace_id: TraceId, span_id: SpanId, flags: TraceFlags) -> String {
    format!("00-{trace_id}-{span_id}-{:02x}", flags.to_u8())
}

/// Parses a W3C `traceparent` (version 00 and later versions' first four fields); `None`
/// when it is malformed or names an invalid (all-zero) id.
#[must_use]
pub fn parse_traceparent(value: &str) -> Option<(TraceId, SpanId, TraceFlags)> {
    let mut parts = value.trim().split('-');
    let version = parts.next()?;
    let (trace, span, flags) = (parts.next()?, parts.next()?, parts.next()?);
    if version.len() != 2 || version == "ff" || trace.len() != 32 || span.len() != 16 {
        return None;
    }
    if version == "00" && parts.next().is_some() {
        return None;
    }
    let trace = TraceId::from_hex(trace).ok().filter(|t| *t != TraceId::INVALID)?;
    let span = SpanId::from_hex(span).ok().filter(|s| *s != SpanId::INVALID)?;
    let flags = u8::from_str_radix(flags, 16).ok()?;
    Some((trace, span, TraceFlags::new(flags)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_are_deterministic_and_distinct() {
        assert_eq!(trace_id("order-1"), trace_id("order-1"));
        assert_ne!(trace_id("order-1"), trace_id("order-2"));
        assert_eq!(attempt_span_id("e", "charge", 1), attempt_span_id("e", "charge", 1));
        assert_ne!(attempt_span_id("e", "charge", 1), attempt_span_id("e", "charge", 2));
        assert_ne!(attempt_span_id("e", "a", 1), root_span_id("e"));
        // The trace id is SHA-256's first 16 bytes (documented in docs/operations.md).
        assert_eq!(trace_id("abc").to_string(), "ba7816bf8f01cfea414140de5dae2223");
    }

    #[test]
    fn children_share_their_roots_trace_but_not_its_spans() {
        assert_eq!(trace_id("abc/pay"), trace_id("abc"));
        assert_eq!(trace_id("abc/run2/pay/refund[3]"), trace_id("abc"));
        assert_ne!(root_span_id("abc/pay"), root_span_id("abc"));
        assert_ne!(attempt_span_id("abc/pay", "a", 1), attempt_span_id("abc", "a", 1));
    }

    #[test]
    fn traceparent_round_trips_and_rejects_garbage() {
        let t = trace_id("x");
        let s = attempt_span_id("x", "s", 3);
        let tp = format_traceparent(t, s, TraceFlags::SAMPLED);
        assert_eq!(parse_traceparent(&tp), Some((t, s, TraceFlags::SAMPLED)));
        assert!(tp.starts_with("00-") && tp.ends_with("-01") && tp.len() == 55);
        for bad in [
            "",
            "00-abc",
            "00-00000000000000000000000000000000-00f067aa0ba902b7-01",
            "ff-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-extra",
        ] {
            assert_eq!(parse_traceparent(bad), None, "{bad}");
        }
    }

    #[test]
    fn sampling_follows_the_ratio_and_the_trace_id_alone() {
        let ids: Vec<TraceId> = (0..2000).map(|i| trace_id(&format!("e-{i}"))).collect();
        assert!(ids.iter().all(|t| sampled(*t, 1.0)));
        assert!(!ids.iter().any(|t| sampled(*t, 0.0)));
        let hits = ids.iter().filter(|t| sampled(**t, 0.1)).count();
        assert!((100..=300).contains(&hits), "{hits} of 2000 at 10 %");
        assert!(ids.iter().all(|t| sampled(*t, 0.1) == sampled(*t, 0.1)));
    }
}
