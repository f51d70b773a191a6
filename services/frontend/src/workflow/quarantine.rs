//! Operator actions on executions parked by the poison quarantine: resume and terminate.
//!
//! Both travel through the inbox like a cancel, so the owner — the only writer — applies
//! them under its epoch; the owner's pass lets `resume` and `terminate` entries through for
//! a parked execution while it skips the others. The checks here answer the common
//! mistakes without writing anything; the owner checks again with the state it holds.

use super::commands::send;
use super::reads::{load_run, scoped};
use crate::error::{err, ApiResult, FrontendError};
use crate::scope::Scope;
use crate::Shared;
use orbit_api::v1::{
    ResumeExecutionRequest, ResumeExecutionResponse, TerminateExecutionRequest,
    TerminateExecutionResponse,
};
use orbit_auth::Action;
use orbit_engine::Status;
use orbit_server_kit::payload::check_limits;
use orbit_server_kit::validate as rules;
use orbit_server_kit::ErrorCode;
use orbit_store::inbox::{Resume, Terminate};
use orbit_store::{InboxMessage, InboxReply};
use serde_json::json;

/// The error code of a terminated execution's `WorkflowFailed`.
const TERMINATED: &str = "TERMINATED";

fn finished(id: &str, status: Status) -> FrontendError {
    err(
        ErrorCode::ExecutionFinished,
        format!("execution `{id}` has already ended {}", status.as_str()),
    )
}

/// A reply of the wrong variant for an operator action: the owner and this frontend
/// disagree about the protocol.
fn unexpected(id: &str, reply: Option<InboxReply>) -> FrontendError {
    err(ErrorCode::StorageError, format!("unexpected owner reply for `{id}`: {reply:?}"))
}

pub(crate) async fn resume(
    shared: &Shared,
    scope: &Scope,
    req: ResumeExecutionRequest,
) -> ApiResult<ResumeExecutionResponse> {
    let id = rules::id("execution_id", &req.execution_id)?;
    let row = scoped(shared, scope, Action::Update, id).await?;
    if row.status.is_closed() {
        return Err(finished(id, row.status));
    }
    if row.status != Status::Suspended {
        return Err(err(
            ErrorCode::ExecutionNotSuspended,
            format!(
                "execution `{id}` is {}, not SUSPENDED: nothing to resume",
                row.status.as_str()
            ),
        ));
    }
    match send(shared, id, &InboxMessage::Resume(Resume {})).await? {
        Some(InboxReply::Resumed { entry_seq, failures }) => {
            Ok(ResumeExecutionResponse { entry_seq, failures })
        }
        other => Err(unexpected(id, other)),
    }
}

pub(crate) async fn terminate(
    shared: &Shared,
    scope: &Scope,
    req: TerminateExecutionRequest,
) -> ApiResult<TerminateExecutionResponse> {
    let id = rules::id("execution_id", &req.execution_id)?;
    let reason = json!(req.reason);
    check_limits("reason", &reason, shared.config.max_payload_bytes)?;
    let row = scoped(shared, scope, Action::Cancel, id).await?;
    if row.status.is_closed() {
        // Idempotent: a terminated execution answers as the first call did.
        let loaded = load_run(shared, scope, Action::Cancel, id, 0).await?;
        if loaded.state.error.as_ref().is_some_and(|e| e.code == TERMINATED) {
            return Ok(TerminateExecutionResponse {
                seq: loaded.state.last_seq,
                terminated: false,
            });
        }
        return Err(finished(id, row.status));
    }
    let message = InboxMessage::Terminate(Terminate { reason: req.reason, request_id: None });
    match send(shared, id, &message).await? {
        Some(InboxReply::Terminated { seq, terminated }) => {
            Ok(TerminateExecutionResponse { seq, terminated })
        }
        other => Err(unexpected(id, other)),
    }
}
