//! Batches: `StartBatch`, `DescribeBatch`, `ListBatches`, `ListBatchItems`, `CancelBatch`.
//!
//! The frontend only writes and reads the `batches` rows; a scheduler runs them
//! (`orbit_scheduler`'s batch runner). A start checks what it can before anything is
//! written — the query, the caller's permission on a named workflow, the target version
//! registered — and records a restricted caller's workflow patterns in the spec: the job
//! then runs with what was checked here, and its selection (and the dry run's) never
//! reaches an execution of a workflow the caller may not act on. A dry run writes
//! nothing: it answers, for the first [`DRY_RUN_LIMIT`] selected executions, what
//! `MigrateExecution`'s (or `ResetExecution`'s) dry run answers for each, and for the
//! other actions whether the execution is open (closed, for `delete`). A batch of a
//! workflow outside a restricted caller's patterns is answered as missing, like an
//! execution; so is one selected by a query alone that was started under other patterns.

use super::batch_wire::{batch, item, spec_of};
use super::{migrate, reset};
use crate::error::{err, no_execution, ApiResult, FrontendError};
use crate::scope::Scope;
use crate::validate::{page_size, random_hex};
use crate::Shared;
use orbit_api::v1::reset_execution_request::To;
use orbit_api::v1::{
    BatchDryRunItem, CancelBatchRequest, CancelBatchResponse, DescribeBatchRequest,
    DescribeBatchResponse, ListBatchItemsRequest, ListBatchItemsResponse, ListBatchesRequest,
    ListBatchesResponse, ResetExecutionRequest, StartBatchRequest, StartBatchResponse,
};
use orbit_auth::Action;
use orbit_server_kit::payload::check_limits;
use orbit_server_kit::validate as rules;
use orbit_server_kit::ErrorCode;
use orbit_store::{BatchAction, BatchRow, BatchSpec, ItemOutcome};
use serde_json::json;

/// The most executions a dry run answers for (the total is counted in full).
pub(crate) const DRY_RUN_LIMIT: u32 = 1000;

/// Page sizes of the lists: the default and the largest.
const PAGE_DEFAULT: u32 = 100;
const PAGE_MAX: u32 = 1000;

pub(crate) async fn start(
    shared: &Shared,
    scope: &Scope,
    req: StartBatchRequest,
) -> ApiResult<StartBatchResponse> {
    let text = req.selector.as_ref().map_or("", |s| s.query.as_str());
    let catalog = super::search::catalog_for(shared, text).await?;
    let mut spec = spec_of(&req, &catalog, shared.config.max_payload_bytes)?;
    let request_id = rules::optional("request_id", &req.request_id)?;
    check_limits("reason", &json!(req.reason), shared.config.max_payload_bytes)?;
    if let BatchAction::Cancel { reason } | BatchAction::Terminate { reason } = &spec.action {
        check_limits("action.reason", &json!(reason), shared.config.max_payload_bytes)?;
    }
    // The job acts with the caller's patterns: recorded, and ANDed into every selection.
    spec.selector.workflows = scope.workflow_patterns();
    let workflow = &spec.selector.workflow;
    if !workflow.is_empty() {
        scope.workflow(permission(&spec.action), workflow)?;
    }
    let to_version = match &spec.action {
        BatchAction::Migrate { to_version } => Some(to_version),
        BatchAction::Reset { to_version, .. } => to_version.as_ref(),
        _ => None,
    };
    if let (Some(to_version), false) = (to_version, workflow.is_empty()) {
        if shared.store.get_definition(workflow, Some(to_version)).await?.is_none() {
            return Err(err(
                ErrorCode::WorkflowNotFound,
                format!("no workflow `{workflow}` version {to_version} to go on with"),
            ));
        }
    }
    let total = shared.store.count_batch_targets(&spec.selector).await?;
    if req.dry_run {
        return dry_run(shared, scope, &spec, total).await;
    }
    let now = shared.config.clock.now();
    let id = format!("batch-{now:013}-{}", random_hex(4)?);
    let mut row = BatchRow::new(&id, &spec, total, now);
    row.request_id = request_id.map(str::to_string);
    let (row, created) = shared.store.create_batch(&row).await?;
    if created {
        tracing::info!(batch_id = %row.batch_id, workflow = %workflow, action = spec.action.name(), total, rate = spec.rate_per_second, reason = %spec.reason, "started a batch");
    }
    Ok(StartBatchResponse {
        batch_id: row.batch_id.clone(),
        batch: Some(batch(&row)),
        created,
        ..StartBatchResponse::default()
    })
}

/// The permission an action needs on each execution's workflow (as the single-execution
/// RPC asks it).
fn permission(action: &BatchAction) -> Action {
    match action {
        BatchAction::Migrate { .. } | BatchAction::Reset { .. } => Action::Update,
        BatchAction::Cancel { .. } | BatchAction::Terminate { .. } | BatchAction::Delete {} => {
            Action::Cancel
        }
        BatchAction::Signal { .. } => Action::Signal,
    }
}

/// A dry run's answer for a cancel, terminate, signal or delete: applied to an open
/// execution (a closed one for delete), or the code the batch would record.
async fn closed_dry_run(
    shared: &Shared,
    id: &str,
    action: &BatchAction,
) -> ApiResult<BatchDryRunItem> {
    let Some(row) = shared.store.get_execution(id).await? else {
        return Err(no_execution(id));
    };
    let closed = row.status.is_closed();
    let refusal = match (action, closed) {
        (BatchAction::Delete {}, false) => {
            Some((ErrorCode::ExecutionNotFinished, "the execution has not finished"))
        }
        (BatchAction::Delete {}, true) | (_, false) => None,
        (_, true) => Some((ErrorCode::ExecutionFinished, "the execution has finished")),
    };
    Ok(BatchDryRunItem {
        execution_id: id.to_string(),
        safe: refusal.is_none(),
        from_version: row.version,
        code: refusal.map(|(c, _)| c.as_str().to_string()).unwrap_or_default(),
        message: refusal.map(|(_, m)| m.to_string()).unwrap_or_default(),
        ..BatchDryRunItem::default()
    })
}

/// What the batch would do to each of the first selected executions.
async fn dry_run(
    shared: &Shared,
    scope: &Scope,
    spec: &BatchSpec,
    total: u64,
) -> ApiResult<StartBatchResponse> {
    let ids = shared.store.batch_targets(&spec.selector, None, DRY_RUN_LIMIT).await?;
    let mut items = Vec::with_capacity(ids.len());
    for id in ids {
        let answer = match &spec.action {
            BatchAction::Migrate { to_version } => {
                migrate::dry_run(shared, scope, &id, to_version).await.map(|plan| BatchDryRunItem {
                    execution_id: id.clone(),
                    safe: plan.safe,
                    from_version: plan.from_version,
                    changes: plan.changes,
                    ..BatchDryRunItem::default()
                })
            }
            BatchAction::Reset { step, drop_signals, to_version } => {
                let request = ResetExecutionRequest {
                    execution_id: id.clone(),
                    to: Some(To::Step(step.clone())),
                    drop_signals: *drop_signals,
                    to_version: to_version.clone().unwrap_or_default(),
                    dry_run: true,
                    ..ResetExecutionRequest::default()
                };
                reset::reset(shared, scope, request).await.map(|r| {
                    let plan = r.plan.unwrap_or_default();
                    BatchDryRunItem {
                        execution_id: id.clone(),
                        safe: plan.safe || plan.changes.is_empty(),
                        from_version: plan.version.clone(),
                        changes: plan.changes.clone(),
                        plan: Some(plan),
                        ..BatchDryRunItem::default()
                    }
                })
            }
            other => closed_dry_run(shared, &id, other).await,
        };
        let item = match answer {
            Ok(item) => item,
            // The store failing is the dry run's failure, not this execution's answer.
            Err(FrontendError::Api(e))
                if !matches!(e.code, ErrorCode::StorageError | ErrorCode::Unavailable) =>
            {
                BatchDryRunItem {
                    execution_id: id,
                    code: e.code.as_str().to_string(),
                    message: e.message,
                    ..BatchDryRunItem::default()
                }
            }
            Err(other) => return Err(other),
        };
        items.push(item);
    }
    Ok(StartBatchResponse { dry_run_items: items, dry_run_total: total, ..Default::default() })
}

/// Whether the caller may see a batch: one of a named workflow when it sees the workflow;
/// one selected by a query alone when nothing restricts the caller, or when the batch was
/// started under exactly the caller's patterns (so it acts on nothing the caller may not).
fn sees(scope: &Scope, row: &BatchRow) -> bool {
    if !row.workflow.is_empty() {
        return scope.sees(&row.workflow);
    }
    let Some(mine) = scope.workflow_patterns() else { return true };
    BatchSpec::from_json(&row.spec).is_ok_and(|s| s.selector.workflows.as_ref() == Some(&mine))
}

/// A batch the caller may see, or `BATCH_NOT_FOUND`.
async fn visible(shared: &Shared, scope: &Scope, id: &str) -> ApiResult<BatchRow> {
    match shared.store.get_batch(id).await? {
        Some(row) if sees(scope, &row) => Ok(row),
        _ => Err(err(ErrorCode::BatchNotFound, format!("no batch `{id}`"))),
    }
}

pub(crate) async fn describe(
    shared: &Shared,
    scope: &Scope,
    req: DescribeBatchRequest,
) -> ApiResult<DescribeBatchResponse> {
    let id = rules::id("batch_id", &req.batch_id)?;
    let row = visible(shared, scope, id).await?;
    Ok(DescribeBatchResponse { batch: Some(batch(&row)) })
}

pub(crate) async fn list(
    shared: &Shared,
    scope: &Scope,
    req: ListBatchesRequest,
) -> ApiResult<ListBatchesResponse> {
    let size = page_size(req.page_size, PAGE_DEFAULT, PAGE_MAX);
    let before = rules::optional("page_token", &req.page_token)?;
    // One more than a page says whether another follows (the token is the last id read,
    // so batches a restricted caller cannot see only make a page shorter).
    let limit = u32::try_from(size + 1).unwrap_or(u32::MAX);
    let rows = shared.store.list_batches(before, limit).await?;
    let next =
        if rows.len() > size { rows.get(size - 1).map(|r| r.batch_id.clone()) } else { None };
    let batches = rows.iter().take(size).filter(|r| sees(scope, r)).map(batch).collect();
    Ok(ListBatchesResponse { batches, next_page_token: next.unwrap_or_default() })
}

pub(crate) async fn items(
    shared: &Shared,
    scope: &Scope,
    req: ListBatchItemsRequest,
) -> ApiResult<ListBatchItemsResponse> {
    let id = rules::id("batch_id", &req.batch_id)?;
    visible(shared, scope, id).await?;
    let size = page_size(req.page_size, PAGE_DEFAULT, PAGE_MAX);
    let after = rules::optional("page_token", &req.page_token)?;
    let only = req.only_failed.then_some(ItemOutcome::Failed);
    let limit = u32::try_from(size + 1).unwrap_or(u32::MAX);
    let mut found = shared.store.list_batch_items(id, after, only, limit).await?;
    let next = if found.len() > size {
        found.truncate(size);
        found.last().map(|i| i.execution_id.clone())
    } else {
        None
    };
    Ok(ListBatchItemsResponse {
        items: found.into_iter().map(item).collect(),
        next_page_token: next.unwrap_or_default(),
    })
}

pub(crate) async fn cancel(
    shared: &Shared,
    scope: &Scope,
    req: CancelBatchRequest,
) -> ApiResult<CancelBatchResponse> {
    let id = rules::id("batch_id", &req.batch_id)?;
    check_limits("reason", &json!(req.reason), shared.config.max_payload_bytes)?;
    let before = visible(shared, scope, id).await?;
    if !before.workflow.is_empty() {
        scope.workflow(Action::Update, &before.workflow)?;
    }
    let now = shared.config.clock.now();
    let Some(row) = shared.store.cancel_batch(id, &req.reason, now).await? else {
        return Err(err(ErrorCode::BatchNotFound, format!("no batch `{id}`")));
    };
    let cancelled = before.state != row.state;
    if cancelled {
        tracing::info!(batch_id = %id, reason = %req.reason, "cancelled a batch");
    }
    Ok(CancelBatchResponse { batch: Some(batch(&row)), cancelled })
}
