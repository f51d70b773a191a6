//! Migrating a running execution to another version of its workflow, after a checked
//! diff. Pure: [`plan`] compares two definitions against the run's state and judges every
//! difference; [`migrate`] turns a safe plan into the one recorded event,
//! `DefinitionMigrated`, which `State::apply` folds (renames, cancellations and mapped
//! outputs) and after which the decider goes on with the new definition
//! (`crate::replay::replay_defs` checks such a history).
//!
//! # How a step stands
//!
//! Each step of each body is *pending* (no unit in a live instance), *running* (a unit of a
//! live instance is open: scheduled, dispatched, waiting, sleeping, a child running, a
//! retry due, a fan-out in progress, a compensation in flight) or *done* (every unit of
//! the live instances resolved: succeeded, failed, skipped, cancelled). Live instances: the
//! main body; `on.<outcome>` while winding down with that outcome; every started
//! `on_signal` instance (they are all scheduled against the current definition); update
//! instances whose update is open.
//!
//! # Rules
//!
//! Steps are matched by id within a body, else by the new step's `renamed_from` naming an
//! old step the new version lacks. A step whose id is in both versions is the same step
//! even when its kind changed (a kind change, not a rename).
//!
//! - **Added**: safe; it starts once its needs are met (in `on_signal` bodies, in every
//!   started instance). Unsafe when a unit of that id is already in the run (a step an
//!   earlier migration removed left it).
//! - **Removed**: pending → safe; running → safe, its open units are cancelled (listed in
//!   `cancel`; no compensation for them); done → unsafe (its recorded events name a step the
//!   new version lacks) — declare `renamed_from` if it was renamed.
//! - **Renamed** (`renamed_from`): pending or done → safe, listed in `renames`; running →
//!   unsafe (an attempt in flight carries the old unit key and idempotency key); unsafe too
//!   when a unit of the new id is already in the run.
//! - **Kind changed**, **task changed** (task name, child workflow, awaited signal): pending
//!   → safe; running or done → unsafe.
//! - **Task declaration** of a task the step calls in both versions: version or language
//!   changed → unsafe only while running (the attempt in flight was offered as the old
//!   one); input contract → safe; output contract → unsafe when a recorded output of the
//!   step (its unit or its elements) fails the new contract, else safe (results in flight
//!   are checked against the new one). Outputs a migration hint maps are judged as mapped.
//! - **Migration hint** (`hints`): the first `migrations:` entry of `to` whose `from`
//!   matches the run's version maps the recorded outputs of main-body task steps, evaluated
//!   once here; a mapping that fails to evaluate, is over the payload limit or fails the
//!   new output contract → unsafe (`output_mapped`), else safe and the results go into
//!   `DefinitionMigrated::outputs` (replay applies them as recorded).
//! - **Input** (`input`, and the kind's value: `compute`, `until`, `http`,
//!   `continue_as_new.input`, a `sleep` duration): pending or done → safe (done: not
//!   evaluated again); running → unsafe (the unit in flight used the old value).
//! - **when**: always safe (running or done: already evaluated).
//! - **for_each** (list or `as`): pending → safe; running → unsafe; done → safe, unless its
//!   fan-out was frozen (`StepFanOut`) → unsafe.
//! - **needs**: always safe (the new graph was checked at registration).
//! - **Policy** (`retry`, `timeout`, `queue_timeout`, `heartbeat_timeout`, `max_concurrency`,
//!   `compensate`): safe, for the next attempts; except dropping the `compensate` of a step
//!   the run's wind-down has still to compensate → unsafe.
//! - **Workflow input contract**: the run's recorded input is checked against the new one:
//!   unsafe when it fails (new defaults are not applied to it).
//! - **Output template, queries, signal and update declarations, task declarations no step
//!   diff covered, settings** (`description`, `timeout`, `retention`, `limits`): safe (read
//!   later); except a removed signal an open `await` (not cancelled by this migration) waits
//!   for, and a removed update handler an open update waits for its reply from → unsafe.
//!
//! [`migrate`] refuses with `INVALID_ARGUMENT` when `to` is another workflow or `from` is
//! not the definition the run is on, `EXECUTION_FINISHED` when the run is not open,
//! `MIGRATION_UNSAFE` listing every unsafe change; the same hash is nothing to do.

mod classify;
mod context;
mod contracts;
mod hints;
mod steps;
mod workflow;

pub use crate::change::{Change, ChangeKind};
use crate::command::CommandError;
use crate::event::Event;
use crate::state::State;
use classify::Units;
use context::{Cx, Out};
use hints::Hinted;
use orbit_codes::ErrorCode;
use orbit_definition::{Body, Definition, Outcome};
use serde::Serialize;
use serde_json::Value;
use std::collections::{BTreeMap, BTreeSet};

/// The checked diff of two versions of a workflow for one run.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Plan {
    /// The version the run is on.
    pub from_version: String,
    /// The version it would move to.
    pub to_version: String,
    /// The definition hash the run is on.
    pub from_hash: String,
    /// The definition hash it would move to.
    pub to_hash: String,
    /// Every difference, in document order (workflow settings, input, tasks, signals,
    /// queries, updates, steps, output, `on`, `on_signal`), safe ones included.
    pub changes: Vec<Change>,
    /// Unit-key renames: old step -> new step, body-qualified
    /// (`crate::unit::qualified_step`).
    pub renames: BTreeMap<String, String>,
    /// Unit keys to cancel (open units of removed steps), sorted.
    pub cancel: Vec<String>,
    /// Outputs the target's migration hint maps, by unit key after `renames`: they replace
    /// the recorded ones. Empty when no hint applies or a mapping failed. Recorded in the
    /// event; left out of the plan's JSON (the owner's reply), which only needs the diff.
    #[serde(skip)]
    pub outputs: BTreeMap<String, Value>,
}

impl Plan {
    /// Whether no change is unsafe.
    #[must_use]
    pub fn is_safe(&self) -> bool {
        self.changes.iter().all(|c| c.safe)
    }

    /// The unsafe changes, in order.
    #[must_use]
    pub fn unsafe_changes(&self) -> Vec<&Change> {
        self.changes.iter().filter(|c| !c.safe).collect()
    }

    /// Whether nothing differs (the same hash, or only the version).
    #[must_use]
    pub fn is_empty(&self) -> bool {
        self.changes.is_empty()
    }
}

/// The checked diff of `from` -> `to` against `state` (the folded history of the current
/// run). Pure.
#[must_use]
pub fn plan(from: &Definition, to: &Definition, state: &State) -> Plan {
    let mut plan = Plan {
        from_version: from.version.clone(),
        to_version: to.version.clone(),
        from_hash: from.hash.clone(),
        to_hash: to.hash.clone(),
        changes: Vec::new(),
        renames: BTreeMap::new(),
        cancel: Vec::new(),
        outputs: BTreeMap::new(),
    };
    if from.hash == to.hash {
        return plan;
    }
    let units = Units::of(state);
    let hinted = Hinted::of(from, to, state, &units);
    let cx = Cx { from, to, state, units, hinted };
    // Bodies first: the signal check needs what they cancel.
    let mut covered = BTreeSet::new();
    let mut body = |b: Body| {
        let mut out = Out::default();
        covered.extend(steps::body(&cx, &b, &mut out));
        out
    };
    let updates: Vec<(String, Out)> = workflow::update_names(&cx)
        .into_iter()
        .map(|name| {
            let out = body(Body::Update(name.clone()));
            (name, out)
        })
        .collect();
    let main = body(Body::Main);
    let on: Vec<Out> = [Outcome::Failure, Outcome::Cancel, Outcome::Timeout]
        .into_iter()
        .map(|o| body(Body::On(o)))
        .collect();
    let signal_names: BTreeSet<&String> =
        from.on_signal.keys().chain(to.on_signal.keys()).collect();
    let on_signal: Vec<Out> =
        signal_names.into_iter().map(|n| body(Body::OnSignal(n.clone()))).collect();
    let bodies = updates.iter().map(|(_, o)| o).chain([&main]).chain(&on).chain(&on_signal);
    let mut top = Out::default();
    for o in bodies {
        top.cancel.extend(o.cancel.iter().cloned());
        top.renames.extend(o.renames.iter().map(|(k, v)| (k.clone(), v.clone())));
    }

    workflow::settings(&cx, &mut top);
    contracts::workflow_input(&cx, &mut top);
    workflow::tasks(&cx, &covered, &mut top);
    workflow::signals(&cx, &mut top);
    workflow::queries(&cx, &mut top);
    let mut changes = std::mem::take(&mut top.changes);
    for (name, o) in updates {
        workflow::update(&cx, &name, &mut top);
        changes.append(&mut top.changes);
        changes.extend(o.changes);
    }
    changes.extend(main.changes);
    workflow::output(&cx, &mut top);
    changes.append(&mut top.changes);
    for o in on.into_iter().chain(on_signal) {
        changes.extend(o.changes);
    }
    if changes.is_empty() && differs_beyond_version(from, to) {
        changes.push(Change {
            kind: ChangeKind::SettingsChanged,
            step: String::new(),
            detail: "the normalised document differs".into(),
            safe: true,
            reason: "no step, contract or declaration the run uses changed".into(),
        });
    }
    plan.changes = changes;
    plan.outputs = cx
        .hinted
        .outputs()
        .into_iter()
        .map(|(key, v)| (crate::state::migrated::renamed(&key, &top.renames).unwrap_or(key), v))
        .collect();
    plan.renames = top.renames;
    plan.cancel = top.cancel.into_iter().collect();
    plan
}

/// Whether the normalised documents differ in more than their version.
fn differs_beyond_version(from: &Definition, to: &Definition) -> bool {
    let document = |d: &Definition| {
        let mut doc = orbit_definition::to_document(d);
        if let Some(map) = doc.as_object_mut() {
            map.remove("version");
        }
        doc
    };
    document(from) != document(to)
}

/// The events that migrate: `[DefinitionMigrated{..}]` when the plan is safe, none when
/// `to` has the hash the run is on already.
///
/// # Errors
/// With the plan: `INVALID_ARGUMENT` when `to` is another workflow (its name differs) or
/// `from` is not the definition the run is on; `EXECUTION_FINISHED` when the run is not
/// open (completed, failed, cancelled, timed out, continued as new); `MIGRATION_UNSAFE`
/// with every unsafe change (`step: detail (reason)`) when any is unsafe.
// The signature is the API the owner calls: the plan travels with the refusal so the
// caller can show every change, which makes the error large.
#[allow(clippy::result_large_err)]
pub fn migrate(
    from: &Definition,
    to: &Definition,
    state: &State,
) -> Result<(Plan, Vec<Event>), (CommandError, Plan)> {
    let plan = plan(from, to, state);
    let refuse = |code: ErrorCode, message: String, plan: Plan| {
        Err((CommandError::new(code, message), plan))
    };
    if to.name != from.name {
        let message = format!(
            "cannot migrate an execution of workflow `{}` to workflow `{}`: pick a version of \
             `{}`",
            from.name, to.name, from.name
        );
        return refuse(ErrorCode::InvalidArgument, message, plan);
    }
    if !state.definition_hash.is_empty() && state.definition_hash != from.hash {
        let message = format!(
            "the execution runs definition {} (version {}), not {} (version {}): plan from \
             the definition it runs",
            state.definition_hash, state.version, from.hash, from.version
        );
        return refuse(ErrorCode::InvalidArgument, message, plan);
    }
    let status = state.status();
    if state.status.is_none() || status.is_closed() {
        let message = format!(
            "the execution is {}: only a running execution can be migrated",
            status.as_str()
        );
        return refuse(ErrorCode::ExecutionFinished, message, plan);
    }
    if from.hash == to.hash {
        return Ok((plan, Vec::new()));
    }
    if !plan.is_safe() {
        let listed: Vec<String> = plan.unsafe_changes().iter().map(|c| c.describe()).collect();
        let message = format!(
            "migrating `{}` from version {} to {} is unsafe for this execution: {}",
            from.name,
            from.version,
            to.version,
            listed.join("; ")
        );
        return refuse(ErrorCode::MigrationUnsafe, message, plan);
    }
    let event = Event::DefinitionMigrated {
        from_version: plan.from_version.clone(),
        to_version: plan.to_version.clone(),
        from_hash: plan.from_hash.clone(),
        to_hash: plan.to_hash.clone(),
        renames: plan.renames.clone(),
        cancelled: plan.cancel.clone(),
        changes: plan.changes.clone(),
        outputs: plan.outputs.clone(),
    };
    Ok((plan, vec![event]))
}
