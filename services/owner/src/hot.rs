//! Hot executions: what the owner keeps in memory per execution, how it is rebuilt from the
//! store (definition by hash, history fold, epoch). Recovery and adoption are in `resume`.

use crate::error::OwnerError;
use crate::owner::Inner;
use orbit_definition::Definition;
use orbit_engine::ErrorCode;
use orbit_engine::State;
use std::collections::{BTreeSet, HashMap};
use std::sync::Arc;

/// An execution held in memory by its owner.
#[derive(Debug, Clone)]
pub(crate) struct Hot {
    pub def: Arc<Definition>,
    pub state: State,
    pub root_id: String,
    pub epoch: Option<u64>,
    /// The timer row's due time as last written; `None` when unknown (after a rebuild).
    pub timer_at: Option<Option<u64>>,
}

/// What the pass loop owns.
pub(crate) struct Core {
    pub hot: HashMap<String, Hot>,
    /// Parsed definitions by hash.
    pub defs: HashMap<String, Arc<Definition>>,
    /// The same, by (name, version): immutable once registered, so read from the store once.
    pub versions: HashMap<(String, String), Arc<Definition>>,
    /// Executions this process lost to a fence, with the owners row's epoch then. Only an
    /// adoption at a higher epoch (a takeover by this process) brings one back.
    pub lost: HashMap<String, u64>,
    /// Executions in recovery mode (see `recovery`): recovered after a start or a takeover
    /// with pending entries, resumed by an operator, or after a caught panic. Their entries
    /// are applied with an attempt count committed first.
    pub suspects: BTreeSet<String>,
    /// Open executions dropped from memory while quiet (see `evict`), with their epoch.
    pub evicted: crate::evict::Evicted,
}

/// The definition of (workflow, version) — latest when `version` is `None` — parsed once and
/// cached by hash; a named version is also cached by name and version (immutable), so it is
/// read from the store once.
pub(crate) async fn definition(
    inner: &Inner,
    core: &mut Core,
    workflow: &str,
    version: Option<&str>,
) -> Result<Arc<Definition>, OwnerError> {
    if let Some(d) = version.and_then(|v| core.versions.get(&(workflow.into(), v.into()))) {
        return Ok(d.clone());
    }
    let row = inner.store.get_definition(workflow, version).await?.ok_or_else(|| {
        OwnerError::new(
            ErrorCode::WorkflowNotFound,
            format!(
                "no workflow `{workflow}`{}",
                version.map(|v| format!(" version {v}")).unwrap_or_default()
            ),
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
    core.versions.insert((row.name, row.version), def.clone());
    Ok(def)
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
        let evicted = core.evicted.epoch(id);
        let rebuilt = rebuild(inner, core, id, true).await?;
        if let Some(held) = evicted {
            core.evicted.remove(id);
            orbit_metrics::get().owner_reloads.inc();
            // The epoch this process held when it evicted the execution is its fence: a
            // different one means it was taken over meanwhile (by another node, or a newer
            // process with this node id), exactly what a fenced commit would have said.
            if rebuilt.epoch != Some(held) {
                let now = rebuilt.epoch.unwrap_or(u64::MAX);
                core.lost.insert(id.to_string(), now);
                return Err(OwnerError::unavailable(format!(
                    "execution `{id}` was taken over while evicted (epoch {held} → {now})"
                )));
            }
        }
        core.hot.insert(id.to_string(), rebuilt);
    }
    core.hot
        .get_mut(id)
        .ok_or_else(|| OwnerError::new(ErrorCode::ExecutionNotFound, id.to_string()))
}

/// An execution rebuilt from the store for a read, whoever owns it; not kept.
pub(crate) async fn read(inner: &Inner, core: &mut Core, id: &str) -> Result<Hot, OwnerError> {
    rebuild(inner, core, id, false).await
}

/// Rebuilds an execution from its history. The owners row is read FIRST: its epoch is the
/// fence of every later commit, so a takeover after this read fences this copy.
pub(crate) async fn rebuild(
    inner: &Inner,
    core: &mut Core,
    id: &str,
    owned_only: bool,
) -> Result<Hot, OwnerError> {
    let owner = inner.store.get_owner(id).await?;
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
    let row = inner.store.get_execution(id).await?.ok_or_else(|| {
        OwnerError::new(ErrorCode::ExecutionNotFound, format!("no execution `{id}`"))
    })?;
    let def = definition(inner, core, &row.workflow, Some(&row.version)).await?;
    let history = inner.store.load_history(id, row.run).await?;
    let state = State::from_history(&history);
    Ok(Hot { def, state, root_id: row.root_id, epoch: owner.map(|o| o.epoch), timer_at: None })
}
