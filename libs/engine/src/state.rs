//! The execution state: the left fold of one run's history.
//!
//! [`State::apply`] is total: an event that does not fit the state (an unknown unit, a
//! result after the end) changes nothing rather than panicking, so any history that was
//! ever written can be replayed by any later version.

use crate::event::{CompensationOutcome, Event, HistoryEvent, ParentRef, TaskError};
use crate::task_code::TaskCode;
use crate::unit::UnitKey;
use orbit_definition::Outcome;
use serde::Serialize;
use serde_json::Value;
use std::collections::{BTreeMap, BTreeSet, HashMap};

pub(crate) mod migrated;
mod parts;
mod restored;
mod resumed;

pub use parts::{Signal, Status, Unit, UnitStatus, Wait, Winding};
pub use resumed::{Resumed, RunSizes};

/// The state of one run of an execution.
#[derive(Debug, Clone, PartialEq, Serialize, Default)]
pub struct State {
    /// Execution id.
    pub execution_id: String,
    /// Run number (1-based).
    pub run: u32,
    /// Workflow name.
    pub workflow: String,
    /// Workflow version.
    pub version: String,
    /// Pinned definition.
    pub definition_hash: String,
    /// Execution input (defaults applied).
    pub input: Value,
    /// Parent, for child executions.
    pub parent: Option<ParentRef>,
    /// Schedule that started it.
    pub schedule_id: Option<String>,
    /// The priority (1..=5) the start request gave the run (`WorkflowCreated.priority`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub priority: Option<u8>,
    /// Status.
    pub status: Option<Status>,
    /// When `WorkflowCreated` was committed.
    pub created_at: u64,
    /// When `WorkflowStarted` was committed.
    pub started_at: Option<u64>,
    /// Workflow-level concurrency keys this run asked for, and whether it holds each
    /// (`ConcurrencySlotRequested` / `ConcurrencySlotGranted`).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub slots: BTreeMap<String, bool>,
    /// A restored run (reset, fork) asks for its slots again before it goes on: the
    /// grants in its copied prefix were the source run's (released when it closed, or held
    /// by another execution for a fork).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub slots_again: bool,
    /// The start request's memo (`WorkflowCreated.memo`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub memo: Option<Value>,
    /// The run's current search attributes (`SearchAttributesUpserted`, unset ones
    /// removed).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub search: BTreeMap<String, orbit_definition::SearchValue>,
    /// Main steps whose `search:` was decided (their `SearchAttributesUpserted`).
    #[serde(default, skip_serializing_if = "BTreeSet::is_empty")]
    pub search_steps: BTreeSet<String>,
    /// Whether the workflow's own `search:` was decided (an upsert without a step).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub search_started: bool,
    /// Units by key.
    pub units: BTreeMap<String, Unit>,
    /// Frozen `for_each` lists by fan-out unit key.
    pub fanouts: BTreeMap<String, Vec<Value>>,
    /// Succeeded units of the main body, in success order (for compensation).
    pub success_order: Vec<String>,
    /// Received signals, in order.
    pub signals: Vec<Signal>,
    /// Started `on_signal` instances: (signal name, signal seq).
    pub handler_instances: Vec<(String, u64)>,
    /// Accepted updates without their `UpdateCompleted` yet (handlers with steps), by the
    /// seq of their `UpdateAccepted`: (update name, args).
    pub open_updates: BTreeMap<u64, (String, Value)>,
    /// The caller ids of this run's accepted updates, with the seq of their
    /// `UpdateAccepted`: a command repeating one is answered with that first acceptance
    /// (see `crate::update::accepted`), never recorded twice.
    pub update_ids: BTreeMap<String, u64>,
    /// Update ids accepted by earlier runs, with the (run, seq) of their `UpdateAccepted`
    /// (from this run's `WorkflowCreated`; see `crate::update::MAX_CARRIED_UPDATE_IDS`).
    pub carried_update_ids: BTreeMap<String, (u32, u64)>,
    /// Set once the execution winds down.
    pub winding: Option<Winding>,
    /// Reason of the first cancel request.
    pub cancel_requested: Option<String>,
    /// Output, once completed.
    pub output: Option<Value>,
    /// Error, once failed.
    pub error: Option<TaskError>,
    /// Next run's input, once continued as new.
    pub next_input: Option<Value>,
    /// The next run's resume state (`WorkflowContinuedAsNew.resume`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub next_resume: Option<Box<crate::event::Resume>>,
    /// The repeat this run continues, from its `WorkflowCreated.resume`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub resumed: Option<Resumed>,
    /// Per top-level list (units `id[n]`): the events its runs took (`measure_run`).
    #[serde(skip)]
    pub run_sizes: BTreeMap<String, RunSizes>,
    /// `event_count` once `WorkflowStarted` was applied.
    #[serde(skip)]
    pub events_at_start: u64,
    /// Events applied (this run).
    pub event_count: u64,
    /// `TimerStarted` events applied (this run), against `max_timers`.
    pub timers_started: u64,
    /// Seq of the last event applied.
    pub last_seq: u64,
    /// Token → unit key, for every token ever issued.
    pub tokens: HashMap<String, String>,
    /// Keys of the units not resolved yet: what the decider's per-unit rounds (timers,
    /// retries, wind-down) look at, so a round costs the open work, not the whole run.
    #[serde(skip)]
    pub open: BTreeSet<String>,
    /// Per fan-out unit key: how its elements stand (kept by [`State::apply`]).
    #[serde(skip)]
    pub elements: BTreeMap<String, Elements>,
    /// The worker of the latest `StepDispatched` applied (this run): the worker a `sticky:`
    /// attempt prefers (issue 27).
    #[serde(skip)]
    pub last_worker: Option<String>,
}

/// How the elements of one fan-out stand, counted as their units change: the decider reads
/// this instead of looking at every element each round.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Elements {
    /// Elements with a unit (started).
    pub present: usize,
    /// Highest element index with a unit, plus one.
    pub end: usize,
    /// Elements resolved other than failed.
    pub resolved: usize,
    /// Indices of failed elements.
    pub failed: BTreeSet<usize>,
}

impl Elements {
    /// Whether the started elements are exactly `0..present` (the decider starts them in
    /// order; any other history is read element by element).
    #[must_use]
    pub fn is_prefix(&self) -> bool {
        self.present == self.end
    }
}

impl State {
    /// Folds a whole history.
    #[must_use]
    pub fn from_history<'a>(events: impl IntoIterator<Item = &'a HistoryEvent>) -> State {
        let mut state = State::default();
        for e in events {
            state.apply(e);
        }
        state
    }

    /// Status, `Pending` before creation.
    #[must_use]
    pub fn status(&self) -> Status {
        self.status.unwrap_or(Status::Pending)
    }

    /// A unit by key.
    #[must_use]
    pub fn unit(&self, key: &str) -> Option<&Unit> {
        self.units.get(key)
    }

    /// The units not resolved yet, in key order (as `units` iterates them).
    pub fn open_units(&self) -> impl Iterator<Item = (&String, &Unit)> {
        self.open.iter().filter_map(|k| self.units.get_key_value(k))
    }

    /// Applies one event. Total: never panics, ignores what does not fit.
    pub fn apply(&mut self, he: &HistoryEvent) {
        // The unit the event names, if any (only a change of its status matters below).
        let unit = he.event.step();
        let before = unit.and_then(|k| self.units.get(k)).map(|u| u.status);
        self.fold(he);
        if let Some(key) = unit {
            let after = self.units.get(key).map(|u| u.status);
            if before != after {
                self.index(key, before, after);
            }
        }
    }

    /// Keeps `open` and `elements` true after unit `key` moved from `before` to `after`.
    fn index(&mut self, key: &str, before: Option<UnitStatus>, after: Option<UnitStatus>) {
        match after {
            Some(s) if !s.is_resolved() => self.open.insert(key.to_string()),
            _ => self.open.remove(key),
        };
        // Only a fan-out element (`step[i]`) is counted: no key parse for any other unit.
        if !key.ends_with(']') {
            return;
        }
        let Some(parsed) = UnitKey::parse(key) else { return };
        let (Some(i), false) = (parsed.index, parsed.compensate) else { return };
        let e = self.elements.entry(parsed.parent().to_string()).or_default();
        let counts = |s: Option<UnitStatus>| match s {
            Some(UnitStatus::Failed) => (1, 0, 1),
            Some(s) if s.is_resolved() => (1, 1, 0),
            Some(_) => (1, 0, 0),
            None => (0, 0, 0),
        };
        let (p0, r0, f0) = counts(before);
        let (p1, r1, f1) = counts(after);
        e.present = e.present + p1 - p0;
        e.resolved = e.resolved + r1 - r0;
        if f0 > f1 {
            e.failed.remove(&i);
        } else if f1 > f0 {
            e.failed.insert(i);
        }
        if p1 > 0 {
            e.end = e.end.max(i + 1);
        }
    }

    fn fold(&mut self, he: &HistoryEvent) {
        self.event_count += 1;
        self.last_seq = self.last_seq.max(he.seq);
        let ts = he.timestamp_ms;
        match &he.event {
            Event::WorkflowCreated {
                execution_id,
                workflow,
                version,
                definition_hash,
                input,
                parent,
                schedule_id,
                run,
                update_ids,
                priority,
                memo,
                resume,
            } => {
                if self.status.is_none() {
                    if let Some(r) = resume {
                        self.resume(r);
                    }
                    self.priority = *priority;
                    self.memo.clone_from(memo);
                    for u in update_ids {
                        self.carried_update_ids.insert(u.id.clone(), (u.run, u.seq));
                    }
                    self.execution_id.clone_from(execution_id);
                    self.workflow.clone_from(workflow);
                    self.version.clone_from(version);
                    self.definition_hash.clone_from(definition_hash);
                    self.input = input.clone();
                    self.parent.clone_from(parent);
                    self.schedule_id.clone_from(schedule_id);
                    self.run = *run;
                    self.created_at = ts;
                    self.status = Some(Status::Running);
                }
            }
            Event::WorkflowStarted {} => self.started(ts),
            Event::SearchAttributesUpserted { step, values, .. } => {
                match step {
                    Some(step) => {
                        self.search_steps.insert(step.clone());
                    }
                    None => self.search_started = true,
                }
                for (name, value) in values {
                    if *value == orbit_definition::SearchValue::Unset {
                        self.search.remove(name);
                    } else {
                        self.search.insert(name.clone(), value.clone());
                    }
                }
            }
            Event::ConcurrencySlotRequested { key, .. } => {
                self.slots.entry(key.clone()).or_insert(false);
            }
            Event::ConcurrencySlotGranted { key } => {
                self.slots.insert(key.clone(), true);
            }
            Event::StepScheduled { step, attempt, input, idempotency_key, redelivery, flow } => {
                let u = self
                    .units
                    .entry(step.clone())
                    .or_insert_with(|| Unit::new(UnitStatus::Scheduled));
                u.status = UnitStatus::Scheduled;
                u.attempt = *attempt;
                u.input = Some(input.clone());
                u.idempotency_key = Some(idempotency_key.clone());
                u.redelivery = *redelivery;
                u.flow.clone_from(flow);
                if !*redelivery {
                    u.losses = 0;
                }
                u.scheduled_at = Some(ts);
                u.token = None;
                u.deadline = None;
                u.fire_at = None;
            }
            Event::StepDispatched { step, attempt, token, deadline, worker_id, .. } => {
                if let Some(u) = self.units.get_mut(step) {
                    if u.status == UnitStatus::Scheduled {
                        u.status = UnitStatus::Dispatched;
                        u.token = Some(token.clone());
                        u.worker_id = Some(worker_id.clone());
                        u.deadline = *deadline;
                    }
                    u.tokens.push((token.clone(), *attempt));
                    self.tokens.insert(token.clone(), step.clone());
                    self.last_worker = Some(worker_id.clone());
                }
            }
            Event::StepSucceeded { step, output, .. } => {
                let u = self
                    .units
                    .entry(step.clone())
                    .or_insert_with(|| Unit::new(UnitStatus::Waiting));
                if !u.status.is_resolved() {
                    u.status = UnitStatus::Succeeded;
                    u.output = Some(output.clone());
                    u.token = None;
                    u.fire_at = None;
                    u.wait = None;
                    if !step.contains(':') {
                        self.success_order.push(step.clone());
                    }
                    self.measure_run(step);
                }
            }
            Event::StepAttemptFailed { step, error, .. } => {
                if let Some(u) = self.units.get_mut(step).filter(|u| !u.status.is_resolved()) {
                    u.status = UnitStatus::AttemptFailed;
                    u.error = Some(error.clone());
                    u.token = None;
                }
            }
            Event::StepAttemptUncertain { step, .. } => {
                if let Some(u) = self.units.get_mut(step).filter(|u| !u.status.is_resolved()) {
                    u.status = UnitStatus::Uncertain;
                    u.token = None;
                    u.losses += 1;
                }
            }
            Event::StepHeartbeat { .. } | Event::StaleResultIgnored { .. } => {}
            Event::UpdateAccepted { name, args, update_id } => {
                self.open_updates.insert(he.seq, (name.clone(), args.clone()));
                if let Some(id) = update_id {
                    self.update_ids.entry(id.clone()).or_insert(he.seq);
                }
            }
            // Without `accepted`, the reply was recorded right after its acceptance.
            Event::UpdateCompleted { accepted, .. } => {
                let seq = accepted.or_else(|| self.open_updates.keys().next_back().copied());
                if let Some(seq) = seq {
                    self.open_updates.remove(&seq);
                }
            }
            Event::RetryScheduled { step, fire_at, .. } => {
                if let Some(u) = self.units.get_mut(step).filter(|u| !u.status.is_resolved()) {
                    u.status = UnitStatus::RetryWait;
                    u.fire_at = Some(*fire_at);
                }
            }
            Event::StepFailed { step, error } => {
                let u =
                    self.units.entry(step.clone()).or_insert_with(|| Unit::new(UnitStatus::Failed));
                u.status = UnitStatus::Failed;
                u.error = Some(error.clone());
                u.token = None;
                u.fire_at = None;
                // A failed update step fails its update (`UPDATE_FAILED`), not the run; a
                // failed step of a group fails its group (decided), not the run.
                let counts = !step.starts_with("compensate:")
                    && !step.starts_with("on:")
                    && !step.starts_with("update:")
                    && !step.ends_with(']')
                    && !crate::unit::in_group(step);
                if counts && self.winding.is_none() && !self.status().is_closed() {
                    self.begin_winding(Outcome::Failure, error.clone());
                    if let Some(w) = &mut self.winding {
                        w.step = Some(step.clone());
                    }
                }
            }
            // Open while its failure branch runs; the branch's end resolves it.
            Event::StepFailureBranched { step, error } => {
                let u = self
                    .units
                    .entry(step.clone())
                    .or_insert_with(|| Unit::new(UnitStatus::Waiting));
                if !u.status.is_resolved() {
                    u.status = UnitStatus::Waiting;
                    u.wait = Some(Wait::OnFailure);
                    u.error = Some(error.clone());
                    u.token = None;
                    u.fire_at = None;
                }
            }
            // Completed for what follows, but not in `success_order`: never compensated.
            Event::StepFailureCaught { step, error, output } => {
                let u = self
                    .units
                    .entry(step.clone())
                    .or_insert_with(|| Unit::new(UnitStatus::Waiting));
                if !u.status.is_resolved() {
                    u.status = UnitStatus::Succeeded;
                    u.output = Some(output.clone());
                    u.error = Some(error.clone());
                    u.token = None;
                    u.fire_at = None;
                    u.wait = None;
                }
            }
            Event::StepSkipped { step, .. } => {
                self.units
                    .entry(step.clone())
                    .or_insert_with(|| Unit::new(UnitStatus::Skipped))
                    .status = UnitStatus::Skipped;
            }
            Event::StepFanOut { step, items } => {
                let u = self
                    .units
                    .entry(step.clone())
                    .or_insert_with(|| Unit::new(UnitStatus::Waiting));
                u.wait = Some(Wait::Elements);
                self.fanouts.insert(step.clone(), items.clone());
            }
            Event::StepCancelled { step } => {
                if let Some(u) = self.units.get_mut(step).filter(|u| !u.status.is_resolved()) {
                    u.status = UnitStatus::Cancelled;
                    u.token = None;
                    u.fire_at = None;
                }
            }
            Event::TimerStarted { step, fire_at } => {
                self.timers_started += 1;
                let u = self
                    .units
                    .entry(step.clone())
                    .or_insert_with(|| Unit::new(UnitStatus::Waiting));
                u.status = UnitStatus::Waiting;
                u.wait = Some(Wait::Timer);
                u.fire_at = Some(*fire_at);
            }
            Event::TimerFired { step } => {
                if let Some(u) = self.units.get_mut(step) {
                    u.fire_at = None;
                }
            }
            Event::AwaitStarted { step, signal, timeout_at } => {
                let u = self
                    .units
                    .entry(step.clone())
                    .or_insert_with(|| Unit::new(UnitStatus::Waiting));
                u.status = UnitStatus::Waiting;
                u.wait = Some(Wait::Signal { name: signal.clone(), since: he.seq });
                u.fire_at = *timeout_at;
            }
            Event::SignalReceived { name, payload } => self.signals.push(Signal {
                seq: he.seq,
                name: name.clone(),
                payload: payload.clone(),
                delivered: false,
            }),
            Event::SignalDelivered { name, seq, step } => {
                if let Some(s) = self.signals.iter_mut().find(|s| s.seq == *seq && !s.delivered) {
                    s.delivered = true;
                    if step.starts_with("on_signal:") {
                        self.handler_instances.push((name.clone(), *seq));
                    }
                }
            }
            Event::CancelRequested { reason } => {
                if self.cancel_requested.is_none() {
                    self.cancel_requested = Some(reason.clone());
                    if self.winding.is_none() && !self.status().is_closed() {
                        self.begin_winding(
                            Outcome::Cancel,
                            TaskCode::Cancelled.fatal(reason.clone()),
                        );
                    }
                }
            }
            Event::ChildStarted { step, child_id, .. } => {
                let u = self
                    .units
                    .entry(step.clone())
                    .or_insert_with(|| Unit::new(UnitStatus::Waiting));
                u.status = UnitStatus::Waiting;
                u.wait = Some(Wait::Child(child_id.clone()));
            }
            Event::WorkflowTimeoutReached {} => {
                if self.winding.is_none() && !self.status().is_closed() {
                    self.begin_winding(
                        Outcome::Timeout,
                        TaskCode::Timeout.fatal("the workflow timeout was reached"),
                    );
                }
            }
            Event::OutputFailed { error } => {
                if self.winding.is_none() && !self.status().is_closed() {
                    self.begin_winding(Outcome::Failure, error.clone());
                }
            }
            Event::LimitExceeded { limit, message } => {
                if self.winding.is_none() && !self.status().is_closed() {
                    self.begin_winding(
                        Outcome::Failure,
                        TaskCode::LimitExceeded.fatal(format!("{limit}: {message}")),
                    );
                }
            }
            Event::CompensationStarted { steps, .. } => {
                if let Some(w) = &mut self.winding {
                    w.compensation = Some(steps.clone());
                }
            }
            Event::CompensationCompleted {} => {
                self.set_compensation(CompensationOutcome::Completed)
            }
            Event::CompensationFailed { .. } => self.set_compensation(CompensationOutcome::Failed),
            Event::HandlersStarted { .. } => {
                if let Some(w) = &mut self.winding {
                    w.handlers_started = true;
                }
            }
            Event::WorkflowCompleted { output } => {
                self.close(Status::Completed);
                self.output = Some(output.clone());
            }
            Event::WorkflowFailed { error, .. } => {
                self.close(Status::Failed);
                self.error = Some(error.clone());
            }
            Event::WorkflowCancelled { .. } => self.close(Status::Cancelled),
            Event::WorkflowTimedOut { .. } => self.close(Status::TimedOut),
            Event::WorkflowContinuedAsNew { input, resume, .. } => {
                self.close(Status::ContinuedAsNew);
                self.next_input = Some(input.clone());
                self.next_resume.clone_from(resume);
            }
            Event::DefinitionMigrated {
                to_version, to_hash, renames, cancelled, outputs, ..
            } => {
                self.migrate(to_version, to_hash, renames, cancelled, outputs);
            }
            // On a run that had closed already (a reset reopening it) this changes nothing.
            Event::WorkflowReset { .. } => self.close(Status::ContinuedAsNew),
            Event::RunRestored { forgotten, redeliver, .. } => {
                self.restore(forgotten, redeliver, ts);
            }
        }
    }

    fn begin_winding(&mut self, outcome: Outcome, error: TaskError) {
        self.winding = Some(Winding {
            outcome,
            error,
            step: None,
            compensation: None,
            compensation_outcome: None,
            handlers_started: false,
        });
        self.status = Some(Status::Compensating);
    }

    fn set_compensation(&mut self, outcome: CompensationOutcome) {
        if let Some(w) = &mut self.winding {
            w.compensation_outcome.get_or_insert(outcome);
        }
    }

    fn close(&mut self, status: Status) {
        if !self.status().is_closed() {
            self.status = Some(status);
        }
    }
}
