//! Reads answered from the store: describe, query, history, list. Never writes.
//!
//! A run is folded from its history with the same pure code the owner uses, so a read sees
//! exactly the committed state (it may lag the owner's hot state by one commit).
//!
//! Time travel: describe and query take an `at_seq` (0 = now) and then fold only the
//! history's prefix up to it, against the definition the run was pinned to at that point
//! (a later `DefinitionMigrated` is not in the prefix). A past point is described from the
//! fold alone: the projection (a `SUSPENDED` status, its suspension, `updated_at` moved by
//! parking) only says how the run stands now.

use crate::error::{err, no_execution, ApiResult, FrontendError};
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

/// One run of an execution, loaded and folded (up to `at_seq`, when one was asked for).
pub(crate) struct LoadedRun {
    pub(crate) row: ExecutionRow,
    pub(crate) run: u32,
    /// The history seq the run was folded up to, or 0 for all of it (now).
    pub(crate) at_seq: u64,
    pub(crate) def: Arc<Definition>,
    /// The events folded into `state`: the prefix up to `at_seq`, or all of them.
    pub(crate) history: Vec<HistoryEvent>,
    pub(crate) state: State,
}

impl LoadedRun {
    /// Whether this is the latest run as it stands now, which the projection describes.
    fn is_now(&self) -> bool {
        self.at_seq == 0 && self.run == self.row.run
    }

    /// The run's summary: the projection for the latest run now, folded for older runs
    /// and for past points of any run.
    pub(crate) fn info(&self) -> ExecutionInfo {
        if self.is_now() {
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
    load_run_at(shared, scope, action, id, run, 0).await
}

/// Loads one run like [`load_run`] and folds its history up to `at_seq` (0: all of it),
/// or `INVALID_ARGUMENT` for a seq past the run's last event.
async fn load_run_at(
    shared: &Shared,
    scope: &Scope,
    action: Action,
    id: &str,
    run: u32,
    at_seq: u64,
) -> ApiResult<LoadedRun> {
    let row = scoped(shared, scope, action, id).await?;
    let run = resolve_run(&row, run)?;
    let mut history = shared.store.load_history(id, run).await?;
    if at_seq > 0 {
        truncate_at(&mut history, at_seq, id, run)?;
    }
    let state = State::from_history(&history);
    // A run is pinned to its definition: the one it was created with, or the one its last
    // `DefinitionMigrated` (up to `at_seq`) moved it to (the state says which; the
    // projection names the latest run's).
    let (version, hash) = if state.definition_hash.is_empty() {
        (row.version.clone(), row.definition_hash.clone())
    } else {
        (state.version.clone(), state.definition_hash.clone())
    };
    let def = shared.defs.pinned(shared.store.as_ref(), &row.workflow, &version, &hash).await?;
    Ok(LoadedRun { row, run, at_seq, def, history, state })
}

/// Keeps the events 1..=`at_seq` of a run's history (in seq order), or `INVALID_ARGUMENT`
/// naming the run's last seq when `at_seq` is past it: that point has not happened (yet).
fn truncate_at(history: &mut Vec<HistoryEvent>, at_seq: u64, id: &str, run: u32) -> ApiResult<()> {
    let last = history.last().map_or(0, |e| e.seq);
    if at_seq > last {
        return Err(invalid(
            "at_seq",
            format!(
                "{at_seq} is past the last event of run {run} of execution `{id}`: its last \
                 seq is {last} (0 means now)"
            ),
        )
        .into());
    }
    let kept = history.iter().take_while(|e| e.seq <= at_seq).count();
    history.truncate(kept);
    Ok(())
}

/// Describes one run now, or as of `at_seq` (see the module docs). At the run's last seq
/// the answer equals the one for now except where only the projection knows: a
/// `SUSPENDED` status (the fold says `RUNNING` or `COMPENSATING`) with its `suspension`,
/// and `updated_at` / `closed_at`, which are the last event's time rather than the
/// projection's last change.
pub(crate) async fn describe(
    shared: &Shared,
    scope: &Scope,
    req: DescribeExecutionRequest,
) -> ApiResult<DescribeExecutionResponse> {
    let id = rules::id("execution_id", &req.execution_id)?;
    let loaded = match load_run_at(shared, scope, Action::Read, id, req.run, req.at_seq).await {
        // An id a debounced start reserved is not missing: it says when it will exist.
        Err(FrontendError::Api(e)) if e.code == ErrorCode::ExecutionNotFound => {
            return Err(super::dedupe::pending(shared, id).await?.unwrap_or(FrontendError::Api(e)));
        }
        other => other?,
    };
    let info = loaded.info();
    let mut execution = orbit_wire::describe(&loaded.def, &loaded.state, info);
    // Parking is projection-level and only says how the run stands now.
    if loaded.is_now() && loaded.row.status == Status::Suspended {
        let faults = shared.store.faults(&[id.to_string()]).await?;
        execution.suspension = faults.into_iter().next().map(|f| orbit_api::v1::Suspension {
            reason: f.reason,
            entry_seq: f.inbox_seq.unwrap_or(0),
            failures: f.failures,
            suspended_at: f.parked_at_ms.map(orbit_server_kit::payload::ms_to_timestamp),
        });
    }
    if loaded.is_now() {
        waiting_on(shared, id, &mut execution.pending_tasks).await?;
    }
    let (search_attributes, memo) = super::search::described(&loaded.state);
    Ok(DescribeExecutionResponse { execution: Some(execution), search_attributes, memo })
}

/// Says why each queued attempt under a concurrency key or a rate limit waits (issue 27):
/// one read, and only when such an attempt is pending.
async fn waiting_on(
    shared: &Shared,
    id: &str,
    tasks: &mut [orbit_api::v1::PendingTask],
) -> ApiResult<()> {
    use orbit_api::v1::{FlowWait, PendingTaskState};
    let limited = |t: &orbit_api::v1::PendingTask| {
        t.state == PendingTaskState::Queued as i32
            && (!t.concurrency_key.is_empty() || !t.rate_limit_key.is_empty())
    };
    if !tasks.iter().any(limited) {
        return Ok(());
    }
    let reasons = shared.store.waiting_on(id).await?;
    for t in tasks.iter_mut().filter(|t| limited(t)) {
        let reason = reasons.iter().rev().find(|(unit, _)| *unit == t.unit).map(|r| r.1);
        t.waiting_on = match reason {
            Some(orbit_store::WaitReason::Concurrency) => FlowWait::Concurrency,
            Some(orbit_store::WaitReason::RateLimit) => FlowWait::RateLimit,
            Some(orbit_store::WaitReason::Ready) | None => FlowWait::Unspecified,
        }
        .into();
    }
    Ok(())
}

/// Evaluates a declared query on the run's state now, or as of `at_seq` (`as_of_seq` then
/// equals it), against the definition the run was pinned to at that point.
pub(crate) async fn query(
    shared: &Shared,
    scope: &Scope,
    req: QueryExecutionRequest,
) -> ApiResult<QueryExecutionResponse> {
    let id = rules::id("execution_id", &req.execution_id)?;
    let name = rules::id("name", &req.name)?;
    let loaded = load_run_at(shared, scope, Action::Query, id, req.run, req.at_seq).await?;
    // With `at_seq`, the folded prefix ends at that seq (a run's seqs have no gaps).
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

/// The `query` (`list_query.rs`) is ANDed with the other filters in the store's SQL.
///
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
    let query = super::search::list_query(shared, &req.query).await?;
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
        query,
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::error::FrontendError;
    use orbit_engine::{Event, Origin};

    fn started(seq: u64) -> HistoryEvent {
        HistoryEvent {
            seq,
            timestamp_ms: seq,
            origin: Origin::Decided,
            event: Event::WorkflowStarted {},
        }
    }

    #[test]
    fn a_seq_keeps_its_prefix_and_one_past_the_end_is_refused_naming_the_last() {
        let all: Vec<HistoryEvent> = (1..=5).map(started).collect();
        for at in 1..=5 {
            let mut history = all.clone();
            assert!(truncate_at(&mut history, at, "e1", 1).is_ok());
            assert_eq!(
                history.iter().map(|e| e.seq).collect::<Vec<_>>(),
                (1..=at).collect::<Vec<_>>()
            );
        }
        let mut history = all.clone();
        let Err(FrontendError::Api(refused)) = truncate_at(&mut history, 6, "e1", 2) else {
            panic!("6 is past the end");
        };
        assert_eq!(refused.code, ErrorCode::InvalidArgument);
        assert!(refused.message.contains("at_seq"), "{}", refused.message);
        assert!(refused.message.contains("its last seq is 5"), "{}", refused.message);
        assert!(refused.message.contains("run 2 of execution `e1`"), "{}", refused.message);
        assert_eq!(history, all, "a refusal leaves the history as it was");
    }
}
