//! The pure core of Orbit: the event model, the state fold, the decider, commands, queries,
//! the replay check and an in-memory simulator.
//!
//! Nothing here does IO, reads a clock or draws random numbers: time comes in as `now`
//! (epoch milliseconds) and tokens come in with commands. The owner service is the only
//! caller that turns the results into effects.

pub mod command;
pub mod decide;
pub mod event;
pub mod query;
pub mod replay;
pub mod scope;
pub mod sim;

pub mod state;
pub mod unit;

pub use command::{accept, start, Command, CommandError};
pub use decide::{advance, decide, decide_with, effective_limits, next_timer};
pub use event::{CompensationOutcome, Event, HistoryEvent, Origin, ParentRef, TaskError};
pub use orbit_codes::ErrorCode;
pub use state::{State, Status, Unit, UnitStatus};
