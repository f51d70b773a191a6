//! Task hand-off (issue 14), the owner's side: before a pass commits, each new task a live
//! worker session of this process can take right now is reserved for it and queued already
//! claimed in the same commit (`CommitBatch::task_claims`: the row `claimed`, plus the
//! `dispatched` entry a claim writes); after the commit the claimed rows go to their
//! sessions, and reservations the commit did not record are given back. A task no session
//! takes is queued as before and the claims pick it up.
//!
//! No guarantee changes: the claim is recorded exactly as `claim_tasks` records it, under
//! the commit's fence, so `StepDispatched`, results, timeouts and lost sessions take their
//! usual paths. See `orbit_store::handoff`.
//!
//! The `dispatched` entries of handed-off tasks wake no one (no `orbit_inbox` NOTIFY): this
//! owner applies them in a pass [`DISPATCHED_APPLY_DELAY`] after the commit, or in any pass
//! before — usually the one that applies the step's result, so a fast step costs one
//! commit, not a second one for `StepDispatched` that the result would wait behind. The
//! attempt's deadline in `StepDispatched` is then taken up to the delay after the worker's.

use orbit_store::DISPATCHED_APPLY_DELAY;
use std::time::Duration;
use tokio::time::Instant;

use crate::context::Inner;
use orbit_store::{CommitBatch, CommitOutcome, TaskClaim};

/// Reserves a session for every new task that one can take, and records the claims in
/// their batches; returns the reservations, for [`settle`]. `def_of` gives an execution's
/// definition, which the hand-off names with its tasks.
pub(crate) fn reserve<'a>(
    inner: &Inner,
    batches: &mut [CommitBatch],
    def_of: impl Fn(&str) -> Option<&'a orbit_definition::Definition>,
) -> Vec<TaskClaim> {
    let Some(handoff) = inner.handoff.get() else { return Vec::new() };
    let mut reserved = Vec::new();
    for b in batches.iter_mut() {
        for t in &b.tasks_to_insert {
            if let Some(claim) = handoff.reserve(&b.execution_id, t) {
                // Named once per execution, and only when a task of it is handed off.
                if b.task_claims.is_empty() {
                    if let Some(def) = def_of(&b.execution_id) {
                        handoff.describe(&b.execution_id, &def.name, &def.version, &def.hash);
                    }
                }
                b.task_claims.push(claim.clone());
                reserved.push(claim);
            }
        }
    }
    reserved
}

/// After the commit (`None`: it failed): delivers the rows it claimed and gives back the
/// reservations it did not record.
pub(crate) fn settle(inner: &Inner, reserved: Vec<TaskClaim>, outcomes: Option<&[CommitOutcome]>) {
    if reserved.is_empty() {
        return;
    }
    let Some(handoff) = inner.handoff.get() else { return };
    let claimed: Vec<_> =
        outcomes.unwrap_or_default().iter().flat_map(|o| o.claimed.iter().cloned()).collect();
    if !claimed.is_empty() {
        let mut due = lock(&inner.dispatch_due);
        due.get_or_insert_with(|| Instant::now() + DISPATCHED_APPLY_DELAY);
    }
    let unused = reserved
        .into_iter()
        .filter(|r| !claimed.iter().any(|row| row.token.as_deref() == Some(r.token.as_str())))
        .collect();
    handoff.settle(claimed, unused);
}

/// A pass starts: it reads the inbox, so no pass is due for handed-off tasks any more.
pub(crate) fn dispatch_pass_started(inner: &Inner) {
    *lock(&inner.dispatch_due) = None;
}

/// How long until a pass is due for handed-off tasks' `dispatched` entries, if one is.
pub(crate) fn until_dispatch_pass(inner: &Inner) -> Option<Duration> {
    lock(&inner.dispatch_due).map(|at| at.saturating_duration_since(Instant::now()))
}

fn lock<T>(m: &std::sync::Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    // A poisoned lock only means a panic elsewhere while it was held; the value stays usable.
    m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}
