//! Update-with-start (`UpdateExecutionRequest.start`): start the execution when it does not
//! exist and apply the update to it, atomically.
//!
//! The update travels with the start to the owner (`StartExecutionRequest.update`), which
//! checks it against the new execution's first state and records `WorkflowCreated`,
//! `UpdateAccepted` (and `UpdateCompleted` for a handler without steps) in the one commit
//! that creates the execution; a refused update creates nothing and fails the start with
//! its code. No process can die between the start and the update's acceptance.
//!
//! When the execution already exists (of the same workflow; another workflow's answers
//! `EXECUTION_EXISTS`), the owner records nothing and the update goes through the inbox
//! like any other. A retry of an update-with-start whose first call created the execution
//! (its answer lost) is such a case: the owner answers it with the first acceptance (the
//! engine records an `update_id` once per run), so it creates nothing and gets the first
//! reply.

use super::commands;
use crate::error::ApiResult;
use crate::scope::Scope;
use crate::Shared;
use orbit_api::internal::v1 as internal;
use orbit_api::v1::StartExecutionRequest;
use orbit_auth::Action;
use orbit_server_kit::payload::json_to_proto;
use orbit_server_kit::validate::{self as rules, invalid};
use orbit_store::inbox::Update;

/// What the start did.
pub(crate) enum Started {
    /// This call created the execution with the update accepted at this seq of run 1.
    WithUpdate(u64),
    /// The execution exists (or an owner that predates update-with-start created it
    /// without the update): the update still has to be sent.
    Without { created: bool },
}

/// Starts execution `id` with `start` and `update` unless it exists.
pub(crate) async fn start(
    shared: &Shared,
    scope: &Scope,
    id: &str,
    start: StartExecutionRequest,
    update: &Update,
) -> ApiResult<Started> {
    if !start.execution_id.is_empty() && start.execution_id != id {
        return Err(invalid(
            "start.execution_id",
            format!("must be empty or the update's execution_id `{id}`"),
        )
        .into());
    }
    let workflow = rules::id("start.workflow", &start.workflow)?;
    // The update is applied by the start itself: the caller must be allowed both.
    scope.workflow(Action::Update, workflow)?;
    let initial = internal::InitialUpdate {
        name: update.name.clone(),
        update_id: update.request_id.clone().unwrap_or_default(),
        args: Some(json_to_proto(update.args.clone())),
    };
    let request = StartExecutionRequest { execution_id: id.to_string(), ..start };
    let started = commands::start_with(shared, scope, request, Some(initial)).await?;
    Ok(match (started.created, started.update_seq) {
        (true, seq) if seq > 0 => Started::WithUpdate(seq),
        (created, _) => Started::Without { created },
    })
}
