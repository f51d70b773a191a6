//! Commands for an execution's owner: start (through `OwnerService.StartExecution`) and
//! signal / cancel (through the inbox); updates are in [`super::update`].
//!
//! Signals, cancels and operator actions go through [`reply::send`] (subscribe, write the
//! typed inbox entry, wake the owner, wait for its [`InboxReply`]); [`send`] turns the
//! reply into the caller's answer.

use super::dedupe;
use super::definitions::not_found;
use super::reads::scoped;
use crate::defs::Resolved;
use crate::error::{err, ApiResult, FrontendError};
use crate::reply::{self, Waited};
use crate::scope::Scope;
use crate::{validate, Shared};
use orbit_api::internal::v1 as internal;
use orbit_api::v1::{
    CancelExecutionRequest, CancelExecutionResponse, SignalExecutionRequest,
    SignalExecutionResponse, StartExecutionRequest, StartExecutionResponse,
};
use orbit_auth::Action;
use orbit_server_kit::payload::check_limits;
use orbit_server_kit::validate as rules;
use orbit_server_kit::ErrorCode;
use orbit_store::inbox::{Cancel, Signal};
use orbit_store::{InboxMessage, InboxReply};
use serde_json::json;

pub(crate) async fn start(
    shared: &Shared,
    scope: &Scope,
    req: StartExecutionRequest,
) -> ApiResult<StartExecutionResponse> {
    let started = start_with(shared, scope, req, None).await?;
    Ok(StartExecutionResponse {
        execution_id: started.execution_id,
        run: started.run,
        created: started.created,
        version: started.version,
        definition_hash: started.definition_hash,
    })
}

/// Validates a start and sends it to the owner, with the update of an update-with-start
/// (`update`, recorded in the commit that creates the execution); the owner's answer.
pub(crate) async fn start_with(
    shared: &Shared,
    scope: &Scope,
    req: StartExecutionRequest,
    update: Option<internal::InitialUpdate>,
) -> ApiResult<internal::StartExecutionResponse> {
    let workflow = rules::id("workflow", &req.workflow)?;
    let version = rules::optional("version", &req.version)?;
    // Before the definition is read: a forbidden name is refused whether registered or not.
    scope.workflow(Action::Start, workflow)?;
    let execution_id = match req.execution_id.as_str() {
        "" => validate::random_hex(16)?,
        given => rules::new_execution_id("execution_id", given)?.to_string(),
    };
    let mut input = validate::payload("input", req.input, shared.config.max_payload_bytes)?;
    let memo = super::search::memo(req.memo, shared.config.max_payload_bytes)?;
    if req.priority > 5 {
        return Err(
            rules::invalid("priority", "must be 1 (first) to 5 (last), or 0 for unset").into()
        );
    }
    // Versions and hashes only (no documents): the owner reads the definition it pins. From
    // the frontend's cached list when it has the version (see `defs`): the latest of it
    // goes with the list's length, which the owner checks.
    let resolved = shared.defs.resolve(&*shared.store, workflow, version).await?;
    let Some(Resolved { row: mut def, mut versions_seen }) = resolved else {
        return Err(not_found(workflow, version));
    };
    // Debounce and singleton starts; a caller's execution id bypasses them. The parsed
    // definition is cached by hash: a workflow without `dedupe:` pays no statement.
    if req.execution_id.is_empty() && update.is_none() {
        let store = &*shared.store;
        let mut pinned =
            shared.defs.pinned(store, workflow, &def.version, &def.definition_hash).await?;
        if versions_seen.is_some() && pinned.dedupe.is_some() {
            // A debounced start pins its version here, before any owner: read the latest.
            let read = shared.defs.read(store, workflow, version).await?;
            let Some(fresh) = read else { return Err(not_found(workflow, version)) };
            (def, versions_seen) = (fresh.row, None);
            pinned =
                shared.defs.pinned(store, workflow, &def.version, &def.definition_hash).await?;
        }
        if let Some(d) = &pinned.dedupe {
            let start = dedupe::Start {
                execution_id: &execution_id,
                input,
                memo: memo.as_ref(),
                priority: req.priority,
            };
            match dedupe::start(shared, &pinned, d, &def, start).await? {
                dedupe::Deduped::Create(applied) => input = applied,
                dedupe::Deduped::Answered(answer) => return Ok(answer),
            }
        }
    }
    let cached_latest = versions_seen.map(|_| def.version.clone());
    let request = internal::StartExecutionRequest {
        memo,
        execution_id,
        workflow: workflow.to_string(),
        version: def.version,
        definition_hash: def.definition_hash,
        input: Some(orbit_server_kit::payload::json_to_proto(input)),
        parent_id: String::new(),
        root_id: String::new(),
        schedule_id: String::new(),
        trace_context: None,
        update,
        fork: None,
        priority: req.priority,
        versions_seen: versions_seen.unwrap_or(0),
    };
    // The owner validates the input and is idempotent by id; its errors already carry
    // Orbit codes, so they pass through unchanged. An id taken by another workflow's
    // execution is refused there (`EXECUTION_EXISTS`, for every caller): a start that
    // answers with an existing execution names the workflow the caller was allowed to start.
    let started = shared.owner.start_execution(tonic::Request::new(request)).await;
    let started = started.map_err(FrontendError::Owner)?.into_inner();
    // The owner started a newer version than the cached latest (or an existing execution
    // of another): the next start reads the list again.
    if cached_latest.is_some_and(|v| v != started.version) {
        shared.defs.forget(workflow);
    }
    Ok(started)
}

pub(crate) async fn signal(
    shared: &Shared,
    scope: &Scope,
    req: SignalExecutionRequest,
) -> ApiResult<SignalExecutionResponse> {
    let id = rules::id("execution_id", &req.execution_id)?;
    let name = rules::id("name", &req.name)?;
    let request_id = rules::optional("request_id", &req.request_id)?;
    let payload = validate::payload("payload", req.payload, shared.config.max_payload_bytes)?;
    let row = scoped(shared, scope, Action::Signal, id).await?;
    let message = InboxMessage::Signal(Signal {
        name: name.to_string(),
        payload,
        request_id: request_id.map(str::to_string),
    });
    Ok(match send(shared, id, &message).await? {
        Some(InboxReply::Applied { seq, run, .. }) => SignalExecutionResponse { seq, run },
        _ => SignalExecutionResponse { seq: 0, run: row.run },
    })
}

pub(crate) async fn cancel(
    shared: &Shared,
    scope: &Scope,
    req: CancelExecutionRequest,
) -> ApiResult<CancelExecutionResponse> {
    let id = rules::id("execution_id", &req.execution_id)?;
    let request_id = rules::optional("request_id", &req.request_id)?;
    let reason = json!(req.reason);
    check_limits("reason", &reason, shared.config.max_payload_bytes)?;
    scoped(shared, scope, Action::Cancel, id).await?;
    let message = InboxMessage::Cancel(Cancel {
        reason: req.reason,
        request_id: request_id.map(str::to_string),
    });
    Ok(match send(shared, id, &message).await? {
        Some(InboxReply::Applied { seq, .. }) => CancelExecutionResponse { seq },
        _ => CancelExecutionResponse { seq: 0 },
    })
}

/// Sends `message` through the one send-and-wait path and answers with the owner's reply:
/// a refusal becomes its error, no reply in time becomes `UNAVAILABLE` (the entry stays
/// queued and will be applied). `None`: applied without a reply.
pub(crate) async fn send(
    shared: &Shared,
    id: &str,
    message: &InboxMessage,
) -> ApiResult<Option<InboxReply>> {
    match reply::send(shared, id, message).await? {
        (_, Waited::Done(Some(InboxReply::Refused { code, message }))) => Err(err(code, message)),
        (_, Waited::Done(reply)) => Ok(reply),
        (seq, Waited::Pending) => Err(err(
            ErrorCode::Unavailable,
            format!(
                "the execution's owner has not applied the command (inbox entry {seq}) within \
                 {} ms; it stays queued and will be applied",
                shared.config.reply_timeout_ms
            ),
        )),
    }
}
