//! Unit timers and retries: attempt and queue deadlines, the retry decision, backoff
//! expiry, redelivery of uncertain attempts, sleeps, await and child timeouts.

use super::Ctx;
use crate::event::{Event, TaskError};
use crate::state::{State, Unit, UnitStatus, Wait};
use crate::task_code::TaskCode;
use crate::unit::{retry_delay_ms, UnitKey};
use orbit_definition::{Definition, RetryPolicy, StepKind, DEFAULT_MAX_REDELIVERIES};
use serde_json::Value;

/// The code of an attempt failed because its worker was lost more than the step's
/// `retry.max_redeliveries` times (retryable under the step's retry policy).
pub const WORKER_LOST: &str = TaskCode::WorkerLost.as_str();

/// Timing settings of a unit, from its step (or its step's `compensate`).
pub(crate) struct Spec<'a> {
    pub retry: &'a RetryPolicy,
    pub timeout_ms: Option<u64>,
    pub queue_timeout_ms: Option<u64>,
}

pub(crate) fn spec<'a>(def: &'a Definition, key: &UnitKey) -> Option<Spec<'a>> {
    let step = def.find_step(&key.scope.body(), &key.step)?;
    if key.compensate {
        let c = step.compensate.as_ref()?;
        return Some(Spec { retry: &c.retry, timeout_ms: c.timeout_ms, queue_timeout_ms: None });
    }
    let timeout_ms = match step.kind {
        StepKind::Task { .. } | StepKind::Http { .. } => step.timeout_ms,
        _ => None,
    };
    Some(Spec { retry: &step.retry, timeout_ms, queue_timeout_ms: step.queue_timeout_ms })
}

/// Whether the unit is part of the work cancelled on wind-down (main body and signal
/// handler instances), as opposed to compensation and `on` handlers.
pub(crate) fn is_body_work(key: &str) -> bool {
    !key.starts_with("compensate:") && !key.starts_with("on:")
}

pub(crate) fn timers_and_retries(ctx: &Ctx<'_>) -> Vec<Event> {
    let mut out = Vec::new();
    let winding = ctx.state.winding.is_some();
    for (key, u) in ctx.state.open_units() {
        if winding && is_body_work(key) {
            continue;
        }
        let Some(parsed) = UnitKey::parse(key) else { continue };
        unit_round(ctx, key, &parsed, u, &mut out);
    }
    out
}

fn unit_round(ctx: &Ctx<'_>, key: &str, parsed: &UnitKey, u: &Unit, out: &mut Vec<Event>) {
    let now = ctx.now;
    let spec = spec(ctx.def, parsed);
    match u.status {
        UnitStatus::Dispatched if u.deadline.is_some_and(|d| now >= d) => {
            out.push(Event::StepAttemptFailed {
                step: key.into(),
                attempt: u.attempt,
                error: TaskCode::Timeout.retryable("the attempt timed out"),
            });
        }
        UnitStatus::Scheduled => {
            let qt = spec.as_ref().and_then(|s| s.queue_timeout_ms);
            if let (Some(qt), Some(at)) = (qt, u.scheduled_at) {
                if now >= at.saturating_add(qt) {
                    out.push(Event::StepAttemptFailed {
                        step: key.into(),
                        attempt: u.attempt,
                        error: TaskError::retryable(
                            "QUEUE_TIMEOUT",
                            "no worker started the task in time",
                        ),
                    });
                }
            }
        }
        UnitStatus::AttemptFailed => {
            let error = u.error.clone().unwrap_or_else(|| TaskCode::Unknown.retryable(""));
            let default = RetryPolicy::default();
            let policy = spec.as_ref().map_or(&default, |s| s.retry);
            let fatal = !error.retryable
                || TaskCode::parse(&error.code).is_some_and(TaskCode::never_retried)
                || policy.non_retryable.contains(&error.code)
                || u.attempt >= policy.max_attempts;
            if fatal {
                out.push(Event::StepFailed { step: key.into(), error });
            } else {
                let next_attempt = u.attempt + 1;
                let delay_ms = retry_delay_ms(
                    policy,
                    next_attempt,
                    u.idempotency_key.as_deref().unwrap_or(key),
                );
                out.push(Event::RetryScheduled {
                    step: key.into(),
                    next_attempt,
                    delay_ms,
                    fire_at: now.saturating_add(delay_ms),
                });
            }
        }
        UnitStatus::RetryWait if u.fire_at.is_some_and(|f| now >= f) => {
            out.push(reschedule(key, u, u.attempt + 1, false));
        }
        UnitStatus::Uncertain => {
            let max = spec.as_ref().map_or(DEFAULT_MAX_REDELIVERIES, |s| s.retry.max_redeliveries);
            if u.losses > max {
                out.push(Event::StepAttemptFailed {
                    step: key.into(),
                    attempt: u.attempt,
                    error: TaskCode::WorkerLost.retryable(format!(
                        "the worker running attempt {} was lost {} times (max_redeliveries {max})",
                        u.attempt, u.losses
                    )),
                });
            } else {
                out.push(reschedule(key, u, u.attempt, true));
            }
        }
        UnitStatus::Waiting if u.fire_at.is_some_and(|f| now >= f) => match &u.wait {
            Some(Wait::Timer) => {
                out.push(Event::TimerFired { step: key.into() });
                out.push(Event::StepSucceeded {
                    step: key.into(),
                    attempt: None,
                    output: Value::Null,
                });
            }
            Some(Wait::Signal { name, .. }) => out.push(Event::StepFailed {
                step: key.into(),
                error: TaskCode::Timeout.fatal(format!("no `{name}` signal arrived in time")),
            }),
            _ => {}
        },
        _ => {}
    }
}

fn reschedule(key: &str, u: &Unit, attempt: u32, redelivery: bool) -> Event {
    Event::StepScheduled {
        step: key.into(),
        attempt,
        input: u.input.clone().unwrap_or(Value::Null),
        idempotency_key: u.idempotency_key.clone().unwrap_or_default(),
        redelivery,
        // Evaluated once, at the first attempt: the keys stay those the attempt held. A
        // redelivery (its worker was lost) no longer waits for the sticky worker.
        flow: if redelivery {
            crate::decide::flow::unstuck(u.flow.as_ref())
        } else {
            u.flow.clone()
        },
    }
}

/// Every pending unit deadline (see [`super::next_timer`]).
pub(crate) fn deadlines<'a>(
    def: &'a Definition,
    state: &'a State,
) -> impl Iterator<Item = u64> + 'a {
    let winding = state.winding.is_some();
    state.open_units().filter_map(move |(key, u)| {
        if winding && is_body_work(key) {
            return None;
        }
        match u.status {
            UnitStatus::Dispatched => u.deadline,
            UnitStatus::Scheduled => {
                let parsed = UnitKey::parse(key)?;
                let qt = spec(def, &parsed)?.queue_timeout_ms?;
                u.scheduled_at.map(|at| at.saturating_add(qt))
            }
            UnitStatus::RetryWait | UnitStatus::Waiting => u.fire_at,
            _ => None,
        }
    })
}
