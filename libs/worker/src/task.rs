//! What a task handler sees ([`TaskContext`]) and returns ([`TaskFailure`] on error).

use std::collections::HashMap;
use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use orbit_api::v1::server_message;
use serde::de::DeserializeOwned;
use serde_json::Value;
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

use crate::value;

/// The code of a failure the worker reports for a handler that panicked or returned an
/// error converted with `?` (the SDK default).
pub const UNHANDLED_EXCEPTION: &str = "UNHANDLED_EXCEPTION";

/// The code the worker reports for a task it stopped because the server sent `Cancel`.
pub const CANCELLED: &str = "CANCELLED";

/// The code the worker reports when a handler's input does not deserialize.
pub const INVALID_INPUT: &str = "INVALID_INPUT";

/// The code the worker reports for a task it has no handler for (name and version).
pub const TASK_NOT_REGISTERED: &str = "TASK_NOT_REGISTERED";

/// The code the worker reports for a task delivered without a free credit.
pub const WORKER_OVER_CAPACITY: &str = "WORKER_OVER_CAPACITY";

/// A failed task attempt, reported to the server as `Fail{error}` (`orbit.v1.TaskError`).
///
/// Any `std::error::Error` converts into one with `?`: code [`UNHANDLED_EXCEPTION`],
/// retryable. Use [`TaskFailure::fatal`] for errors no retry can fix.
#[derive(Debug, Clone, PartialEq)]
pub struct TaskFailure {
    /// A stable, upper-snake-case code, for example `CARD_DECLINED`. Must not be empty
    /// (an empty code is reported as [`UNHANDLED_EXCEPTION`]).
    pub code: String,
    /// A human-readable description.
    pub message: String,
    /// Whether another attempt may succeed.
    pub retryable: bool,
    /// Optional structured details (boxed to keep `Result<_, TaskFailure>` small).
    pub details: Option<Box<Value>>,
}

impl TaskFailure {
    /// A failure with the given code, message and retryability.
    pub fn new(code: impl Into<String>, message: impl Into<String>, retryable: bool) -> Self {
        Self { code: code.into(), message: message.into(), retryable, details: None }
    }

    /// A failure another attempt may fix.
    pub fn retryable(code: impl Into<String>, message: impl Into<String>) -> Self {
        Self::new(code, message, true)
    }

    /// A failure no retry can fix: the step fails at once.
    pub fn fatal(code: impl Into<String>, message: impl Into<String>) -> Self {
        Self::new(code, message, false)
    }

    /// An [`UNHANDLED_EXCEPTION`] (retryable), as reported for panics and `?` errors.
    pub fn unhandled(message: impl Into<String>) -> Self {
        Self::retryable(UNHANDLED_EXCEPTION, message)
    }

    /// The same failure with structured details.
    #[must_use]
    pub fn with_details(mut self, details: Value) -> Self {
        self.details = Some(Box::new(details));
        self
    }
}

impl fmt::Display for TaskFailure {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.code, self.message)
    }
}

impl<E: std::error::Error> From<E> for TaskFailure {
    fn from(error: E) -> Self {
        Self::unhandled(error.to_string())
    }
}

/// The boxed future a handler returns.
pub(crate) type HandlerFuture = Pin<Box<dyn Future<Output = Result<Value, TaskFailure>> + Send>>;

/// A type-erased task handler.
pub(crate) type Handler = Arc<dyn Fn(TaskContext) -> HandlerFuture + Send + Sync>;

/// Something a running task tells the session loop.
#[derive(Debug)]
pub(crate) enum Event {
    /// The task's future ended.
    Finished {
        /// The task token.
        token: String,
        /// How it ended.
        outcome: Outcome,
    },
    /// The handler called [`TaskContext::heartbeat`].
    Heartbeat {
        /// The task token.
        token: String,
        /// Progress details; unset records nothing.
        details: Option<prost_types::Value>,
    },
}

/// How a task's future ended.
#[derive(Debug)]
pub(crate) enum Outcome {
    /// The handler returned.
    Returned(Result<Value, TaskFailure>),
    /// The handler panicked, with the panic message.
    Panicked(String),
    /// The task was cancelled by the server before the handler returned.
    Cancelled,
}

/// One task attempt as seen by its handler.
///
/// Cheap to clone; clones share the cancellation token and the heartbeat channel.
#[derive(Clone)]
pub struct TaskContext {
    token: String,
    execution_id: String,
    workflow: String,
    step: String,
    task: String,
    version: String,
    input: Value,
    idempotency_key: String,
    attempt: u32,
    redelivery: bool,
    deadline: Option<SystemTime>,
    heartbeat_timeout: Option<Duration>,
    traceparent: String,
    tracestate: String,
    cancel: CancellationToken,
    events: mpsc::UnboundedSender<Event>,
}

impl fmt::Debug for TaskContext {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("TaskContext")
            .field("execution_id", &self.execution_id)
            .field("workflow", &self.workflow)
            .field("step", &self.step)
            .field("task", &self.task)
            .field("version", &self.version)
            .field("attempt", &self.attempt)
            .field("redelivery", &self.redelivery)
            .field("idempotency_key", &self.idempotency_key)
            .finish_non_exhaustive()
    }
}

impl TaskContext {
    /// Builds the context of a delivered task.
    pub(crate) fn new(
        task: &server_message::Task,
        cancel: CancellationToken,
        events: mpsc::UnboundedSender<Event>,
    ) -> Self {
        let trace = task.trace_context.clone().unwrap_or_default();
        Self {
            token: task.token.clone(),
            execution_id: task.execution_id.clone(),
            workflow: task.workflow.clone(),
            step: task.step.clone(),
            task: task.task.clone(),
            version: task.version.clone(),
            input: value::from_proto_opt(task.input.as_ref()),
            idempotency_key: task.idempotency_key.clone(),
            attempt: task.attempt,
            redelivery: task.redelivery,
            deadline: task.deadline.and_then(|t| SystemTime::try_from(t).ok()),
            heartbeat_timeout: task.heartbeat_timeout.and_then(|d| Duration::try_from(d).ok()),
            traceparent: trace.traceparent,
            tracestate: trace.tracestate,
            cancel,
            events,
        }
    }

    /// The delivery token (opaque; quoted in results and heartbeats by the worker).
    pub fn token(&self) -> &str {
        &self.token
    }

    /// The execution the task belongs to.
    pub fn execution_id(&self) -> &str {
        &self.execution_id
    }

    /// The workflow name of the execution.
    pub fn workflow(&self) -> &str {
        &self.workflow
    }

    /// The unit key, for example `charge`, `reserve[2]` or `compensate:charge`.
    pub fn step(&self) -> &str {
        &self.step
    }

    /// The task name.
    pub fn task(&self) -> &str {
        &self.task
    }

    /// The task contract version.
    pub fn version(&self) -> &str {
        &self.version
    }

    /// The task input (`null` when unset).
    pub fn input(&self) -> &Value {
        &self.input
    }

    /// The task input deserialized into `T`; a mismatch is a non-retryable
    /// [`INVALID_INPUT`] failure, so `ctx.input_as::<Order>()?` reads well in a handler.
    pub fn input_as<T: DeserializeOwned>(&self) -> Result<T, TaskFailure> {
        T::deserialize(&self.input).map_err(|e| TaskFailure::fatal(INVALID_INPUT, e.to_string()))
    }

    /// A key stable across retries and redeliveries of this unit, for downstream
    /// idempotency.
    pub fn idempotency_key(&self) -> &str {
        &self.idempotency_key
    }

    /// The attempt number, starting at 1.
    pub fn attempt(&self) -> u32 {
        self.attempt
    }

    /// True when this attempt was delivered before to a worker that was lost: the work
    /// may have happened already.
    pub fn redelivery(&self) -> bool {
        self.redelivery
    }

    /// When the attempt times out on the server (`TIMEOUT`); `None` when the step has no
    /// timeout. The worker does not enforce it: a result after it is recorded and ignored.
    pub fn deadline(&self) -> Option<SystemTime> {
        self.deadline
    }

    /// The step's heartbeat timeout, if any: call [`TaskContext::heartbeat`] more often
    /// than this in long handlers. (The worker also heartbeats every in-flight task every
    /// `Welcome.heartbeat_interval` on its own.)
    pub fn heartbeat_timeout(&self) -> Option<Duration> {
        self.heartbeat_timeout
    }

    /// The W3C `traceparent` of the step, empty when not traced.
    pub fn traceparent(&self) -> &str {
        &self.traceparent
    }

    /// The W3C `tracestate` of the step, empty when absent.
    pub fn tracestate(&self) -> &str {
        &self.tracestate
    }

    /// Cancelled when the server sends `Cancel` for this task (or the worker gives up on
    /// it). The handler's future is dropped at that point anyway; the token is for work the
    /// handler spawned elsewhere.
    pub fn cancellation(&self) -> &CancellationToken {
        &self.cancel
    }

    /// True once the task was cancelled.
    pub fn is_cancelled(&self) -> bool {
        self.cancel.is_cancelled()
    }

    /// Sends a `Heartbeat` for this task with progress details, recorded as a
    /// `StepHeartbeat` event; `Value::Null` keeps the attempt alive without recording
    /// anything. Best effort: dropped while the worker is disconnected or after the task
    /// finished. Never blocks.
    pub fn heartbeat(&self, details: Value) {
        // Details over the payload limits would fail the attempt on the server: keep the
        // attempt alive without them.
        let details = match value::refused(&details, "heartbeat details") {
            Some(refused) => {
                tracing::warn!(token = %self.token, error = %refused, "heartbeat details dropped");
                None
            }
            None => value::to_proto_opt(&details),
        };
        let _ = self.events.send(Event::Heartbeat { token: self.token.clone(), details });
    }
}

/// Task handlers by (name, version).
pub(crate) type Handlers = HashMap<(String, String), Handler>;
