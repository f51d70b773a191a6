//! An in-memory simulator: drives whole executions with a manual clock and scripted task
//! outcomes, starting children, continuing as new and delivering signals the way the server
//! does. Used by tests and tooling; it exercises exactly the pure API the owner uses
//! (`start`, `accept`, `advance`, `next_timer`, `next_run`).

use crate::command::{accept, next_run, start, Command, CommandError};
use crate::decide::{advance, next_timer};
use crate::event::{Event, HistoryEvent, Origin, ParentRef, TaskError};
use crate::state::{State, Status, UnitStatus, Wait};
use orbit_definition::{Definition, Limits, StepKind};
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
    /// Task name (`http` for built-in HTTP steps).
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
    defs: Vec<Arc<Definition>>,
    executions: BTreeMap<String, SimExecution>,
    handlers: HashMap<String, Handler>,
    pending: Vec<(u64, String, Command)>,
    requests: Vec<TaskRequest>,
    next_token: u64,
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
            defs: Vec::new(),
            executions: BTreeMap::new(),
            handlers: HashMap::new(),
            pending: Vec::new(),
            requests: Vec::new(),
            next_token: 0,
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
        let created = start(&def, id, input, parent, None, 1, &self.limits)?;
        let mut exec = SimExecution {
            def,
            state: State::default(),
            history: Vec::new(),
            archived: Vec::new(),
        };
        record(&mut exec, vec![created], self.now);
        self.executions.insert(id.to_string(), exec);
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
            let due = self.pending.iter().map(|(at, _, _)| *at);
            let timers = self.executions.values().filter_map(|e| next_timer(&e.def, &e.state));
            match due.chain(timers).min() {
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
            let due = self.pending.iter().map(|(at, _, _)| *at);
            let timers = self.executions.values().filter_map(|e| next_timer(&e.def, &e.state));
            match due.chain(timers).min() {
                Some(at) if at <= until => self.now = self.now.max(at),
                _ => {
                    self.now = self.now.max(until);
                    while self.step_once() {}
                    return;
                }
            }
        }
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
        let any = !due.is_empty();
        for (_, id, command) in due {
            // A refused command (e.g. a result for a finished execution) is what a real
            // server would answer with an error; the simulation goes on.
            let _ = self.command(&id, command);
        }
        any
    }

    fn drive(&mut self, id: &str) -> bool {
        let now = self.now;
        let limits = self.limits.clone();
        let Some(exec) = self.executions.get_mut(id) else { return false };
        let decided = advance(&exec.def, &mut exec.state, now, &limits);
        let mut changed = !decided.is_empty();
        exec.history.extend(decided);
        changed |= self.dispatch(id);
        changed |= self.children(id);
        changed |= self.continue_as_new(id);
        changed
    }

    fn dispatch(&mut self, id: &str) -> bool {
        let exec = &self.executions[id];
        let scheduled: Vec<(String, u32, Value, String, bool)> = exec
            .state
            .units
            .iter()
            .filter(|(_, u)| u.status == UnitStatus::Scheduled)
            .map(|(k, u)| {
                let input = u.input.clone().unwrap_or(Value::Null);
                (
                    k.clone(),
                    u.attempt,
                    input,
                    u.idempotency_key.clone().unwrap_or_default(),
                    u.redelivery,
                )
            })
            .collect();
        let def = exec.def.clone();
        for (step, attempt, input, idempotency_key, redelivery) in &scheduled {
            self.next_token += 1;
            let token = format!("t{}", self.next_token);
            let dispatched = Command::Dispatched {
                step: step.clone(),
                token: token.clone(),
                worker_id: "sim-worker".into(),
                session: "sim-session".into(),
            };
            if self.command(id, dispatched).is_err() {
                continue;
            }
            let request = TaskRequest {
                execution_id: id.to_string(),
                step: step.clone(),
                task: task_name(&def, step),
                attempt: *attempt,
                input: input.clone(),
                idempotency_key: idempotency_key.clone(),
                redelivery: *redelivery,
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
            let at = self.now + self.latency_ms;
            let command = match outcome {
                TaskOutcome::Complete(output) => Command::Complete { token, output },
                TaskOutcome::Fail(error) => Command::Fail { token, error },
                TaskOutcome::Hang => continue,
                TaskOutcome::Lose => Command::Uncertain { token, reason: "SESSION_LOST".into() },
            };
            self.pending.push((at, id.to_string(), command));
        }
        !scheduled.is_empty()
    }

    /// Starts requested children, cancels children of cancelled units, reports closed
    /// children to their parents.
    fn children(&mut self, id: &str) -> bool {
        let exec = &self.executions[id];
        let mut changed = false;
        let mut to_start = Vec::new();
        let mut to_cancel = Vec::new();
        for he in &exec.history {
            if let Event::ChildStarted { step, child_id, workflow, version, input } = &he.event {
                let unit = exec.state.unit(step);
                let waiting = unit.is_some_and(|u| u.wait == Some(Wait::Child(child_id.clone())));
                match (self.executions.get(child_id), unit.map(|u| u.status)) {
                    (None, Some(UnitStatus::Waiting)) if waiting => {
                        to_start.push((
                            step.clone(),
                            child_id.clone(),
                            workflow.clone(),
                            version.clone(),
                            input.clone(),
                        ));
                    }
                    (Some(child), Some(UnitStatus::Cancelled))
                        if !child.state.status().is_closed() =>
                    {
                        to_cancel.push(child_id.clone());
                    }
                    _ => {}
                }
            }
        }
        for (step, child_id, workflow, version, input) in to_start {
            let parent = Some(ParentRef { execution_id: id.to_string(), step: step.clone() });
            if let Err(e) = self.start_with(&workflow, version.as_deref(), &child_id, input, parent)
            {
                let closed = Command::ChildClosed {
                    step,
                    status: Status::Failed,
                    output: None,
                    error: Some(TaskError::fatal(e.code.as_str(), e.message)),
                };
                let _ = self.command(id, closed);
            }
            changed = true;
        }
        for child in to_cancel {
            changed |= self.cancel(&child, "parent is winding down").is_ok();
        }
        // This execution closed: tell its parent.
        let exec = &self.executions[id];
        let status = exec.state.status();
        if let (Some(parent), true) =
            (exec.state.parent.clone(), status.is_closed() && status != Status::ContinuedAsNew)
        {
            let waiting = self
                .executions
                .get(&parent.execution_id)
                .and_then(|p| p.state.unit(&parent.step))
                .is_some_and(|u| !u.status.is_resolved());
            if waiting {
                let closed = Command::ChildClosed {
                    step: parent.step.clone(),
                    status,
                    output: exec.state.output.clone(),
                    error: exec.state.error.clone(),
                };
                changed |= self.command(&parent.execution_id, closed).is_ok();
            }
        }
        changed
    }

    fn continue_as_new(&mut self, id: &str) -> bool {
        let now = self.now;
        let exec = self.executions.get_mut(id).expect("driven execution exists");
        if exec.state.status() != Status::ContinuedAsNew {
            return false;
        }
        let events = next_run(&exec.def, &exec.state);
        exec.archived.push(std::mem::take(&mut exec.history));
        exec.state = State::default();
        record(exec, events, now);
        true
    }
}

fn record(exec: &mut SimExecution, events: Vec<Event>, now: u64) {
    for event in events {
        let he = HistoryEvent {
            seq: exec.state.last_seq + 1,
            timestamp_ms: now,
            origin: Origin::Recorded,
            event,
        };
        exec.state.apply(&he);
        exec.history.push(he);
    }
}

fn task_name(def: &Definition, step: &str) -> String {
    let Some(key) = crate::unit::UnitKey::parse(step) else { return String::new() };
    let Some(s) = def.body(&key.scope.body()).iter().find(|s| s.id == key.step) else {
        return String::new();
    };
    if key.compensate {
        return s.compensate.as_ref().map(|c| c.task.clone()).unwrap_or_default();
    }
    match &s.kind {
        StepKind::Task { task } => task.clone(),
        StepKind::Http { .. } => "http".into(),
        _ => String::new(),
    }
}
