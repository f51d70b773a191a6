//! Payload conversion at the edge (`libs/server-kit/src/payload.rs`, `libs/wire`):
//!
//! * bytes decoded as a `google.protobuf.Value` → JSON → Value → JSON must give the same
//!   JSON (what a worker sends is what the engine sees, and back);
//! * bytes as a JSON document → `google.protobuf.Value` → encoded → decoded → JSON must give
//!   the same JSON, for values shallow enough for protobuf's decode limit (100 nested
//!   messages, about 3 per JSON level);
//! * bytes decoded as an `orbit.v1.TaskError` → domain error → wire → domain again must be
//!   stable.
#![no_main]

use libfuzzer_sys::fuzz_target;
use orbit_server_kit::payload::{json_to_proto, proto_to_json};
use prost::Message;
use serde_json::Value;

/// JSON levels below which an encoded `Value` must decode again.
const DECODABLE_DEPTH: usize = 30;

fn depth(v: &Value) -> usize {
    // Iterative: the input is user-sized.
    let mut deepest = 0;
    let mut stack = vec![(v, 1usize)];
    while let Some((v, d)) = stack.pop() {
        deepest = deepest.max(d);
        match v {
            Value::Array(a) => stack.extend(a.iter().map(|x| (x, d + 1))),
            Value::Object(o) => stack.extend(o.values().map(|x| (x, d + 1))),
            _ => {}
        }
    }
    deepest
}

fuzz_target!(|data: &[u8]| {
    let (selector, rest) = match data.split_first() {
        Some((s, rest)) => (*s, rest),
        None => return,
    };
    match selector % 3 {
        0 => {
            let Ok(value) = prost_types::Value::decode(rest) else { return };
            let Ok(json) = proto_to_json(value) else { return };
            let back = proto_to_json(json_to_proto(json.clone()))
                .expect("a converted value converts back");
            assert_eq!(back, json);
        }
        1 => {
            let Ok(json) = serde_json::from_slice::<Value>(rest) else { return };
            let encoded = json_to_proto(json.clone()).encode_to_vec();
            let decoded = prost_types::Value::decode(encoded.as_slice());
            if depth(&json) <= DECODABLE_DEPTH {
                let decoded = decoded.expect("an encoded shallow value decodes");
                let back = proto_to_json(decoded).expect("a decoded value converts");
                // JSON numbers travel as doubles: compare through f64 where they differ.
                if !has_big_integers(&json) {
                    assert_eq!(back, normalise(&json));
                }
            }
        }
        _ => {
            let Ok(wire) = orbit_api::v1::TaskError::decode(rest) else { return };
            let Ok(error) = orbit_wire::task_error_from_wire(wire) else { return };
            let again = orbit_wire::task_error_from_wire(orbit_wire::task_error(&error))
                .expect("a converted error converts back");
            assert_eq!(again, error);
        }
    }
});

/// Integers beyond 2^53 lose precision as doubles, by design of `google.protobuf.Value`.
fn has_big_integers(v: &Value) -> bool {
    let mut stack = vec![v];
    while let Some(v) = stack.pop() {
        match v {
            Value::Number(n) => {
                if n.as_f64().is_none_or(|f| f.abs() > 9_007_199_254_740_992.0) {
                    return true;
                }
            }
            Value::Array(a) => stack.extend(a),
            Value::Object(o) => stack.extend(o.values()),
            _ => {}
        }
    }
    false
}

/// `v` as it comes back from a double: integral numbers as the converter writes them.
fn normalise(v: &Value) -> Value {
    proto_to_json(json_to_proto(v.clone())).unwrap_or(Value::Null)
}
