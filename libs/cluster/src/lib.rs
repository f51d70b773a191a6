//! Running Orbit's services as many processes on one database.
//!
//! - [`rendezvous`]: which live owner a root execution belongs to, the same answer in every
//!   process.
//! - [`Membership`]: this node's heartbeat in the `nodes` table and a cached list of live
//!   owners.
//! - [`RemoteOwners`]: `OwnerService` for frontends and schedulers, routing each call to the
//!   right owner over gRPC.

pub mod rendezvous;
