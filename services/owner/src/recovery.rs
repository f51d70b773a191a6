//! Recovery mode: the pending entries of executions recovered from the store (after a start
//! or a takeover) are applied with a persistent attempt count, so a poison that kills the
//! process — which `catch_unwind` cannot catch — is counted across restarts and owners.
//!
//! For each recovered execution with pending entries (a "suspect"), before applying them:
//! * failures ≥ `max_failures` for the same first pending entry → park it, do not apply;
//! * failures ≥ 1 (an earlier attempt died) → count one more attempt, COMMIT the count, then
//!   apply this execution ALONE: if the process dies now, the count stays behind;
//! * no count yet → one transaction counts one attempt for all of them, then they are
//!   applied together (a restart with many executions costs two extra writes, not two per
//!   execution); if the process dies, each of them has one failure and goes alone next time.
//!
//! A successful attempt deletes the counts and the execution leaves recovery mode: its later
//! entries are applied in steady state, where nothing extra is written.

use crate::apply::{apply_set, Applied};
use crate::error::OwnerError;
use crate::hot::Core;
use crate::owner::Inner;
use crate::quarantine::{self, DIED};
use orbit_store::{FaultNote, FaultRow, InboxEntry};
use std::collections::{BTreeMap, HashMap};

/// Applies the entries of suspects (see the module docs).
pub(crate) async fn run(
    inner: &Inner,
    core: &mut Core,
    entries: Vec<InboxEntry>,
    now: u64,
) -> Result<(), OwnerError> {
    let mut by_execution: BTreeMap<String, Vec<InboxEntry>> = BTreeMap::new();
    for e in entries {
        by_execution.entry(e.execution_id.clone()).or_default().push(e);
    }
    let ids: Vec<String> = by_execution.keys().cloned().collect();
    let faults: HashMap<String, FaultRow> =
        inner.store.faults(&ids).await?.into_iter().map(|f| (f.execution_id.clone(), f)).collect();
    let (mut together, mut alone) = (Vec::new(), Vec::new());
    for (id, entries) in by_execution {
        let first = entries.first().map(|e| e.seq);
        match faults.get(&id).filter(|f| f.inbox_seq == first) {
            Some(f) if f.failures >= inner.cfg.max_failures => {
                let reason = f.reason.clone();
                quarantine::park(inner, core, &id, first, &reason, now).await?;
            }
            Some(f) if f.failures >= 1 => alone.push((id, entries)),
            _ => together.push((id, entries)),
        }
    }
    if !together.is_empty() {
        attempt(inner, core, together, now).await?;
    }
    for one in alone {
        tracing::warn!(execution_id = %one.0, "recovery: applying an execution whose earlier attempt failed, alone");
        attempt(inner, core, vec![one], now).await?;
    }
    Ok(())
}

/// Counts one attempt for each execution of `set` (committed), then applies them.
async fn attempt(
    inner: &Inner,
    core: &mut Core,
    set: Vec<(String, Vec<InboxEntry>)>,
    now: u64,
) -> Result<(), OwnerError> {
    let ids: Vec<String> = set.iter().map(|(id, _)| id.clone()).collect();
    let notes = set
        .iter()
        .map(|(id, entries)| FaultNote {
            execution_id: id.clone(),
            inbox_seq: entries.first().map(|e| e.seq),
            reason: DIED.into(),
            add: 1,
        })
        .collect();
    inner.store.note_faults(notes).await?;
    let entries: Vec<InboxEntry> = set.into_iter().flat_map(|(_, e)| e).collect();
    let Applied { committed, failed } = match apply_set(inner, core, Vec::new(), entries, now).await
    {
        Ok(applied) => applied,
        Err(e) => {
            // Not the executions' fault (the database, a fence): take the counts back.
            let _ = inner.store.clear_faults(&ids).await;
            return Err(e);
        }
    };
    inner.store.clear_faults(&committed).await?;
    for id in &committed {
        core.suspects.remove(id);
    }
    quarantine::on_failures(inner, core, failed, true, now).await
}
