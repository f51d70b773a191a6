//! Orbit's storage layer.
//!
//! The storage surface is a set of async role traits ([`roles`]: definitions, reads, inbox,
//! owner writes, task queue, timers, nodes, ownership, retention, deletion, migrations); each
//! service holds a view made of the roles it needs ([`FrontendStore`], [`OwnerStore`],
//! [`SchedulerStore`], [`MembershipStore`]), so only the owner can write history; [`Store`]
//! is all of them, for the process wiring. [`SqliteStore`] is the embedded backend
//! (`orbit dev`, single file, WAL) and [`PgStore`] the production one (PostgreSQL, any
//! number of processes on one database, `LISTEN/NOTIFY` wake-ups). Both run the same
//! conformance suite (`tests/conformance.rs`).
//!
//! The history tables are the source of truth; the `executions` projection, task queue rows,
//! timers and inbox acknowledgements of one decision are written with the events in one
//! transaction, fenced by the owner's epoch (see [`CommitBatch`]).

mod batch;
pub mod batch_job;
mod batch_select;
mod change;
mod changes;
mod count;
pub mod dedupe;
mod error;
mod fault;
mod flow;
pub mod handoff;
pub mod inbox;
mod measure;
pub mod migrations;
mod model;
mod postgres;
mod reply;
mod retention;
pub mod roles;
mod schedule;
mod search;
pub mod slots;
mod sqlite;
mod store;

pub use batch::{
    CommitBatch, CommitOutcome, DefinitionChange, InboxDone, NewInbox, NewOwner, ProjectionUpdate,
};
pub use batch_job::{
    BatchAction, BatchItem, BatchRow, BatchSelector, BatchSpec, BatchState, ItemOutcome,
};
pub use change::{Change, ChangeDetail, Completed, MAX_PAYLOAD_BYTES};
pub use changes::{ChangeHub, Seen, Subscription};
pub use count::{CountFilter, CountGroup, ExecutionCounts};
pub use dedupe::{DebounceFire, DedupeClaim, DedupeRow, DedupeStart, StartDedupe};
pub use error::{Result, StoreError};
pub use fault::{FaultNote, FaultRow, SUSPENDED};
pub use flow::{
    FlowWaiting, KeyLoad, LimitedClaim, RateLimitRow, WaitReason, FLOW_TOP_KEYS, PRIORITY_STEP_MS,
};
pub use handoff::{Handoff, SentChange, TaskClaim, DISPATCHED_APPLY_DELAY};
pub use inbox::{InboxKind, InboxMessage, InboxReply};
pub use migrations::{AppliedMigration, SchemaMismatch, SchemaStatus};
pub use model::{credits_left, new_task_token, worker_language, ClaimFilter, MAX_CLAIM};
pub use model::{
    CompletedTask, DbStats, DefinitionRow, ExecutionFilter, ExecutionPage, ExecutionRow,
    InboxEntry, InboxStatus, NewTask, NewTimer, NodeInfo, NodeRow, OrphanRoot, OwnerRow,
    PutOutcome, QueueBacklog, ResumedExecution, TaskRow, TaskState, TimerRow, VersionRow,
};
pub use postgres::{Channel, PgOptions, PgStore, Wakeup};
pub use reply::{wait_reply, Fallback, Waited};
pub use retention::{
    finished_reply, BatchesDeleted, DeleteOutcome, DoneRowsDeleted, ExecutionsDeleted,
    FlowRowsDeleted, OwnersReleased,
};
pub use roles::{
    BatchJobs, Definitions, Deletion, ExecutionReads, Inbox, Migrations, Nodes, OwnerWrites,
    Ownership, RateLimits, Retention, Schedules, TaskQueue, Timers,
};
pub use schedule::{ScheduleFire, ScheduleRow, ScheduleUpdate};
pub use search::SearchAttributeRow;
pub use sqlite::SqliteStore;
pub use store::{FrontendStore, MembershipStore, OwnerStore, SchedulerStore, Store};
