//! The stream's checks of one worker message, without IO: what [`super::stream`],
//! [`super::inbound`] and [`super::results`] verify and convert before anything touches the
//! store or an owner, the hello's included ([`open`]).
//!
//! Exposed as [`check_message`] so the fuzz target `worker_message` (see `fuzz/`) drives the
//! frontend's own conversion and validation with arbitrary decoded messages. It mirrors the
//! order of the handlers' checks (token, payload conversion, size); the error conversion,
//! [`task_error`], and the error object the limits are checked on, [`error_json`], are the
//! ones `results::fail` itself calls. Everything here answers an [`OrbitError`]: the
//! stream turns it into its status when it sends it.

use super::session::{Session, WorkerMeta};
use crate::validate;
use orbit_api::v1::worker_message::{Hello, Kind};
use orbit_api::v1::WorkerMessage;
use orbit_engine::TaskError;
use orbit_server_kit::payload::{check_limits, proto_to_json};
use orbit_server_kit::validate::{self as rules, invalid};
use orbit_server_kit::{ErrorCode, OrbitError};
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
/// The error the stream would answer with: `PROTOCOL_ERROR` for an empty message,
/// `INVALID_ARGUMENT` with the offending field, `PAYLOAD_TOO_LARGE`, `PAYLOAD_TOO_DEEP`.
pub fn check_message(
    message: WorkerMessage,
    max_payload_bytes: u64,
) -> Result<Checked, OrbitError> {
    let Some(kind) = message.kind else {
        return Err(OrbitError::new(ErrorCode::ProtocolError, "empty worker message"));
    };
    Ok(match kind {
        Kind::Hello(hello) => {
            let s = open(&hello)?;
            Checked::Hello { worker_id: s.worker_id.clone(), tasks: s.task_names.clone() }
        }
        Kind::Credits(c) => Checked::Credits(c.n),
        Kind::Drain(_) => Checked::Drain,
        Kind::Heartbeat(hb) => {
            let details = match hb.details {
                None => None,
                Some(d) => {
                    let d = proto_to_json(d).map_err(|e| invalid("details", e.to_string()))?;
                    check_limits("details", &d, max_payload_bytes)?;
                    Some(d)
                }
            };
            Checked::Heartbeat { tokens: hb.tokens, details }
        }
        Kind::Complete(c) => {
            let token = rules::id("token", &c.token)?.to_string();
            let output = c
                .output
                .map(proto_to_json)
                .transpose()
                .map_err(|e| invalid("output", e.to_string()))?
                .unwrap_or(Value::Null);
            let fits = check_limits("output", &output, max_payload_bytes).is_ok();
            Checked::Complete { token, output: fits.then_some(output) }
        }
        Kind::Fail(f) => {
            Checked::Fail { token: f.token.clone(), error: fail_error(f, max_payload_bytes)? }
        }
    })
}

/// Validates a hello into a session, not registered yet (under a fresh random id): the one
/// hello check both the stream and [`check_message`] run.
pub(super) fn open(hello: &Hello) -> Result<Session, OrbitError> {
    let worker_id = rules::id("hello.worker_id", &hello.worker_id)?;
    if hello.tasks.is_empty() {
        return Err(invalid("hello.tasks", "at least one task is required"));
    }
    if hello.max_concurrency == 0 {
        return Err(invalid("hello.max_concurrency", "must be at least 1"));
    }
    let mut names = Vec::new();
    for task in &hello.tasks {
        let name = rules::id("hello.tasks.name", &task.name)?;
        if !names.iter().any(|n| n == name) {
            names.push(name.to_string());
        }
    }
    let id = format!("s-{}", validate::random_hex(12)?);
    let meta = WorkerMeta {
        runtime: hello.runtime.clone(),
        sdk: hello.sdk.clone(),
        tasks: hello.tasks.iter().map(|t| (t.name.clone(), t.version.clone())).collect(),
        labels: hello.labels.clone(),
    };
    Ok(Session::new(id, worker_id.to_string(), names, hello.max_concurrency).with_meta(meta))
}

/// A `fail` message's error object, as `results::fail` checks it.
fn fail_error(
    f: orbit_api::v1::worker_message::Fail,
    max_payload_bytes: u64,
) -> Result<Value, OrbitError> {
    rules::id("token", &f.token)?;
    let error = error_json(&task_error(f.error)?);
    check_limits("error", &error, max_payload_bytes)?;
    Ok(error)
}

/// A worker's task error in domain terms, after the checks both the stream and the unary
/// `FailTask` make: present, with a code, details convertible. The one conversion
/// `results::fail` records and the fuzz target drives.
pub(crate) fn task_error(error: Option<orbit_api::v1::TaskError>) -> Result<TaskError, OrbitError> {
    let Some(error) = error else { return Err(invalid("error", "is required")) };
    if error.code.is_empty() {
        return Err(invalid("error.code", "is required"));
    }
    orbit_wire::task_error_from_wire(error).map_err(|e| invalid("error.details", e.to_string()))
}

/// A task error as the object its payload limits are checked on (`details` null when
/// there are none): one measure for the stream's check and `results::fail`.
pub(crate) fn error_json(error: &TaskError) -> Value {
    json!({
        "code": error.code,
        "message": error.message,
        "retryable": error.retryable,
        "details": error.details,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use orbit_api::v1::worker_message::{Complete, Fail, Hello};
    use orbit_api::v1::{TaskError, TaskRef};

    fn check(kind: Kind) -> Result<Checked, OrbitError> {
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
        assert!(check(Kind::Hello(no_tasks)).unwrap_err().message.contains("hello.tasks"));
        let big = orbit_server_kit::payload::json_to_proto(json!("x".repeat(100)));
        let c = Complete { token: "t1".into(), output: Some(big) };
        assert_eq!(
            check(Kind::Complete(c)).unwrap(),
            Checked::Complete { token: "t1".into(), output: None }
        );
        let f = Fail { token: "t1".into(), error: Some(TaskError::default()) };
        assert!(check(Kind::Fail(f)).unwrap_err().message.contains("error.code"));
    }
}
