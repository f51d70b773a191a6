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

use crate::owner::Inner;
use orbit_store::{CommitBatch, CommitOutcome, TaskClaim};

/// Reserves a session for every new task that one can take, and records the claims in
/// their batches; returns the reservations, for [`settle`].
pub(crate) fn reserve(inner: &Inner, batches: &mut [CommitBatch]) -> Vec<TaskClaim> {
    let Some(handoff) = inner.handoff.get() else { return Vec::new() };
    let mut reserved = Vec::new();
    for b in batches.iter_mut() {
        for t in &b.tasks_to_insert {
            if let Some(claim) = handoff.reserve(&b.execution_id, t) {
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
    let unused = reserved
        .into_iter()
        .filter(|r| !claimed.iter().any(|row| row.token.as_deref() == Some(r.token.as_str())))
        .collect();
    handoff.settle(claimed, unused);
}
