//! What callers hand the pass loop — starts and worker results — with the channels their
//! answers go back on. Plain data: the pass (`pass`, `apply`) consumes them.

use crate::error::OwnerError;
use orbit_engine::event::ParentRef;
use orbit_store::InboxMessage;
use serde_json::Value;
use tokio::sync::oneshot;

/// What [`crate::Owner::start`] answers.
#[derive(Debug, Clone, PartialEq)]
pub struct Started {
    /// The execution id.
    pub execution_id: String,
    /// Its current run.
    pub run: u32,
    /// Whether this call created it (false: it already existed).
    pub created: bool,
    /// Pinned workflow version.
    pub version: String,
    /// Pinned definition hash.
    pub definition_hash: String,
    /// The seq of the start's [`InitialUpdate`]'s `UpdateAccepted` when this call created
    /// the execution with it; 0 otherwise.
    pub update_seq: u64,
}

/// A start waiting for the next pass.
pub(crate) struct PendingStart {
    pub request: StartRequest,
    pub reply: Option<oneshot::Sender<Result<Started, OwnerError>>>,
    /// Passes that failed with this start in them through no fault of its own (another
    /// execution of the pass was fenced); it is retried a few times, then answered.
    pub retries: u32,
}

/// A request to start an execution (or a child).
#[derive(Debug, Clone)]
pub struct StartRequest {
    /// Caller-chosen id (idempotent).
    pub execution_id: String,
    /// Workflow name.
    pub workflow: String,
    /// Version; latest when `None`.
    pub version: Option<String>,
    /// Input.
    pub input: Value,
    /// Parent, for children.
    pub parent: Option<ParentRef>,
    /// Root of the tree (the id itself for roots).
    pub root_id: Option<String>,
    /// Schedule that fired it.
    pub schedule_id: Option<String>,
    /// Update-with-start: an update accepted in the commit that creates the execution (see
    /// [`InitialUpdate`]); ignored when the execution exists.
    pub update: Option<InitialUpdate>,
    /// A fork: the new execution starts from another execution's state at a seq (see
    /// `fork`); `input` is replaced by the source's (`fork::prepare`).
    pub fork: Option<ForkFrom>,
    /// The execution's task priority (1..5; recorded in `WorkflowCreated`), `None`: the
    /// workflow's (docs/flow-control.md).
    pub priority: Option<u8>,
    /// The start's memo (issue 28; a JSON object, size-checked by the frontend), recorded
    /// in `WorkflowCreated`; `None`: none.
    pub memo: Option<serde_json::Value>,
    /// `version` is the latest of this many registered versions, from the caller's cached
    /// list (issue 25: no read of the versions on the start's path). A start alone in its
    /// pass has its commit check that none was registered since; any other start reads the
    /// versions first. Either way the latest is what starts. `None`: `version` as given.
    pub versions_seen: Option<u32>,
}

impl StartRequest {
    /// A start whose version is a frontend's cached latest (`versions_seen`) and that no
    /// commit will check (not alone in its pass, carried, parked): it starts the latest,
    /// which `begin` reads beside its id. One whose versions were read already
    /// (`apply::read_starts`) has no `versions_seen` left and is not changed.
    pub(crate) fn read_latest(&mut self) {
        if self.versions_seen.take().is_some() {
            self.version = None;
        }
    }
}

/// Where a fork comes from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ForkFrom {
    /// The source execution.
    pub source_execution_id: String,
    /// Its run; 0: its current run.
    pub source_run: u32,
    /// The last seq of that run the fork keeps.
    pub at_seq: u64,
    /// The operator's reason.
    pub reason: String,
}

/// The update of an update-with-start: checked against the new execution's first state and
/// recorded (`UpdateAccepted`, and `UpdateCompleted` for a handler without steps) right
/// after `WorkflowCreated`, in the same commit; a refused one creates nothing and fails the
/// start with its code.
#[derive(Debug, Clone, PartialEq)]
pub struct InitialUpdate {
    /// Handler name.
    pub name: String,
    /// Argument.
    pub args: Value,
    /// The caller's idempotency id (recorded in `UpdateAccepted`).
    pub update_id: Option<String>,
}

/// A result waiting for the next pass.
pub(crate) struct Handed {
    pub(crate) execution_id: String,
    pub(crate) report: Report,
    pub(crate) reply: oneshot::Sender<bool>,
}

/// The result itself: what a job needs (the reply channel stays outside the job, so a
/// panicking job cannot take it along).
#[derive(Debug, Clone)]
pub(crate) struct Report {
    pub(crate) worker_id: String,
    pub(crate) message: InboxMessage,
}

/// Answers a start's caller (once; later calls do nothing).
pub(crate) fn reply(start: &mut PendingStart, result: Result<Started, OwnerError>) {
    if let Some(tx) = start.reply.take() {
        let _ = tx.send(result);
    }
}
