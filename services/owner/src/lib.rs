//! The owner service: the only writer of an execution's history.
//!
//! Commands reach it through the inbox table (and starts through `StartExecution`); a pass
//! applies them through the pure engine, decides to the fixpoint and commits every touched
//! execution — history, projection, task offers, the timer row, consumed inbox entries — in
//! one transaction, before memory changes and before anyone is answered.

mod effects;
mod error;
mod grpc;
mod hot;
mod inbox;
mod owner;
mod pass;
mod refused;
mod resume;
mod takeover;

pub use effects::DEFAULT_RETENTION_MS;
pub use error::OwnerError;
pub use owner::{system_clock, Owner, OwnerConfig, Snapshot, StartRequest, Started};
