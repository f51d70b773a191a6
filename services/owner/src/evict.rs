//! Bounded owner memory (issue 14): an execution that is only sleeping or awaiting
//! something (a signal, a child, a retry's backoff) — no task offered or running — is
//! dropped from memory after the commit that left it so, and reloaded from its history by
//! the pass that takes its next event (a fired timer, a signal, a cancel, an operator
//! entry, a child's end).
//!
//! Why after the commit rather than an LRU or a cap: a quiet execution does nothing until
//! an inbox entry arrives, and applying an entry already reads the store; the reload adds
//! the reads of `hot::rebuild` (owners row, execution row, history; the definition stays
//! cached). Executions with a task in flight stay hot, so a step's result never waits for
//! a reload (and the direct result route, which needs the hot copy, keeps working). A
//! sleep shorter than `OwnerConfig::evict_after_ms` also stays hot: reloading it in a
//! moment would cost more than the memory it frees for that moment.
//!
//! What an evicted execution leaves behind is one small record: a 128-bit hash of its id
//! and the epoch it was held at (no id string, so the record does not grow with id
//! length). The record keeps both guarantees a hot copy gave:
//! * fencing: the reload compares the owners row's epoch with the recorded one; a
//!   different epoch means another process (even one with this node id) took it over, and
//!   the execution is treated as lost (`Core::lost`), exactly as a fenced commit would;
//! * steady state: its entries are applied as for a hot execution, not in recovery mode
//!   (which counts an attempt first): this process committed its last state itself, so no
//!   earlier process can have died applying them.

use crate::context::{Core, Hot};
use orbit_engine::state::UnitStatus;

/// Whether `hot` is quiet: open, no unit with a task offered, running or about to be
/// retried now, and its next timer (if any) at least `after_ms` after `now`.
pub(crate) fn quiet(hot: &Hot, now: u64, after_ms: u64) -> bool {
    if hot.state.status().is_closed() {
        return false;
    }
    let idle = hot.state.units.values().all(|u| {
        u.status.is_resolved() || matches!(u.status, UnitStatus::Waiting | UnitStatus::RetryWait)
    });
    // `timer_at` is set after every commit; unknown (`None`) only right after a rebuild.
    let far = match hot.timer_at {
        Some(Some(due)) => due >= now.saturating_add(after_ms),
        Some(None) => true,
        None => orbit_engine::next_timer(&hot.def, &hot.state)
            .is_none_or(|due| due >= now.saturating_add(after_ms)),
    };
    idle && far
}

/// After a commit (or a load): keeps `hot` in memory, or evicts it when it is quiet and
/// eviction is on. A copy without an epoch (never the case for an owned execution) is
/// kept, since the reload could not be fenced against it.
pub(crate) fn keep(core: &mut Core, id: String, hot: Hot, after_ms: Option<u64>, now: u64) {
    match (after_ms, hot.epoch) {
        (Some(after), Some(epoch)) if quiet(&hot, now, after) => {
            core.hot.remove(&id);
            core.evicted.insert(&id, epoch);
            orbit_metrics::get().owner_evictions.inc();
        }
        _ => {
            core.hot.insert(id, hot);
        }
    }
}

/// Publishes how many executions are held and evicted (after each pass with work).
pub(crate) fn observe(core: &Core) {
    let m = orbit_metrics::get();
    m.owner_executions_held.set(i64::try_from(core.hot.len()).unwrap_or(i64::MAX));
    m.owner_executions_evicted.set(i64::try_from(core.evicted.len()).unwrap_or(i64::MAX));
}
