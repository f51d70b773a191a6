//! Commands from outside (start, dispatch, results, heartbeats, signals, cancel, child
//! results) turned into recorded events, with the checks a single server would make.
//!
//! Rule 4 lives here: a success for any token ever issued to an unresolved unit is accepted
//! (the work happened); a failure counts only for the attempt in flight; anything for a
//! resolved unit or an unknown token becomes `StaleResultIgnored`.

use crate::decide::effective_limits;
use crate::event::{Event, ParentRef, TaskError};
use crate::state::{State, Status, UnitStatus};
use crate::task_code::TaskCode;
use crate::unit::UnitKey;
use orbit_codes::ErrorCode;
use orbit_definition::{Definition, Limits, StepKind};
use serde_json::Value;

pub(crate) use crate::refusal::{check_size, refuse};
pub use crate::refusal::{payload_code, payload_error, CommandError};

/// The reason (in `Command::Uncertain`) and then the code of an attempt whose worker sent
/// no heartbeat within the step's `heartbeat_timeout`.
pub const HEARTBEAT_TIMEOUT: &str = TaskCode::HeartbeatTimeout.as_str();

/// A command for one execution.
#[derive(Debug, Clone, PartialEq)]
pub enum Command {
    /// A worker took a scheduled unit.
    Dispatched {
        /// Unit key.
        step: String,
        /// Token issued for this attempt.
        token: String,
        /// Worker id.
        worker_id: String,
        /// Worker session.
        session: String,
    },
    /// A worker finished an attempt.
    Complete {
        /// Token of the attempt.
        token: String,
        /// Output.
        output: Value,
    },
    /// A worker failed an attempt.
    Fail {
        /// Token of the attempt.
        token: String,
        /// Error.
        error: TaskError,
    },
    /// A worker heartbeat for an attempt.
    Heartbeat {
        /// Token of the attempt.
        token: String,
        /// Progress details, recorded when present.
        details: Option<Value>,
    },
    /// The session running an attempt went silent: lost (`SESSION_LOST`, redelivered up
    /// to the step's `retry.max_redeliveries`) or without a heartbeat in time
    /// ([`HEARTBEAT_TIMEOUT`], the attempt fails).
    Uncertain {
        /// Token of the attempt.
        token: String,
        /// Why (`SESSION_LOST`, `HEARTBEAT_TIMEOUT`).
        reason: String,
    },
    /// A signal.
    Signal {
        /// Signal name.
        name: String,
        /// Payload.
        payload: Value,
    },
    /// A cancel request.
    Cancel {
        /// Reason.
        reason: String,
    },
    /// An update: a signal with a reply (see [`crate::update`]).
    Update {
        /// Update name.
        name: String,
        /// Argument.
        args: Value,
        /// The caller's idempotency id, recorded in `UpdateAccepted`.
        update_id: Option<String>,
    },
    /// The store granted the run a slot of a workflow-level concurrency key it asked for
    /// (`ConcurrencySlotRequested`).
    SlotGranted {
        /// The scoped key.
        key: String,
    },
    /// A child execution closed.
    ChildClosed {
        /// The parent's unit.
        step: String,
        /// The child's final status.
        status: Status,
        /// The child's output, when completed.
        output: Option<Value>,
        /// The child's error, when failed.
        error: Option<TaskError>,
    },
}

/// The first event of an execution run: checks the input against the contract and the
/// start request's `priority` (1..=5; `None`: the request gave none, and the workflow's
/// default applies).
///
/// # Errors
/// `INVALID_INPUT` (contract), `PAYLOAD_TOO_LARGE` or `PAYLOAD_TOO_DEEP`;
/// `INVALID_ARGUMENT` for a priority outside 1..=5.
#[allow(clippy::too_many_arguments)]
pub fn start(
    def: &Definition,
    execution_id: &str,
    input: Value,
    parent: Option<ParentRef>,
    schedule_id: Option<String>,
    run: u32,
    server: &Limits,
    priority: Option<u8>,
) -> Result<Event, CommandError> {
    if let Some(p) = priority.filter(|p| !orbit_definition::flow::is_priority(u64::from(*p))) {
        return Err(refuse(
            ErrorCode::InvalidArgument,
            format!("priority {p} is out of range; expected 1 (taken first) to 5 (taken last)"),
        ));
    }
    let input = match &def.input {
        Some(contract) => contract.apply(input).map_err(|v| {
            refuse(
                ErrorCode::InvalidInput,
                v.iter().map(ToString::to_string).collect::<Vec<_>>().join("; "),
            )
        })?,
        None => input,
    };
    check_size(&effective_limits(server, def), &input, "input")?;
    Ok(Event::WorkflowCreated {
        execution_id: execution_id.into(),
        workflow: def.name.clone(),
        version: def.version.clone(),
        definition_hash: def.hash.clone(),
        input,
        parent,
        schedule_id,
        run,
        update_ids: Vec::new(),
        priority,
        memo: None,
        resume: None,
    })
}

/// The first events of the next run after `WorkflowContinuedAsNew`: creation with the new
/// input (and the finished run's priority), then every signal the finished run had not
/// delivered.
#[must_use]
pub fn next_run(def: &Definition, finished: &State) -> Vec<Event> {
    let mut events = vec![Event::WorkflowCreated {
        execution_id: finished.execution_id.clone(),
        workflow: def.name.clone(),
        version: def.version.clone(),
        definition_hash: def.hash.clone(),
        input: finished.next_input.clone().unwrap_or(Value::Null),
        parent: finished.parent.clone(),
        schedule_id: finished.schedule_id.clone(),
        run: finished.run + 1,
        update_ids: crate::update::carried(finished),
        priority: finished.priority,
        memo: finished.memo.clone(),
        resume: finished.next_resume.clone(),
    }];
    events.extend(
        finished
            .signals
            .iter()
            .filter(|s| !s.delivered)
            .map(|s| Event::SignalReceived { name: s.name.clone(), payload: s.payload.clone() }),
    );
    events
}

/// Turns a command received at `now` into recorded events (empty when it changes nothing, e.g. a repeated
/// cancel).
///
/// # Errors
/// `EXECUTION_FINISHED`, `UNKNOWN_SIGNAL`, `SIGNAL_PAYLOAD_INVALID`, `PAYLOAD_TOO_LARGE`,
/// `PAYLOAD_TOO_DEEP`,
/// `INVALID_ARGUMENT` (dispatch of a unit that is not scheduled).
pub fn accept(
    def: &Definition,
    state: &State,
    command: Command,
    now: u64,
    server: &Limits,
) -> Result<Vec<Event>, CommandError> {
    let mut events = recorded(def, state, command, now, server)?;
    // A child's end fails its unit here, not in the decider.
    crate::catch::rewrite(def, state, &mut events);
    Ok(events)
}

fn recorded(
    def: &Definition,
    state: &State,
    command: Command,
    now: u64,
    server: &Limits,
) -> Result<Vec<Event>, CommandError> {
    let limits = effective_limits(server, def);
    let open = !state.status().is_closed() && state.status.is_some();
    match command {
        Command::Dispatched { step, token, worker_id, session } => {
            let unit = state.unit(&step).filter(|u| u.status == UnitStatus::Scheduled);
            let Some(unit) = unit.filter(|_| open) else {
                return Err(refuse(
                    ErrorCode::InvalidArgument,
                    format!("unit `{step}` is not waiting for a worker"),
                ));
            };
            let timeout = UnitKey::parse(&step).and_then(|k| crate::decide::unit_timeout(def, &k));
            Ok(vec![Event::StepDispatched {
                attempt: unit.attempt,
                deadline: timeout.map(|t| now.saturating_add(t)),
                step,
                token,
                worker_id,
                session,
            }])
        }
        Command::Complete { token, output } => {
            let Some((step, attempt)) = live_token(state, &token, true) else {
                return Ok(vec![stale(state, token, "completed")]);
            };
            let contract = output_contract(def, &step);
            let checked = match contract {
                Some(c) => c
                    .apply(output)
                    .map_err(|v| v.iter().map(ToString::to_string).collect::<Vec<_>>().join("; ")),
                None => Ok(output),
            };
            Ok(vec![match checked {
                Err(message) => Event::StepAttemptFailed {
                    step,
                    attempt,
                    error: TaskCode::OutputContractViolation.fatal(message),
                },
                Ok(output) => match payload_error(&limits, &output, "output") {
                    Some(error) => Event::StepAttemptFailed { step, attempt, error },
                    None => Event::StepSucceeded { step, attempt: Some(attempt), output },
                },
            }])
        }
        Command::Fail { token, error } => Ok(vec![match live_token(state, &token, false) {
            Some((step, attempt)) => {
                // Details over the limits are not recorded; the attempt fails with the payload
                // code instead, keeping the worker's code in the message.
                let bad = error
                    .details
                    .as_ref()
                    .and_then(|d| payload_error(&limits, d, &format!("details of {}", error.code)));
                Event::StepAttemptFailed { step, attempt, error: bad.unwrap_or(error) }
            }
            None => stale(state, token, "failed"),
        }]),
        Command::Heartbeat { token, details } => {
            Ok(match (live_token(state, &token, false), details) {
                (Some((step, attempt)), Some(details)) => {
                    match payload_error(&limits, &details, "heartbeat details") {
                        Some(error) => vec![Event::StepAttemptFailed { step, attempt, error }],
                        None => vec![Event::StepHeartbeat { step, attempt, details }],
                    }
                }
                _ => vec![],
            })
        }
        Command::Uncertain { token, reason } => Ok(match live_token(state, &token, false) {
            // A missed heartbeat fails the attempt (retryable, under the step's retry
            // policy), as worker.proto says: the worker is alive but the attempt is not
            // making progress, and offering it again as is could hang forever.
            Some((step, attempt)) if reason == HEARTBEAT_TIMEOUT => {
                vec![Event::StepAttemptFailed {
                    step,
                    attempt,
                    error: TaskCode::HeartbeatTimeout.retryable(
                        "no heartbeat from the worker within the step's heartbeat_timeout",
                    ),
                }]
            }
            Some((step, attempt)) => vec![Event::StepAttemptUncertain { step, attempt, reason }],
            None => vec![],
        }),
        Command::Signal { name, payload } => {
            if !open {
                return Err(refuse(ErrorCode::ExecutionFinished, "the execution has finished"));
            }
            let Some(contract) = def.signals.get(&name) else {
                return Err(refuse(
                    ErrorCode::UnknownSignal,
                    format!("workflow `{}` has no signal `{name}`", def.name),
                ));
            };
            let payload = match contract {
                Some(c) => c.apply(payload).map_err(|v| {
                    refuse(
                        ErrorCode::SignalPayloadInvalid,
                        v.iter().map(ToString::to_string).collect::<Vec<_>>().join("; "),
                    )
                })?,
                None => payload,
            };
            check_size(&limits, &payload, "signal payload")?;
            Ok(vec![Event::SignalReceived { name, payload }])
        }
        Command::Update { name, args, update_id } => {
            // A repeated update id was accepted already: its first acceptance answers it.
            if update_id.as_deref().and_then(|id| crate::update::accepted(state, id)).is_some() {
                return Ok(vec![]);
            }
            if !open {
                return Err(refuse(ErrorCode::ExecutionFinished, "the execution has finished"));
            }
            crate::update::accept(def, state, &limits, name, args, update_id)
        }
        Command::Cancel { reason } => {
            if !open {
                return Err(refuse(ErrorCode::ExecutionFinished, "the execution has finished"));
            }
            Ok(if state.cancel_requested.is_some() {
                vec![]
            } else {
                vec![Event::CancelRequested { reason }]
            })
        }
        // A grant for a key the run does not wait for (a repeated entry, a closed run) changes
        // nothing.
        Command::SlotGranted { key } => Ok(if open && state.slots.get(&key) == Some(&false) {
            vec![Event::ConcurrencySlotGranted { key }]
        } else {
            vec![]
        }),
        Command::ChildClosed { step, status, output, error } => {
            let waiting = state.unit(&step).is_some_and(|u| !u.status.is_resolved());
            if !waiting || !open {
                return Ok(vec![Event::StaleResultIgnored {
                    step: Some(step),
                    token: String::new(),
                    outcome: status.as_str().to_lowercase(),
                }]);
            }
            Ok(vec![match status {
                Status::Completed => {
                    let output = output.unwrap_or(Value::Null);
                    // The child ran under its own limits; the parent records under its own.
                    match payload_error(&limits, &output, "child output") {
                        Some(error) => Event::StepFailed { step, error },
                        None => Event::StepSucceeded { step, attempt: None, output },
                    }
                }
                other => {
                    let cause =
                        error.map(|e| format!(": {} {}", e.code, e.message)).unwrap_or_default();
                    Event::StepFailed {
                        step,
                        error: TaskError::fatal(
                            "CHILD_FAILED",
                            format!("child ended {}{cause}", other.as_str()),
                        ),
                    }
                }
            }])
        }
    }
}

/// The unit and attempt a token may still report for. Successes count for any token of an
/// unresolved unit; failures only for the attempt in flight.
fn live_token(state: &State, token: &str, success: bool) -> Option<(String, u32)> {
    let step = state.tokens.get(token)?;
    let unit = state.unit(step).filter(|u| !u.status.is_resolved())?;
    if state.status().is_closed() {
        return None;
    }
    let attempt = unit.tokens.iter().find(|(t, _)| t == token).map(|(_, a)| *a)?;
    let current = unit.token.as_deref() == Some(token) && unit.status == UnitStatus::Dispatched;
    (success || current).then(|| (step.clone(), attempt))
}

fn stale(state: &State, token: String, outcome: &str) -> Event {
    Event::StaleResultIgnored {
        step: state.tokens.get(&token).cloned(),
        token,
        outcome: outcome.into(),
    }
}

fn output_contract<'a>(def: &'a Definition, step: &str) -> Option<&'a orbit_definition::Contract> {
    let key = UnitKey::parse(step)?;
    let s = def.find_step(&key.scope.body(), &key.step)?;
    let task = if key.compensate {
        &s.compensate.as_ref()?.task
    } else {
        match &s.kind {
            StepKind::Task { task } => task,
            _ => return None,
        }
    };
    def.tasks.get(task)?.output.as_ref()
}
