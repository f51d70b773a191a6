//! Parsed definitions by hash. Definitions are immutable per hash, so a parsed one never
//! goes stale; the cache only saves re-parsing the stored document on every read.

use crate::error::{err, ApiResult};
use orbit_definition::Definition;
use orbit_server_kit::ErrorCode;
use orbit_store::Definitions;
use std::collections::HashMap;
use std::sync::{Arc, Mutex};

/// A cache of parsed definitions, by definition hash.
#[derive(Default)]
pub(crate) struct DefinitionCache {
    by_hash: Mutex<HashMap<String, Arc<Definition>>>,
}

impl DefinitionCache {
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
