//! The frontend's error helpers: every failure becomes an [`OrbitError`] with a stable
//! code (`orbit-error-code` metadata + `google.rpc.ErrorInfo`, via the server kit).

use orbit_server_kit::payload::PayloadError;
use orbit_server_kit::{ErrorCode, OrbitError};
use orbit_store::StoreError;
use serde_json::Value;
use tonic::Status;

/// The result type of handler internals.
pub(crate) type ApiResult<T> = Result<T, Status>;

/// A status with an Orbit code.
pub(crate) fn err(code: ErrorCode, message: impl Into<String>) -> Status {
    OrbitError::new(code, message).to_status()
}

/// `INVALID_ARGUMENT` naming the offending request field.
pub(crate) fn invalid(field: &str, message: impl Into<String>) -> Status {
    let message = message.into();
    OrbitError::new(ErrorCode::InvalidArgument, format!("{field}: {message}"))
        .with_violation(orbit_server_kit::FieldViolation::new(field, "INVALID_ARGUMENT", message))
        .to_status()
}

/// A payload JSON cannot hold, for request field `field`.
pub(crate) fn bad_payload(field: &str, e: &PayloadError) -> Status {
    invalid(field, e.to_string())
}

/// A store failure. `NotFound` is reported as `EXECUTION_NOT_FOUND`: every store lookup the
/// frontend makes by id is one of an execution (or its inbox entry).
pub(crate) fn store(e: StoreError) -> Status {
    let (code, message) = match e {
        StoreError::NotFound(m) => (ErrorCode::ExecutionNotFound, m),
        StoreError::ExecutionExists(m) => (ErrorCode::ExecutionExists, m),
        StoreError::Conflict(m) => (ErrorCode::StorageError, format!("conflict: {m}")),
        StoreError::Fenced(m) => (ErrorCode::Unavailable, format!("ownership moved: {m}")),
        StoreError::InvalidArgument(m) => (ErrorCode::InvalidArgument, m),
        StoreError::Unavailable(m) => {
            (ErrorCode::Unavailable, format!("database unavailable: {m}"))
        }
        StoreError::Storage(m) => {
            tracing::error!(error = %m, "store failed");
            (ErrorCode::StorageError, m)
        }
    };
    err(code, message)
}

/// The error of an owner's inbox reply `{"error": {"code", "message"}}`. Codes the API does
/// not know become `STORAGE_ERROR` with the original code in the message.
pub(crate) fn from_reply(error: &Value) -> Status {
    let code = error.get("code").and_then(Value::as_str).unwrap_or("");
    let message = error.get("message").and_then(Value::as_str).unwrap_or("").to_string();
    match code.parse::<ErrorCode>() {
        Ok(code) => err(code, message),
        Err(_) => err(ErrorCode::StorageError, format!("owner replied {code}: {message}")),
    }
}

/// `EXECUTION_NOT_FOUND` for an id.
pub(crate) fn no_execution(id: &str) -> Status {
    err(ErrorCode::ExecutionNotFound, format!("execution `{id}` does not exist"))
}
