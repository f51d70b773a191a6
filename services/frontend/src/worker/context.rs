//! The context of an execution's run that every task message carries (its workflow and
//! pinned definition), remembered per run in a bounded map so a delivery rarely reads it.

use crate::Shared;
use std::sync::Arc;

/// The workflow and pinned definition of one run.
#[derive(Clone)]
pub(crate) struct Context {
    pub(super) workflow: String,
    pub(super) def: Arc<orbit_definition::Definition>,
}

/// The workflow and definition of an execution's run, for the task message; `None` if
/// unknown. A run's workflow and pinned definition never change, so they are remembered
/// (a bounded map: cleared when full) instead of read for every task.
pub(super) async fn context(shared: &Shared, execution_id: &str, run: u32) -> Option<Context> {
    let key = (execution_id.to_string(), run);
    if let Some(found) = shared.contexts.lock().ok().and_then(|m| m.get(&key).cloned()) {
        return Some(found);
    }
    let row = shared.store.get_execution(execution_id).await.ok()??;
    let def = shared
        .defs
        .pinned(shared.store.as_ref(), &row.workflow, &row.version, &row.definition_hash)
        .await
        .ok()?;
    let ctx = Context { workflow: row.workflow, def };
    if row.run == run {
        remember_context(shared, key, ctx.clone());
    }
    Some(ctx)
}

/// Remembers the context of a run an owner described with a handed task (workflow,
/// version, definition hash), so its delivery reads no execution row: the definition
/// comes from the cache (read once per hash).
pub(super) async fn learn_context(
    shared: &Shared,
    execution_id: &str,
    run: u32,
    (workflow, version, hash): (&str, &str, &str),
) {
    let key = (execution_id.to_string(), run);
    if workflow.is_empty() || shared.contexts.lock().is_ok_and(|m| m.contains_key(&key)) {
        return;
    }
    let Ok(def) = shared.defs.pinned(shared.store.as_ref(), workflow, version, hash).await else {
        return;
    };
    remember_context(shared, key, Context { workflow: workflow.to_string(), def });
}

/// Keeps a run's context (a bounded map: cleared when full).
fn remember_context(shared: &Shared, key: (String, u32), ctx: Context) {
    if let Ok(mut m) = shared.contexts.lock() {
        if m.len() >= CONTEXTS {
            m.clear();
        }
        m.insert(key, ctx);
    }
}

/// How many runs' contexts a frontend remembers.
const CONTEXTS: usize = 10_000;
