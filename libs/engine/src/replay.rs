//! The replay check: re-run the decider over a recorded history and report the first place
//! where it would decide differently.
//!
//! Recorded events are applied as they are; at each decided event the decider runs one
//! round at that event's timestamp, and the history's next events must equal that round.
//!
//! A run migrated to another version of its workflow (`DefinitionMigrated`, recorded) is
//! decided by one definition up to the migration and by the next after it: [`replay_defs`]
//! takes every definition the run used, by hash ([`definition_hashes`] lists them), and
//! switches at each migration. [`replay`] checks against one definition and so reports a
//! history with a migration as diverging at its `DefinitionMigrated`.

use crate::decide::{round, Memo};
use crate::event::{Event, HistoryEvent, Origin};
use crate::state::State;
use orbit_definition::{Definition, Limits};
use serde::Serialize;
use std::collections::BTreeMap;

/// Where replay diverged.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Divergence {
    /// Seq of the first event that differs (or where an event was expected).
    pub seq: u64,
    /// What the decider produces there (`None`: nothing).
    pub expected: Option<Box<Event>>,
    /// What the history holds there (`None`: the history ends).
    pub actual: Option<Box<Event>>,
}

impl Divergence {
    /// The history holds `he` where nothing can be checked (no definition for it).
    fn at(he: &HistoryEvent) -> Divergence {
        Divergence { seq: he.seq, expected: None, actual: Some(Box::new(he.event.clone())) }
    }
}

/// Replays `history` (one run) against `def`; `Ok(())` when every decided event matches.
/// One definition only: a `DefinitionMigrated` in the history is a divergence at that event
/// (use [`replay_defs`] for a run that was migrated).
///
/// # Errors
/// The first divergence.
pub fn replay(
    def: &Definition,
    history: &[HistoryEvent],
    server: &Limits,
) -> Result<(), Divergence> {
    check(def, history, server, |_| None)
}

/// Every definition hash a run's history uses, in order: its `WorkflowCreated`'s, then each
/// `DefinitionMigrated`'s `to_hash`.
#[must_use]
pub fn definition_hashes(history: &[HistoryEvent]) -> Vec<String> {
    history
        .iter()
        .filter_map(|he| match &he.event {
            Event::WorkflowCreated { definition_hash, .. } => Some(definition_hash.clone()),
            Event::DefinitionMigrated { to_hash, .. } => Some(to_hash.clone()),
            _ => None,
        })
        .collect()
}

/// [`replay`] for a history that may contain migrations: starts with
/// `defs[WorkflowCreated.definition_hash]` and switches to `defs[to_hash]` at each
/// `DefinitionMigrated` (applied as a recorded event). A hash missing from `defs` is a
/// divergence at that event (the `WorkflowCreated` or the `DefinitionMigrated`), as is a
/// non-empty history without a `WorkflowCreated` (at its first event).
///
/// # Errors
/// The first divergence.
pub fn replay_defs(
    defs: &BTreeMap<String, Definition>,
    history: &[HistoryEvent],
    server: &Limits,
) -> Result<(), Divergence> {
    let Some(first) = history.first() else { return Ok(()) };
    let created = history.iter().find_map(|he| match &he.event {
        Event::WorkflowCreated { definition_hash, .. } => Some((he, definition_hash)),
        _ => None,
    });
    let Some((created, hash)) = created else { return Err(Divergence::at(first)) };
    let Some(def) = defs.get(hash) else { return Err(Divergence::at(created)) };
    check(def, history, server, |hash| defs.get(hash))
}

/// The replay loop; `next` gives the definition a `DefinitionMigrated` moves to.
fn check<'d>(
    mut def: &'d Definition,
    history: &[HistoryEvent],
    server: &Limits,
    next: impl Fn(&str) -> Option<&'d Definition>,
) -> Result<(), Divergence> {
    let mut state = State::default();
    // As in `advance_within`: what rounds learn holds while only decided events follow.
    let mut memo = Memo::default();
    let mut i = 0;
    while i < history.len() {
        let he = &history[i];
        if he.origin != Origin::Decided {
            if let Event::DefinitionMigrated { to_hash, .. } = &he.event {
                def = next(to_hash).ok_or_else(|| Divergence::at(he))?;
            }
            state.apply(he);
            memo = Memo::default();
            i += 1;
            continue;
        }
        let first = i;
        let round = round(def, &state, he.timestamp_ms, server, &memo);
        if round.is_empty() {
            return Err(Divergence::at(he));
        }
        for expected in round {
            let actual = history.get(i);
            match actual {
                Some(a) if a.origin == Origin::Decided && a.event == expected => {
                    state.apply(a);
                    i += 1;
                }
                _ => {
                    return Err(Divergence {
                        seq: actual.map_or(state.last_seq + 1, |a| a.seq),
                        expected: Some(Box::new(expected)),
                        actual: actual.map(|a| Box::new(a.event.clone())),
                    })
                }
            }
        }
        memo.observe(&state, &history[first..i]);
    }
    Ok(())
}
