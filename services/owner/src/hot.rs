//! Hot executions: what the owner keeps in memory per execution, how it is rebuilt from the
//! store (definition by hash, history fold, epoch), and recovery at start.

use crate::effects::ChildStart;
use crate::error::OwnerError;
use crate::owner::{Inner, PendingStart, StartRequest};
use orbit_definition::Definition;
use orbit_engine::State;
use orbit_store::ExecutionFilter;
use serde_json::Value;
use std::collections::HashMap;
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
    pub defs: HashMap<String, Arc<Definition>>,
}

/// The definition of (workflow, version) — latest when `version` is `None` — parsed once and
/// cached by hash.
pub(crate) async fn definition(
    inner: &Inner,
    core: &mut Core,
    workflow: &str,
    version: Option<&str>,
) -> Result<Arc<Definition>, OwnerError> {
    let row = inner.store.get_definition(workflow, version).await?.ok_or_else(|| {
        OwnerError::new(
            "WORKFLOW_NOT_FOUND",
            format!(
                "no workflow `{workflow}`{}",
                version.map(|v| format!(" version {v}")).unwrap_or_default()
            ),
        )
    })?;
    if let Some(d) = core.defs.get(&row.definition_hash) {
        return Ok(d.clone());
    }
    let def = orbit_definition::parse(&row.document).map_err(|e| {
        OwnerError::new(
            "STORAGE_ERROR",
            format!("stored definition {workflow}@{}: {e}", row.version),
        )
    })?;
    let def = Arc::new(def);
    core.defs.insert(row.definition_hash, def.clone());
    Ok(def)
}

/// The hot execution, rebuilt from the store when not in memory.
pub(crate) async fn hot<'a>(
    inner: &Inner,
    core: &'a mut Core,
    id: &str,
) -> Result<&'a mut Hot, OwnerError> {
    if !core.hot.contains_key(id) {
        let rebuilt = rebuild(inner, core, id).await?;
        core.hot.insert(id.to_string(), rebuilt);
    }
    core.hot.get_mut(id).ok_or_else(|| OwnerError::new("EXECUTION_NOT_FOUND", id.to_string()))
}

async fn rebuild(inner: &Inner, core: &mut Core, id: &str) -> Result<Hot, OwnerError> {
    let row =
        inner.store.get_execution(id).await?.ok_or_else(|| {
            OwnerError::new("EXECUTION_NOT_FOUND", format!("no execution `{id}`"))
        })?;
    let def = definition(inner, core, &row.workflow, Some(&row.version)).await?;
    let history = inner.store.load_history(id, row.run).await?;
    let state = State::from_history(&history);
    let epoch = inner.store.get_owner(id).await?.map(|o| o.epoch);
    Ok(Hot { def, state, root_id: row.root_id, epoch, timer_at: None })
}

/// Loads every open execution, restarts children that were asked for but never started, and
/// lets the first pass rewrite timers.
pub(crate) async fn recover(inner: &Inner) -> Result<(), OwnerError> {
    let mut core = inner.core.lock().await;
    for status in ["RUNNING", "COMPENSATING"] {
        let mut token = None;
        loop {
            let page = inner
                .store
                .list_executions(ExecutionFilter {
                    status: Some(status.into()),
                    page_size: 500,
                    page_token: token,
                    ..Default::default()
                })
                .await?;
            for row in page.executions {
                match rebuild(inner, &mut core, &row.execution_id).await {
                    Ok(h) => {
                        core.hot.insert(row.execution_id.clone(), h);
                    }
                    Err(e) => {
                        tracing::error!(execution_id = %row.execution_id, error = %e, "cannot rebuild execution")
                    }
                }
            }
            match page.next_page_token {
                Some(t) => token = Some(t),
                None => break,
            }
        }
    }
    let mut children = Vec::new();
    for (id, h) in &core.hot {
        for he_child in waiting_children(h) {
            if inner.store.get_execution(&he_child.child_id).await?.is_none() {
                tracing::info!(execution_id = %id, child = %he_child.child_id, "restarting a child that never started");
                children.push(he_child);
            }
        }
    }
    drop(core);
    queue_children(inner, children);
    Ok(())
}

/// Children asked for by `ChildStarted` whose units still wait.
fn waiting_children(h: &Hot) -> Vec<ChildStart> {
    let mut out = Vec::new();
    for (key, u) in &h.state.units {
        if let Some(orbit_engine::state::Wait::Child(child_id)) = &u.wait {
            if !u.status.is_resolved() {
                let step = h.def.step(
                    orbit_engine::unit::UnitKey::parse(key)
                        .map(|k| k.step)
                        .unwrap_or_default()
                        .as_str(),
                );
                if let Some(orbit_definition::StepKind::Workflow { workflow, version }) =
                    step.map(|s| &s.kind)
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
        }
    }
    out
}

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
                },
                reply: None,
            });
        }
    }
    inner.kick.notify_one();
}
