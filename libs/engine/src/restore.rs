//! Reset and fork: a run that goes on from another run's state at a history position.
//!
//! Pure. [`point`] turns "back to step `s`" or "back to seq `n`" into the last seq kept;
//! [`plan`] works out, from the source run's history and the definition in effect at that
//! seq, what the new run keeps and what it runs again ([`Restore`]); [`closing`] gives the
//! events that close a reset run and [`first_events`] the new run's first events.
//!
//! # The new run
//!
//! Its history begins with its own `WorkflowCreated` (seq 1), then a copy of the source
//! run's events `2..=through_seq` (origin [`Origin::Copied`], seqs and timestamps kept),
//! then `RunRestored` (recorded), then — unless the caller drops them — a `SignalReceived`
//! for every signal the source run received after the point. So its state is the source's
//! state at the point, minus the *forgotten* units, which the decider runs again from their
//! first attempt, with the new run's idempotency keys and child ids:
//!
//! - every unit open at the point (scheduled, dispatched, retrying, waiting, sleeping, a
//!   child running, a fan-out in progress with all its elements);
//! - every main-body unit the source run's compensation undid after the point (its effect
//!   is gone), with the whole fan-out for an element;
//! - every main-body step that depends (`needs` or an expression) on a forgotten one,
//!   transitively, whatever it came to.
//!
//! Signals delivered to a forgotten unit are delivered again. Units that succeeded or were
//! skipped by the point are kept, with their outputs, and are compensated by the new run if
//! it winds down. What the source run did after the point is not undone: its steps are run
//! again, and their side effects are the worker's idempotency to handle (the new run's keys
//! differ, so a worker that deduplicates by key runs them again).
//!
//! # Refusals
//!
//! `INVALID_ARGUMENT`: a seq outside the run, a step id that is not a main-body step id.
//! `RESET_POINT_INVALID`: a step that never started in the run; a point at which the run
//! had closed or was winding down (cancelling, compensating, running `on` handlers).

mod pass;

pub use pass::{reset, restored, Restored};

use crate::command::{refuse, CommandError};
use crate::event::{Event, HistoryEvent, Origin};
use crate::state::{State, Status};
use crate::unit::{Scope, UnitKey};
use orbit_codes::ErrorCode;
use orbit_definition::Definition;
use serde::Serialize;
use std::collections::BTreeSet;

/// Where a reset goes back to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Point {
    /// Just before a main-body step first started (its first event): that step, and
    /// everything started after it, runs again.
    Step(String),
    /// The state after the event with this seq.
    Seq(u64),
}

/// What a restored run keeps and runs again (see the module docs).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Restore {
    /// The last source event copied.
    pub through_seq: u64,
    /// The source's events `2..=through_seq`, origin [`Origin::Copied`].
    #[serde(skip)]
    pub prefix: Vec<HistoryEvent>,
    /// Unit keys the new run runs again.
    pub forgotten: Vec<String>,
    /// Seqs of signals delivered to forgotten units (delivered again).
    pub redeliver: Vec<u64>,
    /// Units kept (succeeded or skipped by the point).
    pub kept: Vec<String>,
    /// Signals the source received after the point: re-received by the new run unless
    /// dropped.
    #[serde(skip)]
    pub later_signals: Vec<Event>,
    /// How many signals the source received after the point.
    pub signals_after: usize,
    /// The version in effect at the point (the new run goes on with it).
    pub version: String,
    /// Its definition hash.
    pub definition_hash: String,
}

/// The last seq a reset to `to` keeps, in `history` (one run, from its `WorkflowCreated`).
///
/// # Errors
/// `INVALID_ARGUMENT` for a seq outside the run or a step id that is not a main-body step
/// id; `RESET_POINT_INVALID` for a step that never started in the run.
pub fn point(history: &[HistoryEvent], to: &Point) -> Result<u64, CommandError> {
    let last = history.last().map_or(0, |he| he.seq);
    match to {
        Point::Seq(seq) if *seq >= 1 && *seq <= last => Ok(*seq),
        Point::Seq(seq) => Err(refuse(
            ErrorCode::InvalidArgument,
            format!("seq {seq} is not in the run: its events are 1..={last}"),
        )),
        Point::Step(step) => {
            let plain = !step.is_empty()
                && UnitKey::parse(step)
                    .is_some_and(|k| k.scope == Scope::Main && !k.compensate && k.index.is_none());
            if !plain {
                return Err(refuse(
                    ErrorCode::InvalidArgument,
                    format!(
                        "`{step}` is not a step id of the workflow's main body (a reset goes \
                         back to a step, e.g. `charge`; use a seq for any other point)"
                    ),
                ));
            }
            let first = history.iter().find(|he| {
                he.event
                    .step()
                    .and_then(UnitKey::parse)
                    .is_some_and(|k| k.scope == Scope::Main && !k.compensate && k.step == *step)
            });
            match first {
                Some(he) => Ok(he.seq - 1),
                None => Err(refuse(
                    ErrorCode::ResetPointInvalid,
                    format!("step `{step}` never started in this run: nothing to go back to"),
                )),
            }
        }
    }
}

/// The state of `history` after its events up to `seq`.
#[must_use]
pub fn state_at(history: &[HistoryEvent], seq: u64) -> State {
    State::from_history(history.iter().take_while(|he| he.seq <= seq))
}

/// What a run restored from `history` (one run) through `through` keeps and runs again;
/// `def` is the definition in effect at that seq (`state_at(..).definition_hash`).
///
/// # Errors
/// `RESET_POINT_INVALID` when the run had closed or was winding down at `through`;
/// `INVALID_ARGUMENT` when `history` does not begin with `WorkflowCreated` or `def` is not
/// the definition in effect at the point.
pub fn plan(
    def: &Definition,
    history: &[HistoryEvent],
    through: u64,
) -> Result<Restore, CommandError> {
    if !matches!(history.first().map(|he| &he.event), Some(Event::WorkflowCreated { .. })) {
        return Err(refuse(ErrorCode::InvalidArgument, "a history begins with WorkflowCreated"));
    }
    let at = state_at(history, through);
    if at.definition_hash != def.hash {
        return Err(refuse(
            ErrorCode::InvalidArgument,
            format!(
                "at seq {through} the run is on definition {}, not {}",
                at.definition_hash, def.hash
            ),
        ));
    }
    if at.status() != Status::Running || at.winding.is_some() {
        let what = match (at.status().is_closed(), &at.winding) {
            (true, _) => format!("had ended {}", at.status().as_str()),
            (false, Some(w)) => format!("was winding down ({})", w.outcome.as_str()),
            (false, None) => format!("was {}", at.status().as_str()),
        };
        return Err(refuse(
            ErrorCode::ResetPointInvalid,
            format!(
                "at seq {through} the run {what}: go back to a point where it was running \
                 (before the event that made it fail, cancel or time out)"
            ),
        ));
    }
    let later = history.iter().skip_while(|he| he.seq <= through);
    let mut gone: BTreeSet<String> = at.open.iter().cloned().collect();
    let mut gone_steps: BTreeSet<String> = BTreeSet::new();
    for key in &at.open {
        main_step(key).map(|s| gone_steps.insert(s));
    }
    for he in later.clone() {
        let Some(k) = he.event.step().and_then(UnitKey::parse) else { continue };
        let undone = UnitKey { compensate: false, ..k.clone() }.to_string();
        if k.compensate && k.scope == Scope::Main && at.units.contains_key(&undone) {
            gone_steps.insert(k.step);
        }
    }
    // Dependents, transitively (the definition lists steps in an order that respects
    // `deps`, but a fixpoint does not rely on it).
    loop {
        let before = gone_steps.len();
        for step in &def.steps {
            if step.deps.iter().any(|d| gone_steps.contains(d)) {
                gone_steps.insert(step.id.clone());
            }
        }
        if gone_steps.len() == before {
            break;
        }
    }
    for key in at.units.keys() {
        if main_step(key).is_some_and(|s| gone_steps.contains(&s)) {
            gone.insert(key.clone());
        }
    }
    let redeliver = history
        .iter()
        .take_while(|he| he.seq <= through)
        .filter_map(|he| match &he.event {
            Event::SignalDelivered { seq, step, .. } if gone.contains(step) => Some(*seq),
            _ => None,
        })
        .collect();
    let later_signals: Vec<Event> = later
        .filter(|he| matches!(he.event, Event::SignalReceived { .. }))
        .map(|he| he.event.clone())
        .collect();
    let kept = at.units.keys().filter(|k| !gone.contains(*k)).cloned().collect();
    let prefix = history
        .iter()
        .skip(1)
        .take_while(|he| he.seq <= through)
        .map(|he| HistoryEvent { origin: Origin::Copied, ..he.clone() })
        .collect();
    Ok(Restore {
        through_seq: through,
        prefix,
        forgotten: gone.into_iter().collect(),
        redeliver,
        kept,
        signals_after: later_signals.len(),
        later_signals,
        version: at.version.clone(),
        definition_hash: at.definition_hash.clone(),
    })
}

/// The main-body step a unit key belongs to (not a compensation), if any.
fn main_step(key: &str) -> Option<String> {
    UnitKey::parse(key).filter(|k| k.scope == Scope::Main && !k.compensate).map(|k| k.step)
}

/// The events that close a run being reset (`state` is its state now): `StepCancelled`
/// for each open unit (no compensation), then `WorkflowReset`. A run that had closed
/// already gets only `WorkflowReset`, which changes nothing in its state.
#[must_use]
pub fn closing(state: &State, to_seq: u64, reason: &str) -> Vec<Event> {
    let mut events = Vec::new();
    if !state.status().is_closed() {
        events.extend(state.open.iter().map(|step| Event::StepCancelled { step: step.clone() }));
    }
    events.push(Event::WorkflowReset {
        next_run: state.run + 1,
        to_seq,
        reason: reason.to_string(),
    });
    events
}

/// Where a restored run comes from.
#[derive(Debug, Clone, Copy)]
pub struct Source<'a> {
    /// The source execution.
    pub execution_id: &'a str,
    /// Its run.
    pub run: u32,
}

/// The first events of a restored run, in order, with their seqs: `created` (its
/// `WorkflowCreated`, seq 1, at `now`), the copied prefix, `RunRestored` and, when
/// `keep_signals`, the signals the source received after the point (recorded at `now`).
#[must_use]
pub fn first_events(
    created: Event,
    restore: &Restore,
    source: Source<'_>,
    reason: &str,
    keep_signals: bool,
    now: u64,
) -> Vec<HistoryEvent> {
    let recorded = |seq: u64, event: Event| HistoryEvent {
        seq,
        timestamp_ms: now,
        origin: Origin::Recorded,
        event,
    };
    let mut events = vec![recorded(1, created)];
    events.extend(restore.prefix.iter().cloned());
    let mut seq = restore.through_seq + 1;
    events.push(recorded(
        seq,
        Event::RunRestored {
            source_execution_id: source.execution_id.to_string(),
            source_run: source.run,
            through_seq: restore.through_seq,
            forgotten: restore.forgotten.clone(),
            redeliver: restore.redeliver.clone(),
            reason: reason.to_string(),
        },
    ));
    if keep_signals {
        for s in &restore.later_signals {
            seq += 1;
            events.push(recorded(seq, s.clone()));
        }
    }
    events
}

/// The `WorkflowCreated` of the run a reset starts: the source run's own (same input,
/// parent, schedule, and the version it was created with — the copied prefix holds the
/// migrations after it) for run `state.run + 1`, carrying the update ids of the run being
/// reset (`crate::update::carried`), so a retried update is not applied twice.
#[must_use]
pub fn reset_created(source_created: &Event, state: &State) -> Option<Event> {
    let Event::WorkflowCreated { .. } = source_created else { return None };
    let mut created = source_created.clone();
    if let Event::WorkflowCreated { run, update_ids, .. } = &mut created {
        *run = state.run + 1;
        *update_ids = crate::update::carried(state);
    }
    Some(created)
}

/// The `WorkflowCreated` of a fork: the source run's, for the new execution `execution_id`
/// as run 1, with no parent and no schedule (a fork is nobody's child).
#[must_use]
pub fn fork_created(source_created: &Event, execution_id: &str) -> Option<Event> {
    let Event::WorkflowCreated { .. } = source_created else { return None };
    let mut created = source_created.clone();
    if let Event::WorkflowCreated {
        execution_id: id, run, parent, schedule_id, update_ids, ..
    } = &mut created
    {
        execution_id.clone_into(id);
        *run = 1;
        *parent = None;
        *schedule_id = None;
        update_ids.clear();
    }
    Some(created)
}
