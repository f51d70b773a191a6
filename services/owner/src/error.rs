//! The owner's errors: a stable Orbit code and a message (mapped to gRPC status at the edge).

use orbit_engine::{CommandError, ErrorCode};
use orbit_store::StoreError;

/// An owner error with its stable Orbit code.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{code}: {message}")]
pub struct OwnerError {
    /// The code (`EXECUTION_NOT_FOUND`, ...).
    pub code: ErrorCode,
    /// What went wrong.
    pub message: String,
}

impl OwnerError {
    /// Builds an error.
    #[must_use]
    pub fn new(code: ErrorCode, message: impl Into<String>) -> OwnerError {
        OwnerError { code, message: message.into() }
    }

    /// `UNAVAILABLE`.
    #[must_use]
    pub fn unavailable(message: impl Into<String>) -> OwnerError {
        OwnerError::new(ErrorCode::Unavailable, message)
    }
}

impl From<CommandError> for OwnerError {
    fn from(e: CommandError) -> Self {
        OwnerError { code: e.code, message: e.message }
    }
}

impl From<StoreError> for OwnerError {
    fn from(e: StoreError) -> Self {
        OwnerError { code: e.code(), message: e.message() }
    }
}
