//! The conformance cases. Each takes a fresh [`Backend`](crate::support::Backend) and states
//! one guarantee of the [`Store`](orbit_store::Store) contract; none depends on a particular
//! database.

mod batches;
mod batching;
mod cluster;
mod commit;
mod coordination;
mod dedupe;
mod fairness;
mod faults;
mod flow;
mod overlaps;
mod pools;
mod queries;
mod retention;
mod routing;
mod schedules;
mod schema;
mod search;
mod slots;

pub use batches::*;
pub use batching::*;
pub use cluster::*;
pub use commit::*;
pub use coordination::*;
pub use dedupe::*;
pub use fairness::*;
pub use faults::*;
pub use flow::*;
pub use overlaps::*;
pub use pools::*;
pub use queries::*;
pub use retention::*;
pub use routing::*;
pub use schedules::*;
pub use schema::*;
pub use search::*;
pub use slots::*;
