//! Parsed definitions by hash. Definitions are immutable per hash, so a parsed one never
//! goes stale; the cache only saves re-parsing the stored document on every read.
//!
//! And the registered versions of each workflow a start named (issue 25: that read was the
//! only statement on a start's path before the owner). A version never changes once
//! registered and is never deleted, so a cached list only misses versions registered
//! since: a start that names a version not in it reads the list again, and a start of the
//! latest version sends the list's length with it (`versions_seen`), which the owner checks
//! (in the commit that creates the execution, or by reading) and starts the latest if the
//! list was short. An answer naming another version than the cached latest, and a
//! registration through this frontend, drop the workflow's list.

use crate::error::{err, ApiResult};
use orbit_definition::Definition;
use orbit_server_kit::ErrorCode;
use orbit_store::{Definitions, VersionRow};
use std::collections::HashMap;
use std::sync::{Arc, Mutex};

/// A cache of parsed definitions, by definition hash, and of registered versions, by
/// workflow.
#[derive(Default)]
pub(crate) struct DefinitionCache {
    by_hash: Mutex<HashMap<String, Arc<Definition>>>,
    versions: Mutex<HashMap<String, Vec<VersionRow>>>,
}

/// The version a start runs, as [`DefinitionCache::resolve`] found it.
pub(crate) struct Resolved {
    pub(crate) row: VersionRow,
    /// `Some(n)`: the latest of a cached list of `n` versions, not read for this start
    /// (`internal::StartExecutionRequest.versions_seen`); `None`: named, or read now.
    pub(crate) versions_seen: Option<u32>,
}

impl DefinitionCache {
    /// The version `version` of `workflow` (the latest when `None`), from the cached list
    /// when it has it, else read (and cached); `None` when the workflow or version is not
    /// registered.
    pub(crate) async fn resolve(
        &self,
        store: &dyn Definitions,
        workflow: &str,
        version: Option<&str>,
    ) -> ApiResult<Option<Resolved>> {
        // Under the lock, only the row picked is copied, not the list.
        let cached = self.versions().get(workflow).map(|list| {
            // Only the latest needs the count checked: a named version never changes.
            let seen = u32::try_from(list.len()).ok().filter(|_| version.is_none());
            (pick(list, version), seen)
        });
        if let Some((Some(row), versions_seen)) = cached {
            return Ok(Some(Resolved { row, versions_seen }));
        }
        self.read(store, workflow, version).await
    }

    /// As [`resolve`](Self::resolve), always read (and cached): for a start that must not
    /// take a cached latest.
    pub(crate) async fn read(
        &self,
        store: &dyn Definitions,
        workflow: &str,
        version: Option<&str>,
    ) -> ApiResult<Option<Resolved>> {
        let list = store.definition_versions(workflow).await?;
        let row = pick(&list, version);
        if !list.is_empty() {
            self.versions().insert(workflow.to_string(), list);
        }
        Ok(row.map(|row| Resolved { row, versions_seen: None }))
    }

    /// Drops the cached versions of `workflow` (a version registered, or an owner that
    /// started another version than the cached latest).
    pub(crate) fn forget(&self, workflow: &str) {
        self.versions().remove(workflow);
    }

    fn versions(&self) -> std::sync::MutexGuard<'_, HashMap<String, Vec<VersionRow>>> {
        // As `lock`: the lists are valid whatever panicked.
        self.versions.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// The definition an execution is pinned to.
    pub(crate) async fn pinned(
        &self,
        store: &dyn Definitions,
        workflow: &str,
        version: &str,
        hash: &str,
    ) -> ApiResult<Arc<Definition>> {
        if let Some(def) = self.lock().get(hash) {
            return Ok(def.clone());
        }
        let row = store.get_definition(workflow, Some(version)).await?;
        let Some(row) = row else {
            return Err(err(
                ErrorCode::StorageError,
                format!("definition {workflow}@{version} of a stored execution is missing"),
            ));
        };
        let def = orbit_definition::parse_stored(&row.document).map_err(|e| {
            err(ErrorCode::StorageError, format!("stored definition {workflow}@{version}: {e}"))
        })?;
        if def.hash != hash {
            return Err(err(
                ErrorCode::StorageError,
                format!("stored definition {workflow}@{version} has hash {} not {hash}", def.hash),
            ));
        }
        let def = Arc::new(def);
        self.lock().insert(hash.to_string(), def.clone());
        Ok(def)
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, Arc<Definition>>> {
        // A poisoned cache only means a panic elsewhere; its entries are still valid.
        self.by_hash.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}

/// `version` of `list`, or its latest when `None`.
fn pick(list: &[VersionRow], version: Option<&str>) -> Option<VersionRow> {
    let i = match version {
        Some(v) => list.iter().position(|r| r.version == v),
        None => VersionRow::latest_index(list),
    };
    i.and_then(|i| list.get(i)).cloned()
}
