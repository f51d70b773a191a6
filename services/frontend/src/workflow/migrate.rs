//! `MigrateExecution`: move a running execution to another version of its workflow, with
//! the step-graph diff checked against its state (`orbit_engine::migrate`).
//!
//! A dry run is answered here: the execution's current run is folded from its history and
//! the engine's plan computed against it, nothing written. A migration travels through the
//! inbox like `terminate` (an operator action the owner applies even to a parked
//! execution), so the owner — the only writer — checks the diff again against the state it
//! holds and records `DefinitionMigrated`, or refuses with `MIGRATION_UNSAFE`. The caller
//! needs the `update` permission on the workflow.

use super::commands::send;
use super::reads::{load_run, scoped};
use crate::error::{err, ApiResult, FrontendError};
use crate::scope::Scope;
use crate::Shared;
use orbit_api::v1::{MigrateExecutionRequest, MigrateExecutionResponse, MigrationChange};
use orbit_auth::Action;
use orbit_server_kit::payload::check_limits;
use orbit_server_kit::validate as rules;
use orbit_server_kit::ErrorCode;
use orbit_store::inbox::Migrate;
use orbit_store::{DefinitionRow, ExecutionRow, InboxMessage, InboxReply};
use serde_json::{json, Value};

pub(crate) async fn migrate(
    shared: &Shared,
    scope: &Scope,
    req: MigrateExecutionRequest,
) -> ApiResult<MigrateExecutionResponse> {
    let id = rules::id("execution_id", &req.execution_id)?;
    let to_version = rules::id("to_version", &req.to_version)?;
    let request_id = rules::optional("request_id", &req.request_id)?;
    check_limits("reason", &json!(req.reason), shared.config.max_payload_bytes)?;
    if req.dry_run {
        return dry_run(shared, scope, id, to_version).await;
    }
    let row = scoped(shared, scope, Action::Update, id).await?;
    open(shared, &row, to_version).await?;
    let message = InboxMessage::Migrate(Migrate {
        to_version: to_version.to_string(),
        reason: req.reason,
        request_id: request_id.map(str::to_string),
    });
    match send(shared, id, &message).await? {
        Some(InboxReply::Migrated { seq, run, plan, .. }) => response(&plan, seq > 0, seq, run),
        other => Err(err(
            ErrorCode::StorageError,
            format!("unexpected owner reply to a migration of `{id}`: {other:?}"),
        )),
    }
}

/// The dry run of migrating execution `id` to `to_version`: the engine's plan against its
/// current run, nothing written (also what a batch's dry run answers per execution).
pub(super) async fn dry_run(
    shared: &Shared,
    scope: &Scope,
    id: &str,
    to_version: &str,
) -> ApiResult<MigrateExecutionResponse> {
    let row = scoped(shared, scope, Action::Update, id).await?;
    let target = open(shared, &row, to_version).await?;
    let loaded = load_run(shared, scope, Action::Update, id, 0).await?;
    let to = shared
        .defs
        .pinned(shared.store.as_ref(), &row.workflow, to_version, &target.definition_hash)
        .await?;
    let plan = orbit_engine::migrate::plan(&loaded.def, &to, &loaded.state);
    let plan = serde_json::to_value(&plan).unwrap_or(Value::Null);
    response(&plan, false, 0, loaded.run)
}

/// The target definition of migrating the open execution `row`: `EXECUTION_FINISHED` for
/// a closed one, `WORKFLOW_NOT_FOUND` for a version that is not registered.
async fn open(shared: &Shared, row: &ExecutionRow, to_version: &str) -> ApiResult<DefinitionRow> {
    let id = &row.execution_id;
    if row.status.is_closed() {
        return Err(err(
            ErrorCode::ExecutionFinished,
            format!(
                "execution `{id}` has already ended {}: nothing to migrate",
                row.status.as_str()
            ),
        ));
    }
    match shared.store.get_definition(&row.workflow, Some(to_version)).await? {
        Some(target) => Ok(target),
        None => Err(err(
            ErrorCode::WorkflowNotFound,
            format!("no workflow `{}` version {to_version} to migrate to", row.workflow),
        )),
    }
}

/// The response from the engine's plan (`orbit_engine::migrate::Plan` as JSON, as the
/// owner's reply stores it).
fn response(
    plan: &Value,
    migrated: bool,
    seq: u64,
    run: u32,
) -> ApiResult<MigrateExecutionResponse> {
    let text = |v: &Value| v.as_str().unwrap_or_default().to_string();
    if !plan["changes"].is_array() {
        return Err(malformed(plan));
    }
    let changes = changes(plan);
    let renames = plan["renames"]
        .as_object()
        .map(|m| m.iter().map(|(k, v)| (k.clone(), text(v))).collect())
        .unwrap_or_default();
    let cancelled =
        plan["cancel"].as_array().map(|a| a.iter().map(text).collect()).unwrap_or_default();
    Ok(MigrateExecutionResponse {
        from_version: text(&plan["from_version"]),
        to_version: text(&plan["to_version"]),
        safe: changes.iter().all(|c| c.safe),
        changes,
        migrated,
        seq,
        run,
        renames,
        cancelled,
    })
}

/// The changes of an engine migration plan (as JSON).
pub(crate) fn changes(plan: &Value) -> Vec<MigrationChange> {
    let text = |v: &Value| v.as_str().unwrap_or_default().to_string();
    plan["changes"]
        .as_array()
        .map(|a| {
            a.iter()
                .map(|c| MigrationChange {
                    kind: text(&c["kind"]),
                    step: text(&c["step"]),
                    detail: text(&c["detail"]),
                    safe: c["safe"].as_bool().unwrap_or(false),
                    reason: text(&c["reason"]),
                })
                .collect()
        })
        .unwrap_or_default()
}

fn malformed(plan: &Value) -> FrontendError {
    err(ErrorCode::StorageError, format!("a migration plan without changes: {plan}"))
}
