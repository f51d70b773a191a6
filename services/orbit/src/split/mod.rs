//! `orbit frontend`, `orbit owner` and `orbit scheduler`: each service as its own process,
//! any number of each, sharing one database. Each process heartbeats in the `nodes` table,
//! turns the database's notifications into its in-process wake-ups, serves its gRPC API
//! (with health and reflection) and, on SIGINT/SIGTERM, drains and removes its node row.

mod args;
pub mod backend;
mod frontend;
mod lend;
mod node;
mod owner;
mod scheduler;

pub use args::{ConnectionArgs, FrontendArgs, OwnerArgs, SchedulerArgs};
pub use frontend::run as run_frontend;
pub use owner::run as run_owner;
pub use scheduler::run as run_scheduler;
