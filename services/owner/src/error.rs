//! The owner's errors: a stable Orbit code and a message (mapped to gRPC status at the edge).

use orbit_engine::CommandError;
use orbit_store::StoreError;

/// An owner error with its stable Orbit code.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{code}: {message}")]
pub struct OwnerError {
    /// Stable code (`EXECUTION_NOT_FOUND`, ...).
    pub code: &'static str,
    /// What went wrong.
    pub message: String,
}

impl OwnerError {
    /// Builds an error.
    #[must_use]
    pub fn new(code: &'static str, message: impl Into<String>) -> OwnerError {
        OwnerError { code, message: message.into() }
    }

    /// `UNAVAILABLE`.
    #[must_use]
    pub fn unavailable(message: impl Into<String>) -> OwnerError {
        OwnerError::new("UNAVAILABLE", message)
    }
}

impl From<CommandError> for OwnerError {
    fn from(e: CommandError) -> Self {
        OwnerError { code: e.code, message: e.message }
    }
}

impl From<StoreError> for OwnerError {
    fn from(e: StoreError) -> Self {
        match e {
            StoreError::NotFound(m) => OwnerError::new("EXECUTION_NOT_FOUND", m),
            StoreError::ExecutionExists(m) => OwnerError::new("EXECUTION_EXISTS", m),
            StoreError::Fenced(m) => OwnerError::unavailable(format!("fenced: {m}")),
            StoreError::Unavailable(m) => {
                OwnerError::unavailable(format!("database unavailable: {m}"))
            }
            other => OwnerError::new("STORAGE_ERROR", other.to_string()),
        }
    }
}
