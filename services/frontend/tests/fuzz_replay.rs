//! Replays the `worker_message` fuzz inputs kept in the repository (`fuzz/corpus/` seeds,
//! `fuzz/artifacts/` crash repros): each decodes as an `orbit.v1.WorkerMessage` (or not) and
//! goes through the frontend's checks of a stream message without panicking.

use orbit_api::v1::WorkerMessage;
use orbit_frontend::{check_message, Checked};
use prost::Message;
use std::path::PathBuf;

#[test]
fn worker_message_inputs_are_checked_without_panics() {
    let fuzz = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../fuzz");
    let mut seen = 0;
    let mut accepted = 0;
    for dir in ["corpus", "artifacts"] {
        let Ok(entries) = std::fs::read_dir(fuzz.join(dir).join("worker_message")) else {
            continue;
        };
        for entry in entries.flatten() {
            let bytes = std::fs::read(entry.path()).expect("read a fuzz input");
            seen += 1;
            let Ok(message) = WorkerMessage::decode(bytes.as_slice()) else { continue };
            match check_message(message, 512) {
                Ok(Checked::Complete { output: Some(out), .. }) => {
                    assert!(serde_json::to_vec(&out).expect("json").len() <= 512);
                    accepted += 1;
                }
                Ok(_) => accepted += 1,
                Err(_) => {}
            }
        }
    }
    assert!(seen >= 6, "the seed corpus is there: {seen}");
    assert!(accepted >= 6, "the seeds are valid messages: {accepted}");
}
