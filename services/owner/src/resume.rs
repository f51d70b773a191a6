//! Taking executions into memory in bulk: at start (the executions this node id owns) and
//! after a takeover (a dead owner's root tree).
//!
//! Invariants: only executions whose owners row names this node are loaded (or, at start,
//! recorded as evicted), each with the epoch read from that row; a restarted node first
//! moves its rows to a new epoch, so a previous process with the same node id (paused, or
//! not yet gone) can never write again. Children a lost process asked for but never
//! started are started again.

use crate::context::{Core, Hot, Inner};
use crate::effects::ChildStart;
use crate::error::OwnerError;
use crate::hot::rebuild;
use crate::requests::{PendingStart, StartRequest};
use serde_json::Value;
use std::collections::BTreeSet;

/// Owners rows moved per `resume_node` call at start.
const RESUME_PAGE: u32 = 10_000;

/// Resumes every open execution this node id owns, after fencing any previous process of
/// the same id: `resume_node` moves every owners row of the node to the next epoch, a
/// statement per page of `RESUME_PAGE` rows. The pages are not one transaction, and need
/// not be: a row is fenced once its page moved, and no history is read before every page
/// moved.
///
/// With eviction on, only the executions that need a look at their history are loaded:
/// those with pending inbox entries (recovery mode, see `recovery`) and those whose history
/// records a child start (a child a lost process asked for but never created is started
/// again). The others are recorded as evicted at their new epoch without being read — a
/// restart with 1,000,000 sleeping executions reads no history — and come back from their
/// history at their next event, as any evicted execution does (their timer rows were
/// written with their events). One with a task in flight is among them: its result takes
/// the inbox route once (the direct route needs a held copy), which reloads it. With
/// eviction off every one is loaded and held, as before.
pub(crate) async fn recover(inner: &Inner) -> Result<(), OwnerError> {
    let me = inner.cfg.node_id.as_str();
    let mut core = inner.core.lock().await;
    let pending = pending_ids(inner).await?;
    let lazy = inner.cfg.evict_after_ms.is_some();
    let (mut ids, mut total, mut after) = (Vec::new(), 0, String::new());
    loop {
        let page = inner.store.resume_node(me, &after, RESUME_PAGE).await?;
        let more = page.len() >= RESUME_PAGE as usize;
        if let Some(last) = page.last() {
            after.clone_from(&last.execution_id);
        }
        for r in page.into_iter().filter(|r| r.open) {
            total += 1;
            if lazy && !r.child_started && !pending.contains(&r.execution_id) {
                core.evicted.insert(&r.execution_id, r.epoch);
            } else {
                ids.push(r.execution_id);
            }
        }
        if !more {
            break;
        }
    }
    let (loaded, children) = load(inner, &mut core, &ids, &pending).await?;
    if total > 0 {
        tracing::info!(node_id = %me, executions = total, loaded, "resumed the executions this node owns");
    }
    // A child start a previous process died on is retried in recovery mode too.
    core.suspects.extend(children.iter().map(|c| c.child_id.clone()));
    drop(core);
    queue_children(inner, children);
    Ok(())
}

/// Takes the executions of a root tree this node just took over into memory, replacing any
/// stale copy, and wakes the pass and the dispatchers (queued tasks are announced again).
pub(crate) async fn adopt(
    inner: &Inner,
    root_id: &str,
    from_node: &str,
    rows: &[(String, u64)],
) -> Result<(), OwnerError> {
    let ids: Vec<String> = rows.iter().map(|(id, _)| id.clone()).collect();
    let mut core = inner.core.lock().await;
    for id in &ids {
        core.hot.remove(id);
        core.lost.remove(id);
        core.evicted.remove(id);
    }
    let pending = if ids.is_empty() { BTreeSet::new() } else { pending_ids(inner).await? };
    let (_, children) = load(inner, &mut core, &ids, &pending).await?;
    core.suspects.extend(children.iter().map(|c| c.child_id.clone()));
    drop(core);
    let epoch = rows.iter().map(|(_, e)| *e).max().unwrap_or(0);
    tracing::info!(
        node_id = %inner.cfg.node_id,
        "took over root {root_id} from {from_node} ({} executions, epoch {epoch})",
        rows.len()
    );
    queue_children(inner, children);
    inner.kick_inbox();
    inner.tasks_ready.notify_waiters();
    Ok(())
}

/// Which executions of this node have pending inbox entries: loaded, they go into recovery
/// mode, since a previous process may have died applying them (see `recovery`). Those
/// without entries stay in steady state, so a restart adds no writes for them.
async fn pending_ids(inner: &Inner) -> Result<BTreeSet<String>, OwnerError> {
    let pending =
        inner.store.pending_inbox_owned(&inner.cfg.node_id, &[], inner.cfg.max_batch).await?;
    Ok(pending.into_iter().map(|e| e.execution_id).collect())
}

/// Rebuilds `ids` (owned by this node); closed ones stay out, those with `pending` entries
/// become suspects and stay in memory, quiet ones are evicted at once (see `evict`: a
/// restart with many sleeping executions does not keep them all), the others are held.
/// Returns how many were loaded and the children they asked for that were never created.
/// A failed rebuild is logged: the execution is rebuilt when its next inbox entry comes.
async fn load(
    inner: &Inner,
    core: &mut Core,
    ids: &[String],
    pending: &BTreeSet<String>,
) -> Result<(usize, Vec<ChildStart>), OwnerError> {
    let (mut loaded, mut children) = (0, Vec::new());
    let now = inner.cfg.clock.now();
    for id in ids {
        match rebuild(inner, core, id, true).await {
            Ok(h) if h.state.status().is_closed() => {}
            Ok(h) => {
                loaded += 1;
                for child in waiting_children(&h) {
                    if inner.store.get_execution(&child.child_id).await?.is_none() {
                        tracing::info!(execution_id = %id, trace_id = %orbit_telemetry::trace_id(id), child = %child.child_id, "restarting a child that never started");
                        children.push(child);
                    }
                }
                if pending.contains(id) {
                    core.suspects.insert(id.clone());
                    core.hot.insert(id.clone(), h);
                } else {
                    crate::evict::keep(core, id.clone(), h, inner.cfg.evict_after_ms, now);
                }
            }
            Err(e) => {
                tracing::error!(execution_id = %id, trace_id = %orbit_telemetry::trace_id(id), error = %e, "cannot rebuild execution")
            }
        }
    }
    crate::evict::observe(core);
    Ok((loaded, children))
}

/// Children asked for by `ChildStarted` whose units still wait.
fn waiting_children(h: &Hot) -> Vec<ChildStart> {
    let mut out = Vec::new();
    for (key, u) in &h.state.units {
        let Some(orbit_engine::state::Wait::Child(child_id)) = &u.wait else { continue };
        if u.status.is_resolved() {
            continue;
        }
        let step = orbit_engine::unit::UnitKey::parse(key).map(|k| k.step).unwrap_or_default();
        if let Some(orbit_definition::StepKind::Workflow { workflow, version }) =
            h.def.step(step.as_str()).map(|s| &s.kind)
        {
            out.push(ChildStart {
                child_id: child_id.clone(),
                workflow: workflow.clone(),
                version: version.clone(),
                input: u.input.clone().unwrap_or(Value::Null),
                parent: orbit_engine::ParentRef {
                    execution_id: h.state.execution_id.clone(),
                    step: key.clone(),
                },
                root_id: h.root_id.clone(),
            });
        }
    }
    out
}

/// Queues child starts for the next pass (no one waits for their answer).
pub(crate) fn queue_children(inner: &Inner, children: Vec<ChildStart>) {
    if children.is_empty() {
        return;
    }
    if let Ok(mut starts) = inner.starts.lock() {
        for c in children {
            starts.push(PendingStart {
                request: StartRequest {
                    execution_id: c.child_id,
                    workflow: c.workflow,
                    version: c.version,
                    input: c.input,
                    parent: Some(c.parent),
                    root_id: Some(c.root_id),
                    schedule_id: None,
                    fork: None,
                    priority: None,
                    memo: None,
                    update: None,
                    versions_seen: None,
                },
                reply: None,
                retries: 0,
            });
        }
    }
    inner.kick_inbox();
}
