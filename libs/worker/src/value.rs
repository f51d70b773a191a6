//! `google.protobuf.Value` ⇄ `serde_json::Value`.
//!
//! Payloads travel as `google.protobuf.Value`, whose numbers are doubles. Going to JSON, a
//! whole number within ±2^53 becomes a JSON integer (so `1500` stays `1500`, not `1500.0`);
//! other finite numbers stay floats; NaN and ±infinity (not representable in JSON) become
//! `null`. An unset value (or an unset `kind`) reads as `null`. Going to protobuf, every
//! JSON number becomes a double (integers beyond ±2^53 lose precision, as documented in
//! `common.proto`).

use prost_types::value::Kind;
use prost_types::{ListValue, Struct, Value as PbValue};
use serde_json::{Map, Number, Value as Json};

/// 2^53: the largest magnitude below which every integer is exactly representable as f64.
const MAX_SAFE_INTEGER: f64 = 9_007_199_254_740_992.0;

/// A non-retryable failure with the payload code (`PAYLOAD_TOO_LARGE`, `PAYLOAD_TOO_DEEP`)
/// when `json` is over the server's default `max_payload_bytes` or nested deeper than the
/// depth limit (see `orbit_payload`): such a value would be refused by the server, or not
/// even decode there. A workflow's own, stricter limit is still checked by the server.
pub(crate) fn refused(json: &Json, what: &str) -> Option<crate::TaskFailure> {
    orbit_payload::check(json, Some(orbit_payload::DEFAULT_MAX_PAYLOAD_BYTES))
        .err()
        .map(|v| crate::TaskFailure::fatal(v.code(), v.message(what)))
}

/// Converts a JSON value to a protobuf value.
pub(crate) fn to_proto(json: &Json) -> PbValue {
    let kind = match json {
        Json::Null => Kind::NullValue(0),
        Json::Bool(b) => Kind::BoolValue(*b),
        Json::Number(n) => Kind::NumberValue(n.as_f64().unwrap_or_default()),
        Json::String(s) => Kind::StringValue(s.clone()),
        Json::Array(items) => {
            Kind::ListValue(ListValue { values: items.iter().map(to_proto).collect() })
        }
        Json::Object(fields) => Kind::StructValue(Struct {
            fields: fields.iter().map(|(k, v)| (k.clone(), to_proto(v))).collect(),
        }),
    };
    PbValue { kind: Some(kind) }
}

/// Converts a JSON value to an optional protobuf value: `null` becomes unset.
pub(crate) fn to_proto_opt(json: &Json) -> Option<PbValue> {
    if json.is_null() {
        None
    } else {
        Some(to_proto(json))
    }
}

/// Converts a protobuf value to JSON.
pub(crate) fn from_proto(value: &PbValue) -> Json {
    match &value.kind {
        None | Some(Kind::NullValue(_)) => Json::Null,
        Some(Kind::BoolValue(b)) => Json::Bool(*b),
        Some(Kind::NumberValue(n)) => number(*n),
        Some(Kind::StringValue(s)) => Json::String(s.clone()),
        Some(Kind::ListValue(list)) => Json::Array(list.values.iter().map(from_proto).collect()),
        Some(Kind::StructValue(s)) => Json::Object(
            s.fields.iter().map(|(k, v)| (k.clone(), from_proto(v))).collect::<Map<_, _>>(),
        ),
    }
}

/// Converts an optional protobuf value to JSON: unset reads as `null`.
pub(crate) fn from_proto_opt(value: Option<&PbValue>) -> Json {
    value.map_or(Json::Null, from_proto)
}

/// A double as JSON: whole numbers within ±2^53 as integers, other finite numbers as
/// floats, non-finite numbers as `null`.
fn number(n: f64) -> Json {
    if n.is_finite() && n.fract() == 0.0 && n.abs() <= MAX_SAFE_INTEGER {
        // Exact: whole and within ±2^53, so the cast neither truncates nor saturates.
        Json::from(n as i64)
    } else {
        Number::from_f64(n).map_or(Json::Null, Json::Number)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use serde_json::json;

    #[test]
    fn whole_numbers_become_integers() {
        assert_eq!(from_proto(&to_proto(&json!(1500))), json!(1500));
        assert_eq!(from_proto(&to_proto(&json!(1500.0))), json!(1500));
        assert_eq!(from_proto(&to_proto(&json!(-3))), json!(-3));
        assert_eq!(from_proto(&to_proto(&json!(-0.0))), json!(0));
        assert!(from_proto(&to_proto(&json!(7))).is_i64());
    }

    #[test]
    fn limits_of_exact_integers() {
        let limit = 9_007_199_254_740_992_i64; // 2^53
        assert_eq!(from_proto(&to_proto(&json!(limit))), json!(limit));
        assert_eq!(from_proto(&to_proto(&json!(-limit))), json!(-limit));
        // Beyond 2^53 the number stays a float.
        let big = from_proto(&PbValue { kind: Some(Kind::NumberValue(2f64.powi(60))) });
        assert!(big.is_f64());
    }

    #[test]
    fn fractions_stay_floats() {
        assert_eq!(from_proto(&to_proto(&json!(1.5))), json!(1.5));
        assert_eq!(from_proto(&to_proto(&json!(-0.25))), json!(-0.25));
    }

    #[test]
    fn non_finite_numbers_become_null() {
        for n in [f64::NAN, f64::INFINITY, f64::NEG_INFINITY] {
            assert_eq!(from_proto(&PbValue { kind: Some(Kind::NumberValue(n)) }), Json::Null);
        }
    }

    #[test]
    fn values_over_the_payload_limits_are_refused_with_the_code() {
        let deep = (0..=orbit_payload::MAX_DEPTH).fold(json!(1), |v, _| json!([v]));
        let failure = refused(&deep, "output").expect("too deep");
        assert_eq!((failure.code.as_str(), failure.retryable), ("PAYLOAD_TOO_DEEP", false));
        // 300k small numbers: 600 kB of JSON, 3.3 MB as protobuf.
        let wide = Json::Array(vec![json!(1); 300_000]);
        assert_eq!(refused(&wide, "output").expect("too large").code, "PAYLOAD_TOO_LARGE");
        assert!(refused(&json!({"ok": [1, 2]}), "output").is_none());
    }

    #[test]
    fn unset_reads_as_null() {
        assert_eq!(from_proto(&PbValue { kind: None }), Json::Null);
        assert_eq!(from_proto_opt(None), Json::Null);
        assert_eq!(to_proto_opt(&Json::Null), None);
        assert_eq!(to_proto_opt(&json!(1)), Some(to_proto(&json!(1))));
    }

    #[test]
    fn nested_document_round_trips() {
        let doc = json!({
            "order_id": "o-1",
            "amount": 1500,
            "ratio": 0.5,
            "ok": true,
            "none": null,
            "items": [{"sku": "a"}, {"sku": "b", "qty": 2}],
            "empty": {},
            "list": []
        });
        assert_eq!(from_proto(&to_proto(&doc)), doc);
    }

    fn arb_json() -> impl Strategy<Value = Json> {
        let leaf = prop_oneof![
            Just(Json::Null),
            any::<bool>().prop_map(Json::Bool),
            (-(1i64 << 53)..=(1i64 << 53)).prop_map(Json::from),
            (-1.0e12f64..1.0e12f64)
                .prop_filter("fractional", |f| f.fract() != 0.0)
                .prop_map(Json::from),
            ".{0,12}".prop_map(Json::String),
        ];
        leaf.prop_recursive(4, 48, 6, |inner| {
            prop_oneof![
                prop::collection::vec(inner.clone(), 0..6).prop_map(Json::Array),
                prop::collection::btree_map(".{0,8}", inner, 0..6)
                    .prop_map(|m| Json::Object(m.into_iter().collect())),
            ]
        })
    }

    proptest! {
        #[test]
        fn json_round_trips(doc in arb_json()) {
            prop_assert_eq!(from_proto(&to_proto(&doc)), doc);
        }

        #[test]
        fn proto_numbers_round_trip_through_json(n in any::<f64>().prop_filter("finite", |f| f.is_finite())) {
            let back = to_proto(&from_proto(&PbValue { kind: Some(Kind::NumberValue(n)) }));
            prop_assert_eq!(back.kind, Some(Kind::NumberValue(if n == 0.0 { 0.0 } else { n })));
        }
    }
}
