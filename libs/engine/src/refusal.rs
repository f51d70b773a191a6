//! Why a command was refused ([`CommandError`], with the API code the caller receives),
//! and the payload checks that refuse a command or fail a task over the limits.

use crate::event::TaskError;
use orbit_codes::ErrorCode;
use orbit_definition::Limits;
use serde_json::Value;

/// Why a command was refused, with the API error code the caller receives.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{code}: {message}")]
pub struct CommandError {
    /// The code (`UNKNOWN_SIGNAL`, `EXECUTION_FINISHED`, ...).
    pub code: ErrorCode,
    /// What is wrong.
    pub message: String,
}

impl CommandError {
    /// Builds a refusal.
    pub fn new(code: ErrorCode, message: impl Into<String>) -> CommandError {
        CommandError { code, message: message.into() }
    }
}

pub(crate) fn refuse(code: ErrorCode, message: impl Into<String>) -> CommandError {
    CommandError::new(code, message)
}

/// The API code of a payload over the limits.
#[must_use]
pub fn payload_code(v: &orbit_payload::Violation) -> ErrorCode {
    match v {
        orbit_payload::Violation::TooLarge { .. } => ErrorCode::PayloadTooLarge,
        orbit_payload::Violation::TooDeep { .. } => ErrorCode::PayloadTooDeep,
    }
}

/// Refuses a command's payload over the limits (see [`payload_error`]).
pub(crate) fn check_size(limits: &Limits, value: &Value, what: &str) -> Result<(), CommandError> {
    orbit_payload::check(value, limits.max_payload_bytes)
        .map(drop)
        .map_err(|v| refuse(payload_code(&v), v.message(what)))
}

/// The non-retryable task error for a value about to be recorded that is over the effective
/// `max_payload_bytes` (`PAYLOAD_TOO_LARGE`) or nested deeper than the depth limit
/// (`PAYLOAD_TOO_DEEP`); `None` when it is within both. `what` names the value in the
/// message, which also names the offending path.
#[must_use]
pub fn payload_error(limits: &Limits, value: &Value, what: &str) -> Option<TaskError> {
    orbit_payload::check(value, limits.max_payload_bytes)
        .err()
        .map(|v| TaskError::fatal(v.code(), v.message(what)))
}
