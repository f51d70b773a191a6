//! What a run's new events cause outside its history: task offers, cancelled offers,
//! children to start or cancel, a parent to notify, the execution's timer, continue-as-new
//! and built-in adapters to run. Derived once, here, for both the served owner (which maps
//! each [`Effect`] onto its commit batch) and the simulator (which carries them out in
//! memory), so a workflow behaves the same in both.

use crate::event::{Event, HistoryEvent, ParentRef, TaskError};
use crate::state::{State, Status, UnitStatus, Wait};
use crate::task_code::TaskCode;
use crate::unit::UnitKey;
use orbit_definition::{Definition, StepKind};
use serde_json::Value;

/// Task name (and queue) of built-in HTTP steps.
pub const HTTP_TASK: &str = "orbit.http";

/// Task version of built-in HTTP steps.
pub const HTTP_TASK_VERSION: &str = "1";

/// The code of the non-retryable failure recorded for an offer of a disabled adapter.
pub const ADAPTER_DISABLED: &str = TaskCode::AdapterDisabled.as_str();

/// The reason sent with the cancel of a child whose parent unit was cancelled.
pub const CHILD_CANCEL_REASON: &str = "the parent is winding down";

/// The built-in adapters a host can run.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Capabilities {
    /// Built-in `http` steps. Off: their offers fail at once with `ADAPTER_DISABLED` instead
    /// of waiting in a queue nobody serves.
    pub http: bool,
}

/// A built-in adapter.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Adapter {
    /// The `http` step kind, run as task [`HTTP_TASK`].
    Http,
}

/// One attempt of a unit offered to whoever runs it.
#[derive(Debug, Clone, PartialEq)]
pub struct TaskOffer {
    /// The unit key.
    pub unit: String,
    /// The attempt number.
    pub attempt: u32,
    /// Which offer of the attempt this is (1 + offers already issued a token).
    pub offer: u32,
    /// Task name.
    pub task: String,
    /// Task version.
    pub task_version: String,
    /// The worker language the task is routed to (lower-case, from the task's `language`;
    /// `None` for any worker): only a worker whose `Hello.runtime` names it may claim it.
    pub language: Option<String>,
    /// Rendered input.
    pub input: Value,
    /// Idempotency key.
    pub idempotency_key: String,
    /// Flow control recorded with the attempt's `StepScheduled` (`None`: none declared,
    /// which dispatch treats exactly as before issue 27).
    pub flow: Option<crate::flow::Flow>,
}

/// Something a run's new events ask of the world around the history.
#[derive(Debug, Clone, PartialEq)]
pub enum Effect {
    /// Queue an attempt for workers.
    OfferTask(TaskOffer),
    /// Run an attempt with a built-in adapter the host enabled.
    RunAdapter {
        /// Which adapter.
        adapter: Adapter,
        /// The attempt (its task is the adapter's task name).
        offer: TaskOffer,
    },
    /// Withdraw every queued offer of a unit (it resolved, failed an attempt or was
    /// cancelled).
    CancelUnit {
        /// The unit key.
        unit: String,
    },
    /// Start a child execution.
    StartChild {
        /// The child's execution id.
        child_id: String,
        /// Its workflow.
        workflow: String,
        /// Its pinned version, if the step names one.
        version: Option<String>,
        /// Its input.
        input: Value,
        /// The unit of this run it resolves.
        parent: ParentRef,
    },
    /// Ask a running child to cancel.
    CancelChild {
        /// The child's execution id.
        child_id: String,
        /// Why.
        reason: String,
    },
    /// Tell this run's parent that it closed.
    NotifyParent {
        /// The parent's unit waiting for this child.
        parent: ParentRef,
        /// This execution's id.
        child_id: String,
        /// How it closed.
        status: Status,
        /// Its output.
        output: Option<Value>,
        /// Its error.
        error: Option<TaskError>,
    },
    /// Ask the store for a slot of a workflow-level concurrency key (issue 27): it grants it
    /// (an inbox entry `slot_granted` for this execution), queues the request, or cancels
    /// as `on_limit` says, under the key's lock.
    AcquireSlot {
        /// The scoped key.
        key: String,
        /// Most executions holding it at once.
        limit: u32,
        /// `queue`, `cancel_newest` or `cancel_in_progress`.
        on_limit: String,
    },
    /// The run closed: give up its slots (held or waited for) of these keys; the store
    /// grants each freed slot to the key's oldest waiter.
    ReleaseSlots {
        /// The scoped keys, sorted.
        keys: Vec<String>,
    },
    /// The execution's next wake-up moved to `at`.
    SetTimer {
        /// Epoch milliseconds.
        at: u64,
    },
    /// The execution has no wake-up any more.
    ClearTimer,
    /// This run ended by continue-as-new; the next `Run` of the same pass opens with the
    /// next run's first events.
    ContinueAsNew {
        /// The run that ended.
        finished_run: u32,
        /// The run that follows.
        next_run: u32,
    },
}

/// The language a task's offers are routed to: its contract's `language`, lower-case;
/// `None` (any worker) when it declares none or `any`.
#[must_use]
pub fn routing_language(def: &Definition, task: &str) -> Option<String> {
    let language = def.tasks.get(task)?.language.as_deref()?.to_ascii_lowercase();
    (language != ANY_LANGUAGE).then_some(language)
}

/// The task `language` that routes to any worker (the same as declaring none).
pub const ANY_LANGUAGE: &str = "any";

/// The task name and version a unit is offered as; `None` for units no worker runs.
#[must_use]
pub fn task_of(def: &Definition, unit: &str) -> Option<(String, String)> {
    let key = UnitKey::parse(unit)?;
    let step = def.find_step(&key.scope.body(), &key.step)?;
    let name = if key.compensate {
        step.compensate.as_ref()?.task.clone()
    } else {
        match &step.kind {
            StepKind::Task { task } => task.clone(),
            StepKind::Http { .. } => return Some((HTTP_TASK.into(), HTTP_TASK_VERSION.into())),
            _ => return None,
        }
    };
    let version = def.tasks.get(&name).map_or_else(|| "1".to_string(), |c| c.version.clone());
    Some((name, version))
}

/// The failure recorded for an http offer when the adapter is off.
#[must_use]
pub fn adapter_disabled() -> TaskError {
    TaskError::fatal(ADAPTER_DISABLED, "built-in http steps are disabled on this server")
}

/// The effects of `events` (already applied to `state`), timer and continue-as-new aside.
///
/// Order: offers, child cancels and child starts in event order, then the units whose
/// offers to withdraw (sorted, once each), then the parent notification. A host applies
/// withdrawals before offers: a unit scheduled again in the same pass keeps its new offer.
/// Only what is still wanted at the end of `events` is offered or started: nothing for a
/// unit no longer scheduled (or waiting for that child), nothing once the run closed or
/// continued as new.
#[must_use]
pub fn derive(
    def: &Definition,
    state: &State,
    events: &[HistoryEvent],
    caps: Capabilities,
) -> Vec<Effect> {
    let mut fx = Vec::new();
    let mut cancel = Vec::new();
    let mut closed = false;
    for he in events {
        match &he.event {
            Event::StepScheduled { step, attempt, input, idempotency_key, flow, .. } => {
                let Some((task, task_version)) = task_of(def, step) else { continue };
                // Offers of this attempt only: a retry's first offer is no redelivery.
                let issued = state
                    .unit(step)
                    .map_or(0, |u| u.tokens.iter().filter(|(_, a)| a == attempt).count());
                let offer = issued + 1;
                let offer = TaskOffer {
                    unit: step.clone(),
                    attempt: *attempt,
                    offer: u32::try_from(offer).unwrap_or(u32::MAX),
                    language: routing_language(def, &task),
                    task,
                    task_version,
                    input: input.clone(),
                    idempotency_key: idempotency_key.clone(),
                    flow: flow.clone(),
                };
                if offer.task != HTTP_TASK {
                    fx.push(Effect::OfferTask(offer));
                } else if caps.http {
                    fx.push(Effect::RunAdapter { adapter: Adapter::Http, offer });
                }
                // Off: `settle` already recorded the attempt's ADAPTER_DISABLED failure.
            }
            Event::StepCancelled { step } => cancelled(state, step, &mut cancel, &mut fx),
            // A migration cancels the open units of removed steps as the decider would.
            Event::DefinitionMigrated { cancelled: units, .. } => {
                for step in units {
                    cancelled(state, step, &mut cancel, &mut fx);
                }
            }
            Event::StepSucceeded { step, .. }
            | Event::StepFailed { step, .. }
            | Event::StepFailureCaught { step, .. }
            | Event::StepFailureBranched { step, .. }
            | Event::StepAttemptFailed { step, .. }
            | Event::StepAttemptUncertain { step, .. } => cancel.push(step.clone()),
            Event::ChildStarted { step, child_id, workflow, version, input } => {
                fx.push(Effect::StartChild {
                    child_id: child_id.clone(),
                    workflow: workflow.clone(),
                    version: version.clone(),
                    input: input.clone(),
                    parent: ParentRef {
                        execution_id: state.execution_id.clone(),
                        step: step.clone(),
                    },
                });
            }
            Event::ConcurrencySlotRequested { key, limit, on_limit } => {
                fx.push(Effect::AcquireSlot {
                    key: key.clone(),
                    limit: *limit,
                    on_limit: on_limit.clone(),
                });
            }
            Event::WorkflowCompleted { .. }
            | Event::WorkflowFailed { .. }
            | Event::WorkflowCancelled { .. }
            | Event::WorkflowTimedOut { .. } => closed = true,
            _ => {}
        }
    }
    cancel.sort();
    cancel.dedup();
    let mut fx = still_wanted(state, fx);
    fx.extend(cancel.into_iter().map(|unit| Effect::CancelUnit { unit }));
    // Only the pass that records the close tells the parent: touching a closed child again
    // (a late result) must not resolve, or stale-mark, the parent's unit a second time.
    let status = state.status();
    // A continued (or reset) run keeps its slots: the next run asks again and holds them.
    if closed && status.is_closed() && status != Status::ContinuedAsNew && !state.slots.is_empty() {
        fx.push(Effect::ReleaseSlots { keys: state.slots.keys().cloned().collect() });
    }
    if closed && status.is_closed() && status != Status::ContinuedAsNew {
        if let Some(parent) = &state.parent {
            fx.push(Effect::NotifyParent {
                parent: parent.clone(),
                child_id: state.execution_id.clone(),
                status,
                output: state.output.clone(),
                error: state.error.clone(),
            });
        }
    }
    fx
}

/// A cancelled unit: its offers are withdrawn (the worker holding it is told) and the child
/// it waits for, if any, is asked to cancel.
fn cancelled(state: &State, step: &str, cancel: &mut Vec<String>, fx: &mut Vec<Effect>) {
    cancel.push(step.to_string());
    if let Some(Wait::Child(child)) = state.unit(step).and_then(|u| u.wait.clone()) {
        fx.push(Effect::CancelChild { child_id: child, reason: CHILD_CANCEL_REASON.into() });
    }
}

/// Keeps only the offers and child starts the batch still wants at its end: events are
/// derived one by one, but a unit scheduled (or a child started) and then cancelled, or
/// left behind by the run's close or continue-as-new, in the same batch must not reach a
/// worker or start a child (its answer could only be recorded as stale after the terminal
/// event). The cancel of a child that is never started goes too. One pass over the
/// effects: no work per step beyond a unit lookup.
fn still_wanted(state: &State, fx: Vec<Effect>) -> Vec<Effect> {
    let open = !state.status().is_closed();
    let offered = |o: &TaskOffer| {
        open && state
            .unit(&o.unit)
            .is_some_and(|u| u.status == UnitStatus::Scheduled && u.attempt == o.attempt)
    };
    let mut dropped: Vec<String> = Vec::new();
    let mut kept = Vec::with_capacity(fx.len());
    for effect in fx {
        match &effect {
            Effect::OfferTask(o) | Effect::RunAdapter { offer: o, .. } if !offered(o) => {}
            Effect::StartChild { child_id, parent, .. } => {
                let waits = state.unit(&parent.step).is_some_and(|u| {
                    !u.status.is_resolved()
                        && u.wait.as_ref() == Some(&Wait::Child(child_id.clone()))
                });
                if open && waits {
                    kept.push(effect);
                } else {
                    dropped.push(child_id.clone());
                }
            }
            _ => kept.push(effect),
        }
    }
    if !dropped.is_empty() {
        kept.retain(
            |e| !matches!(e, Effect::CancelChild { child_id, .. } if dropped.contains(child_id)),
        );
    }
    kept
}

/// The timer effect of a wake-up that moved from `before` to `after` (`before = None`
/// when unknown, e.g. after a rebuild: the timer is then written again).
#[must_use]
pub fn timer_change(before: Option<Option<u64>>, after: Option<u64>) -> Option<Effect> {
    if before == Some(after) {
        return None;
    }
    Some(match after {
        Some(at) => Effect::SetTimer { at },
        None => Effect::ClearTimer,
    })
}
