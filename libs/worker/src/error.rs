//! What a worker fails with ([`WorkerError`]).

use tonic::Status;

/// Why [`Worker::run`] (or [`WorkerBuilder::build`](crate::WorkerBuilder::build)) failed.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum WorkerError {
    /// The builder's settings are invalid.
    #[error("invalid worker configuration: {0}")]
    Config(String),
    /// The server refused the session for a reason a reconnect cannot fix
    /// (`INVALID_ARGUMENT`, `PERMISSION_DENIED`, `UNAUTHENTICATED`, `UNIMPLEMENTED`).
    #[error("the server refused the session: {0}")]
    Rejected(Box<Status>),
    /// Shutdown did not finish within the drain timeout; the remaining tasks were aborted
    /// and their results (if any) not acknowledged.
    #[error(
        "drain timed out: {running} task(s) still running, {unacknowledged} result(s) not acknowledged"
    )]
    DrainTimeout {
        /// Tasks still running when the worker gave up.
        running: usize,
        /// Results the server had not acknowledged.
        unacknowledged: usize,
    },
}
