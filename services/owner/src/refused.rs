//! A pass whose commit the store refused. Memory was never changed, so every execution of
//! the pass is forgotten and the next pass rebuilds those still owned from what the store
//! holds.
//!
//! `Fenced` means another node took some of them over (a takeover while this node was
//! paused or cut off): those are named in a warning and dropped for good — they are not
//! reloaded, because the inbox query returns only entries of executions this node owns or
//! holds, and because the epoch they were lost at is remembered (`Core::lost`): a newer
//! process with the SAME node id owns them at a higher epoch, and this one must not pick
//! that epoch up — and their starters get `UNAVAILABLE`. Starters of the other executions are
//! carried into the next pass, which runs at once and carries on with what is still owned.

use crate::context::{Core, Inner};
use crate::error::OwnerError;
use crate::requests::reply;
use crate::work::Work;
use orbit_store::StoreError;
use std::collections::BTreeMap;

/// How many times a start is carried into the next pass after a pass failed because of
/// another execution in it (fenced, or created elsewhere at the same time), or because its
/// own id was taken (a start that did not read its id, see `begin::Existing`).
const START_RETRIES: u32 = 3;

/// Handles a refused commit (see the module docs); `Ok` when the refusal was a fence that
/// is now dealt with, or a taken id or a newer version in a commit of starts only
/// (carried, the loop woken).
pub(crate) async fn on_commit_error(
    inner: &Inner,
    core: &mut Core,
    work: BTreeMap<String, Work>,
    e: StoreError,
) -> Result<(), OwnerError> {
    let fenced = matches!(e, StoreError::Fenced(_));
    let taken = matches!(e, StoreError::ExecutionExists(_));
    // A start whose cached latest version is no longer the latest (a version registered
    // since, `StartRequest::versions_seen`): carried, it reads the latest and starts it.
    let changed = matches!(e, StoreError::DefinitionChanged(_));
    let retry_starts = fenced || taken || changed;
    // Only starts, refused because an id was taken (a start that did not read its id,
    // `begin::Existing::Unchecked`, or one created elsewhere meanwhile) or a version was
    // registered: nothing else was held back, and the carried starts read their ids (and
    // latest versions) in the next pass, at once.
    let only_starts = (taken || changed) && work.values().all(|w| w.new_execution.is_some());
    let lost = if fenced { lost_executions(inner, &work).await } else { BTreeMap::new() };
    let err = OwnerError::from(e);
    let mut carried = Vec::new();
    for (id, w) in work {
        core.hot.remove(&id);
        for mut r in w.replies {
            if retry_starts && !lost.contains_key(&id) && r.retries < START_RETRIES {
                r.retries += 1;
                r.request.read_latest();
                carried.push(r);
            } else {
                reply(&mut r, Err(err.clone()));
            }
        }
    }
    let carried_any = !carried.is_empty();
    if let Ok(mut starts) = inner.starts.lock() {
        starts.extend(carried);
    }
    if only_starts {
        if carried_any {
            inner.kick.notify_one();
        }
        return Ok(());
    }
    if lost.is_empty() {
        // Not a fence this process can resolve by dropping executions (or no fence at
        // all): the pass loop logs it and retries after a pause, never in a tight loop.
        return Err(err);
    }
    tracing::warn!(
        node_id = %inner.cfg.node_id,
        executions = ?lost.keys().collect::<Vec<_>>(),
        error = %err,
        "commit refused by the epoch check (fenced): another owner took these executions over; dropped them from memory"
    );
    core.lost.extend(lost);
    inner.kick_inbox();
    Ok(())
}

/// The executions of a fenced pass whose owners row no longer names this node at the epoch
/// it held, with the epoch the row has now (`u64::MAX` when it is gone). New executions
/// are not among them: they carry no epoch yet.
async fn lost_executions(inner: &Inner, work: &BTreeMap<String, Work>) -> BTreeMap<String, u64> {
    let mut lost = BTreeMap::new();
    for (id, w) in work {
        if w.new_execution.is_some() {
            continue;
        }
        match inner.store.get_owner(id).await {
            Ok(Some(o)) if o.node_id == inner.cfg.node_id && Some(o.epoch) == w.hot.epoch => {}
            Ok(o) => {
                lost.insert(id.clone(), o.map_or(u64::MAX, |o| o.epoch));
            }
            // Unknown: treat it as still owned; if it is not, the next pass is fenced again.
            Err(e) => {
                tracing::warn!(execution_id = %id, trace_id = %orbit_telemetry::trace_id(id), error = %e, "cannot read the owner")
            }
        }
    }
    lost
}
