//! Conversions between wire payload and time types and the domain's JSON and milliseconds.
//!
//! Payloads are `google.protobuf.Value` on the wire and [`serde_json::Value`] in the
//! domain; times are `Timestamp` / `Duration` on the wire and `u64` milliseconds (since
//! the Unix epoch, or elapsed) in the domain. Convert once, at the edge.
//!
//! Invariants:
//! - Numbers are doubles on the wire. A JSON integer within ±2^53 converts to an exactly
//!   equal double, and a whole double within ±2^53 converts back to a JSON integer, so such
//!   integers round-trip exactly. Larger integers are rounded to the nearest double.
//! - Doubles that JSON cannot represent (NaN, ±infinity) are rejected, never silently
//!   turned into `null`.
//! - Timestamps and durations are truncated to whole milliseconds; negative ones and ones
//!   with out-of-range nanos are rejected.
//! - Payload limits (size and nesting depth) live in `orbit_payload`; [`check_limits`] maps
//!   a violation to an API error, and [`fit`] / [`fit_fields`] are what reads send.

use crate::error::{ErrorCode, FieldViolation, OrbitError};
pub use orbit_payload::{fit, fit_fields, DEFAULT_MAX_PAYLOAD_BYTES, MAX_DEPTH, TRUNCATED_KEY};
use prost_types::value::Kind;
use prost_types::{ListValue, Struct};
use serde_json::{Map, Number, Value as Json};

/// The largest integer magnitude a double holds exactly together with all smaller ones.
pub const MAX_SAFE_INTEGER: i64 = (1 << 53) - 1;

/// A wire payload or time that has no domain equivalent.
#[derive(Clone, Debug, PartialEq, thiserror::Error)]
pub enum PayloadError {
    /// A number is NaN or infinite, which JSON cannot represent.
    #[error("number {0} is not finite and cannot be represented in JSON")]
    NonFiniteNumber(f64),
    /// A timestamp is before the Unix epoch or a duration is negative.
    #[error("{0} is negative")]
    Negative(&'static str),
    /// A timestamp or duration has nanos outside `0..1_000_000_000`.
    #[error("{0} has nanos {1} outside 0..1000000000")]
    InvalidNanos(&'static str, i32),
    /// A timestamp or duration does not fit in `u64` milliseconds.
    #[error("{0} overflows u64 milliseconds")]
    Overflow(&'static str),
}

/// Converts a JSON value into a wire payload. Infallible: every JSON value has a
/// `google.protobuf.Value` form (integers beyond ±2^53 are rounded).
#[must_use]
pub fn json_to_proto(value: Json) -> prost_types::Value {
    let kind = match value {
        Json::Null => Kind::NullValue(0),
        Json::Bool(b) => Kind::BoolValue(b),
        // `as_f64` is `Some` for every `Number` without arbitrary precision.
        Json::Number(n) => Kind::NumberValue(n.as_f64().unwrap_or(f64::NAN)),
        Json::String(s) => Kind::StringValue(s),
        Json::Array(items) => {
            Kind::ListValue(ListValue { values: items.into_iter().map(json_to_proto).collect() })
        }
        Json::Object(map) => Kind::StructValue(json_object_to_struct(map)),
    };
    prost_types::Value { kind: Some(kind) }
}

/// Converts a JSON object into a `google.protobuf.Struct`.
#[must_use]
pub fn json_object_to_struct(map: Map<String, Json>) -> Struct {
    Struct { fields: map.into_iter().map(|(k, v)| (k, json_to_proto(v))).collect() }
}

/// An object as a `Struct` (a stored memo back on a request); `None` for any other value.
pub fn object_to_struct(value: Json) -> Option<Struct> {
    match value {
        Json::Object(map) => Some(json_object_to_struct(map)),
        _ => None,
    }
}

/// Converts a wire payload into JSON. A `Value` with no kind set reads as `null`.
///
/// # Errors
///
/// [`PayloadError::NonFiniteNumber`] for NaN or infinite numbers anywhere in the value.
pub fn proto_to_json(value: prost_types::Value) -> Result<Json, PayloadError> {
    Ok(match value.kind {
        None | Some(Kind::NullValue(_)) => Json::Null,
        Some(Kind::BoolValue(b)) => Json::Bool(b),
        Some(Kind::NumberValue(n)) => Json::Number(number_from_f64(n)?),
        Some(Kind::StringValue(s)) => Json::String(s),
        Some(Kind::ListValue(list)) => {
            Json::Array(list.values.into_iter().map(proto_to_json).collect::<Result<_, _>>()?)
        }
        Some(Kind::StructValue(s)) => Json::Object(struct_to_json_object(s)?),
    })
}

/// Converts a `google.protobuf.Struct` into a JSON object. Keys come out sorted, as the
/// wire form is a map.
///
/// # Errors
///
/// [`PayloadError::NonFiniteNumber`] for NaN or infinite numbers anywhere in the struct.
pub fn struct_to_json_object(s: Struct) -> Result<Map<String, Json>, PayloadError> {
    s.fields.into_iter().map(|(k, v)| Ok((k, proto_to_json(v)?))).collect()
}

/// A whole double within ±2^53 becomes a JSON integer; any other finite double stays a
/// JSON float.
fn number_from_f64(n: f64) -> Result<Number, PayloadError> {
    // Exact in f64: 2^53 - 1 has 53 significant bits.
    #[allow(clippy::cast_precision_loss)]
    const LIMIT: f64 = MAX_SAFE_INTEGER as f64;
    if n.fract() == 0.0 && n.abs() <= LIMIT {
        // Whole and within ±(2^53 - 1), so the cast is exact.
        #[allow(clippy::cast_possible_truncation)]
        return Ok(Number::from(n as i64));
    }
    Number::from_f64(n).ok_or(PayloadError::NonFiniteNumber(n))
}

/// Checks a payload against the depth limit and `max_bytes` (see `orbit_payload`), as a
/// request field named `field`.
///
/// # Errors
/// `PAYLOAD_TOO_DEEP` or `PAYLOAD_TOO_LARGE`, with a field violation at the offending path
/// (`input[0][0]...` for a too-deep value).
pub fn check_limits(field: &str, value: &Json, max_bytes: u64) -> Result<(), OrbitError> {
    orbit_payload::check(value, Some(max_bytes)).map(drop).map_err(|v| {
        let code = match v {
            orbit_payload::Violation::TooLarge { .. } => ErrorCode::PayloadTooLarge,
            orbit_payload::Violation::TooDeep { .. } => ErrorCode::PayloadTooDeep,
        };
        let message = v.message(field);
        OrbitError::new(code, message.clone()).with_violation(FieldViolation::new(
            v.path(field),
            code.as_str(),
            message,
        ))
    })
}

/// Converts epoch milliseconds into a wire timestamp.
#[must_use]
pub fn ms_to_timestamp(epoch_ms: u64) -> prost_types::Timestamp {
    let (seconds, nanos) = split_ms(epoch_ms);
    prost_types::Timestamp { seconds, nanos }
}

/// Converts a wire timestamp into epoch milliseconds, truncating sub-millisecond nanos.
///
/// # Errors
///
/// A timestamp before the epoch, with nanos outside `0..1e9`, or beyond `u64` ms.
pub fn timestamp_to_ms(ts: &prost_types::Timestamp) -> Result<u64, PayloadError> {
    join_ms("timestamp", ts.seconds, ts.nanos)
}

/// Converts optional epoch milliseconds into an optional wire timestamp (unset = `None`).
#[must_use]
pub fn opt_ms_to_timestamp(epoch_ms: Option<u64>) -> Option<prost_types::Timestamp> {
    epoch_ms.map(ms_to_timestamp)
}

/// Converts an optional wire timestamp into optional epoch milliseconds.
///
/// # Errors
///
/// As [`timestamp_to_ms`].
pub fn opt_timestamp_to_ms(
    ts: Option<&prost_types::Timestamp>,
) -> Result<Option<u64>, PayloadError> {
    ts.map(timestamp_to_ms).transpose()
}

/// Converts milliseconds into a wire duration.
#[must_use]
pub fn ms_to_duration(ms: u64) -> prost_types::Duration {
    let (seconds, nanos) = split_ms(ms);
    prost_types::Duration { seconds, nanos }
}

/// Converts a wire duration into milliseconds, truncating sub-millisecond nanos.
///
/// # Errors
///
/// A negative duration, nanos outside `0..1e9`, or a duration beyond `u64` ms.
pub fn duration_to_ms(d: &prost_types::Duration) -> Result<u64, PayloadError> {
    join_ms("duration", d.seconds, d.nanos)
}

fn split_ms(ms: u64) -> (i64, i32) {
    // u64::MAX / 1000 < i64::MAX and (ms % 1000) * 1e6 < 1e9 < i32::MAX: both casts fit.
    #[allow(clippy::cast_possible_wrap, clippy::cast_possible_truncation)]
    ((ms / 1000) as i64, ((ms % 1000) * 1_000_000) as i32)
}

fn join_ms(what: &'static str, seconds: i64, nanos: i32) -> Result<u64, PayloadError> {
    if !(0..1_000_000_000).contains(&nanos) {
        return Err(PayloadError::InvalidNanos(what, nanos));
    }
    let seconds = u64::try_from(seconds).map_err(|_| PayloadError::Negative(what))?;
    // Non-negative after the range check above.
    let millis = u64::from(nanos.unsigned_abs() / 1_000_000);
    seconds
        .checked_mul(1000)
        .and_then(|ms| ms.checked_add(millis))
        .ok_or(PayloadError::Overflow(what))
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use serde_json::json;

    /// JSON values whose numbers are integers within ±2^53 or arbitrary finite floats.
    fn arb_json() -> impl Strategy<Value = Json> {
        let leaf = prop_oneof![
            Just(Json::Null),
            any::<bool>().prop_map(Json::Bool),
            (-MAX_SAFE_INTEGER..=MAX_SAFE_INTEGER).prop_map(|i| json!(i)),
            any::<f64>()
                .prop_filter("finite, not whole", |f| f.is_finite() && f.fract() != 0.0)
                .prop_map(|f| json!(f)),
            ".*".prop_map(Json::String),
        ];
        leaf.prop_recursive(4, 64, 8, |inner| {
            prop_oneof![
                prop::collection::vec(inner.clone(), 0..8).prop_map(Json::Array),
                prop::collection::btree_map(".*", inner, 0..8)
                    .prop_map(|m| Json::Object(m.into_iter().collect())),
            ]
        })
    }

    /// Object keys come back sorted (the wire form is a map); compare key-order-free.
    fn sorted(v: Json) -> Json {
        match v {
            Json::Array(items) => Json::Array(items.into_iter().map(sorted).collect()),
            Json::Object(map) => {
                let mut entries: Vec<_> = map.into_iter().map(|(k, v)| (k, sorted(v))).collect();
                entries.sort_by(|a, b| a.0.cmp(&b.0));
                Json::Object(entries.into_iter().collect())
            }
            other => other,
        }
    }

    proptest! {
        #[test]
        fn json_round_trips(value in arb_json()) {
            let back = proto_to_json(json_to_proto(value.clone())).unwrap();
            prop_assert_eq!(sorted(back), sorted(value));
        }

        #[test]
        fn safe_integers_stay_integers(i in -MAX_SAFE_INTEGER..=MAX_SAFE_INTEGER) {
            let back = proto_to_json(json_to_proto(json!(i))).unwrap();
            prop_assert_eq!(back.as_i64(), Some(i));
        }

        #[test]
        fn timestamps_round_trip(ms in any::<u64>()) {
            prop_assert_eq!(timestamp_to_ms(&ms_to_timestamp(ms)), Ok(ms));
            prop_assert_eq!(opt_timestamp_to_ms(opt_ms_to_timestamp(Some(ms)).as_ref()), Ok(Some(ms)));
        }

        #[test]
        fn durations_round_trip(ms in any::<u64>()) {
            prop_assert_eq!(duration_to_ms(&ms_to_duration(ms)), Ok(ms));
        }
    }

    #[test]
    fn whole_doubles_read_as_integers() {
        let v = prost_types::Value { kind: Some(Kind::NumberValue(42.0)) };
        assert_eq!(proto_to_json(v).unwrap().to_string(), "42");
        let v = prost_types::Value { kind: Some(Kind::NumberValue(1.5)) };
        assert_eq!(proto_to_json(v).unwrap().to_string(), "1.5");
        // Beyond 2^53 a whole double stays a float rather than claim integer precision.
        let v = prost_types::Value { kind: Some(Kind::NumberValue(2f64.powi(60))) };
        assert!(proto_to_json(v).unwrap().is_f64());
    }

    #[test]
    fn non_finite_numbers_are_rejected() {
        for n in [f64::NAN, f64::INFINITY, f64::NEG_INFINITY] {
            let v = prost_types::Value {
                kind: Some(Kind::ListValue(ListValue {
                    values: vec![prost_types::Value { kind: Some(Kind::NumberValue(n)) }],
                })),
            };
            assert!(matches!(proto_to_json(v), Err(PayloadError::NonFiniteNumber(_))));
        }
    }

    #[test]
    fn unset_kind_reads_as_null() {
        assert_eq!(proto_to_json(prost_types::Value { kind: None }), Ok(Json::Null));
    }

    #[test]
    fn bad_times_are_rejected() {
        let ts = |seconds, nanos| prost_types::Timestamp { seconds, nanos };
        assert_eq!(timestamp_to_ms(&ts(-1, 0)), Err(PayloadError::Negative("timestamp")));
        assert_eq!(
            timestamp_to_ms(&ts(0, 1_000_000_000)),
            Err(PayloadError::InvalidNanos("timestamp", 1_000_000_000))
        );
        assert_eq!(timestamp_to_ms(&ts(i64::MAX, 0)), Err(PayloadError::Overflow("timestamp")));
        // Sub-millisecond precision is truncated.
        assert_eq!(timestamp_to_ms(&ts(1, 2_999_999)), Ok(1002));
        let d = prost_types::Duration { seconds: -5, nanos: 0 };
        assert_eq!(duration_to_ms(&d), Err(PayloadError::Negative("duration")));
        assert_eq!(opt_timestamp_to_ms(None), Ok(None));
    }
}
