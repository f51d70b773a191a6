//! The stream's checks of one worker message, without IO: what [`super::session`] and
//! [`super::results`] verify and convert before anything touches the store or an owner.
//!
//! Exposed as [`check_message`] so the fuzz target `worker_message` (see `fuzz/`) drives the
//! frontend's own conversion and validation with arbitrary decoded messages. It mirrors the
//! order of the handlers' checks (token, payload conversion, size); the error conversion,
//! [`error_json`], is the one `results::fail` itself calls.

use super::session;
use crate::error::{invalid, ApiResult};
use crate::validate;
use orbit_api::v1::worker_message::Kind;
use orbit_api::v1::WorkerMessage;
use orbit_server_kit::payload::proto_to_json;
use serde_json::{json, Value};

/// What a valid worker message asks the frontend to do, in domain terms.
#[derive(Debug, Clone, PartialEq)]
pub enum Checked {
    /// A session may open for this worker id and these task names.
    Hello {
        /// The validated worker id.
        worker_id: String,
        /// The distinct task names it serves.
        tasks: Vec<String>,
    },
    /// More credits.
    Credits(u32),
    /// Stop sending tasks.
    Drain,
    /// Liveness of these tokens, with details to record (if any).
    Heartbeat {
        /// The tokens the worker still runs.
        tokens: Vec<String>,
        /// Progress details, as JSON.
        details: Option<Value>,
    },
    /// A result to record.
    Complete {
        /// The task token.
        token: String,
        /// The output, or `None` when it exceeds the payload limit (then recorded as a
        /// non-retryable `PAYLOAD_TOO_LARGE` failure).
        output: Option<Value>,
    },
    /// A failure to record.
    Fail {
        /// The task token.
        token: String,
        /// The inbox entry's error object.
        error: Value,
    },
}

/// Checks one worker message as the session does (`hello` as the first message, anything
/// else after it), with the frontend's `max_payload_bytes`.
///
/// # Errors
/// The status the stream would answer with: `PROTOCOL_ERROR` for an empty message,
/// `INVALID_ARGUMENT` with the offending field, `PAYLOAD_TOO_LARGE`.
pub fn check_message(
    message: WorkerMessage,
    max_payload_bytes: u64,
) -> Result<Checked, tonic::Status> {
    let Some(kind) = message.kind else {
        return Err(crate::error::err(
            orbit_server_kit::ErrorCode::ProtocolError,
            "empty worker message",
        ));
    };
    Ok(match kind {
        Kind::Hello(hello) => {
            let s = session::open(&hello)?;
            Checked::Hello { worker_id: s.worker_id.clone(), tasks: s.task_names.clone() }
        }
        Kind::Credits(c) => Checked::Credits(c.n),
        Kind::Drain(_) => Checked::Drain,
        Kind::Heartbeat(hb) => {
            let details = match hb.details {
                None => None,
                Some(d) => {
                    let d = proto_to_json(d).map_err(|e| invalid("details", e.to_string()))?;
                    validate::check_size("details", &d, max_payload_bytes)?;
                    Some(d)
                }
            };
            Checked::Heartbeat { tokens: hb.tokens, details }
        }
        Kind::Complete(c) => {
            let token = validate::id("token", &c.token)?.to_string();
            let output = c
                .output
                .map(proto_to_json)
                .transpose()
                .map_err(|e| invalid("output", e.to_string()))?
                .unwrap_or(Value::Null);
            let fits = validate::check_size("output", &output, max_payload_bytes).is_ok();
            Checked::Complete { token, output: fits.then_some(output) }
        }
        Kind::Fail(f) => {
            Checked::Fail { token: f.token.clone(), error: fail_error(f, max_payload_bytes)? }
        }
    })
}

/// A `fail` message's error object, as `results::fail` records it.
fn fail_error(f: orbit_api::v1::worker_message::Fail, max_payload_bytes: u64) -> ApiResult<Value> {
    validate::id("token", &f.token)?;
    let (_, error_json) = error_json(f.error)?;
    validate::check_size("error", &error_json, max_payload_bytes)?;
    Ok(error_json)
}

/// A worker's task error as the inbox entry's error object (with the worker's code), after
/// the checks both the stream and the unary `FailTask` make: present, with a code, details
/// convertible. The one conversion `results::fail` records and the fuzz target drives.
pub(crate) fn error_json(error: Option<orbit_api::v1::TaskError>) -> ApiResult<(String, Value)> {
    let Some(error) = error else { return Err(invalid("error", "is required")) };
    if error.code.is_empty() {
        return Err(invalid("error.code", "is required"));
    }
    let error = orbit_wire::task_error_from_wire(error)
        .map_err(|e| invalid("error.details", e.to_string()))?;
    let value = json!({
        "code": error.code,
        "message": error.message,
        "retryable": error.retryable,
        "details": error.details,
    });
    Ok((error.code, value))
}

#[cfg(test)]
mod tests {
    use super::*;
    use orbit_api::v1::worker_message::{Complete, Fail, Hello};
    use orbit_api::v1::{TaskError, TaskRef};

    fn check(kind: Kind) -> Result<Checked, tonic::Status> {
        check_message(WorkerMessage { kind: Some(kind) }, 64)
    }

    #[test]
    fn messages_are_checked_as_the_stream_does() {
        assert!(check_message(WorkerMessage { kind: None }, 64).is_err());
        let hello = Hello {
            worker_id: "w".into(),
            tasks: vec![TaskRef { name: "t".into(), version: "1".into() }],
            max_concurrency: 1,
            ..Hello::default()
        };
        assert_eq!(
            check(Kind::Hello(hello.clone())).unwrap(),
            Checked::Hello { worker_id: "w".into(), tasks: vec!["t".into()] }
        );
        let no_tasks = Hello { tasks: Vec::new(), ..hello };
        assert!(check(Kind::Hello(no_tasks)).unwrap_err().message().contains("hello.tasks"));
        let big = orbit_server_kit::payload::json_to_proto(json!("x".repeat(100)));
        let c = Complete { token: "t1".into(), output: Some(big) };
        assert_eq!(
            check(Kind::Complete(c)).unwrap(),
            Checked::Complete { token: "t1".into(), output: None }
        );
        let f = Fail { token: "t1".into(), error: Some(TaskError::default()) };
        assert!(check(Kind::Fail(f)).unwrap_err().message().contains("error.code"));
    }
}
