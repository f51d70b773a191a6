//! The workflow definition model: what a parsed, validated and normalised document is.
//!
//! Every value here has passed validation (see `parse`), so the engine can rely on it:
//! step ids are unique and well-formed, every dependency names an existing step, the
//! dependency graph is acyclic, every task step names a declared contract, and every
//! expression compiled. Durations are whole milliseconds.

use crate::contract::Contract;
use crate::expr::{Expr, Template};
use crate::flow::{Fairness, StepFlow, WorkflowConcurrency};
use std::collections::{BTreeMap, BTreeSet};

/// A validated workflow definition, pinned by its `hash`.
#[derive(Debug, Clone, PartialEq)]
pub struct Definition {
    /// Workflow name (`[A-Za-z0-9_.-]+`).
    pub name: String,
    /// Version string; (name, version) is immutable once registered.
    pub version: String,
    /// Free text for people.
    pub description: Option<String>,
    /// Whole-execution timeout in milliseconds; reaching it times the execution out.
    pub timeout_ms: Option<u64>,
    /// How long a finished execution is kept before it is deleted (overrides the server's
    /// default retention), in milliseconds.
    pub retention_ms: Option<u64>,
    /// Per-workflow limits (the stricter of these and the server's apply).
    pub limits: Limits,
    /// The default priority (1..=5) of the workflow's task attempts (`priority:`): below a
    /// step's own `priority` and the priority a start request gives the run.
    pub priority: Option<u8>,
    /// The default fair queue of the workflow's task steps (`fairness:`): a step's own
    /// `fairness` comes first. Its key reads only `input` and `execution`.
    pub fairness: Option<Fairness>,
    /// The default worker labels of the workflow's task steps (`worker_labels:`, the shape
    /// of a step's `on:`, which replaces it). Its values read only `input` and `execution`.
    pub worker_labels: Option<crate::flow::Labels>,
    /// The default `sticky:` of the workflow's task steps (a step's own comes first).
    pub sticky: Option<crate::flow::Sticky>,
    /// Debounce or singleton starts (`dedupe:`): starts of one key within a window collapse
    /// into one execution.
    pub dedupe: Option<crate::dedupe::Dedupe>,
    /// Workflow-level concurrency keys (`concurrency:`): an execution holds a slot of each
    /// from before its first step until it closes. Keys read only `input` and `execution`.
    pub concurrency: Vec<WorkflowConcurrency>,
    /// Declared search attributes (`search_attributes:`), name -> type (see
    /// [`crate::search`]).
    pub search_attributes: BTreeMap<String, crate::search::SearchType>,
    /// Search attributes set at start (`search:`): declared name -> template over `input`
    /// and `execution`.
    pub search: BTreeMap<String, Template>,
    /// Contract of the execution input (defaults applied before validation).
    pub input: Option<Contract>,
    /// Contracts of the worker tasks this workflow calls, by task name.
    pub tasks: BTreeMap<String, TaskContract>,
    /// Signals this workflow accepts, with an optional payload contract.
    pub signals: BTreeMap<String, Option<Contract>>,
    /// Named read-only queries evaluated over the execution state.
    pub queries: BTreeMap<String, Expr>,
    /// Update handlers by name: a signal with a reply (`UpdateExecution`).
    pub updates: BTreeMap<String, Update>,
    /// The main body, in document order.
    pub steps: Vec<Step>,
    /// Output expression; without it the output is null.
    pub output: Option<Template>,
    /// Handlers run while the execution winds down after failure, cancel or timeout.
    pub on: Handlers,
    /// Handler bodies started once per received signal of that name.
    pub on_signal: BTreeMap<String, Vec<Step>>,
    /// Hints for migrating running executions of earlier versions to this one
    /// (`migrations:`), in document order: the first whose `from` matches applies.
    pub migrations: Vec<MigrationHint>,
    /// `sha256:<hex>` of the canonical JSON of the normalised document.
    pub hash: String,
}

/// An update handler: `args` checked against `input`, then `validator` (a boolean over the
/// state and `args`, evaluated before anything is written), then `steps` (if any) run as
/// one handler instance inside the execution, then `reply` gives the result.
#[derive(Debug, Clone, PartialEq)]
pub struct Update {
    /// Contract of the update's argument.
    pub input: Option<Contract>,
    /// Must be true for the update to be accepted; false rejects it with nothing recorded.
    pub validator: Option<Expr>,
    /// The reply; without it the reply is null. With `steps`, evaluated once they are all
    /// resolved and may read their outputs (`steps.<id>.output`).
    pub reply: Option<Expr>,
    /// The handler's body: empty means the reply is computed when the update is accepted.
    pub steps: Vec<Step>,
}

/// A migration hint (`migrations[]`): how the recorded outputs of some main-body task steps
/// of an execution on an earlier version map to this version's shape, applied once when
/// the execution is migrated here (`orbit_engine::migrate`) and recorded, never evaluated
/// again.
#[derive(Debug, Clone, PartialEq)]
pub struct MigrationHint {
    /// Version patterns (`1`, `1.*`, `*`; see [`crate::version::matches`]): the hint applies
    /// to an execution whose current version matches one of them.
    pub from: Vec<String>,
    /// Main-body task step id of this version -> the template of its new output, evaluated
    /// over the old run's state (`steps.<old id>`, `input`, `execution`) with `output` bound
    /// to the recorded output of each unit of the step (its own, or each `for_each`
    /// element's).
    pub outputs: BTreeMap<String, Template>,
}

impl MigrationHint {
    /// The first of its patterns `version` matches.
    #[must_use]
    pub fn matching(&self, version: &str) -> Option<&str> {
        self.from.iter().find(|p| crate::version::matches(p, version)).map(String::as_str)
    }
}

/// Limits a workflow may tighten; `None` leaves the server's limit.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Limits {
    /// Elements one `for_each` may fan out to.
    pub max_fan_out: Option<u64>,
    /// Events one run's history may hold.
    pub max_history_events: Option<u64>,
    /// Serialized bytes of an input, output or signal payload.
    pub max_payload_bytes: Option<u64>,
    /// Durable timers (`sleep` and `until` steps) one run may start; the step that would
    /// start one more fails with `LIMIT_EXCEEDED`.
    pub max_timers: Option<u64>,
}

/// The contract of one worker task.
#[derive(Debug, Clone, PartialEq)]
pub struct TaskContract {
    /// Task version the worker must announce (default `"1"`).
    pub version: String,
    /// Contract checked before dispatch (`INPUT_CONTRACT_VIOLATION`).
    pub input: Option<Contract>,
    /// Contract checked on results (`OUTPUT_CONTRACT_VIOLATION`, not retried).
    pub output: Option<Contract>,
    /// Optional routing by worker runtime (e.g. `python`).
    pub language: Option<String>,
}

/// The outcome a wind-down handler list runs for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Outcome {
    /// A step failed or a limit was exceeded.
    Failure,
    /// A cancel was requested.
    Cancel,
    /// The workflow timeout was reached.
    Timeout,
}

impl Outcome {
    /// The lowercase name used in documents and unit keys.
    #[must_use]
    pub fn as_str(self) -> &'static str {
        match self {
            Outcome::Failure => "failure",
            Outcome::Cancel => "cancel",
            Outcome::Timeout => "timeout",
        }
    }

    /// Parses the lowercase name.
    #[must_use]
    pub fn parse(s: &str) -> Option<Outcome> {
        match s {
            "failure" => Some(Outcome::Failure),
            "cancel" => Some(Outcome::Cancel),
            "timeout" => Some(Outcome::Timeout),
            _ => None,
        }
    }
}

/// Handler step lists by outcome (`on:` in the document).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Handlers {
    /// Run after a failure.
    pub failure: Vec<Step>,
    /// Run after a cancel.
    pub cancel: Vec<Step>,
    /// Run after the workflow timeout.
    pub timeout: Vec<Step>,
}

impl Handlers {
    /// The handler steps for one outcome.
    #[must_use]
    pub fn for_outcome(&self, outcome: Outcome) -> &[Step] {
        match outcome {
            Outcome::Failure => &self.failure,
            Outcome::Cancel => &self.cancel,
            Outcome::Timeout => &self.timeout,
        }
    }
}

/// One step of a body (main, handler or signal handler).
#[derive(Debug, Clone, PartialEq)]
pub struct Step {
    /// Unique within its body; `[A-Za-z_][A-Za-z0-9_]*`.
    pub id: String,
    /// What the step does.
    pub kind: StepKind,
    /// Dependencies written in `needs`.
    pub needs: Vec<String>,
    /// Every dependency within the same body: `needs` plus steps referenced by expressions.
    pub deps: BTreeSet<String>,
    /// Condition; false skips the step.
    pub when: Option<Expr>,
    /// Input of a task, child workflow or http call.
    pub input: Option<Template>,
    /// Per attempt (task), per wait (await), per child run (workflow); milliseconds.
    pub timeout_ms: Option<u64>,
    /// Longest a task may wait in the queue before a worker starts it.
    pub queue_timeout_ms: Option<u64>,
    /// Longest a worker may go without heartbeating an attempt.
    pub heartbeat_timeout_ms: Option<u64>,
    /// Retry policy for failed attempts.
    pub retry: RetryPolicy,
    /// Task run to undo this step when the workflow winds down.
    pub compensate: Option<TaskCall>,
    /// Fan-out over a list.
    pub for_each: Option<ForEach>,
    /// The id this step had in the previous version of the workflow (`renamed_from`): a
    /// migration of a running execution carries the old step's units over to this id
    /// instead of treating the step as removed and another one added.
    pub renamed_from: Option<String>,
    /// Flow control (`priority`, `concurrency`, `rate_limit`, `fairness`, `on`, `sticky`;
    /// task steps only).
    pub flow: StepFlow,
    /// Search attributes set when the step succeeds (`search:`, main body only): declared
    /// name -> template, which may read the step's own output (`steps.<id>.output`).
    pub search: BTreeMap<String, Template>,
    /// `continue_on_failure: true`: a unit of this step that fails for good (its last
    /// attempt, an expression, a limit, a child) counts as completed instead, with
    /// [`caught_output`] of the error as its output; the body goes on and the unit is never
    /// compensated. With `for_each`, each element is caught on its own.
    pub continue_on_failure: bool,
    /// `on_failure: {steps, output?}`: when a unit of this step fails for good, this list
    /// runs (units `<unit>.on_failure.<id>`, `failure` readable in its expressions) and the
    /// step completes with the list's output, or fails with the list's error. Not on
    /// `group`, `switch`, `race` or `continue_as_new` steps, nor with `for_each` or
    /// `continue_on_failure`.
    pub on_failure: Option<OnFailure>,
}

/// The failure branch of a step (`on_failure: {steps, output?}`).
#[derive(Debug, Clone, PartialEq)]
pub struct OnFailure {
    /// The branch's steps (at least one); ids unique within it.
    pub steps: Vec<Step>,
    /// The step's output once the branch succeeded; without one, the branch's last step's
    /// output.
    pub output: Option<Template>,
}

/// The output of a unit whose failure `continue_on_failure` caught:
/// `{failed: true, error: {code, message}}`, plus `error.details` when the error had them.
#[must_use]
pub fn caught_output(
    code: &str,
    message: &str,
    details: Option<&serde_json::Value>,
) -> serde_json::Value {
    let mut error = serde_json::Map::new();
    error.insert("code".into(), code.into());
    error.insert("message".into(), message.into());
    if let Some(d) = details {
        error.insert("details".into(), d.clone());
    }
    serde_json::json!({"failed": true, "error": error})
}

/// What a step does (exactly one per step).
#[derive(Debug, Clone, PartialEq)]
pub enum StepKind {
    /// Call a worker task with a declared contract.
    Task {
        /// Task name, a key of `Definition::tasks`.
        task: String,
    },
    /// Pure expression evaluated by the decider.
    Compute {
        /// The value to record as output.
        value: Template,
    },
    /// Durable timer for a fixed time.
    Sleep {
        /// Milliseconds to sleep.
        duration_ms: u64,
    },
    /// Durable timer until a timestamp.
    Until {
        /// Expression yielding an RFC 3339 timestamp (or epoch milliseconds).
        at: Template,
    },
    /// Wait for the next undelivered signal of that name.
    Await {
        /// Signal name, a key of `Definition::signals`.
        signal: String,
    },
    /// Child workflow.
    Workflow {
        /// Child workflow name.
        workflow: String,
        /// Pinned version; `None` takes the latest when the child starts.
        version: Option<String>,
    },
    /// Built-in HTTP call run by the server (off unless enabled).
    Http {
        /// `{method, url, headers, body}` evaluated to the request.
        request: Template,
    },
    /// End this run and start the next with this input.
    ContinueAsNew {
        /// Input of the next run.
        input: Template,
    },
    /// A nested list of steps run as one step (`group: {steps, output?}`). Its steps' ids
    /// are unique within the group and their `needs` name steps of the group; their units
    /// are `<group unit>.<id>` (`g.sub`, `g.h.sub`). The group completes once every one of
    /// its steps is resolved: with `output` rendered over its steps (null without one), or
    /// failed if one of them failed.
    Group {
        /// The group's steps, in document order.
        steps: Vec<Step>,
        /// The group's output; sees the group's steps and what its steps see.
        output: Option<Template>,
    },
    /// Exactly one branch runs (`switch: [{when, steps}, ..., {default}]`): the first whose
    /// `when` holds, else the default one, else none. A branch's steps are like a group's;
    /// their units are `<switch unit>.<branch index>.<id>` (`route.1.ship`). The output is
    /// `{branch: index, output: <the branch's output>}`, `{branch: null, output: null}`
    /// when no branch ran.
    Switch {
        /// The branches, in document order; the default one, if any, last.
        branches: Vec<Branch>,
    },
    /// Every branch runs at once (`race: [{steps, output?}, ...]`, at least two); the
    /// first whose list resolves without a failure wins and the others' open units are
    /// cancelled. Units are `<race unit>.<branch index>.<id>` (`r.0.wait`); step ids are
    /// unique across the branches. The output is `{winner: index, output: <the winner's
    /// output>}`; when every branch failed, the race fails with branch 0's error.
    Race {
        /// The branches, in document order (their `when` is always `None`).
        branches: Vec<Branch>,
    },
    /// A nested list run again and again (`repeat: {steps, until, max_iterations,
    /// output?}`): iteration `n` (0-based) has units `<repeat unit>[n].<id>` (`poll[2].check`)
    /// and, once its steps are resolved, its output (the template, else its last step's
    /// output) is recorded as unit `<repeat unit>[n]`; then `until` is evaluated over it.
    /// The repeat succeeds with the iteration's output once `until` holds, and fails with
    /// `LIMIT_EXCEEDED` when `max_iterations` iterations ran without it holding. Its steps'
    /// expressions see `iteration` (n) and `previous` (iteration n-1's output, null in
    /// the first).
    Repeat(Box<Repeat>),
}

/// The payload of a `repeat` step (see [`StepKind::Repeat`]).
#[derive(Debug, Clone, PartialEq)]
pub struct Repeat {
    /// The steps of one iteration, in document order.
    pub steps: Vec<Step>,
    /// Evaluated after each iteration over its steps (and `iteration`, `previous`,
    /// `output`): true ends the loop.
    pub until: Expr,
    /// The most iterations (1..=[`crate::limits::MAX_REPEAT_ITERATIONS`]).
    pub max_iterations: u32,
    /// An iteration's output over its steps; without one, its last step's output.
    pub output: Option<Template>,
    /// Whether a repeat of the main `steps` continues the run as new by itself when the
    /// history nears its limit (`continue_as_new`, default true; docs/definitions.md).
    pub continue_as_new: bool,
}

/// One branch of a `switch` or `race` step.
#[derive(Debug, Clone, PartialEq)]
pub struct Branch {
    /// Condition; `None` for the `default` branch.
    pub when: Option<Expr>,
    /// The branch's steps (at least one).
    pub steps: Vec<Step>,
    /// The branch's output over its steps; without one, its last step's output.
    pub output: Option<Template>,
}

impl StepKind {
    /// The document keyword of this kind.
    #[must_use]
    pub fn keyword(&self) -> &'static str {
        match self {
            StepKind::Task { .. } => "task",
            StepKind::Compute { .. } => "compute",
            StepKind::Sleep { .. } => "sleep",
            StepKind::Until { .. } => "until",
            StepKind::Await { .. } => "await",
            StepKind::Workflow { .. } => "workflow",
            StepKind::Http { .. } => "http",
            StepKind::ContinueAsNew { .. } => "continue_as_new",
            StepKind::Group { .. } => "group",
            StepKind::Switch { .. } => "switch",
            StepKind::Race { .. } => "race",
            StepKind::Repeat(_) => "repeat",
        }
    }
}

/// A task call used by `compensate`.
#[derive(Debug, Clone, PartialEq)]
pub struct TaskCall {
    /// Task name, a key of `Definition::tasks`.
    pub task: String,
    /// Input template; sees the compensated unit's scope (its `item` too).
    pub input: Option<Template>,
    /// Retry policy of the compensation task.
    pub retry: RetryPolicy,
    /// Per-attempt timeout.
    pub timeout_ms: Option<u64>,
}

/// Fan-out of a step over a list.
#[derive(Debug, Clone, PartialEq)]
pub struct ForEach {
    /// Expression yielding the list; frozen when first evaluated.
    pub items: Template,
    /// Name the element is bound to (default `item`).
    pub as_name: String,
    /// Elements in flight at once; `None` means all.
    pub max_concurrency: Option<u32>,
}

/// How failed attempts are retried.
#[derive(Debug, Clone, PartialEq)]
pub struct RetryPolicy {
    /// Attempts in all, the first included (>= 1).
    pub max_attempts: u32,
    /// Delay before the second attempt, in milliseconds.
    pub initial_interval_ms: u64,
    /// Multiplier per further attempt (>= 1.0).
    pub backoff: f64,
    /// Cap of the delay, in milliseconds.
    pub max_interval_ms: u64,
    /// Error codes never retried.
    pub non_retryable: Vec<String>,
    /// Times one attempt is offered again after its worker was lost (the session ended
    /// with the attempt in flight); one loss more fails the attempt with `WORKER_LOST`,
    /// which the policy then retries or not like any failure.
    pub max_redeliveries: u32,
}

/// The default of [`RetryPolicy::max_redeliveries`].
pub const DEFAULT_MAX_REDELIVERIES: u32 = 5;

impl Default for RetryPolicy {
    fn default() -> Self {
        RetryPolicy {
            max_attempts: 3,
            initial_interval_ms: 1_000,
            backoff: 2.0,
            max_interval_ms: 60_000,
            non_retryable: Vec::new(),
            max_redeliveries: DEFAULT_MAX_REDELIVERIES,
        }
    }
}

impl Step {
    /// The steps of a group or repeat step.
    #[must_use]
    pub fn group_steps(&self) -> Option<&[Step]> {
        match &self.kind {
            StepKind::Group { steps, .. } => Some(steps),
            StepKind::Repeat(r) => Some(&r.steps),
            _ => None,
        }
    }

    /// Whether the step holds lists of steps of its own (`group`, `switch`, `race`, `repeat`).
    #[must_use]
    pub fn is_nested(&self) -> bool {
        matches!(
            self.kind,
            StepKind::Group { .. }
                | StepKind::Switch { .. }
                | StepKind::Race { .. }
                | StepKind::Repeat(_)
        )
    }
}

/// Follows a unit-key path through nested lists: `id` is a step of `list`; a group's steps
/// follow its id (`g.sub`), a switch or race branch's its id and the branch index
/// (`sw.1.sub`), a failure branch's its id and `on_failure` (`charge.on_failure.sub`), a
/// `for_each` group element's or a repeat iteration's its id and index (`g[2].sub`,
/// `poll[0].check`: the index is dropped, every element runs the same list).
/// Returns the step the path ends at, or — when it ends at a list (`g`, `sw.1`) — that
/// list as `Err`.
fn walk<'a>(mut list: &'a [Step], path: &str) -> Option<Result<&'a Step, &'a [Step]>> {
    let mut parts = path.split('.').peekable();
    loop {
        let part = parts.next()?;
        let id = part.split_once('[').map_or(part, |(id, _)| id);
        let step = list.iter().find(|s| s.id == id)?;
        if parts.peek().is_none() {
            return Some(Ok(step));
        }
        list = match &step.kind {
            StepKind::Group { steps, .. } => steps,
            StepKind::Repeat(r) => &r.steps,
            StepKind::Switch { branches } | StepKind::Race { branches } => {
                let i: usize = parts.next()?.parse().ok()?;
                let steps = &branches.get(i)?.steps;
                if parts.peek().is_none() {
                    return Some(Err(steps));
                }
                steps
            }
            _ => {
                let branch =
                    step.on_failure.as_ref().filter(|_| parts.next() == Some("on_failure"));
                let steps = &branch?.steps;
                if parts.peek().is_none() {
                    return Some(Err(steps));
                }
                steps
            }
        };
    }
}

/// The step at `path` (`id`, `group.id`, `switch.1.id`, ...) of a list.
fn find_in<'a>(list: &'a [Step], path: &str) -> Option<&'a Step> {
    walk(list, path)?.ok()
}

impl Definition {
    /// A main-body step by id, or by path (`group.id`) inside groups.
    #[must_use]
    pub fn step(&self, id: &str) -> Option<&Step> {
        find_in(&self.steps, id)
    }

    /// A step of a body by id, or by path (`group.id`) inside its groups.
    #[must_use]
    pub fn find_step(&self, body: &Body, path: &str) -> Option<&Step> {
        find_in(self.body(body), path)
    }

    /// The list of steps at a group prefix of a body: `""` is the body itself, `"g."` the
    /// steps of its group `g`, `"g.h."` those of `g`'s group `h`, `"sw.1."` those of branch
    /// 1 of its switch (or race) `sw`, `"s.on_failure."` the failure branch of its step `s`
    /// (empty if there is none).
    #[must_use]
    pub fn list_at(&self, body: &Body, prefix: &str) -> &[Step] {
        match prefix.strip_suffix('.') {
            None => self.body(body),
            Some(path) => match walk(self.body(body), path) {
                Some(Ok(step)) => step.group_steps().unwrap_or(&[]),
                Some(Err(branch)) => branch,
                None => &[],
            },
        }
    }

    /// The migration hint for an execution on `version`: the first of `migrations` whose
    /// `from` matches it, with its index.
    #[must_use]
    pub fn migration_hint(&self, version: &str) -> Option<(usize, &MigrationHint)> {
        self.migrations.iter().enumerate().find(|(_, h)| h.matching(version).is_some())
    }

    /// The steps of a body: `None` is the main body.
    #[must_use]
    pub fn body(&self, body: &Body) -> &[Step] {
        match body {
            Body::Main => &self.steps,
            Body::On(outcome) => self.on.for_outcome(*outcome),
            Body::OnSignal(name) => self.on_signal.get(name).map_or(&[], Vec::as_slice),
            Body::Update(name) => self.updates.get(name).map_or(&[], |u| u.steps.as_slice()),
        }
    }
}

/// Which list of steps a step belongs to.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Body {
    /// `steps:`.
    Main,
    /// `on.<outcome>:`.
    On(Outcome),
    /// `on_signal.<name>:`.
    OnSignal(String),
    /// `updates.<name>.steps:`.
    Update(String),
}
