//! Commands for an execution's owner: start (through `OwnerService.StartExecution`) and
//! signal / cancel (through the inbox).
//!
//! Inbox protocol: subscribe to the execution's changes, write the entry, call
//! `OwnerService.Wake` (in one process it runs the owner's pass; split, the insert's
//! notification already woke the owner), then wait — on change notifications, bounded by
//! `reply_timeout_ms` — until the owner has marked the entry done with its reply:
//! `{"ok": true, "seq": <history seq>, "run": <run>}` or `{"error": {"code", "message"}}`.

use super::definitions::not_found;
use super::reads::execution;
use crate::error::{err, from_reply, store, ApiResult};
use crate::{reply, validate, Shared};
use orbit_api::internal::v1 as internal;
use orbit_api::v1::{
    CancelExecutionRequest, CancelExecutionResponse, SignalExecutionRequest,
    SignalExecutionResponse, StartExecutionRequest, StartExecutionResponse, UpdateExecutionRequest,
    UpdateExecutionResponse,
};
use orbit_server_kit::ErrorCode;
use serde_json::{json, Value};
use std::time::Duration;

pub(crate) async fn start(
    shared: &Shared,
    req: StartExecutionRequest,
) -> ApiResult<StartExecutionResponse> {
    let workflow = validate::name("workflow", &req.workflow)?;
    let version = validate::optional("version", &req.version)?;
    let execution_id = match req.execution_id.as_str() {
        "" => validate::random_hex(16)?,
        given => validate::new_execution_id(given)?.to_string(),
    };
    let input = validate::payload("input", req.input, shared.config.max_payload_bytes)?;
    let def = shared.store.get_definition(workflow, version).await.map_err(store)?;
    let Some(def) = def else {
        return Err(not_found(workflow, version));
    };
    let request = internal::StartExecutionRequest {
        execution_id,
        workflow: def.name,
        version: def.version,
        definition_hash: def.definition_hash,
        input: Some(orbit_server_kit::payload::json_to_proto(input)),
        parent_id: String::new(),
        root_id: String::new(),
        schedule_id: String::new(),
        trace_context: None,
    };
    // The owner validates the input and is idempotent by id; its errors already carry
    // Orbit codes, so they pass through unchanged.
    let started = shared.owner.start_execution(tonic::Request::new(request)).await?.into_inner();
    Ok(StartExecutionResponse {
        execution_id: started.execution_id,
        run: started.run,
        created: started.created,
        version: started.version,
        definition_hash: started.definition_hash,
    })
}

pub(crate) async fn signal(
    shared: &Shared,
    req: SignalExecutionRequest,
) -> ApiResult<SignalExecutionResponse> {
    let id = validate::id("execution_id", &req.execution_id)?;
    let name = validate::name("name", &req.name)?;
    let request_id = validate::optional("request_id", &req.request_id)?;
    let payload = validate::payload("payload", req.payload, shared.config.max_payload_bytes)?;
    let row = execution(shared, id).await?;
    let mut command = json!({"name": name, "payload": payload});
    if let Some(request_id) = request_id {
        command["request_id"] = json!(request_id);
    }
    let reply = send(shared, id, "signal", &command).await?;
    Ok(SignalExecutionResponse {
        seq: reply.get("seq").and_then(Value::as_u64).unwrap_or(0),
        run: reply_run(&reply).unwrap_or(row.run),
    })
}

pub(crate) async fn cancel(
    shared: &Shared,
    req: CancelExecutionRequest,
) -> ApiResult<CancelExecutionResponse> {
    let id = validate::id("execution_id", &req.execution_id)?;
    let request_id = validate::optional("request_id", &req.request_id)?;
    let reason = json!(req.reason);
    validate::check_size("reason", &reason, shared.config.max_payload_bytes)?;
    execution(shared, id).await?;
    let mut command = json!({"reason": reason});
    if let Some(request_id) = request_id {
        command["request_id"] = json!(request_id);
    }
    let reply = send(shared, id, "cancel", &command).await?;
    Ok(CancelExecutionResponse { seq: reply.get("seq").and_then(Value::as_u64).unwrap_or(0) })
}

/// Updates need update handlers in definitions, which do not exist yet: after validating
/// the request this answers gRPC `UNIMPLEMENTED`, as the proto documents.
pub(crate) async fn update(
    shared: &Shared,
    req: UpdateExecutionRequest,
) -> ApiResult<UpdateExecutionResponse> {
    let id = validate::id("execution_id", &req.execution_id)?;
    validate::name("name", &req.name)?;
    execution(shared, id).await?;
    Err(tonic::Status::unimplemented(
        "UpdateExecution is not supported yet: workflow definitions cannot declare update \
         handlers; use SignalExecution and QueryExecution instead",
    ))
}

fn reply_run(reply: &Value) -> Option<u32> {
    reply.get("run").and_then(Value::as_u64).and_then(|r| u32::try_from(r).ok())
}

/// Writes an inbox entry, wakes the owner and waits for its reply; returns the `ok` reply.
pub(crate) async fn send(
    shared: &Shared,
    id: &str,
    kind: &str,
    payload: &Value,
) -> ApiResult<Value> {
    let sub = shared.changes.subscribe(id);
    let seq = shared.store.enqueue_inbox(id, kind, None, payload).await.map_err(store)?;
    let wake = internal::OwnerServiceWakeRequest { execution_ids: vec![id.to_string()] };
    shared.owner.wake(tonic::Request::new(wake)).await?;
    let timeout = Duration::from_millis(shared.config.reply_timeout_ms);
    match reply::wait(shared, &sub, seq, timeout, true).await? {
        Some(Some(reply)) if reply.get("error").is_some() => Err(from_reply(&reply["error"])),
        Some(Some(reply)) => Ok(reply),
        // Applied without a reply: recorded, nothing to report.
        Some(None) => Ok(Value::Null),
        None => Err(err(
            ErrorCode::Unavailable,
            format!(
                "the execution's owner has not applied the command (inbox entry {seq}) within \
                 {} ms; it stays queued and will be applied",
                shared.config.reply_timeout_ms
            ),
        )),
    }
}
