//! Update-with-start in the owner: the start's update is accepted in the execution's first
//! engine job, right after `WorkflowCreated` and before `settle` decides anything, so
//! `UpdateAccepted` (and `UpdateCompleted` for a handler without steps) are in the one
//! commit that creates the execution: no process can die between the start and the update.
//!
//! It runs inside the isolated job (a validator is the user's expression, like any other
//! the engine evaluates). A refused update leaves the work marked refused: `apply_set`
//! commits nothing for it and answers the start with the refusal.

use crate::error::OwnerError;
use crate::work::Work;
use orbit_engine::{accept, Command, State};
use orbit_store::InboxReply;

/// Accepts `w`'s initial update, if any, recording its events; `Err` when the engine
/// refuses it (nothing was recorded for it then).
pub(crate) fn accept_initial(
    w: &mut Work,
    now: u64,
    limits: &orbit_definition::Limits,
) -> Result<(), OwnerError> {
    let Some(u) = w.initial.take() else { return Ok(()) };
    let command = Command::Update { name: u.name, args: u.args, update_id: u.update_id };
    let events = accept(&w.hot.def, &w.hot.state, command, now, limits)?;
    for event in events {
        let seq = w.record(event, now);
        w.update_seq.get_or_insert(seq);
    }
    Ok(())
}

/// The answer to an update command whose `update_id` this run accepted already (by an
/// update-with-start, whose acceptance has no inbox entry to deduplicate a retry with):
/// that acceptance's seq, its reply being in the history after it. `None`: not a repeat.
pub(crate) fn repeated(state: &State, cmd: &Command) -> Option<InboxReply> {
    let Command::Update { update_id: Some(id), .. } = cmd else { return None };
    let (run, seq) = orbit_engine::update::accepted(state, id)?;
    Some(InboxReply::Applied { seq, run, applied: true })
}
