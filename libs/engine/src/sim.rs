//! An in-memory simulator: drives whole executions with a manual clock and scripted task
//! outcomes. Used by tests and tooling; it calls exactly the pure API the owner calls
//! (`start`, `accept`, [`settle`]) and carries out the same [`Effect`]s in memory: offers go
//! to the scripted handlers, children start and cancel, parents hear of their children's
//! end (messages between executions arrive the round after they were sent, like the served
//! owner's inbox entries the pass after), timers move the clock, continued runs are
//! archived. Built-in `http` steps behave as on a server without the adapter
//! (`ADAPTER_DISABLED`) unless [`Sim::capabilities`] enables it; then the handler
//! registered for [`crate::effects::HTTP_TASK`] runs them.

mod restore;

use crate::command::{accept, start, Command, CommandError};
use crate::effects::{Capabilities, Effect, TaskOffer};
use crate::event::{Event, HistoryEvent, ParentRef, TaskError};
use crate::migrate::{migrate, Plan};
use crate::run::{settle, Pass};
use crate::state::{State, Status, Wait};
use orbit_definition::{Definition, Limits};
use serde_json::Value;
use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

/// A task attempt offered to a simulated worker.
#[derive(Debug, Clone)]
pub struct TaskRequest {
    /// Execution id.
    pub execution_id: String,
    /// Unit key.
    pub step: String,
    /// Task name (`orbit.http`, [`crate::effects::HTTP_TASK`], for built-in HTTP steps).
    pub task: String,
    /// Attempt number.
    pub attempt: u32,
    /// Rendered input.
    pub input: Value,
    /// Idempotency key.
    pub idempotency_key: String,
    /// Whether this is a redelivery.
    pub redelivery: bool,
    /// The token issued for this offer.
    pub token: String,
}

/// What a simulated worker does with an attempt.
#[derive(Debug, Clone)]
pub enum TaskOutcome {
    /// Succeeds with this output.
    Complete(Value),
    /// Fails with this error.
    Fail(TaskError),
    /// Never answers (the attempt deadline, if any, fails it with `TIMEOUT`).
    Hang,
    /// The worker is lost: the attempt becomes uncertain and is redelivered.
    Lose,
    /// The inner outcome, answered after this many milliseconds instead of
    /// [`Sim::latency_ms`] (a slow worker: `orbit test` fixtures' `delay`).
    After(u64, Box<TaskOutcome>),
}

type Handler = Box<dyn FnMut(&TaskRequest) -> TaskOutcome>;

/// One simulated execution.
#[derive(Debug, Clone)]
pub struct SimExecution {
    /// Its pinned definition.
    pub def: Arc<Definition>,
    /// Current run's state.
    pub state: State,
    /// Current run's history.
    pub history: Vec<HistoryEvent>,
    /// Histories of runs ended by continue-as-new, oldest first.
    pub archived: Vec<Vec<HistoryEvent>>,
}

/// The simulator.
pub struct Sim {
    /// The clock, epoch milliseconds.
    pub now: u64,
    /// Delay between dispatch and a worker's answer.
    pub latency_ms: u64,
    /// Server-wide limits.
    pub limits: Limits,
    /// Built-in adapters this simulated server runs (none by default, like `orbit dev`).
    pub capabilities: Capabilities,
    defs: Vec<Arc<Definition>>,
    executions: BTreeMap<String, SimExecution>,
    handlers: HashMap<String, Handler>,
    pending: Vec<(u64, String, Command)>,
    requests: Vec<TaskRequest>,
    next_token: u64,
    /// Per execution: how many events at the end of its history no pass has settled yet.
    unsettled: BTreeMap<String, usize>,
    /// Per execution: its timer as the effects last set it.
    timers: BTreeMap<String, Option<u64>>,
    /// Messages between executions (a child's cancel, a child's end for its parent), sent
    /// by one round's effects and delivered at the start of the next, as the served owner
    /// writes them to the inbox in one pass and applies them in the next: a parent's cancel
    /// never lands between a child's recorded result and the child's own decision on it.
    mail: Vec<Mail>,
}

/// A message from one execution to another, delivered the round after it was sent.
#[derive(Debug)]
struct Mail {
    /// The execution it goes to.
    to: String,
    /// For a child's end: the child, which the parent's unit must still wait for then
    /// (the owner's check on a `child_closed` entry when it applies it).
    from_child: Option<String>,
    command: Command,
}

impl Default for Sim {
    fn default() -> Self {
        Sim::new()
    }
}

impl Sim {
    /// A simulator at time 1_700_000_000_000 with 10 ms worker latency.
    #[must_use]
    pub fn new() -> Sim {
        Sim {
            now: 1_700_000_000_000,
            latency_ms: 10,
            limits: Limits::default(),
            capabilities: Capabilities::default(),
            defs: Vec::new(),
            executions: BTreeMap::new(),
            handlers: HashMap::new(),
            pending: Vec::new(),
            requests: Vec::new(),
            next_token: 0,
            unsettled: BTreeMap::new(),
            timers: BTreeMap::new(),
            mail: Vec::new(),
        }
    }

    /// Registers a definition (children are looked up among these).
    pub fn register(&mut self, def: Definition) -> &mut Sim {
        self.defs.push(Arc::new(def));
        self
    }

    /// Scripts a task: every attempt of `task` asks `handler` what to do.
    pub fn on_task(
        &mut self,
        task: &str,
        handler: impl FnMut(&TaskRequest) -> TaskOutcome + 'static,
    ) -> &mut Sim {
        self.handlers.insert(task.to_string(), Box::new(handler));
        self
    }

    /// Starts an execution of the latest registered version of `workflow`.
    ///
    /// # Errors
    /// `WORKFLOW_NOT_FOUND`, `EXECUTION_EXISTS`, or what [`start`] refuses.
    pub fn start(&mut self, workflow: &str, id: &str, input: Value) -> Result<(), CommandError> {
        self.start_with(workflow, None, id, input, None)
    }

    /// Update-with-start: starts an execution of `workflow` and accepts `update` (a
    /// [`Command::Update`]) in the same first batch, before anything is decided, as the
    /// owner does for `UpdateExecutionRequest.start`. A refused update starts nothing.
    ///
    /// # Errors
    /// As [`Sim::start`], or what [`accept`] refuses for the update.
    pub fn start_with_update(
        &mut self,
        workflow: &str,
        id: &str,
        input: Value,
        update: Command,
    ) -> Result<(), CommandError> {
        self.start_with(workflow, None, id, input, None)?;
        let exec = self.executions.get_mut(id).expect("just started");
        match accept(&exec.def, &exec.state, update, self.now, &self.limits) {
            Ok(events) => {
                *self.unsettled.entry(id.to_string()).or_default() += events.len();
                record(exec, events, self.now);
                Ok(())
            }
            Err(e) => {
                self.executions.remove(id);
                self.unsettled.remove(id);
                self.timers.remove(id);
                Err(e)
            }
        }
    }

    fn start_with(
        &mut self,
        workflow: &str,
        version: Option<&str>,
        id: &str,
        input: Value,
        parent: Option<ParentRef>,
    ) -> Result<(), CommandError> {
        let def = self
            .defs
            .iter()
            .rev()
            .find(|d| d.name == workflow && version.is_none_or(|v| d.version == v))
            .cloned()
            .ok_or_else(|| CommandError {
                code: orbit_codes::ErrorCode::WorkflowNotFound,
                message: format!("no workflow `{workflow}`"),
            })?;
        if self.executions.contains_key(id) {
            return Err(CommandError::new(orbit_codes::ErrorCode::ExecutionExists, id));
        }
        let created = start(&def, id, input, parent, None, 1, &self.limits, None)?;
        let mut exec = SimExecution {
            def,
            state: State::default(),
            history: Vec::new(),
            archived: Vec::new(),
        };
        record(&mut exec, vec![created], self.now);
        self.executions.insert(id.to_string(), exec);
        self.unsettled.insert(id.to_string(), 1);
        // Like a new execution on the server: no timer row yet.
        self.timers.insert(id.to_string(), None);
        Ok(())
    }

    /// Sends a command to an execution now.
    ///
    /// # Errors
    /// `EXECUTION_NOT_FOUND` or what [`accept`] refuses.
    pub fn command(&mut self, id: &str, command: Command) -> Result<(), CommandError> {
        let exec = self
            .executions
            .get_mut(id)
            .ok_or_else(|| CommandError::new(orbit_codes::ErrorCode::ExecutionNotFound, id))?;
        let events = accept(&exec.def, &exec.state, command, self.now, &self.limits)?;
        *self.unsettled.entry(id.to_string()).or_default() += events.len();
        record(exec, events, self.now);
        Ok(())
    }

    /// Sends a signal now.
    ///
    /// # Errors
    /// As [`Sim::command`].
    pub fn signal(&mut self, id: &str, name: &str, payload: Value) -> Result<(), CommandError> {
        self.command(id, Command::Signal { name: name.into(), payload })
    }

    /// Requests cancellation now.
    ///
    /// # Errors
    /// As [`Sim::command`].
    pub fn cancel(&mut self, id: &str, reason: &str) -> Result<(), CommandError> {
        self.command(id, Command::Cancel { reason: reason.into() })
    }

    /// Migrates an execution to `to` as the owner does: [`crate::migrate::migrate`]
    /// against its current definition and state, the `DefinitionMigrated` recorded now and
    /// the definition swapped; the next [`Sim::run`] settles it (cancelled units are
    /// withdrawn, the decider goes on with `to`). Returns the plan (nothing is recorded
    /// when `to` has the execution's hash already).
    ///
    /// # Errors
    /// `EXECUTION_NOT_FOUND`, or what [`crate::migrate::migrate`] refuses.
    pub fn migrate(&mut self, id: &str, to: Definition) -> Result<Plan, CommandError> {
        let exec = self
            .executions
            .get_mut(id)
            .ok_or_else(|| CommandError::new(orbit_codes::ErrorCode::ExecutionNotFound, id))?;
        let (plan, events) = migrate(&exec.def, &to, &exec.state).map_err(|(e, _)| e)?;
        if !events.is_empty() {
            *self.unsettled.entry(id.to_string()).or_default() += events.len();
            record(exec, events, self.now);
            exec.def = Arc::new(to);
        }
        Ok(plan)
    }

    /// An execution.
    #[must_use]
    pub fn execution(&self, id: &str) -> Option<&SimExecution> {
        self.executions.get(id)
    }

    /// Every execution, by id.
    #[must_use]
    pub fn executions(&self) -> &BTreeMap<String, SimExecution> {
        &self.executions
    }

    /// Every task offer made so far, in order.
    #[must_use]
    pub fn requests(&self) -> &[TaskRequest] {
        &self.requests
    }

    /// Runs until nothing can happen without outside input (or `max_steps` clock moves);
    /// returns whether it came to rest.
    pub fn run(&mut self, max_steps: usize) -> bool {
        for _ in 0..max_steps {
            while self.step_once() {}
            match self.next_due() {
                Some(at) => self.now = self.now.max(at),
                None => return true,
            }
        }
        false
    }

    /// Runs until time `until` at the latest.
    pub fn run_until(&mut self, until: u64) {
        loop {
            while self.step_once() {}
            match self.next_due() {
                Some(at) if at <= until => self.now = self.now.max(at),
                _ => {
                    self.now = self.now.max(until);
                    while self.step_once() {}
                    return;
                }
            }
        }
    }

    /// The next time something is due: a worker's answer or a timer the effects set.
    fn next_due(&self) -> Option<u64> {
        if !self.mail.is_empty() {
            return Some(self.now);
        }
        let due = self.pending.iter().map(|(at, _, _)| *at);
        due.chain(self.timers.values().flatten().copied()).min()
    }

    /// One pass over every execution; returns whether anything changed.
    fn step_once(&mut self) -> bool {
        let mut changed = self.deliver_due();
        let ids: Vec<String> = self.executions.keys().cloned().collect();
        for id in ids {
            changed |= self.drive(&id);
        }
        changed
    }

    fn deliver_due(&mut self) -> bool {
        let now = self.now;
        let (due, later): (Vec<_>, Vec<_>) =
            self.pending.drain(..).partition(|(at, _, _)| *at <= now);
        self.pending = later;
        let mail = std::mem::take(&mut self.mail);
        let any = !due.is_empty() || !mail.is_empty();
        for (_, id, command) in due {
            // A refused command (e.g. a result for a finished execution) is what a real
            // server would answer with an error; the simulation goes on.
            let _ = self.command(&id, command);
        }
        for Mail { to, from_child, command } in mail {
            let (Command::ChildClosed { step, .. }, Some(child)) = (&command, &from_child) else {
                let _ = self.command(&to, command);
                continue;
            };
            // Only the child the parent's unit waits for may resolve it.
            let waits = self
                .executions
                .get(&to)
                .and_then(|p| p.state.unit(step))
                .is_some_and(|u| u.wait.as_ref() == Some(&Wait::Child(child.clone())));
            if waits {
                let _ = self.command(&to, command);
            }
        }
        any
    }

    /// Settles one execution (the owner's pass for it) and carries out the effects.
    fn drive(&mut self, id: &str) -> bool {
        let pass = Pass { now: self.now, limits: &self.limits, caps: self.capabilities };
        let recorded = self.unsettled.remove(id).unwrap_or(0);
        let before = self.timers.get(id).copied();
        let Some(exec) = self.executions.get_mut(id) else { return false };
        let tail = exec.history.len().saturating_sub(recorded);
        let runs = settle(&exec.def, &mut exec.state, exec.history[tail..].to_vec(), before, &pass);
        let mut changed = false;
        let mut effects = Vec::new();
        for (i, run) in runs.into_iter().enumerate() {
            // The events the commands recorded are in the history already.
            let skip = if i == 0 { recorded } else { 0 };
            changed |= run.events.len() > skip;
            exec.history.extend(run.events.into_iter().skip(skip));
            if run.effects.iter().any(|e| matches!(e, Effect::ContinueAsNew { .. })) {
                exec.archived.push(std::mem::take(&mut exec.history));
            }
            effects.extend(run.effects);
        }
        // Offers are claimed at once here, so a `CancelUnit` never finds one left to withdraw.
        for effect in effects {
            changed |= self.carry_out(id, effect);
        }
        changed
    }

    /// Carries out one effect of execution `id`; returns whether it changed anything.
    fn carry_out(&mut self, id: &str, effect: Effect) -> bool {
        match effect {
            Effect::OfferTask(offer) | Effect::RunAdapter { offer, .. } => self.dispatch(id, offer),
            Effect::StartChild { child_id, workflow, version, input, parent } => {
                let step = parent.step.clone();
                let started =
                    self.start_with(&workflow, version.as_deref(), &child_id, input, Some(parent));
                if let Err(e) = started {
                    let command = Command::ChildClosed {
                        step,
                        status: Status::Failed,
                        output: None,
                        error: Some(TaskError::fatal(e.code.as_str(), e.message)),
                    };
                    self.mail.push(Mail { to: id.to_string(), from_child: None, command });
                }
                true
            }
            Effect::CancelChild { child_id, reason } => {
                let command = Command::Cancel { reason };
                self.mail.push(Mail { to: child_id, from_child: None, command });
                true
            }
            Effect::NotifyParent { parent, child_id, status, output, error } => {
                let command = Command::ChildClosed { step: parent.step, status, output, error };
                let to = parent.execution_id;
                self.mail.push(Mail { to, from_child: Some(child_id), command });
                true
            }
            Effect::SetTimer { at } => {
                self.timers.insert(id.to_string(), Some(at));
                false
            }
            Effect::ClearTimer => {
                self.timers.insert(id.to_string(), None);
                false
            }
            // One process, no other holder: every slot is granted at once.
            Effect::AcquireSlot { key, .. } => {
                let command = Command::SlotGranted { key };
                self.mail.push(Mail { to: id.to_string(), from_child: None, command });
                true
            }
            // The history was archived by `drive`; nothing is queued per unit here.
            Effect::ContinueAsNew { .. }
            | Effect::CancelUnit { .. }
            | Effect::ReleaseSlots { .. } => false,
        }
    }

    /// A worker claims `offer` at once and answers after the latency.
    fn dispatch(&mut self, id: &str, offer: TaskOffer) -> bool {
        self.next_token += 1;
        let token = format!("t{}", self.next_token);
        let dispatched = Command::Dispatched {
            step: offer.unit.clone(),
            token: token.clone(),
            worker_id: "sim-worker".into(),
            session: "sim-session".into(),
        };
        if self.command(id, dispatched).is_err() {
            return false;
        }
        let redelivery = self.executions[id].state.unit(&offer.unit).is_some_and(|u| u.redelivery);
        let request = TaskRequest {
            execution_id: id.to_string(),
            step: offer.unit,
            task: offer.task,
            attempt: offer.attempt,
            input: offer.input,
            idempotency_key: offer.idempotency_key,
            redelivery,
            token: token.clone(),
        };
        let outcome = match self.handlers.get_mut(&request.task) {
            Some(h) => h(&request),
            None => TaskOutcome::Fail(TaskError::fatal(
                "NO_HANDLER",
                format!("no worker for `{}`", request.task),
            )),
        };
        self.requests.push(request);
        let (mut delay, mut outcome) = (self.latency_ms, outcome);
        while let TaskOutcome::After(ms, inner) = outcome {
            (delay, outcome) = (ms, *inner);
        }
        let at = self.now + delay;
        let command = match outcome {
            TaskOutcome::Complete(output) => Command::Complete { token, output },
            TaskOutcome::Fail(error) => Command::Fail { token, error },
            // `After` was unwrapped above.
            TaskOutcome::Hang | TaskOutcome::After(..) => return true,
            TaskOutcome::Lose => Command::Uncertain { token, reason: "SESSION_LOST".into() },
        };
        self.pending.push((at, id.to_string(), command));
        true
    }
}

fn record(exec: &mut SimExecution, events: Vec<Event>, now: u64) {
    for event in events {
        crate::run::record(&mut exec.state, &mut exec.history, event, now);
    }
}
