//! The owner service: the only writer of an execution's history.
//!
//! Commands reach it through the inbox table (and starts through `StartExecution`); a pass
//! applies them through the pure engine, decides to the fixpoint and commits every touched
//! execution — history, projection, task offers, the timer row, consumed inbox entries — in
//! one transaction, before memory changes and before anyone is answered.
//!
//! Poison quarantine: each execution's engine work runs off the runtime threads behind
//! `catch_unwind`; failures — caught panics, and deaths of the process counted across
//! restarts by the recovery mode — park an execution as SUSPENDED after `max_failures`,
//! so one hostile input never takes the owner (or the next owner) down.

mod admission;
mod apply;
mod batches;
mod begin;
mod config;
mod context;
mod control;
mod counters;
mod effects;
mod entries;
mod error;
mod evict;
mod evicted;
mod fault_inject;
mod fork;
mod grpc;
mod handed;
mod handoff;
mod hot;
mod inbox;
mod initial;
mod isolate;
mod lend;
mod migrate;
mod operator;
mod owner;
mod pass;
mod quarantine;
mod recovery;
mod refused;
mod reported;
mod requests;
mod reset;
mod resume;
mod takeover;
mod trace;
mod work;

pub use config::{OwnerConfig, DEFAULT_EVICT_AFTER_MS, IDLE_PASS_SAFETY_NET, TAKEOVER_SAFETY_NET};
pub use counters::QuarantineStats;
pub use effects::DEFAULT_RETENTION_MS;
pub use error::OwnerError;
pub use fault_inject::FAULT_INJECT_ENV;
pub use isolate::{engine_sized_thread, ENGINE_STACK_BYTES};
pub use lend::{Lenders, Service as HandoffServer};
pub use orbit_clock::{system_clock, Clock, ManualClock};
pub use owner::{Memory, Owner, Snapshot};
pub use requests::{ForkFrom, InitialUpdate, StartRequest, Started};
