//! The store's closed error enum.
//!
//! Every backend maps its failures onto these variants, so callers (and later the gRPC layer,
//! which turns each variant into a stable Orbit code) never see a driver error type.
//! `Storage` means "the database failed"; `Unavailable` means it could not be reached (or
//! kept refusing for transient reasons) and the same call may succeed later; the others
//! describe a request the stored state refuses.

use orbit_codes::ErrorCode;

/// What a store operation can fail with.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum StoreError {
    /// The addressed row (execution, inbox entry, ...) does not exist.
    #[error("not found: {0}")]
    NotFound(String),
    /// The request contradicts stored state: a definition version registered with another
    /// hash, an event sequence that does not follow the history, an inbox entry already done.
    #[error("conflict: {0}")]
    Conflict(String),
    /// A commit tried to create an execution whose id is taken.
    #[error("execution already exists: {0}")]
    ExecutionExists(String),
    /// A start took its workflow's latest version from a list of versions that is no longer
    /// complete (`CommitBatch::versions_seen`): another version was registered since.
    /// Nothing was written; resolve the latest version again and retry.
    #[error("definition changed: {0}")]
    DefinitionChanged(String),
    /// An inbox message's request id was used before for the execution and kind with
    /// another payload; nothing was written.
    #[error("request id reused: {0}")]
    RequestIdReused(String),
    /// The writer's ownership epoch is stale (or the execution has no owner): another node
    /// took the execution over, so this writer must stop.
    #[error("fenced: {0}")]
    Fenced(String),
    /// The request itself is malformed (for example an unreadable page token).
    #[error("invalid argument: {0}")]
    InvalidArgument(String),
    /// The database failed, or returned data that cannot be decoded.
    #[error("storage: {0}")]
    Storage(String),
    /// The database could not be reached, the connection was lost, no pooled connection
    /// came free in time, or transactions kept conflicting: transient, retrying later may
    /// succeed. When a write fails this way its outcome is unknown (it may have committed).
    #[error("unavailable: {0}")]
    Unavailable(String),
}

/// The result type of every store operation.
pub type Result<T> = std::result::Result<T, StoreError>;

impl StoreError {
    /// The API code a caller receives for this error: the one `StoreError → ErrorCode`
    /// mapping. `NotFound` is `EXECUTION_NOT_FOUND`: every lookup by id a service answers
    /// with it is one of an execution (or of its inbox entry, owner row, ...); a fenced
    /// writer and an unreachable database are both "retry later".
    #[must_use]
    pub fn code(&self) -> ErrorCode {
        match self {
            StoreError::NotFound(_) => ErrorCode::ExecutionNotFound,
            StoreError::ExecutionExists(_) => ErrorCode::ExecutionExists,
            StoreError::RequestIdReused(_) => ErrorCode::RequestIdReused,
            StoreError::InvalidArgument(_) => ErrorCode::InvalidArgument,
            StoreError::Fenced(_)
            | StoreError::Unavailable(_)
            | StoreError::DefinitionChanged(_) => ErrorCode::Unavailable,
            StoreError::Conflict(_) | StoreError::Storage(_) => ErrorCode::StorageError,
        }
    }

    /// The message that goes with [`code`](Self::code): the detail, prefixed with what
    /// happened where the code alone does not say it.
    #[must_use]
    pub fn message(&self) -> String {
        match self {
            StoreError::NotFound(m)
            | StoreError::ExecutionExists(m)
            | StoreError::RequestIdReused(m)
            | StoreError::InvalidArgument(m)
            | StoreError::Storage(m) => m.clone(),
            StoreError::Conflict(m) => format!("conflict: {m}"),
            StoreError::Fenced(m) => format!("ownership moved: {m}"),
            StoreError::DefinitionChanged(m) => {
                format!("a version of workflow `{m}` was registered meanwhile; start again")
            }
            StoreError::Unavailable(m) => format!("database unavailable: {m}"),
        }
    }

    /// A `Storage` error for a stored value that cannot be decoded.
    pub(crate) fn corrupt(what: &str, detail: impl std::fmt::Display) -> StoreError {
        StoreError::Storage(format!("corrupt {what}: {detail}"))
    }
}
