//! The pure core of Orbit: the event model, the state fold, the decider, commands, queries,
//! the replay check and an in-memory simulator.
//!
//! Nothing here does IO, reads a clock or draws random numbers: time comes in as `now`
//! (epoch milliseconds) and tokens come in with commands. [`run::settle`] returns what the
//! new events cause as typed [`effects::Effect`]s; the owner service maps them onto its
//! commit and the simulator carries them out in memory.

mod catch;
mod change;
pub mod command;
pub mod decide;
pub mod effects;
pub mod event;
pub mod flow;
mod loops;
pub mod migrate;
pub mod query;
mod refusal;
pub mod replay;
pub mod restore;
pub mod run;
pub mod scope;
pub mod sim;

pub mod state;
pub mod task_code;
pub mod unit;
pub mod update;

pub use command::{accept, start, Command, CommandError};
pub use decide::{advance, decide, decide_with, effective_limits, next_timer};
pub use effects::{Capabilities, Effect, TaskOffer, HTTP_TASK};
pub use event::{CompensationOutcome, Event, HistoryEvent, Origin, ParentRef, TaskError};
pub use flow::{ConcurrencyKey, FairKey, Flow, RateKey, RateSource, StickyWorker};
pub use migrate::{Change, ChangeKind, Plan};
pub use orbit_codes::ErrorCode;
pub use run::{hand_off, settle, HandedOff, Pass, Run};
pub use state::{State, Status, Unit, UnitStatus};
pub use task_code::TaskCode;
