//! `DeleteExecution`: an operator deletes one finished execution (and its descendants) now,
//! instead of waiting for retention. The store refuses a tree with an open execution in one
//! transaction, so a running execution never loses rows; a repeated call finds nothing and
//! answers `EXECUTION_NOT_FOUND`.

use super::reads::scoped;
use crate::error::{err, no_execution, ApiResult};
use crate::scope::Scope;
use crate::Shared;
use orbit_api::v1::{DeleteExecutionRequest, DeleteExecutionResponse};
use orbit_auth::Action;
use orbit_server_kit::ErrorCode;
use orbit_store::DeleteOutcome;

/// At most this many open ids are named in a refusal (the message stays small).
const NAMED: usize = 5;

pub(crate) async fn delete(
    shared: &Shared,
    scope: &Scope,
    req: DeleteExecutionRequest,
) -> ApiResult<DeleteExecutionResponse> {
    let id = orbit_server_kit::validate::id("execution_id", &req.execution_id)?;
    // Only a pattern-restricted caller pays for reading the row first (the delete itself
    // needs no read). The descendants go with the execution that started them, whatever
    // their workflows: the tree is the addressed execution's.
    if scope.is_restricted() {
        scoped(shared, scope, Action::Cancel, id).await?;
    }
    match shared.store.delete_execution(id).await? {
        DeleteOutcome::Deleted(rows) => {
            tracing::info!(execution_id = %id, trace_id = %orbit_telemetry::trace_id(id), executions = rows.executions, events = rows.events, "execution deleted");
            Ok(DeleteExecutionResponse { executions: rows.executions, events: rows.events })
        }
        DeleteOutcome::NotFound => Err(no_execution(id)),
        DeleteOutcome::NotFinished(open) => {
            let mut named = open.iter().take(NAMED).map(|o| format!("`{o}`")).collect::<Vec<_>>();
            if open.len() > NAMED {
                named.push(format!("and {} more", open.len() - NAMED));
            }
            Err(err(
                ErrorCode::ExecutionNotFinished,
                format!(
                    "execution `{id}` cannot be deleted while it or a descendant runs (open: {}); \
                     cancel it and delete it once it has finished",
                    named.join(", ")
                ),
            ))
        }
    }
}
