//! One owner pass: take pending starts and inbox entries, apply them, commit, answer.
//!
//! Order within a pass:
//! 1. operator entries (`resume`, `terminate`, see `control`), each on its own;
//! 2. entries of executions in recovery mode (see `recovery`) — recovered after a start or
//!    a takeover, or not in memory at all — counted before the attempt;
//! 3. everything else in steady state (see `apply`): ONE transaction for every execution
//!    whose engine work succeeded; a panic drops only that execution's work and is counted
//!    (see `quarantine`).

use crate::apply::apply_set;
use crate::context::{Core, Inner};
use crate::error::OwnerError;
use crate::inbox::{self, Request};
use crate::requests::PendingStart;
use crate::{control, handed, quarantine, recovery};
use orbit_store::InboxEntry;
use std::collections::BTreeSet;
use std::sync::PoisonError;
use std::time::Duration;
use tokio::time::Instant;

/// Runs one pass; errors are logged (the next pass retries from the store). Returns
/// whether it found work or failed: the owner then looks again soon (`retry_pass`) rather
/// than only at its idle safety net.
pub(crate) async fn run_pass(inner: &Inner) -> bool {
    inner.passes.send_modify(|p| p.started += 1);
    let started = inner.passes.borrow().started;
    let busy = match pass(inner).await {
        Ok(found) => found,
        Err(e) => {
            tracing::error!(error = %e, "owner pass failed");
            inner.mark_inbox();
            tokio::time::sleep(std::time::Duration::from_millis(50)).await;
            true
        }
    };
    inner.passes.send_modify(|p| p.finished = p.finished.max(started));
    busy
}

/// Up to this many executions held in memory are named on every inbox read.
pub(crate) const HELD_ALWAYS: usize = 256;

/// With more held, an inbox read names them at most once per this period.
pub(crate) const HELD_PERIOD: Duration = Duration::from_secs(1);

/// The held executions an inbox read names besides those whose owners row names this node
/// (see `OwnerWrites::pending_inbox_owned`). Naming them only finds the entries of one
/// this node lost meanwhile (a takeover), so that its next commit is fenced and it drops
/// the execution sooner; its commits are fenced in any case, the new owner applies the
/// entries, and the takeover loop drops such executions too (`takeover::drop_lost`,
/// `fence_held`). The list cost every read O(held): 10,000 held executions (a backlog of
/// queued starts) made each read clone 10,000 ids and SQLite build an index of them,
/// about 4 ms a pass (docs/benchmarks.md, 2026-12-04). So beyond [`HELD_ALWAYS`] a read
/// names them at most once per [`HELD_PERIOD`], however many passes a backlog runs.
fn held_to_name(inner: &Inner, core: &Core) -> Vec<String> {
    let now = Instant::now();
    let mut last = inner.held_named_at.lock().unwrap_or_else(PoisonError::into_inner);
    if names_held(core.hot.len(), last.map(|at| now.saturating_duration_since(at))) {
        *last = Some(now);
        core.hot.keys().cloned().collect()
    } else {
        Vec::new()
    }
}

/// Whether an inbox read names the `held` executions, `since` the last read that did.
fn names_held(held: usize, since: Option<Duration>) -> bool {
    held <= HELD_ALWAYS || since.is_none_or(|d| d >= HELD_PERIOD)
}

/// The pending entries this node applies; a failed read, or one that filled its batch,
/// leaves the inbox marked for the next pass.
async fn read_inbox(inner: &Inner, core: &Core) -> Result<Vec<InboxEntry>, OwnerError> {
    let max = inner.cfg.max_batch;
    let held = held_to_name(inner, core);
    let read = inner.store.pending_inbox_owned(&inner.cfg.node_id, &held, max).await;
    if read.as_ref().map_or(true, |entries| entries.len() >= max as usize) {
        inner.mark_inbox();
    }
    Ok(read?)
}

/// One pass; `Ok(false)` when there was nothing to do.
async fn pass(inner: &Inner) -> Result<bool, OwnerError> {
    let mut core = inner.core.lock().await;
    let starts: Vec<PendingStart> =
        inner.starts.lock().map(|mut s| std::mem::take(&mut *s)).unwrap_or_default();
    // The entries of what this node owns, plus (see `held_to_name`) of what it holds in
    // memory: if it lost one of those, the commit is fenced and the execution dropped (see
    // `on_commit_error`).
    // Handed results before the inbox read: a result reaches the owner only after its
    // claim committed, so the read below sees the claim's `dispatched` entry. The read is
    // skipped when nothing may be new (see `Inner::inbox_dirty`) and every handed result
    // is for an attempt already recorded dispatched (a handed-off task's is in its commit;
    // a claimed task's entry may still be pending).
    let handed = handed::take(inner);
    let marked = inner.take_inbox_mark();
    let entries = if marked || !handed::all_in_flight(&core, &handed) {
        read_inbox(inner, &core).await?
    } else {
        Vec::new()
    };
    let metrics = orbit_metrics::get();
    metrics.inbox_backlog.set(i64::try_from(entries.len()).unwrap_or(i64::MAX));
    if starts.is_empty() && entries.is_empty() && handed.is_empty() {
        return Ok(false);
    }
    // Only passes with work are timed: idle wake-ups would drown the distribution.
    #[allow(clippy::cast_precision_loss)]
    metrics.owner_pass_entries.observe((starts.len() + entries.len()) as f64);
    let _timer = metrics.owner_pass.start_timer();
    let now = inner.cfg.clock.now();

    // 1. Operator entries. An execution they touched sits out the rest of this pass.
    let mut touched = BTreeSet::new();
    let mut rest = Vec::with_capacity(entries.len());
    for entry in entries {
        match inbox::request(&entry) {
            Ok(Request::Control(c)) => {
                touched.insert(entry.execution_id.clone());
                if let Err(e) = control::apply(inner, &mut core, &entry, c, now).await {
                    tracing::warn!(execution_id = %entry.execution_id, trace_id = %orbit_telemetry::trace_id(&entry.execution_id), seq = entry.seq, error = %e, "operator entry not applied; retried");
                }
            }
            _ => rest.push(entry),
        }
    }
    let (suspect, steady): (Vec<InboxEntry>, Vec<InboxEntry>) = rest
        .into_iter()
        .filter(|e| !touched.contains(&e.execution_id))
        // Not in memory = loaded from the store now (a takeover racing its adoption, a
        // fence, a failed commit): a previous process may have died applying these entries.
        // An evicted execution is not one of those: this process committed its last state.
        .partition(|e| {
            let id = &e.execution_id;
            core.suspects.contains(id) || !(core.hot.contains_key(id) || core.evicted.contains(id))
        });
    // A handed result is taken only for an execution held in steady state and untouched by
    // an operator entry in this pass; the others go to the inbox (see `handed`).
    let (handed, refused): (Vec<_>, Vec<_>) = handed.into_iter().partition(|h| {
        !touched.contains(&h.execution_id)
            && !core.suspects.contains(&h.execution_id)
            && core.hot.contains_key(&h.execution_id)
    });
    handed::refuse(refused);
    let (suspect_starts, starts): (Vec<PendingStart>, Vec<PendingStart>) =
        starts.into_iter().partition(|s| core.suspects.contains(&s.request.execution_id));

    // 2. Recovery mode.
    if !suspect.is_empty() || !suspect_starts.is_empty() {
        // A failure here (the database) must not hold back the steady work below: the
        // suspects stay suspects and are tried again by a later pass.
        if let Err(e) = recovery::run(inner, &mut core, suspect_starts, suspect, now).await {
            tracing::warn!(error = %e, "recovery attempt failed; retried");
        }
    }

    // 3. Steady state.
    let applied = apply_set(inner, &mut core, starts, steady, handed, now).await;
    crate::evict::observe(&core);
    quarantine::on_failures(inner, &mut core, applied?.failed, false, now).await?;
    Ok(true)
}

#[cfg(test)]
mod tests {
    use super::{names_held, HELD_ALWAYS, HELD_PERIOD};
    use std::time::Duration;

    #[test]
    fn few_held_executions_are_named_on_every_read_many_once_per_period() {
        let soon = Some(Duration::from_millis(1));
        assert!(names_held(HELD_ALWAYS, soon), "a few: every read");
        assert!(names_held(0, soon));
        let many = HELD_ALWAYS + 1;
        assert!(names_held(many, None), "many: the first read");
        assert!(!names_held(many, soon), "many: not again within the period");
        assert!(!names_held(many, Some(HELD_PERIOD - Duration::from_millis(1))));
        assert!(names_held(many, Some(HELD_PERIOD)), "many: once the period is over");
    }
}
