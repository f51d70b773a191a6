//! Update-with-start (`UpdateExecutionRequest.start`): start the execution when it does not
//! exist, so the update that follows has something to apply to.
//!
//! A start writes `WorkflowCreated` before the update can be checked by the owner, so the
//! update is checked here first, purely (`orbit_engine::accept` over the state the new
//! execution would begin with): a refused update (unknown, args contract, validator) starts
//! nothing. The start itself is idempotent by execution id and the update by `request_id`,
//! so a retry after a failure between the two (a lost frontend, an owner that did not
//! answer) starts nothing twice and applies the update once: the pair is atomic for a
//! caller that retries until it gets an answer, which is what the API asks of callers.

use super::commands;
use super::definitions::not_found;
use crate::error::{err, invalid, store, ApiResult};
use crate::scope::Scope;
use crate::Shared;
use orbit_api::v1::StartExecutionRequest;
use orbit_auth::Action;
use orbit_engine::{Command, HistoryEvent, Origin, State};
use orbit_server_kit::ErrorCode;
use orbit_store::InboxMessage;

/// Starts execution `id` with `start` unless it exists; returns whether this call created
/// it. An existing execution of another workflow answers `EXECUTION_EXISTS`.
pub(crate) async fn ensure_started(
    shared: &Shared,
    scope: &Scope,
    id: &str,
    start: StartExecutionRequest,
    update: &InboxMessage,
) -> ApiResult<bool> {
    if !start.execution_id.is_empty() && start.execution_id != id {
        return Err(invalid(
            "start.execution_id",
            format!("must be empty or the update's execution_id `{id}`"),
        ));
    }
    let workflow = crate::validate::name("start.workflow", &start.workflow)?;
    scope.workflow(Action::Start, workflow)?;
    if let Some(row) = shared.store.get_execution(id).await.map_err(store)? {
        if row.workflow != workflow {
            return Err(err(
                ErrorCode::ExecutionExists,
                format!(
                    "execution id `{id}` is already in use by an execution of another \
                     workflow; start with another id"
                ),
            ));
        }
        return Ok(false);
    }
    precheck(shared, id, &start, update).await?;
    let request = StartExecutionRequest { execution_id: id.to_string(), ..start };
    Ok(commands::start(shared, scope, request).await?.created)
}

/// Refuses the update as the owner would, against the execution about to be started.
async fn precheck(
    shared: &Shared,
    id: &str,
    start: &StartExecutionRequest,
    update: &InboxMessage,
) -> ApiResult<()> {
    let InboxMessage::Update(u) = update else { return Ok(()) };
    let version = crate::validate::optional("start.version", &start.version)?;
    let row = shared.store.get_definition(&start.workflow, version).await.map_err(store)?;
    let Some(row) = row else { return Err(not_found(&start.workflow, version)) };
    let def = shared
        .defs
        .pinned(shared.store.as_ref(), &row.name, &row.version, &row.definition_hash)
        .await?;
    let input = crate::validate::payload(
        "start.input",
        start.input.clone(),
        shared.config.max_payload_bytes,
    )?;
    let limits = orbit_definition::Limits::default();
    let refused = |e: orbit_engine::CommandError| err(e.code, e.message);
    let created = orbit_engine::start(&def, id, input, None, None, 1, &limits).map_err(refused)?;
    let first = HistoryEvent { seq: 1, timestamp_ms: 0, origin: Origin::Recorded, event: created };
    let state = State::from_history([&first]);
    let command = Command::Update { name: u.name.clone(), args: u.args.clone(), update_id: None };
    orbit_engine::accept(&def, &state, command, 0, &limits).map_err(refused)?;
    Ok(())
}
