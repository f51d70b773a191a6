//! Forks: a new execution that starts from another execution's state at a seq
//! (`StartExecutionRequest.fork`, `orbit_engine::restore`).
//!
//! A fork is a start. Before `begin`, [`prepare`] reads the source run's history from the
//! store (events up to any committed seq are immutable, whoever owns the source), finds the
//! version in effect at the seq and loads it (and the requested one, when it differs: the
//! fork is migrated to it right away, after the checked diff). In the new execution's
//! engine job, [`runs`] asks the engine for the plan and the first run
//! (`orbit_engine::restore::restored`): its own `WorkflowCreated`, the copied prefix,
//! `RunRestored`, then the decider's first round — committed with the projection and owner
//! rows like any start. A refusal (`RESET_POINT_INVALID`, `MIGRATION_UNSAFE`, …) creates
//! nothing and fails the start with its code.

use crate::context::{Core, Hot, Inner};
use crate::error::OwnerError;
use crate::hot::definition;
use crate::requests::StartRequest;
use orbit_definition::Definition;
use orbit_engine::event::{Event, HistoryEvent};
use orbit_engine::restore::{self, Restored, Source};
use orbit_engine::run::{Pass, Run};
use orbit_engine::{Capabilities, ErrorCode};
use std::sync::Arc;

/// What a fork's engine job needs, read before it.
pub(crate) struct ForkInput {
    source_id: String,
    source_run: u32,
    at_seq: u64,
    reason: String,
    history: Vec<HistoryEvent>,
    def: Arc<Definition>,
    to: Option<Arc<Definition>>,
}

/// Reads a fork's source and definitions; pins `req.version` to the version the fork ends
/// on (the requested one, else the one in effect at the seq), so `begin` creates the
/// projection row with it, and sets `req.input` to the source's input.
pub(crate) async fn prepare(
    inner: &Inner,
    core: &mut Core,
    req: &mut StartRequest,
) -> Result<Option<ForkInput>, OwnerError> {
    let Some(f) = req.fork.clone() else { return Ok(None) };
    let source = inner.store.get_execution(&f.source_execution_id).await?.ok_or_else(|| {
        OwnerError::new(
            ErrorCode::ExecutionNotFound,
            format!("no execution `{}` to fork", f.source_execution_id),
        )
    })?;
    if source.workflow != req.workflow {
        return Err(OwnerError::new(
            ErrorCode::InvalidArgument,
            format!("`{}` is an execution of another workflow", f.source_execution_id),
        ));
    }
    let run = if f.source_run == 0 { source.run } else { f.source_run };
    let history = inner.store.load_history(&f.source_execution_id, run).await?;
    let through = restore::point(&history, &restore::Point::Seq(f.at_seq))?;
    let at = restore::state_at(&history, through);
    let def = definition(inner, core, &req.workflow, Some(&at.version)).await?;
    let to = match req.version.as_deref() {
        Some(v) if v != at.version => Some(definition(inner, core, &req.workflow, Some(v)).await?),
        _ => None,
    };
    req.version = Some(to.as_ref().unwrap_or(&def).version.clone());
    // The fork's input is the source's (its `WorkflowCreated` carries it): `begin` checks
    // the start's input against the input contract, and the caller sent none.
    if let Some(Event::WorkflowCreated { input, .. }) = history.first().map(|h| &h.event) {
        req.input = input.clone();
    }
    Ok(Some(ForkInput {
        source_id: f.source_execution_id,
        source_run: run,
        at_seq: through,
        reason: f.reason,
        history,
        def,
        to,
    }))
}

/// The fork's first run(s), recorded in the execution's hot copy (whose state is
/// replaced). In the job.
pub(crate) fn runs(
    hot: &mut Hot,
    caps: Capabilities,
    id: &str,
    f: &ForkInput,
    now: u64,
    limits: &orbit_definition::Limits,
) -> Result<Vec<Run>, OwnerError> {
    let plan = restore::plan(&f.def, &f.history, f.at_seq)?;
    let created = restore::fork_created(&f.history[0].event, id)
        .ok_or_else(|| OwnerError::new(ErrorCode::StorageError, "no WorkflowCreated"))?;
    let r = Restored {
        def: &f.def,
        to: f.to.as_deref(),
        restore: &plan,
        source: Source { execution_id: &f.source_id, run: f.source_run },
        reason: &f.reason,
        keep_signals: false,
    };
    let pass = Pass { now, limits, caps };
    let timer = hot.timer_at;
    Ok(restore::restored(&mut hot.state, &r, created, timer, &pass)?.0)
}
