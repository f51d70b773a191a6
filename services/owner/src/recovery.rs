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
//! Children a lost process asked for but never created are recovered the same way, keyed by
//! the child's id (no entry): one that keeps killing the process is stored without its
//! first decision and parked.
//!
//! A successful attempt deletes the counts and the execution leaves recovery mode: its later
//! entries are applied in steady state, where nothing extra is written.

use crate::apply::apply_set;
use crate::begin::create_only;
use crate::context::{Core, Inner};
use crate::error::OwnerError;
use crate::quarantine::{self, DIED};
use crate::requests::PendingStart;
use crate::work::Applied;
use orbit_store::{FaultNote, FaultRow, InboxEntry};
use std::collections::{BTreeMap, HashMap};

/// One unit of recovery: an execution's pending entries, or a start a lost process asked
/// for (a child), keyed by execution id.
#[derive(Default)]
struct Suspect {
    starts: Vec<PendingStart>,
    entries: Vec<InboxEntry>,
}

impl Suspect {
    fn first_seq(&self) -> Option<u64> {
        self.entries.first().map(|e| e.seq)
    }
}

/// Applies the starts and entries of suspects (see the module docs).
pub(crate) async fn run(
    inner: &Inner,
    core: &mut Core,
    starts: Vec<PendingStart>,
    entries: Vec<InboxEntry>,
    now: u64,
) -> Result<(), OwnerError> {
    let mut by_execution: BTreeMap<String, Suspect> = BTreeMap::new();
    for s in starts {
        by_execution.entry(s.request.execution_id.clone()).or_default().starts.push(s);
    }
    for e in entries {
        by_execution.entry(e.execution_id.clone()).or_default().entries.push(e);
    }
    let ids: Vec<String> = by_execution.keys().cloned().collect();
    let faults: HashMap<String, FaultRow> =
        inner.store.faults(&ids).await?.into_iter().map(|f| (f.execution_id.clone(), f)).collect();
    let (mut together, mut alone) = (Vec::new(), Vec::new());
    for (id, suspect) in by_execution {
        let first = suspect.first_seq();
        match faults.get(&id).filter(|f| f.inbox_seq == first) {
            Some(f) if f.failures >= inner.cfg.max_failures => {
                let reason = f.reason.clone();
                if let Err(e) = park_suspect(inner, core, &id, suspect, first, &reason, now).await {
                    // Not parked (fenced, database trouble): out of recovery mode here; the
                    // next recovery (of this node or the next owner) counts it again.
                    tracing::warn!(execution_id = %id, trace_id = %orbit_telemetry::trace_id(&id), error = %e, "could not park an execution");
                    core.suspects.remove(&id);
                    core.hot.remove(&id);
                }
            }
            Some(f) if f.failures >= 1 => alone.push((id, suspect)),
            _ => together.push((id, suspect)),
        }
    }
    if !together.is_empty() {
        attempt(inner, core, together, now).await?;
    }
    for one in alone {
        tracing::warn!(execution_id = %one.0, trace_id = %orbit_telemetry::trace_id(&one.0), "recovery: applying an execution whose earlier attempt failed, alone");
        attempt(inner, core, vec![one], now).await?;
    }
    Ok(())
}

/// Parks a suspect that reached the limit; a start that never got stored is stored first
/// without its first decision, so it is visible and an operator decides.
async fn park_suspect(
    inner: &Inner,
    core: &mut Core,
    id: &str,
    suspect: Suspect,
    first: Option<u64>,
    reason: &str,
    now: u64,
) -> Result<(), OwnerError> {
    if suspect.entries.is_empty() {
        for start in suspect.starts {
            create_only(inner, core, start, now).await?;
        }
    }
    quarantine::park(inner, core, id, first, reason, now).await
}

/// Counts one attempt for each execution of `set` (committed), then applies them.
async fn attempt(
    inner: &Inner,
    core: &mut Core,
    set: Vec<(String, Suspect)>,
    now: u64,
) -> Result<(), OwnerError> {
    let ids: Vec<String> = set.iter().map(|(id, _)| id.clone()).collect();
    let notes = set
        .iter()
        .map(|(id, s)| FaultNote {
            execution_id: id.clone(),
            inbox_seq: s.first_seq(),
            reason: DIED.into(),
            add: 1,
        })
        .collect();
    inner.store.note_faults(notes).await?;
    let (mut starts, mut entries) = (Vec::new(), Vec::new());
    for (_, s) in set {
        starts.extend(s.starts);
        entries.extend(s.entries);
    }
    let Applied { committed, failed } =
        match apply_set(inner, core, starts, entries, Vec::new(), now).await {
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
    // A start that already existed (nothing to commit) needs no more care either.
    for id in &ids {
        if !failed.iter().any(|f| &f.execution_id == id) && !core.hot.contains_key(id) {
            core.suspects.remove(id);
        }
    }
    quarantine::on_failures(inner, core, failed, true, now).await
}
