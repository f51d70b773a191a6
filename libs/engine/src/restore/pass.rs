//! A reset or a fork as one pass: the events to record and what they cause, per run, as
//! [`crate::settle`] returns them — so the served owner and the simulator apply a
//! restoration the way they apply any other pass.

use super::{closing, first_events, Restore, Source};
use crate::command::CommandError;
use crate::effects::derive;
use crate::event::{Event, HistoryEvent};
use crate::migrate::Plan;
use crate::run::{record, settle, Pass, Run};
use crate::state::State;
use orbit_definition::Definition;

/// What a restored run starts from.
#[derive(Debug, Clone, Copy)]
pub struct Restored<'a> {
    /// The definition in effect at the point (`Restore::definition_hash`).
    pub def: &'a Definition,
    /// The version to migrate the restored run to right after `RunRestored`, after the
    /// checked diff (`crate::migrate`), if any.
    pub to: Option<&'a Definition>,
    /// The plan.
    pub restore: &'a Restore,
    /// Where it comes from.
    pub source: Source<'a>,
    /// The operator's reason (in `WorkflowReset` and `RunRestored`).
    pub reason: &'a str,
    /// Whether the signals the source received after the point are received again.
    pub keep_signals: bool,
}

/// Resets the run whose state is `state` (on definition `current`): closes it
/// ([`closing`]) and starts the next run from `r`. Returns the runs touched, the closed
/// one first; `state` ends as the new run's (or a later one's, if it continued as new at
/// once), and the migration's plan with `r.to`. `timer_before`: the execution's stored
/// wake-up.
///
/// # Errors
/// The migration's refusal when `r.to` is set and unsafe (nothing is recorded then).
pub fn reset(
    current: &Definition,
    state: &mut State,
    r: &Restored<'_>,
    created: Event,
    timer_before: Option<Option<u64>>,
    pass: &Pass<'_>,
) -> Result<(Vec<Run>, Option<Plan>), CommandError> {
    let mut old = state.clone();
    let mut events = Vec::new();
    for e in closing(&old, r.restore.through_seq, r.reason) {
        record(&mut old, &mut events, e, pass.now);
    }
    let effects = derive(current, &old, &events, pass.caps);
    let closed = Run { run: old.run, status: old.status(), events, effects, wake: None };
    let (mut runs, migration) = restored(state, r, created, timer_before, pass)?;
    runs.insert(0, closed);
    Ok((runs, migration))
}

/// Starts a run from `r` in `state` (replaced): its first events ([`first_events`]), the
/// migration to `r.to` if any, then the decider to the fixpoint. The copied prefix is in
/// the first run's events but causes nothing (its effects happened in the source run).
/// Returns the runs and, with `r.to`, the migration's plan.
///
/// # Errors
/// The migration's refusal when `r.to` is set and unsafe.
pub fn restored(
    state: &mut State,
    r: &Restored<'_>,
    created: Event,
    timer_before: Option<Option<u64>>,
    pass: &Pass<'_>,
) -> Result<(Vec<Run>, Option<Plan>), CommandError> {
    let first = first_events(created, r.restore, r.source, r.reason, r.keep_signals, pass.now);
    let mut next = State::default();
    let split = 1 + r.restore.prefix.len();
    for he in &first {
        next.apply(he);
    }
    let (copied, restored): (Vec<HistoryEvent>, Vec<HistoryEvent>) = {
        let mut all = first;
        let rest = all.split_off(split);
        (all, rest)
    };
    let mut recorded = restored;
    let mut def = r.def;
    let mut migration = None;
    if let Some(to) = r.to {
        let (plan, events) = crate::migrate::migrate(r.def, to, &next).map_err(|(e, _)| e)?;
        migration = Some(plan);
        for e in events {
            record(&mut next, &mut recorded, e, pass.now);
        }
        def = to;
    }
    *state = next;
    let mut runs = settle(def, state, recorded, timer_before, pass);
    if let Some(first) = runs.first_mut() {
        let mut events = copied;
        events.append(&mut first.events);
        first.events = events;
    }
    Ok((runs, migration))
}
