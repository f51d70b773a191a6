//! The parts of a run's state: its status, its units (steps, attempts, children, sleeps,
//! waits) and what they wait for, received signals and the wind-down record.

use crate::event::{CompensationOutcome, TaskError};
use crate::flow::Flow;
use orbit_definition::Outcome;
use serde::Serialize;
use serde_json::Value;

/// Execution (run) status.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, serde::Deserialize)]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
pub enum Status {
    /// No `WorkflowCreated` yet.
    Pending,
    /// Running.
    Running,
    /// Winding down: cancelling, compensating, running `on` handlers.
    Compensating,
    /// Terminal: success.
    Completed,
    /// Terminal: failure.
    Failed,
    /// Terminal: cancelled.
    Cancelled,
    /// Terminal: workflow timeout.
    TimedOut,
    /// Terminal for this run; the execution goes on in the next run.
    ContinuedAsNew,
    /// Parked by its owner after repeated failures (poison quarantine): a projection-level
    /// state the owner sets without running the engine; no history fold produces it. Not
    /// closed: an operator resumes or terminates it.
    Suspended,
}

impl Status {
    /// The API name (`RUNNING`, ...).
    #[must_use]
    pub fn as_str(self) -> &'static str {
        match self {
            Status::Pending => "PENDING",
            Status::Running => "RUNNING",
            Status::Compensating => "COMPENSATING",
            Status::Completed => "COMPLETED",
            Status::Failed => "FAILED",
            Status::Cancelled => "CANCELLED",
            Status::TimedOut => "TIMED_OUT",
            Status::ContinuedAsNew => "CONTINUED_AS_NEW",
            Status::Suspended => "SUSPENDED",
        }
    }

    /// Every status.
    pub const ALL: &'static [Status] = &[
        Status::Pending,
        Status::Running,
        Status::Compensating,
        Status::Completed,
        Status::Failed,
        Status::Cancelled,
        Status::TimedOut,
        Status::ContinuedAsNew,
        Status::Suspended,
    ];

    /// Parses an API name; `None` for anything else (never a default).
    #[must_use]
    pub fn parse(name: &str) -> Option<Status> {
        Status::ALL.iter().copied().find(|s| s.as_str() == name)
    }

    /// Whether the run has ended.
    #[must_use]
    pub fn is_closed(self) -> bool {
        !matches!(
            self,
            Status::Pending | Status::Running | Status::Compensating | Status::Suspended
        )
    }
}

/// Status of one unit.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum UnitStatus {
    /// Offered to workers.
    Scheduled,
    /// A worker has it.
    Dispatched,
    /// Done, with an output.
    Succeeded,
    /// The last attempt failed; the decider picks retry or failure next.
    AttemptFailed,
    /// Waiting for the retry backoff.
    RetryWait,
    /// Failed for good.
    Failed,
    /// The worker was lost; the decider redelivers next.
    Uncertain,
    /// Waiting for a timer, a signal, a child or fan-out elements.
    Waiting,
    /// Not run.
    Skipped,
    /// Cancelled while winding down.
    Cancelled,
}

impl UnitStatus {
    /// Whether the unit is resolved (nothing more will happen to it).
    #[must_use]
    pub fn is_resolved(self) -> bool {
        matches!(
            self,
            UnitStatus::Succeeded
                | UnitStatus::Failed
                | UnitStatus::Skipped
                | UnitStatus::Cancelled
        )
    }

    /// The lowercase name, as `steps.<id>.status` reads it.
    #[must_use]
    pub fn as_str(self) -> &'static str {
        match self {
            UnitStatus::Scheduled => "scheduled",
            UnitStatus::Dispatched => "dispatched",
            UnitStatus::Succeeded => "succeeded",
            UnitStatus::AttemptFailed => "attempt_failed",
            UnitStatus::RetryWait => "retry_wait",
            UnitStatus::Failed => "failed",
            UnitStatus::Uncertain => "uncertain",
            UnitStatus::Waiting => "waiting",
            UnitStatus::Skipped => "skipped",
            UnitStatus::Cancelled => "cancelled",
        }
    }
}

/// What a waiting unit waits for.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Wait {
    /// A durable timer.
    Timer,
    /// A signal of this name; `since` orders waiters (oldest first).
    Signal {
        /// Signal name.
        name: String,
        /// History seq of the `AwaitStarted`.
        since: u64,
    },
    /// A child execution.
    Child(String),
    /// Its `for_each` elements.
    Elements,
    /// Its failure branch (`on_failure`), after its own failure (`error` holds it).
    OnFailure,
}

/// One unit's state.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Unit {
    /// Status.
    pub status: UnitStatus,
    /// Current attempt (1-based); 0 for units that are not tasks.
    pub attempt: u32,
    /// Input of the current attempt.
    pub input: Option<Value>,
    /// Output once succeeded.
    pub output: Option<Value>,
    /// Last error.
    pub error: Option<TaskError>,
    /// Every token issued, with its attempt.
    pub tokens: Vec<(String, u32)>,
    /// The token of the attempt in flight.
    pub token: Option<String>,
    /// The worker (its `Hello.worker_id`) the attempt in flight was dispatched to.
    pub worker_id: Option<String>,
    /// Idempotency key (tasks).
    pub idempotency_key: Option<String>,
    /// Whether the current offer is a redelivery.
    pub redelivery: bool,
    /// When the current offer was scheduled.
    pub scheduled_at: Option<u64>,
    /// Attempt deadline of the dispatched attempt.
    pub deadline: Option<u64>,
    /// When the unit's timer fires: sleep end, retry due, await timeout, child timeout.
    pub fire_at: Option<u64>,
    /// What a waiting unit waits for.
    pub wait: Option<Wait>,
    /// Times the current attempt's worker was lost (`StepAttemptUncertain`): bounded by
    /// the step's `retry.max_redeliveries`.
    #[serde(skip)]
    pub losses: u32,
    /// Flow control recorded with the last `StepScheduled` (issue 27): what a retry or a
    /// redelivery records again.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub flow: Option<Flow>,
}

impl Unit {
    pub(super) fn new(status: UnitStatus) -> Unit {
        Unit {
            status,
            attempt: 0,
            input: None,
            output: None,
            error: None,
            tokens: Vec::new(),
            token: None,
            worker_id: None,
            idempotency_key: None,
            redelivery: false,
            scheduled_at: None,
            deadline: None,
            fire_at: None,
            wait: None,
            losses: 0,
            flow: None,
        }
    }
}

/// A received signal.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Signal {
    /// History seq of its `SignalReceived`.
    pub seq: u64,
    /// Name.
    pub name: String,
    /// Payload (contract defaults applied).
    pub payload: Value,
    /// Whether it went to an await or a handler.
    pub delivered: bool,
}

/// Why the execution is winding down.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Winding {
    /// Failure, cancel or timeout.
    #[serde(serialize_with = "outcome_name")]
    pub outcome: Outcome,
    /// What caused it (for failure: the step's error; `failure` in handler scope).
    pub error: TaskError,
    /// The step whose failure began it (a failure by a step only; the projection's
    /// `failed_step`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub step: Option<String>,
    /// Units to compensate, in order, once `CompensationStarted` is recorded.
    pub compensation: Option<Vec<String>>,
    /// The compensation result once known.
    pub compensation_outcome: Option<CompensationOutcome>,
    /// Whether `HandlersStarted` was recorded.
    pub handlers_started: bool,
}

#[allow(clippy::trivially_copy_pass_by_ref)]
fn outcome_name<S: serde::Serializer>(o: &Outcome, s: S) -> Result<S::Ok, S::Error> {
    s.serialize_str(o.as_str())
}
