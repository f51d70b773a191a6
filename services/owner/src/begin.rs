//! The first phase of a start: is the id taken (an idempotent retry), or is it a new
//! execution — its definition, `WorkflowCreated` and projection row ([`begin`]). And the
//! start that is stored without its first decision ([`create_only`], for quarantine).

use crate::batches::batches_for;
use crate::context::{Core, Hot, Inner};
use crate::error::OwnerError;
use crate::hot::definition;
use crate::requests::{PendingStart, StartRequest, Started};
use crate::work::Work;
use orbit_engine::event::Event;
use orbit_engine::{ErrorCode, State, Status};
use orbit_store::ExecutionRow;

/// Stores a start's `WorkflowCreated` (projection and owners row) WITHOUT its first
/// decision: how a start that kept killing the process is kept, to be parked. A start's
/// update is not recorded here: its caller, answered `UNAVAILABLE`, retries and finds the
/// execution parked.
pub(crate) async fn create_only(
    inner: &Inner,
    core: &mut Core,
    mut start: PendingStart,
    now: u64,
) -> Result<(), OwnerError> {
    start.request.read_latest();
    let Begin::New(new) = begin(inner, core, &start.request, now, Existing::Read).await? else {
        return Ok(());
    };
    let (hot, created, row) = *new;
    let id = start.request.execution_id.clone();
    let mut w = Work::new(hot, inner.cfg.capabilities);
    w.new_execution = Some(row);
    w.record(created, now);
    let runs = w.undecided();
    let (batches, _, _, _) =
        batches_for(&inner.cfg.node_id, inner.cfg.retention_ms, &id, &mut w, runs, now);
    inner.store.commit_all(batches).await?;
    inner.changes.publish([id.as_str()]);
    w.hot.epoch = Some(1);
    core.hot.insert(id, w.hot);
    Ok(())
}

/// What [`begin`] found.
pub(crate) enum Begin {
    Exists(Started),
    New(Box<(Hot, Event, ExecutionRow)>),
}

/// Whether [`begin`] reads the execution of the start's id first.
#[derive(Debug)]
pub(crate) enum Existing {
    /// Read it: a taken id is answered here (an idempotent retry) or refused.
    Read,
    /// Do not read it (issue 25: a read on every start's critical path): the commit that
    /// creates the execution checks that the id is free, as it does in any case, and
    /// fails with `ExecutionExists` if not; the start is then carried into the next pass,
    /// which reads (`refused::on_commit_error`). Only for a start alone in its pass, so
    /// nothing else is held back by such a commit.
    Unchecked,
    /// Already read, by the pass, together with the other starts of the pass
    /// (`apply::load`: one round trip for all of them instead of one each in sequence).
    Known(Option<Box<ExecutionRow>>),
}

/// Reads what a start needs: the existing execution of that id (unless `existing` says
/// not to), or the definition to create it with.
pub(crate) async fn begin(
    inner: &Inner,
    core: &mut Core,
    req: &StartRequest,
    now: u64,
    existing: Existing,
) -> Result<Begin, OwnerError> {
    // Both reads at once: a new execution (the usual start) needs the definition, and the
    // two round trips in sequence were on every start's path.
    let read = async {
        match existing {
            Existing::Read => inner.store.get_execution(&req.execution_id).await,
            Existing::Unchecked => Ok(None),
            Existing::Known(row) => Ok(row.map(|r| *r)),
        }
    };
    let (existing, def) =
        tokio::join!(read, definition(inner, core, &req.workflow, req.version.as_deref()));
    if let Some(row) = existing? {
        // Execution ids are unique across workflows: a start of another workflow under a
        // taken id is refused, never answered with that execution (whose workflow,
        // version and hash the caller did not ask for). The message names neither, so a
        // caller allowed only its own workflows learns nothing of the other one.
        if row.workflow != req.workflow {
            return Err(OwnerError::new(
                ErrorCode::ExecutionExists,
                format!(
                    "execution id `{}` is already in use by an execution of another \
                     workflow; start with another id",
                    req.execution_id
                ),
            ));
        }
        return Ok(Begin::Exists(Started {
            execution_id: row.execution_id,
            run: row.run,
            created: false,
            version: row.version,
            definition_hash: row.definition_hash,
            update_seq: 0,
        }));
    }
    let def = def?;
    let mut created = orbit_engine::start(
        &def,
        &req.execution_id,
        req.input.clone(),
        req.parent.clone(),
        req.schedule_id.clone(),
        1,
        &inner.cfg.limits,
        req.priority,
    )?;
    if let Event::WorkflowCreated { memo, .. } = &mut created {
        memo.clone_from(&req.memo);
    }
    let root_id = req.root_id.clone().unwrap_or_else(|| req.execution_id.clone());
    let row = ExecutionRow {
        execution_id: req.execution_id.clone(),
        run: 1,
        root_id: root_id.clone(),
        parent_id: req.parent.as_ref().map(|p| p.execution_id.clone()),
        workflow: def.name.clone(),
        version: def.version.clone(),
        definition_hash: def.hash.clone(),
        status: Status::Running,
        schedule_id: req.schedule_id.clone(),
        created_at_ms: now,
        updated_at_ms: now,
        closed_at_ms: None,
        last_seq: 0,
        failed_step: None,
        error_code: None,
    };
    let hot = Hot { def, state: State::default(), root_id, epoch: Some(1), timer_at: Some(None) };
    Ok(Begin::New(Box::new((hot, created, row))))
}
