//! The per-service views of the storage surface, and [`Store`], all of it.
//!
//! The surface is cut into role traits ([`crate::roles`]): [`Definitions`],
//! [`ExecutionReads`], [`Inbox`], [`OwnerWrites`], [`TaskQueue`], [`Timers`], [`Nodes`],
//! [`Ownership`], [`Retention`], [`Deletion`], [`Schedules`], [`BatchJobs`], [`RateLimits`], [`Migrations`]. Each backend ([`SqliteStore`],
//! [`PgStore`]) implements every role and is checked by one conformance suite. A service holds
//! the view made of the roles it needs, so what it may write is a matter of types:
//!
//! | view | roles | held by |
//! |---|---|---|
//! | [`FrontendStore`] | definitions, reads, inbox, task queue, nodes, ownership, deletion, schedules, batch jobs (create, read, cancel), rate limits, start dedupe (claim keys) | `orbit-frontend` |
//! | [`OwnerStore`] | definitions, reads, inbox, owner writes, nodes, ownership | `orbit-owner` |
//! | [`SchedulerStore`] | timers, retention, schedules (claim and fire; execution reads, inbox writes for overlap policies), batch jobs (lease and run; a batch's deletes), start dedupe (fire debounces, sweep) | `orbit-scheduler` (timer loop and sweeper) |
//! | [`MembershipStore`] | nodes, ownership | `orbit-cluster` (`Membership`, `RemoteOwners`) |
//! | [`Store`] | every role, migrations included | the process wiring (`orbit dev`, split), tests |
//!
//! **Only the owner writes history.** History, projections, owners rows and the applying of
//! inbox entries are written only by the methods of [`OwnerWrites`] ([`OwnerWrites::commit`],
//! [`OwnerWrites::commit_all`], takeover, parking), and [`OwnerStore`] is the only view with
//! that role (deleting closed trees, [`Deletion`] and [`Retention`], removes rows, it never
//! writes them). The frontend's and the scheduler's store types have no such method, so the
//! frontend cannot commit history:
//!
//! ```compile_fail,E0599
//! use orbit_store::{FrontendStore, OwnerWrites};
//! async fn write(store: std::sync::Arc<dyn FrontendStore>) {
//!     let _ = store.commit_all(Vec::new()).await;
//! }
//! ```
//!
//! nor can the scheduler:
//!
//! ```compile_fail,E0599
//! use orbit_store::{OwnerWrites, SchedulerStore};
//! async fn write(store: std::sync::Arc<dyn SchedulerStore>) {
//!     let _ = store.commit(orbit_store::CommitBatch::default()).await;
//! }
//! ```
//!
//! while the owner can, and a [`Store`] becomes any view by trait upcasting:
//!
//! ```
//! use orbit_store::{FrontendStore, OwnerStore, Store};
//! use std::sync::Arc;
//! async fn write(store: Arc<dyn OwnerStore>) {
//!     let _ = store.commit_all(Vec::new()).await;
//! }
//! fn views(store: Arc<dyn Store>) -> (Arc<dyn FrontendStore>, Arc<dyn OwnerStore>) {
//!     (store.clone(), store)
//! }
//! ```
//!
//! The views and [`Store`] have no methods of their own and a blanket implementation each:
//! whatever implements their roles is one. Methods of a role are callable on a view's trait
//! object without importing the role; on a concrete backend, import the role (or all of them:
//! `use orbit_store::roles::*`).
//!
//! [`SqliteStore`]: crate::SqliteStore
//! [`PgStore`]: crate::PgStore

use crate::roles::StartDedupe;
use crate::roles::{
    BatchJobs, Definitions, Deletion, ExecutionReads, Inbox, Migrations, Nodes, OwnerWrites,
    Ownership, RateLimits, Retention, Schedules, TaskQueue, Timers,
};

/// What the frontend may do: register and read definitions, read executions, write inbox
/// commands and read their replies, serve the task queue to workers, read the cluster, delete
/// a closed execution on request, manage the named rate limits. It cannot write history (no [`OwnerWrites`]).
pub trait FrontendStore:
    Definitions
    + ExecutionReads
    + Inbox
    + TaskQueue
    + Nodes
    + Ownership
    + Deletion
    + Schedules
    + BatchJobs
    + RateLimits
    + StartDedupe
{
}

impl<T> FrontendStore for T where
    T: Definitions
        + ExecutionReads
        + Inbox
        + TaskQueue
        + Nodes
        + Ownership
        + Deletion
        + Schedules
        + BatchJobs
        + RateLimits
        + StartDedupe
        + ?Sized
{
}

/// What an owner may do: the only view that writes history ([`OwnerWrites`]), plus the
/// reads it rebuilds executions from and the cluster reads of its takeover round.
pub trait OwnerStore:
    Definitions + ExecutionReads + Inbox + OwnerWrites + Nodes + Ownership
{
}

impl<T> OwnerStore for T where
    T: Definitions + ExecutionReads + Inbox + OwnerWrites + Nodes + Ownership + ?Sized
{
}

/// What the scheduler may do: fire timers (into inbox entries), sweep retention, and fire
/// schedules: claim them, read whether their last execution still runs, write the cancel or
/// terminate of an overlap policy into the inbox; run batches (whose `delete` action is an
/// operator's [`Deletion`]).
pub trait SchedulerStore:
    Timers + Retention + Schedules + ExecutionReads + Inbox + BatchJobs + StartDedupe + Deletion
{
}

impl<T> SchedulerStore for T where
    T: Timers
        + Retention
        + Schedules
        + ExecutionReads
        + Inbox
        + BatchJobs
        + StartDedupe
        + Deletion
        + ?Sized
{
}

/// What cluster membership needs: heartbeats and liveness, and who owns an execution (to
/// route a call to its owner).
pub trait MembershipStore: Nodes + Ownership {}

impl<T: Nodes + Ownership + ?Sized> MembershipStore for T {}

/// The whole storage surface, every role and migrations: what a process that builds several
/// services (`orbit dev`, the split wiring, tests) opens, then hands each service its view
/// (`Arc<dyn Store>` coerces to `Arc<dyn FrontendStore>` and the others).
pub trait Store:
    Migrations + FrontendStore + OwnerStore + SchedulerStore + MembershipStore
{
}

impl<T> Store for T where
    T: Migrations + FrontendStore + OwnerStore + SchedulerStore + MembershipStore + ?Sized
{
}
