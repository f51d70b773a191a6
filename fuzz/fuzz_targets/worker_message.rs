//! Arbitrary bytes decoded as the worker stream's `orbit.v1.WorkerMessage` (as tonic decodes
//! each frame), then through the frontend's own checks of a message
//! (`orbit_frontend::check_message`: hello validation, token and payload conversion, size
//! limits). A refusal is fine; a panic is a finding. Accepted payloads must be within the
//! limit.
#![no_main]

use libfuzzer_sys::fuzz_target;
use orbit_api::v1::WorkerMessage;
use orbit_frontend::{check_message, Checked};
use prost::Message;

/// A small limit, so the size checks are reached by small inputs.
const MAX_PAYLOAD_BYTES: u64 = 512;

fuzz_target!(|data: &[u8]| {
    let Ok(message) = WorkerMessage::decode(data) else { return };
    match check_message(message, MAX_PAYLOAD_BYTES) {
        Ok(Checked::Complete { output: Some(output), .. }) => {
            let size = serde_json::to_vec(&output).map_or(0, |v| v.len() as u64);
            assert!(size <= MAX_PAYLOAD_BYTES, "an accepted output is within the limit");
        }
        Ok(_) | Err(_) => {}
    }
});
