//! The event model: every change to an execution is one of these, appended to its history.
//!
//! Event names and fields are part of the API (users read histories). `step` fields hold a
//! unit key (see [`crate::unit`]). Events are either *recorded* (from a command: a worker
//! result, a signal, a dispatch) or *decided* (by the pure decider); [`Origin`] says which,
//! so the replay check knows which events to recompute.

use crate::change::Change;
use crate::flow::Flow;
use orbit_definition::SearchValue;
use serde::{Deserialize, Serialize};
use serde_json::Value;
use std::collections::BTreeMap;

mod resume;

pub use resume::{CarriedStatus, CarriedUnit, Resume};

/// An error reported by a worker, or decided by the engine, for an attempt or a step.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TaskError {
    /// Stable code (`TIMEOUT`, `CARD_DECLINED`, ...).
    pub code: String,
    /// Human-readable message.
    #[serde(default)]
    pub message: String,
    /// Whether another attempt may help (the retry policy still decides).
    #[serde(default = "yes")]
    pub retryable: bool,
    /// Structured details from the worker.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub details: Option<Value>,
}

fn yes() -> bool {
    true
}

impl TaskError {
    /// A retryable error.
    #[must_use]
    pub fn retryable(code: &str, message: impl Into<String>) -> TaskError {
        TaskError { code: code.into(), message: message.into(), retryable: true, details: None }
    }

    /// An error that is never retried.
    #[must_use]
    pub fn fatal(code: &str, message: impl Into<String>) -> TaskError {
        TaskError { code: code.into(), message: message.into(), retryable: false, details: None }
    }
}

/// The parent of a child execution.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ParentRef {
    /// The parent's execution id.
    pub execution_id: String,
    /// The parent's unit this child resolves.
    pub step: String,
}

/// An update id accepted by an earlier run: where its `UpdateAccepted` is.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CarriedUpdate {
    /// The caller's update id (`request_id`).
    pub id: String,
    /// The run that accepted it.
    pub run: u32,
    /// The seq of its `UpdateAccepted` in that run.
    pub seq: u64,
}

/// How compensation went, recorded on the terminal event.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum CompensationOutcome {
    /// Nothing needed compensating.
    None,
    /// Every compensation task succeeded.
    Completed,
    /// At least one compensation task failed.
    Failed,
}

/// One history event.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type")]
#[allow(missing_docs)] // Field meanings are documented in docs/events.md.
pub enum Event {
    /// The execution (this run) exists. Always the first event of a run.
    WorkflowCreated {
        execution_id: String,
        workflow: String,
        version: String,
        definition_hash: String,
        input: Value,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        parent: Option<ParentRef>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        schedule_id: Option<String>,
        run: u32,
        /// Update ids accepted by earlier runs (the most recent, at most
        /// `update::MAX_CARRIED_UPDATE_IDS`), so a retry after a continue-as-new is
        /// answered by its first acceptance instead of being applied again.
        #[serde(default, skip_serializing_if = "Vec::is_empty")]
        update_ids: Vec<CarriedUpdate>,
        /// The run's priority (1..=5) from the start request (issue 27), carried to the
        /// next run on continue-as-new; absent when the request gave none.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        priority: Option<u8>,
        /// The start request's memo (issue 28): free JSON shown by describe, never
        /// indexed; carried to the next run on continue-as-new. Absent when none was given.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        memo: Option<Value>,
        /// The resume state a top-level repeat's continue-as-new handed this run
        /// (`resume`): the run goes on from it instead of from the first step.
        /// Absent for every other run.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        resume: Option<Box<Resume>>,
    },
    /// The decider took the execution up.
    WorkflowStarted {},
    /// Search attributes set (issue 28; `orbit_definition::search`): decided right after
    /// `WorkflowStarted` from the workflow's `search:` (`step` absent), and once a main
    /// step with `search:` succeeded (`step` names it). `values` holds what was set
    /// (`unset` for null); a value that did not fit its declared type, or whose template
    /// failed, is left out and named in `errors` with the reason. The store projects
    /// `values` into `execution_search` in the same commit.
    SearchAttributesUpserted {
        #[serde(default, skip_serializing_if = "Option::is_none")]
        step: Option<String>,
        values: BTreeMap<String, SearchValue>,
        #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
        errors: BTreeMap<String, String>,
    },
    /// The run asks for a slot of a workflow-level concurrency key (`concurrency:`, issue
    /// 27), before `WorkflowStarted`; keys are asked one at a time, in key order. `key` is
    /// scoped (`<workflow>/<value>`); `on_limit` is `queue`, `cancel_newest` or
    /// `cancel_in_progress`.
    ConcurrencySlotRequested { key: String, limit: u32, on_limit: String },
    /// The run holds a slot of `key` (recorded from the store's grant, an inbox entry).
    ConcurrencySlotGranted { key: String },
    /// A task attempt was offered to workers.
    StepScheduled {
        step: String,
        attempt: u32,
        input: Value,
        idempotency_key: String,
        redelivery: bool,
        /// Flow control evaluated for the attempt (issue 27); a retry records the unit's
        /// flow again unchanged, a redelivery too but for its sticky worker (dropped).
        /// Absent when nothing was declared and no priority other than the default applies.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        flow: Option<Flow>,
    },
    /// A worker took the attempt.
    StepDispatched {
        step: String,
        attempt: u32,
        token: String,
        worker_id: String,
        session: String,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        deadline: Option<u64>,
    },
    /// The unit produced its output.
    StepSucceeded {
        step: String,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        attempt: Option<u32>,
        output: Value,
    },
    /// One attempt failed (a worker error, `TIMEOUT` or `QUEUE_TIMEOUT`).
    StepAttemptFailed { step: String, attempt: u32, error: TaskError },
    /// The worker running the attempt was lost; the attempt will be redelivered.
    StepAttemptUncertain { step: String, attempt: u32, reason: String },
    /// A heartbeat that carried details.
    StepHeartbeat { step: String, attempt: u32, details: Value },
    /// Another attempt is due at `fire_at`.
    RetryScheduled { step: String, next_attempt: u32, delay_ms: u64, fire_at: u64 },
    /// The unit failed for good.
    StepFailed { step: String, error: TaskError },
    /// The unit failed for good, but its step has `continue_on_failure`: it counts as
    /// completed with `output` (`{failed: true, error: {code, message}}`), the body goes on,
    /// and it is never compensated. Recorded instead of `StepFailed`.
    StepFailureCaught { step: String, error: TaskError, output: Value },
    /// The unit failed for good, but its step has `on_failure`: recorded instead of
    /// `StepFailed`, the unit stays open while its failure branch runs (units
    /// `<unit>.on_failure.<id>`, `failure` = this error). The branch's end resolves it:
    /// `StepFailureCaught` with the branch's output, or `StepFailed` with the branch's error.
    StepFailureBranched { step: String, error: TaskError },
    /// The unit will not run (`when` was false, or a dependency failed in a handler).
    StepSkipped { step: String, reason: String },
    /// A `for_each` list was frozen.
    StepFanOut { step: String, items: Vec<Value> },
    /// The unit was cancelled while winding down.
    StepCancelled { step: String },
    /// A durable timer (sleep / until) started.
    TimerStarted { step: String, fire_at: u64 },
    /// A durable timer fired.
    TimerFired { step: String },
    /// An `await` unit began waiting for a signal.
    AwaitStarted {
        step: String,
        signal: String,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        timeout_at: Option<u64>,
    },
    /// A signal arrived (buffered until delivered).
    SignalReceived { name: String, payload: Value },
    /// A buffered signal went to an `await` unit or started an `on_signal` instance.
    SignalDelivered { name: String, seq: u64, step: String },
    /// Somebody asked to cancel the execution.
    CancelRequested { reason: String },
    /// An update passed its input contract and validator (`UpdateExecution`).
    UpdateAccepted {
        name: String,
        args: Value,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        update_id: Option<String>,
    },
    /// The update's reply; the caller receives `result`, or `error` when the handler's steps
    /// failed (code `UPDATE_FAILED`). An expression handler's reply is recorded with its
    /// acceptance (right after it, `accepted` unset); a handler with steps completes later,
    /// decided once its steps are resolved, and `accepted` is the seq of its
    /// `UpdateAccepted`.
    UpdateCompleted {
        name: String,
        #[serde(default)]
        result: Value,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        accepted: Option<u64>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        error: Option<TaskError>,
    },
    /// A result for a resolved unit or an unknown token: kept, never applied.
    StaleResultIgnored {
        #[serde(default, skip_serializing_if = "Option::is_none")]
        step: Option<String>,
        token: String,
        outcome: String,
    },
    /// The decider asked for a child execution.
    ChildStarted {
        step: String,
        child_id: String,
        workflow: String,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        version: Option<String>,
        input: Value,
    },
    /// The workflow timeout passed.
    WorkflowTimeoutReached {},
    /// The `output` expression failed; the execution winds down as a failure.
    OutputFailed { error: TaskError },
    /// A limit was exceeded; the execution winds down as a failure.
    LimitExceeded { limit: String, message: String },
    /// Compensation of these units (in this order) begins.
    CompensationStarted { reason: String, steps: Vec<String> },
    /// Every compensation task succeeded.
    CompensationCompleted {},
    /// A compensation task failed.
    CompensationFailed { step: String, error: TaskError },
    /// The `on.<outcome>` handlers begin.
    HandlersStarted { outcome: String },
    /// Terminal: success.
    WorkflowCompleted { output: Value },
    /// Terminal: failure.
    WorkflowFailed { error: TaskError, compensation: CompensationOutcome },
    /// Terminal: cancelled.
    WorkflowCancelled { reason: String, compensation: CompensationOutcome },
    /// Terminal: the workflow timeout passed.
    WorkflowTimedOut { compensation: CompensationOutcome },
    /// Terminal for the run: the execution goes on in `next_run` with `input`. A top-level
    /// repeat that continued the run near the history limit also hands over `resume`
    /// (see `resume`; `input` is then the run's own input), which the next run's
    /// `WorkflowCreated` carries.
    WorkflowContinuedAsNew {
        next_run: u32,
        input: Value,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        resume: Option<Box<Resume>>,
    },
    /// The run moved to another version of its workflow after a checked diff
    /// (`crate::migrate`). Recorded: replay applies it and goes on with the `to_hash`
    /// definition (`crate::replay::replay_defs`).
    DefinitionMigrated {
        from_version: String,
        to_version: String,
        from_hash: String,
        to_hash: String,
        /// Unit-key renames applied to the state: old step -> new step, each a
        /// body-qualified step name (`crate::unit::qualified_step`); only the step id part
        /// of each unit key of that body changes (`a[2]` -> `a2[2]`, `compensate:a` ->
        /// `compensate:a2`).
        #[serde(default)]
        renames: BTreeMap<String, String>,
        /// Unit keys cancelled by the migration (open units of steps the new version
        /// removed), as `StepCancelled` would.
        #[serde(default)]
        cancelled: Vec<String>,
        /// The checked diff, for people and the console (see `crate::migrate::Change`).
        #[serde(default)]
        changes: Vec<Change>,
        /// Outputs replaced by the target's migration hint (`migrations:`), by unit key as
        /// it is after `renames`: evaluated once when the migration was planned, applied
        /// as they are on replay. Left out of the JSON when empty.
        #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
        outputs: BTreeMap<String, Value>,
    },
    /// Terminal for the run: an operator reset the execution (`crate::restore`), which
    /// goes on in `next_run` from this run's state at `to_seq`. Also appended to a run
    /// that had already closed (a reset reopens a failed, cancelled or timed-out
    /// execution): it then changes nothing in the run's state.
    WorkflowReset { next_run: u32, to_seq: u64, reason: String },
    /// Recorded right after a copied history prefix (events `2..=through_seq` of
    /// `source_run` of `source_execution_id`, stored with origin `copied`): the run goes on
    /// from that state. A reset (same execution, the next run) or a fork (another
    /// execution, run 1). The fold forgets the `forgotten` units (open at the point, or
    /// undone by the source run's compensation, and every step depending on one), so the
    /// decider runs them again from their first attempt; marks the signals at the
    /// `redeliver` seqs undelivered again (they were delivered to forgotten units); and
    /// restarts the workflow's timeout clock (`started_at`).
    RunRestored {
        source_execution_id: String,
        source_run: u32,
        through_seq: u64,
        #[serde(default)]
        forgotten: Vec<String>,
        #[serde(default)]
        redeliver: Vec<u64>,
        #[serde(default)]
        reason: String,
    },
}

impl Event {
    /// The event's type name, as stored in `history_events.event_type`.
    #[must_use]
    pub fn type_name(&self) -> &'static str {
        macro_rules! names {
            ($($v:ident),* $(,)?) => {
                match self { $(Event::$v { .. } => stringify!($v),)* }
            };
        }
        names!(
            WorkflowCreated,
            WorkflowStarted,
            SearchAttributesUpserted,
            ConcurrencySlotRequested,
            ConcurrencySlotGranted,
            StepScheduled,
            StepDispatched,
            StepSucceeded,
            StepAttemptFailed,
            StepAttemptUncertain,
            StepHeartbeat,
            RetryScheduled,
            StepFailed,
            StepFailureCaught,
            StepFailureBranched,
            StepSkipped,
            StepFanOut,
            StepCancelled,
            TimerStarted,
            TimerFired,
            AwaitStarted,
            SignalReceived,
            SignalDelivered,
            CancelRequested,
            UpdateAccepted,
            UpdateCompleted,
            StaleResultIgnored,
            ChildStarted,
            WorkflowTimeoutReached,
            OutputFailed,
            LimitExceeded,
            CompensationStarted,
            CompensationCompleted,
            CompensationFailed,
            HandlersStarted,
            WorkflowCompleted,
            WorkflowFailed,
            WorkflowCancelled,
            WorkflowTimedOut,
            WorkflowContinuedAsNew,
            DefinitionMigrated,
            WorkflowReset,
            RunRestored,
        )
    }

    /// The unit key the event is about, if any.
    #[must_use]
    pub fn step(&self) -> Option<&str> {
        match self {
            Event::StepScheduled { step, .. }
            | Event::StepDispatched { step, .. }
            | Event::StepSucceeded { step, .. }
            | Event::StepAttemptFailed { step, .. }
            | Event::StepAttemptUncertain { step, .. }
            | Event::StepHeartbeat { step, .. }
            | Event::RetryScheduled { step, .. }
            | Event::StepFailed { step, .. }
            | Event::StepFailureCaught { step, .. }
            | Event::StepFailureBranched { step, .. }
            | Event::StepSkipped { step, .. }
            | Event::StepFanOut { step, .. }
            | Event::StepCancelled { step }
            | Event::TimerStarted { step, .. }
            | Event::TimerFired { step }
            | Event::AwaitStarted { step, .. }
            | Event::SignalDelivered { step, .. }
            | Event::ChildStarted { step, .. }
            | Event::CompensationFailed { step, .. } => Some(step),
            Event::StaleResultIgnored { step, .. } => step.as_deref(),
            _ => None,
        }
    }

    /// Whether this event ends the run.
    #[must_use]
    pub fn is_terminal(&self) -> bool {
        matches!(
            self,
            Event::WorkflowCompleted { .. }
                | Event::WorkflowFailed { .. }
                | Event::WorkflowCancelled { .. }
                | Event::WorkflowTimedOut { .. }
                | Event::WorkflowContinuedAsNew { .. }
                | Event::WorkflowReset { .. }
        )
    }
}

/// Who produced an event.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Origin {
    /// Recorded from a command (start, result, signal, dispatch, cancel).
    Recorded,
    /// Produced by the decider; the replay check recomputes these.
    Decided,
    /// Copied from another run's history by a reset or a fork (`crate::restore`): facts of
    /// that run, applied as they are by the replay check (the run they were decided in
    /// checks them).
    Copied,
}

/// An event with its place in the history of one run.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct HistoryEvent {
    /// 1-based position in the run's history.
    pub seq: u64,
    /// When it was committed, in epoch milliseconds (the decider's `now` for decided ones).
    pub timestamp_ms: u64,
    /// Recorded or decided.
    pub origin: Origin,
    /// The event.
    pub event: Event,
}
