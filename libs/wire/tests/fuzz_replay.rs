//! Replays the `payload` fuzz inputs kept in the repository (`fuzz/corpus/payload/` seeds,
//! `fuzz/artifacts/payload/` crash repros) through the target's checks: the first byte
//! picks the conversion (0: protobuf `Value` → JSON → back; 1: JSON → protobuf `Value` →
//! bytes → back; 2: `TaskError` wire → domain → back), the rest is its input.

use orbit_server_kit::payload::{json_to_proto, proto_to_json};
use prost::Message;
use serde_json::Value;
use std::path::PathBuf;

fn inputs(target: &str) -> Vec<(PathBuf, Vec<u8>)> {
    let fuzz = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../fuzz");
    let mut out = Vec::new();
    for dir in ["corpus", "artifacts"] {
        let Ok(entries) = std::fs::read_dir(fuzz.join(dir).join(target)) else { continue };
        for entry in entries.flatten() {
            if entry.path().is_file() {
                out.push((entry.path(), std::fs::read(entry.path()).expect("read a fuzz input")));
            }
        }
    }
    out.sort();
    out
}

#[test]
fn payload_inputs_convert_both_ways() {
    let inputs = inputs("payload");
    assert!(inputs.len() >= 5, "the seed corpus is there: {}", inputs.len());
    for (path, bytes) in inputs {
        let Some((selector, rest)) = bytes.split_first() else { continue };
        match selector % 3 {
            0 => {
                let Ok(value) = prost_types::Value::decode(rest) else { continue };
                let Ok(json) = proto_to_json(value) else { continue };
                let back = proto_to_json(json_to_proto(json.clone())).expect("converts back");
                assert_eq!(back, json, "{}", path.display());
            }
            1 => {
                let Ok(json) = serde_json::from_slice::<Value>(rest) else { continue };
                let encoded = json_to_proto(json).encode_to_vec();
                // Shallow seeds decode again; deep ones only must not crash the conversion.
                let _ = prost_types::Value::decode(encoded.as_slice()).map(proto_to_json);
            }
            _ => {
                let Ok(wire) = orbit_api::v1::TaskError::decode(rest) else { continue };
                let Ok(error) = orbit_wire::task_error_from_wire(wire) else { continue };
                let again = orbit_wire::task_error_from_wire(orbit_wire::task_error(&error))
                    .expect("converts back");
                assert_eq!(again, error, "{}", path.display());
            }
        }
    }
}
