//! The frontend's error helpers: every failure becomes an [`OrbitError`] with a stable
//! code (`orbit-error-code` metadata + `google.rpc.ErrorInfo`, via the server kit).

use orbit_server_kit::payload::PayloadError;
use orbit_server_kit::{ErrorCode, OrbitError};
use orbit_store::StoreError;
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

/// A store failure, with the store's one code mapping (`StoreError::code`).
pub(crate) fn store(e: StoreError) -> Status {
    if let StoreError::Storage(m) = &e {
        tracing::error!(error = %m, "store failed");
    }
    err(e.code(), e.message())
}

/// `EXECUTION_NOT_FOUND` for an id.
pub(crate) fn no_execution(id: &str) -> Status {
    err(ErrorCode::ExecutionNotFound, format!("execution `{id}` does not exist"))
}
