//! Task hand-off (issue 14, issue 25), the owner's side: in an execution's engine job, each
//! new task a live worker session can take right now is reserved for it, its
//! `StepDispatched` is recorded at once (`orbit_engine::hand_off`), and the row is queued
//! already claimed in the same commit (`CommitBatch::task_claims`); after the commit the
//! claimed rows go to their sessions, and reservations the commit did not record are given
//! back. A task no session takes is queued as before and the claims pick it up.
//!
//! So a handed-off step costs one commit on the critical path and writes no `dispatched`
//! inbox entry: the commit that queues the task records whom it went to, and
//! `DescribeExecution` names the worker from that commit on. Everything downstream
//! (results, timeouts, lost sessions, the claim sweep) sees what a claim whose `dispatched`
//! entry was applied leaves. See `orbit_store::handoff`.

use crate::work::Work;
use orbit_engine::effects::Effect;
use orbit_engine::run::{hand_off, HandedOff, Pass, Run};
use orbit_store::{CommitBatch, CommitOutcome, Handoff, SentChange, TaskClaim};
use std::panic::{catch_unwind, resume_unwind, AssertUnwindSafe};
use std::sync::Arc;

use crate::context::Inner;

/// In an execution's engine job, after the decision (`runs`, the last one current): reserves
/// a session for every task offered that one can take and records its `StepDispatched` in
/// the run; then runs `rest` (building the batches). If recording or `rest` panics, the
/// reservations are given back before the panic goes on, so no session's credit is lost
/// with the job.
pub(crate) fn in_job<T>(
    handoff: Option<&Arc<dyn Handoff>>,
    id: &str,
    w: &mut Work,
    mut runs: Vec<Run>,
    pass: &Pass<'_>,
    rest: impl FnOnce(&mut Work, Vec<Run>, &[TaskClaim]) -> T,
) -> (T, Vec<TaskClaim>) {
    let all = match (handoff, runs.last()) {
        (Some(handoff), Some(run)) => reserve(handoff.as_ref(), id, run),
        _ => Vec::new(),
    };
    let job = AssertUnwindSafe(|| {
        let recorded = match (handoff, runs.last_mut()) {
            (Some(handoff), Some(run)) if !all.is_empty() => {
                record(handoff.as_ref(), id, w, run, &all, pass)
            }
            _ => Vec::new(),
        };
        rest(w, runs, &recorded)
    });
    match catch_unwind(job) {
        Ok(out) => (out, all),
        Err(panic) => {
            if let Some(handoff) = handoff {
                handoff.settle(Vec::new(), all);
            }
            resume_unwind(panic)
        }
    }
}

/// A session for each task the run offers that one can take right now. A task under a
/// concurrency key or a rate limit is never handed off: only the queue's flow claim may
/// count and take for it (issue 27), so it is queued.
fn reserve(handoff: &dyn Handoff, id: &str, run: &Run) -> Vec<TaskClaim> {
    run.effects
        .iter()
        .filter_map(|effect| match effect {
            Effect::OfferTask(offer) | Effect::RunAdapter { offer, .. }
                if !offer.flow.as_ref().is_some_and(orbit_engine::Flow::is_limited) =>
            {
                handoff.reserve(id, offer)
            }
            _ => None,
        })
        .collect()
}

/// Records the reserved attempts' `StepDispatched` in the run; returns the claims recorded.
fn record(
    handoff: &dyn Handoff,
    id: &str,
    w: &mut Work,
    run: &mut Run,
    all: &[TaskClaim],
    pass: &Pass<'_>,
) -> Vec<TaskClaim> {
    let handed: Vec<HandedOff> = all
        .iter()
        .map(|c| HandedOff {
            step: c.unit.clone(),
            token: c.token.clone(),
            worker_id: c.worker_id.clone(),
            session: c.session.clone(),
        })
        .collect();
    let hot = &mut w.hot;
    let ok = hand_off(&hot.def, &mut hot.state, run, hot.timer_at, &handed, pass);
    let recorded: Vec<TaskClaim> =
        all.iter().zip(ok).filter(|(_, ok)| *ok).map(|(c, _)| c.clone()).collect();
    if !recorded.is_empty() {
        // Named once per execution, and only when a task of it is handed off.
        handoff.describe(id, &hot.def.name, &hot.def.version, &hot.def.hash);
    }
    recorded
}

/// Puts the recorded claims on the batch of the current run (the last one).
pub(crate) fn claim_in(batches: &mut [CommitBatch], recorded: &[TaskClaim]) {
    if let Some(last) = batches.last_mut() {
        last.task_claims = recorded.to_vec();
    }
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

/// Before the commit: when the hand-off reaches every live frontend
/// ([`Handoff::carries_changes`]), marks each batch readers hear of `changes_sent` (its
/// commit sends no `orbit_changes`, issue 25) and returns their payloads, to send after the
/// commit ([`send_changes`]). Otherwise nothing is marked and the commit notifies.
pub(crate) fn take_changes(inner: &Inner, batches: &mut [CommitBatch]) -> Vec<SentChange> {
    if !inner.handoff.get().is_some_and(|h| h.carries_changes()) {
        return Vec::new();
    }
    batches
        .iter_mut()
        .filter(|b| b.notifies_change())
        .map(|b| {
            b.changes_sent = true;
            SentChange {
                execution_id: b.execution_id.clone(),
                everyone: b.concerns_every_reader(),
                payload: orbit_store::Change::of_batch(b).encode(),
            }
        })
        .collect()
}

/// After a successful commit: the changes [`take_changes`] took, to the frontends.
pub(crate) fn send_changes(inner: &Inner, changes: Vec<SentChange>) {
    if changes.is_empty() {
        return;
    }
    if let Some(handoff) = inner.handoff.get() {
        handoff.changed(changes);
    }
}
