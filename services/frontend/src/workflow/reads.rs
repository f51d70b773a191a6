//! Reads answered from the store: describe, query, history, list. Never writes.
//!
//! A run is folded from its history with the same pure code the owner uses, so a read sees
//! exactly the committed state (it may lag the owner's hot state by one commit).

use crate::error::{err, no_execution, ApiResult};
use crate::scope::Scope;
use crate::validate;
use crate::Shared;
use orbit_api::v1::{
    DescribeExecutionRequest, DescribeExecutionResponse, ExecutionInfo, ExecutionStatus,
    GetHistoryRequest, GetHistoryResponse, ListExecutionsRequest, ListExecutionsResponse,
    QueryExecutionRequest, QueryExecutionResponse,
};
use orbit_auth::Action;
use orbit_definition::Definition;
use orbit_engine::{HistoryEvent, State, Status};
use orbit_server_kit::payload::{check_limits, json_to_proto, timestamp_to_ms};
use orbit_server_kit::validate::{self as rules, invalid};
use orbit_server_kit::ErrorCode;
use orbit_store::{ExecutionFilter, ExecutionRow};
use std::sync::Arc;

/// One run of an execution, loaded and folded.
pub(crate) struct LoadedRun {
    pub(crate) row: ExecutionRow,
    pub(crate) run: u32,
    pub(crate) def: Arc<Definition>,
    pub(crate) history: Vec<HistoryEvent>,
    pub(crate) state: State,
}

impl LoadedRun {
    /// The run's summary: the projection for the latest run, folded for older ones.
    pub(crate) fn info(&self) -> ExecutionInfo {
        if self.run == self.row.run {
            orbit_wire::execution_info(&self.row)
        } else {
            let last = self.history.last().map_or(self.state.created_at, |e| e.timestamp_ms);
            orbit_wire::info_from_state(&self.state, &self.row.root_id, last)
        }
    }
}

/// The projection of an execution, or `EXECUTION_NOT_FOUND`.
pub(crate) async fn execution(shared: &Shared, id: &str) -> ApiResult<ExecutionRow> {
    shared.store.get_execution(id).await?.ok_or_else(|| no_execution(id))
}

/// The projection of an execution the caller may address with `action`; one of a workflow
/// outside a restricted caller's patterns is answered as missing (see [`Scope::execution`]).
/// The check reuses the row every handler reads anyway: no extra query.
pub(crate) async fn scoped(
    shared: &Shared,
    scope: &Scope,
    action: Action,
    id: &str,
) -> ApiResult<ExecutionRow> {
    let row = execution(shared, id).await?;
    scope.execution(action, &row)?;
    Ok(row)
}

/// The requested run (0 = latest), or `EXECUTION_NOT_FOUND` for a run that does not exist.
pub(crate) fn resolve_run(row: &ExecutionRow, run: u32) -> ApiResult<u32> {
    match run {
        0 => Ok(row.run),
        r if r <= row.run => Ok(r),
        r => Err(err(
            ErrorCode::ExecutionNotFound,
            format!("execution `{}` has no run {r} (latest is {})", row.execution_id, row.run),
        )),
    }
}

/// Loads and folds one run of an execution `scope` may address with `action`.
pub(crate) async fn load_run(
    shared: &Shared,
    scope: &Scope,
    action: Action,
    id: &str,
    run: u32,
) -> ApiResult<LoadedRun> {
    let row = scoped(shared, scope, action, id).await?;
    let run = resolve_run(&row, run)?;
    let history = shared.store.load_history(id, run).await?;
    let state = State::from_history(&history);
    // A run is pinned to its definition: the one it was created with, or the one its last
    // `DefinitionMigrated` moved it to (the state says which; the projection names the
    // latest run's).
    let (version, hash) = if state.definition_hash.is_empty() {
        (row.version.clone(), row.definition_hash.clone())
    } else {
        (state.version.clone(), state.definition_hash.clone())
    };
    let def = shared.defs.pinned(shared.store.as_ref(), &row.workflow, &version, &hash).await?;
    Ok(LoadedRun { row, run, def, history, state })
}

pub(crate) async fn describe(
    shared: &Shared,
    scope: &Scope,
    req: DescribeExecutionRequest,
) -> ApiResult<DescribeExecutionResponse> {
    let id = rules::id("execution_id", &req.execution_id)?;
    let loaded = load_run(shared, scope, Action::Read, id, req.run).await?;
    let info = loaded.info();
    let mut execution = orbit_wire::describe(&loaded.def, &loaded.state, info);
    if loaded.run == loaded.row.run && loaded.row.status == Status::Suspended {
        let faults = shared.store.faults(&[id.to_string()]).await?;
        execution.suspension = faults.into_iter().next().map(|f| orbit_api::v1::Suspension {
            reason: f.reason,
            entry_seq: f.inbox_seq.unwrap_or(0),
            failures: f.failures,
            suspended_at: f.parked_at_ms.map(orbit_server_kit::payload::ms_to_timestamp),
        });
    }
    Ok(DescribeExecutionResponse { execution: Some(execution) })
}

pub(crate) async fn query(
    shared: &Shared,
    scope: &Scope,
    req: QueryExecutionRequest,
) -> ApiResult<QueryExecutionResponse> {
    let id = rules::id("execution_id", &req.execution_id)?;
    let name = rules::id("name", &req.name)?;
    let loaded = load_run(shared, scope, Action::Query, id, req.run).await?;
    let as_of_seq = loaded.state.last_seq;
    let name = name.to_string();
    let what = format!("query `{name}` result");
    // The evaluation is bounded (EXPRESSION_LIMIT past its budget) but may still take a
    // while: it runs off the async runtime so other RPCs keep being served.
    let value = tokio::task::spawn_blocking(move || {
        orbit_engine::query::query(&loaded.def, &loaded.state, &name)
    })
    .await
    .map_err(|e| err(ErrorCode::QueryFailed, format!("the query evaluation failed: {e}")))?
    .map_err(|e| err(e.code, e.message))?;
    // A result over the payload limits would not fit (or decode in) the response: say so.
    check_limits(&what, &value, shared.config.max_payload_bytes)?;
    Ok(QueryExecutionResponse { result: Some(json_to_proto(value)), as_of_seq })
}

/// The most event bytes one history page holds: the message limit less room for the rest
/// of the response. Every event fits on its own (reads truncate payloads over the limits).
const MAX_PAGE_BYTES: usize = orbit_server_kit::server::DEFAULT_MAX_MESSAGE_BYTES - 64 * 1024;

/// Pages by seq: the token is the seq of the next event to return. A page ends at
/// `page_size` events or before the event that would take it past [`MAX_PAGE_BYTES`]
/// (never empty), so it always fits one message.
pub(crate) async fn history(
    shared: &Shared,
    scope: &Scope,
    req: GetHistoryRequest,
) -> ApiResult<GetHistoryResponse> {
    use prost::Message as _;
    let id = rules::id("execution_id", &req.execution_id)?;
    let size = validate::page_size(req.page_size, 1000, 10_000);
    let from = validate::numeric_token(&req.page_token)?.unwrap_or(1);
    let row = scoped(shared, scope, Action::Read, id).await?;
    let run = resolve_run(&row, req.run)?;
    let history = shared.store.load_history(id, run).await?;
    let mut events = Vec::new();
    let mut bytes = 0usize;
    let mut next_page_token = String::new();
    for e in history.iter().filter(|e| e.seq >= from) {
        let wire = orbit_wire::history_event(e, run);
        // A repeated field: tag, length, body.
        let len = wire.encoded_len() + 8;
        if events.len() >= size || (!events.is_empty() && bytes + len > MAX_PAGE_BYTES) {
            next_page_token = e.seq.to_string();
            break;
        }
        bytes += len;
        events.push(wire);
    }
    Ok(GetHistoryResponse { events, next_page_token, run })
}

/// Filters the store cannot apply (several statuses, version, time range, root, schedule)
/// are applied to each store page, so a page may hold fewer than `page_size` results; the
/// token is the store's and stays valid.
///
/// A caller restricted to some workflows sees only executions of those: a `workflow`
/// filter outside its patterns is refused (`PERMISSION_DENIED`), and without a filter the
/// other executions are dropped from each page like the filters above (the paging stays
/// the store's, so following `next_page_token` still visits every visible execution once).
pub(crate) async fn list_executions(
    shared: &Shared,
    scope: &Scope,
    req: ListExecutionsRequest,
) -> ApiResult<ListExecutionsResponse> {
    let mut statuses = Vec::new();
    for raw in &req.statuses {
        let status = ExecutionStatus::try_from(*raw)
            .map_err(|_| invalid("statuses", format!("{raw} is not an execution status")))?;
        // UNSPECIFIED matches nothing, as documented.
        statuses.push(orbit_wire::status_of(status));
    }
    if !req.version.is_empty() && req.workflow.is_empty() {
        return Err(invalid("version", "requires `workflow`").into());
    }
    if !req.workflow.is_empty() {
        scope.workflow(Action::Read, &req.workflow)?;
    }
    let created_after = req.created_after.as_ref().map(timestamp_to_ms).transpose();
    let created_after = created_after.map_err(|e| invalid("created_after", e.to_string()))?;
    let created_before = req.created_before.as_ref().map(timestamp_to_ms).transpose();
    let created_before = created_before.map_err(|e| invalid("created_before", e.to_string()))?;
    let single_status = match statuses.as_slice() {
        [Some(one)] => Some(*one),
        _ => None,
    };
    let filter = ExecutionFilter {
        status: single_status,
        workflow: rules::optional("workflow", &req.workflow)?.map(str::to_string),
        parent_id: rules::optional("parent_id", &req.parent_id)?.map(str::to_string),
        schedule_id: rules::optional("schedule_id", &req.schedule_id)?.map(str::to_string),
        page_size: u32::try_from(validate::page_size(req.page_size, 100, 1000)).unwrap_or(1000),
        page_token: (!req.page_token.is_empty()).then(|| req.page_token.clone()),
    };
    let page = shared.store.list_executions(filter).await?;
    let keep = |row: &ExecutionRow| {
        (statuses.is_empty() || statuses.contains(&Some(row.status)))
            && (req.version.is_empty() || row.version == req.version)
            && created_after.is_none_or(|t| row.created_at_ms >= t)
            && created_before.is_none_or(|t| row.created_at_ms < t)
            && (req.root_id.is_empty() || row.root_id == req.root_id)
            && (req.schedule_id.is_empty()
                || row.schedule_id.as_deref() == Some(req.schedule_id.as_str()))
            && scope.sees(&row.workflow)
    };
    Ok(ListExecutionsResponse {
        executions: page
            .executions
            .iter()
            .filter(|r| keep(r))
            .map(orbit_wire::execution_info)
            .collect(),
        next_page_token: page.next_page_token.unwrap_or_default(),
    })
}
