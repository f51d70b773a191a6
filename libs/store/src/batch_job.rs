//! The rows of the `batches` and `batch_items` tables: server-side jobs that apply one
//! operator action (migrate, reset, cancel, terminate, signal, delete) to many executions (the
//! [`BatchJobs`](crate::roles::BatchJobs) role).
//!
//! A batch is created `RUNNING` by the frontend with its [`BatchSpec`] (JSON, kept whole so
//! later actions need no new columns) and run by one scheduler at a time under a lease
//! (`lease_holder`, `lease_until`): a scheduler that dies only delays its batch until the
//! lease ends, then another (or the same one restarted) takes it over. The runner walks the
//! selected executions in execution-id order after the `cursor`. Each execution is first
//! *begun* — a `PENDING` item written and the cursor moved past it, one transaction — then
//! its command is sent, and its outcome *recorded* — the item's outcome and the counters, one
//! transaction. A runner that takes a batch over finishes the `PENDING` items first (their
//! commands carry the batch's request id, so the inbox answers a resend with the first
//! entry's reply) and then goes on after the cursor: no execution is acted on twice and no
//! item is counted twice, whatever became of the selection meanwhile.

use serde::{Deserialize, Serialize};

/// What a batch does to each selected execution. New actions are new variants; a stored
/// spec names its action by key (`{"migrate": {...}}`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum BatchAction {
    /// Migrate to another version of the workflow (`MigrateExecution`'s inbox entry).
    Migrate {
        /// The version to migrate to.
        to_version: String,
    },
    /// Reset to just before a main-body step (`ResetExecution`'s inbox entry).
    Reset {
        /// The step to go back to.
        step: String,
        /// Leave out the signals received after the point.
        #[serde(default)]
        drop_signals: bool,
        /// A version to migrate each new run to.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        to_version: Option<String>,
    },
    /// Request the cancellation (`CancelExecution`'s inbox entry).
    Cancel {
        /// Recorded in `CancelRequested` (the batch's reason when empty).
        #[serde(default)]
        reason: String,
    },
    /// Terminate (`TerminateExecution`'s inbox entry).
    Terminate {
        /// Recorded in the execution's error (the batch's reason when empty).
        #[serde(default)]
        reason: String,
    },
    /// Signal (`SignalExecution`'s inbox entry).
    Signal {
        /// The signal name.
        name: String,
        /// Its payload.
        #[serde(default)]
        payload: serde_json::Value,
    },
    /// Delete a finished execution and its descendants (`DeleteExecution`, straight on the
    /// store: no owner is involved).
    Delete {},
}

impl BatchAction {
    /// The action's name, for metrics and logs (`migrate`).
    #[must_use]
    pub fn name(&self) -> &'static str {
        match self {
            BatchAction::Migrate { .. } => "migrate",
            BatchAction::Reset { .. } => "reset",
            BatchAction::Cancel { .. } => "cancel",
            BatchAction::Terminate { .. } => "terminate",
            BatchAction::Signal { .. } => "signal",
            BatchAction::Delete {} => "delete",
        }
    }
}

/// Which executions a batch acts on: those matching every part that is set (see
/// [`crate::batch_select`] for the SQL).
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct BatchSelector {
    /// The workflow name; empty only when `query` is set.
    #[serde(default)]
    pub workflow: String,
    /// Only executions pinned to this version.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub version: Option<String>,
    /// Only executions in one of these statuses (`Status::as_str`); empty only when `query`
    /// is set (the query alone decides then).
    #[serde(default)]
    pub statuses: Vec<String>,
    /// A list query (`orbit-query`, checked against the system attributes when the batch
    /// was started, without `ORDER BY`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub query: Option<String>,
    /// The starting caller's workflow patterns (`billing.*`) when it was restricted to
    /// some: only executions of workflows one of them matches are selected. `None`: any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub workflows: Option<Vec<String>>,
}

/// A batch's definition, stored as JSON in `batches.spec`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct BatchSpec {
    /// The executions.
    pub selector: BatchSelector,
    /// What to do to each.
    pub action: BatchAction,
    /// At most this many executions per second.
    pub rate_per_second: u32,
    /// Why, for the logs and the recorded commands.
    #[serde(default)]
    pub reason: String,
}

impl BatchSpec {
    /// The spec as stored.
    #[must_use]
    pub fn to_json(&self) -> String {
        // A struct of strings and numbers always serializes.
        serde_json::to_string(self).unwrap_or_default()
    }

    /// A stored spec.
    pub fn from_json(text: &str) -> crate::Result<BatchSpec> {
        serde_json::from_str(text).map_err(|e| crate::StoreError::corrupt("batch spec", e))
    }
}

/// Where a batch stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BatchState {
    /// Being run (or waiting for a scheduler to lease it).
    Running,
    /// Every selected execution has an outcome.
    Completed,
    /// Stopped by `CancelBatch`; no further execution is acted on.
    Cancelled,
    /// Stopped by an error that is not any one execution's (an unreadable spec).
    Failed,
}

impl BatchState {
    /// As stored and in the API (`RUNNING`, ...).
    #[must_use]
    pub fn as_str(self) -> &'static str {
        match self {
            BatchState::Running => "RUNNING",
            BatchState::Completed => "COMPLETED",
            BatchState::Cancelled => "CANCELLED",
            BatchState::Failed => "FAILED",
        }
    }

    /// A stored state.
    pub fn parse(text: &str) -> crate::Result<BatchState> {
        Ok(match text {
            "RUNNING" => BatchState::Running,
            "COMPLETED" => BatchState::Completed,
            "CANCELLED" => BatchState::Cancelled,
            "FAILED" => BatchState::Failed,
            other => return Err(crate::StoreError::corrupt("batch state", other)),
        })
    }
}

/// What became of one execution of a batch.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ItemOutcome {
    /// Begun: its command may have been sent, its outcome is not recorded yet.
    Pending,
    /// The action was applied.
    Succeeded,
    /// The action was refused (`code` says why, e.g. `MIGRATION_UNSAFE`).
    Failed,
    /// Nothing to do (already on the version, already finished).
    Skipped,
}

impl ItemOutcome {
    /// As stored and in the API.
    #[must_use]
    pub fn as_str(self) -> &'static str {
        match self {
            ItemOutcome::Pending => "PENDING",
            ItemOutcome::Succeeded => "SUCCEEDED",
            ItemOutcome::Failed => "FAILED",
            ItemOutcome::Skipped => "SKIPPED",
        }
    }

    /// A stored outcome.
    pub fn parse(text: &str) -> crate::Result<ItemOutcome> {
        Ok(match text {
            "PENDING" => ItemOutcome::Pending,
            "SUCCEEDED" => ItemOutcome::Succeeded,
            "FAILED" => ItemOutcome::Failed,
            "SKIPPED" => ItemOutcome::Skipped,
            other => return Err(crate::StoreError::corrupt("batch item outcome", other)),
        })
    }
}

/// One batch with its progress.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BatchRow {
    /// The batch id.
    pub batch_id: String,
    /// The selector's workflow (for listing and permission checks without parsing the spec);
    /// empty for a batch selected by a query alone.
    pub workflow: String,
    /// Its [`BatchSpec`], JSON.
    pub spec: String,
    /// Where it stands.
    pub state: BatchState,
    /// The caller's request id (idempotent start), if any.
    pub request_id: Option<String>,
    /// The last execution id begun, in execution-id order; `None` before the first.
    pub cursor: Option<String>,
    /// How many executions the selector matched at the start.
    pub total: u64,
    /// Items with an outcome (succeeded + failed + skipped).
    pub done: u64,
    /// Items applied.
    pub succeeded: u64,
    /// Items refused.
    pub failed: u64,
    /// Items with nothing to do.
    pub skipped: u64,
    /// Why it was started, or why it was cancelled.
    pub reason: String,
    /// The scheduler running it while the lease lasts.
    pub lease_holder: Option<String>,
    /// When the lease ends (caller's clock).
    pub lease_until_ms: Option<u64>,
    /// Creation time (caller's clock).
    pub created_at_ms: u64,
    /// Last change (caller's clock).
    pub updated_at_ms: u64,
}

impl BatchRow {
    /// A new `RUNNING` batch, no progress, no lease.
    #[must_use]
    pub fn new(batch_id: &str, spec: &BatchSpec, total: u64, now_ms: u64) -> BatchRow {
        BatchRow {
            batch_id: batch_id.to_string(),
            workflow: spec.selector.workflow.clone(),
            spec: spec.to_json(),
            state: BatchState::Running,
            request_id: None,
            cursor: None,
            total,
            done: 0,
            succeeded: 0,
            failed: 0,
            skipped: 0,
            reason: spec.reason.clone(),
            lease_holder: None,
            lease_until_ms: None,
            created_at_ms: now_ms,
            updated_at_ms: now_ms,
        }
    }
}

/// The outcome of one execution of a batch.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BatchItem {
    /// The batch.
    pub batch_id: String,
    /// The execution.
    pub execution_id: String,
    /// What became of it.
    pub outcome: ItemOutcome,
    /// The refusal's code (`MIGRATION_UNSAFE`, `EXECUTION_FINISHED`, ...), empty otherwise.
    pub code: String,
    /// For people.
    pub message: String,
    /// The seq of the event the action recorded (0: none).
    pub seq: u64,
}
