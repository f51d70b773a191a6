//! Poison quarantine: failures of an execution's processing are counted in the store and,
//! after `max_failures` of them, the execution is parked (projection `SUSPENDED`, the
//! offending entry marked and left pending, its entries skipped) so the owner and every
//! other execution keep running.
//!
//! Two kinds of failure are counted:
//! * a panic in an execution's engine work, caught by `isolate`: counted after the fact (a
//!   write on the failure path only);
//! * a death of the process (stack overflow, abort, allocation failure): it cannot be caught,
//!   so `recovery` counts each attempt BEFORE making it, for the executions recovered after
//!   a start or a takeover; in steady state nothing extra is written.

use crate::context::{Core, Inner};
use crate::error::OwnerError;
use crate::hot::hot;
use crate::work::Failed;
use orbit_store::FaultNote;
use std::sync::atomic::Ordering;

/// The reason recorded before an attempt in recovery mode: if it stays, the process ended
/// while applying the execution's entries.
pub(crate) const DIED: &str =
    "the owner process ended while applying the execution's pending entries (counted before the attempt)";

/// Counts the panics of a pass and parks the executions that reached `max_failures`.
/// `counted` says the attempt was already counted before it ran (recovery mode): then only
/// the reason is recorded.
pub(crate) async fn on_failures(
    inner: &Inner,
    core: &mut Core,
    failed: Vec<Failed>,
    counted: bool,
    now: u64,
) -> Result<(), OwnerError> {
    for f in failed {
        inner.quarantine.panics.fetch_add(1, Ordering::Relaxed);
        let first = f.seqs.first().copied();
        tracing::error!(
            execution_id = %f.execution_id, trace_id = %orbit_telemetry::trace_id(&f.execution_id),
            seq = ?first,
            entries = ?f.seqs,
            panic = %f.message,
            "an execution's processing panicked; its work was dropped from the pass"
        );
        if f.new_execution && f.retry_starts.is_empty() {
            // Nothing is stored yet: the starter got an error and decides whether to retry.
            continue;
        }
        let note = FaultNote {
            execution_id: f.execution_id.clone(),
            inbox_seq: first,
            reason: format!("panicked: {}", f.message),
            add: u32::from(!counted),
        };
        let row = inner.store.note_faults(vec![note]).await?.pop();
        let failures = row.as_ref().map_or(0, |r| r.failures);
        if failures >= inner.cfg.max_failures {
            for start in f.retry_starts {
                crate::begin::create_only(inner, core, start, now).await?;
            }
            park(inner, core, &f.execution_id, first, &format!("panicked: {}", f.message), now)
                .await?;
        } else {
            // A child start is retried (nobody else would ask again).
            if let Ok(mut starts) = inner.starts.lock() {
                starts.extend(f.retry_starts);
            }
            // Its next attempt runs in recovery mode: counted first, alone.
            core.suspects.insert(f.execution_id);
        }
    }
    Ok(())
}

/// Parks an execution (see the module docs); fenced by the epoch this node holds.
pub(crate) async fn park(
    inner: &Inner,
    core: &mut Core,
    id: &str,
    seq: Option<u64>,
    reason: &str,
    now: u64,
) -> Result<(), OwnerError> {
    let epoch = hot(inner, core, id).await?.epoch;
    let note =
        FaultNote { execution_id: id.to_string(), inbox_seq: seq, reason: reason.into(), add: 0 };
    let row = inner.store.park_execution(note, epoch, now).await?;
    core.hot.remove(id);
    core.suspects.remove(id);
    inner.quarantine.parked.fetch_add(1, Ordering::Relaxed);
    inner.changes.publish([id]);
    tracing::error!(
        execution_id = %id, trace_id = %orbit_telemetry::trace_id(id),
        seq = ?row.inbox_seq,
        failures = row.failures,
        reason = %row.reason,
        node_id = %inner.cfg.node_id,
        "parked the execution (SUSPENDED) after repeated failures: `orbit execution resume` or `terminate` it"
    );
    Ok(())
}
