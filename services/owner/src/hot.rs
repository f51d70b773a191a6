//! Hot executions: what the owner keeps in memory per execution, how it is rebuilt from the
//! store (definition by hash, history fold, epoch). Recovery and adoption are in `resume`.

use crate::context::{Core, Hot, Inner};
use crate::error::OwnerError;
use futures_util::stream::{self, StreamExt};
use orbit_definition::Definition;
use orbit_engine::ErrorCode;
use orbit_engine::State;
use orbit_store::{ExecutionRow, OwnerRow, OwnerStore};
use std::sync::Arc;

/// The definition of (workflow, version) — latest when `version` is `None` — parsed once and
/// cached by hash; a named version is also cached by name and version (immutable), so it is
/// read from the store once.
pub(crate) async fn definition(
    inner: &Inner,
    core: &mut Core,
    workflow: &str,
    version: Option<&str>,
) -> Result<Arc<Definition>, OwnerError> {
    // Without a version: the latest by `orbit_definition::version::latest`, from the
    // versions alone, so a cached definition is not read again.
    let latest;
    let version = match version {
        Some(v) => Some(v),
        None => {
            let versions = inner.store.definition_versions(workflow).await?;
            latest = orbit_store::VersionRow::latest(versions).map(|v| v.version);
            latest.as_deref()
        }
    };
    let Some(version) = version else {
        return Err(OwnerError::new(
            ErrorCode::WorkflowNotFound,
            format!("no workflow `{workflow}`"),
        ));
    };
    if let Some(d) = pinned(inner, workflow, version) {
        return Ok(d);
    }
    let row = inner.store.get_definition(workflow, Some(version)).await?.ok_or_else(|| {
        OwnerError::new(
            ErrorCode::WorkflowNotFound,
            format!("no workflow `{workflow}` version {version}"),
        )
    })?;
    let def = match core.defs.get(&row.definition_hash) {
        Some(d) => d.clone(),
        None => {
            let def = orbit_definition::parse_stored(&row.document).map_err(|e| {
                OwnerError::new(
                    ErrorCode::StorageError,
                    format!("stored definition {workflow}@{}: {e}", row.version),
                )
            })?;
            let def = Arc::new(def);
            core.defs.insert(row.definition_hash.clone(), def.clone());
            def
        }
    };
    if let Ok(mut versions) = inner.versions.lock() {
        versions.insert((row.name, row.version), def.clone());
    }
    Ok(def)
}

/// The definition of (workflow, version) when it was read before. A version's definition
/// never changes once stored (`DEFINITION_CONFLICT`), so this needs no core lock.
pub(crate) fn pinned(inner: &Inner, workflow: &str, version: &str) -> Option<Arc<Definition>> {
    let versions = inner.versions.lock().ok()?;
    versions.get(&(workflow.to_string(), version.to_string())).cloned()
}

/// The hot execution, rebuilt from the store when not in memory. Only an execution this
/// node owns is rebuilt: one taken over by another node is refused, so a stale pass can
/// never pick up the other node's epoch and write beside it.
pub(crate) async fn hot<'a>(
    inner: &Inner,
    core: &'a mut Core,
    id: &str,
) -> Result<&'a mut Hot, OwnerError> {
    if !core.hot.contains_key(id) {
        let rebuilt = rebuild(inner, core, id, true).await;
        admit(core, id, rebuilt)?;
    }
    core.hot
        .get_mut(id)
        .ok_or_else(|| OwnerError::new(ErrorCode::ExecutionNotFound, id.to_string()))
}

/// Reloads the evicted executions among `ids` (see `evict`) with their store reads in
/// flight together, so a pass that wakes thousands of them at one instant does not pay
/// three sequential round trips each. Failures are left for [`hot`] to retry and report.
pub(crate) async fn reload_evicted(inner: &Inner, core: &mut Core, ids: &[&str]) {
    let mut wanted: Vec<&str> = ids
        .iter()
        .copied()
        .filter(|id| !core.hot.contains_key(*id) && core.evicted.contains(id))
        .collect();
    wanted.sort_unstable();
    wanted.dedup();
    if wanted.is_empty() {
        return;
    }
    let ids: Vec<String> = wanted.into_iter().map(str::to_string).collect();
    let fetched: Vec<(String, Result<Fetched, OwnerError>)> = stream::iter(ids)
        .map(|id| {
            let store = inner.store.clone();
            async move {
                let f = fetch(store.as_ref(), &id).await;
                (id, f)
            }
        })
        .buffer_unordered(RELOAD_CONCURRENCY)
        .collect()
        .await;
    for (id, f) in fetched {
        let Ok(f) = f else { continue };
        let id = id.as_str();
        let rebuilt = assemble(inner, core, id, f, true).await;
        if let Err(e) = admit(core, id, rebuilt) {
            tracing::warn!(execution_id = %id, trace_id = %orbit_telemetry::trace_id(id), error = %e, "evicted execution not reloaded");
        }
    }
}

/// Store reads in flight at once while reloading evicted executions.
const RELOAD_CONCURRENCY: usize = 32;

/// Puts a rebuilt execution into memory. For an evicted one, the epoch this process held
/// when it evicted it is its fence: a different one means it was taken over meanwhile (by
/// another node, or a newer process with this node id), exactly what a fenced commit
/// would have said, and it is treated as lost.
fn admit(core: &mut Core, id: &str, rebuilt: Result<Hot, OwnerError>) -> Result<(), OwnerError> {
    let evicted = core.evicted.epoch(id);
    let rebuilt = rebuilt?;
    if let Some(held) = evicted {
        core.evicted.remove(id);
        orbit_metrics::get().owner_reloads.inc();
        if rebuilt.epoch != Some(held) {
            let now = rebuilt.epoch.unwrap_or(u64::MAX);
            core.lost.insert(id.to_string(), now);
            return Err(OwnerError::unavailable(format!(
                "execution `{id}` was taken over while evicted (epoch {held} → {now})"
            )));
        }
    }
    core.hot.insert(id.to_string(), rebuilt);
    Ok(())
}

/// An execution rebuilt from the store for a read, whoever owns it; not kept.
pub(crate) async fn read(inner: &Inner, core: &mut Core, id: &str) -> Result<Hot, OwnerError> {
    rebuild(inner, core, id, false).await
}

/// What a rebuild reads from the store; touches nothing of the owner's memory.
pub(crate) struct Fetched {
    owner: Option<OwnerRow>,
    row: ExecutionRow,
    state: State,
}

/// Reads an execution's owners row, row and history, and folds the history. The owners
/// row is read FIRST: its epoch is the fence of every later commit, so a takeover after
/// this read fences this copy.
async fn fetch(store: &dyn OwnerStore, id: &str) -> Result<Fetched, OwnerError> {
    let owner = store.get_owner(id).await?;
    let row = store.get_execution(id).await?.ok_or_else(|| {
        OwnerError::new(ErrorCode::ExecutionNotFound, format!("no execution `{id}`"))
    })?;
    let history = store.load_history(id, row.run).await?;
    Ok(Fetched { owner, row, state: State::from_history(&history) })
}

/// Rebuilds an execution from its history (see [`fetch`]).
pub(crate) async fn rebuild(
    inner: &Inner,
    core: &mut Core,
    id: &str,
    owned_only: bool,
) -> Result<Hot, OwnerError> {
    let f = fetch(inner.store.as_ref(), id).await?;
    assemble(inner, core, id, f, owned_only).await
}

/// A fetched execution as a hot copy, refused when `owned_only` and the owners row names
/// another node, or an epoch this process already lost it at.
async fn assemble(
    inner: &Inner,
    core: &mut Core,
    id: &str,
    f: Fetched,
    owned_only: bool,
) -> Result<Hot, OwnerError> {
    let Fetched { owner, row, state } = f;
    if let Some(o) = owner.as_ref().filter(|o| owned_only && o.node_id != inner.cfg.node_id) {
        return Err(OwnerError::unavailable(format!(
            "execution `{id}` is owned by node {} at epoch {}",
            o.node_id, o.epoch
        )));
    }
    if let Some(seen) = core.lost.get(id).filter(|_| owned_only) {
        if owner.as_ref().is_none_or(|o| o.epoch <= *seen) {
            return Err(OwnerError::unavailable(format!(
                "execution `{id}` was taken from this process at epoch {seen}"
            )));
        }
    }
    let def = definition(inner, core, &row.workflow, Some(&row.version)).await?;
    Ok(Hot { def, state, root_id: row.root_id, epoch: owner.map(|o| o.epoch), timer_at: None })
}
