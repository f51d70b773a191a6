//! Running Orbit's services as many processes on one database.
//!
//! - [`rendezvous`]: which live owner a root execution belongs to, the same answer in every
//!   process.
//! - [`Membership`]: this node's heartbeat in the `nodes` table and a cached list of live
//!   owners.
//! - [`claim_node_id`]: one process per node id, checked before the first heartbeat.
//! - [`RemoteOwners`]: `OwnerService` for frontends and schedulers, routing each call to the
//!   right owner over gRPC.

pub mod rendezvous;

mod identity;
mod membership;
mod remote;

pub use identity::{claim_node_id, IdentityError, NodeIdClaim, NodeIdInUse};
pub use membership::{Membership, MembershipConfig, Report, FRONTEND_SERVICE, OWNER_SERVICE};
pub use remote::{RemoteOwners, RetryPolicy};
