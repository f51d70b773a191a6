//! Conversions between PostgreSQL rows and the store's row types.
//!
//! Columns are `BIGINT` (`i64`) and `TEXT`; the API uses `u64`/`u32` and JSON values.
//! Writing refuses values that do not fit; reading turns negative or oversized numbers,
//! bad JSON and unexpected column types into [`StoreError::Storage`], never a panic. The
//! column orders are those of the `*_columns!` lists in `sql.rs`.

use crate::error::{Result, StoreError};
use crate::model::{
    DefinitionRow, ExecutionRow, InboxEntry, NodeRow, OwnerRow, TaskRow, TaskState, TimerRow,
};
use orbit_engine::{Event, HistoryEvent, Origin};
use serde_json::Value;
use tokio_postgres::types::FromSql;
use tokio_postgres::Row;

/// A `u64` as a `BIGINT`.
pub(crate) fn to_i64(v: u64, what: &str) -> Result<i64> {
    i64::try_from(v).map_err(|_| StoreError::InvalidArgument(format!("{what} {v} is too large")))
}

/// One column, with the column named in the error.
pub(crate) fn get<'a, T: FromSql<'a>>(row: &'a Row, idx: usize, what: &str) -> Result<T> {
    row.try_get(idx).map_err(|e| StoreError::corrupt(what, e))
}

/// A `BIGINT` column as a `u64`.
pub(crate) fn get_u64(row: &Row, idx: usize, what: &str) -> Result<u64> {
    let v: i64 = get(row, idx, what)?;
    u64::try_from(v).map_err(|_| StoreError::corrupt(what, format!("negative value {v}")))
}

fn get_u32(row: &Row, idx: usize, what: &str) -> Result<u32> {
    let v: i64 = get(row, idx, what)?;
    u32::try_from(v).map_err(|_| StoreError::corrupt(what, format!("value {v} out of range")))
}

fn get_opt_u64(row: &Row, idx: usize, what: &str) -> Result<Option<u64>> {
    let v: Option<i64> = get(row, idx, what)?;
    v.map(|v| u64::try_from(v).map_err(|_| StoreError::corrupt(what, format!("negative {v}"))))
        .transpose()
}

fn get_json(row: &Row, idx: usize, what: &str) -> Result<Value> {
    let text: &str = get(row, idx, what)?;
    serde_json::from_str(text).map_err(|e| StoreError::corrupt(what, e))
}

/// The stored name of an event origin.
pub(crate) fn origin_name(origin: Origin) -> &'static str {
    match origin {
        Origin::Recorded => "recorded",
        Origin::Decided => "decided",
        Origin::Copied => "copied",
    }
}

/// Columns: seq, origin, payload, timestamp.
pub(crate) fn history_event(row: &Row) -> Result<HistoryEvent> {
    let origin = match get::<&str>(row, 1, "event origin")? {
        "recorded" => Origin::Recorded,
        "decided" => Origin::Decided,
        "copied" => Origin::Copied,
        other => return Err(StoreError::corrupt("event origin", other)),
    };
    let payload: &str = get(row, 2, "event payload")?;
    let event: Event =
        serde_json::from_str(payload).map_err(|e| StoreError::corrupt("event payload", e))?;
    Ok(HistoryEvent {
        seq: get_u64(row, 0, "event seq")?,
        origin,
        event,
        timestamp_ms: get_u64(row, 3, "event timestamp")?,
    })
}

/// Columns: name, version, definition_hash, document, created_at.
pub(crate) fn definition(row: &Row) -> Result<DefinitionRow> {
    Ok(DefinitionRow {
        name: get(row, 0, "definition name")?,
        version: get(row, 1, "definition version")?,
        definition_hash: get(row, 2, "definition hash")?,
        document: get(row, 3, "definition document")?,
        created_at_ms: get_u64(row, 4, "definition created_at")?,
    })
}

/// Columns: `execution_columns!`.
pub(crate) fn execution(row: &Row) -> Result<ExecutionRow> {
    Ok(ExecutionRow {
        execution_id: get(row, 0, "execution id")?,
        run: get_u32(row, 1, "execution run")?,
        root_id: get(row, 2, "execution root_id")?,
        parent_id: get(row, 3, "execution parent_id")?,
        workflow: get(row, 4, "execution workflow")?,
        version: get(row, 5, "execution version")?,
        definition_hash: get(row, 6, "execution definition_hash")?,
        status: crate::model::parse_status(&get::<String>(row, 7, "execution status")?)?,
        schedule_id: get(row, 8, "execution schedule_id")?,
        created_at_ms: get_u64(row, 9, "execution created_at")?,
        updated_at_ms: get_u64(row, 10, "execution updated_at")?,
        closed_at_ms: get_opt_u64(row, 11, "execution closed_at")?,
        last_seq: get_u64(row, 12, "execution last_seq")?,
        failed_step: get(row, 13, "execution failed_step")?,
        error_code: get(row, 14, "execution error_code")?,
    })
}

/// Columns: `task_columns!`.
pub(crate) fn task(row: &Row) -> Result<TaskRow> {
    let state: &str = get(row, 10, "task state")?;
    let (priority, flow) =
        crate::flow::read_flow(get(row, 18, "task priority")?, get(row, 19, "task flow")?)?;
    Ok(TaskRow {
        id: get_u64(row, 0, "task id")?,
        execution_id: get(row, 1, "task execution_id")?,
        run: get_u32(row, 2, "task run")?,
        unit_key: get(row, 3, "task unit_key")?,
        attempt: get_u32(row, 4, "task attempt")?,
        offer: get_u32(row, 5, "task offer")?,
        task: get(row, 6, "task name")?,
        task_version: get(row, 7, "task version")?,
        input: get_json(row, 8, "task input")?,
        idempotency_key: get(row, 9, "task idempotency_key")?,
        state: TaskState::parse(state).ok_or_else(|| StoreError::corrupt("task state", state))?,
        claimed_by: get(row, 11, "task claimed_by")?,
        session: get(row, 12, "task session")?,
        token: get(row, 13, "task token")?,
        created_at_ms: get_u64(row, 14, "task created_at")?,
        claimed_at_ms: get_opt_u64(row, 15, "task claimed_at")?,
        worker_id: get(row, 16, "task worker_id")?,
        language: get(row, 17, "task language")?,
        priority,
        flow,
    })
}

/// Columns: `inbox_columns!`.
pub(crate) fn inbox(row: &Row) -> Result<InboxEntry> {
    let result: Option<&str> = get(row, 7, "inbox result")?;
    Ok(InboxEntry {
        seq: get_u64(row, 0, "inbox seq")?,
        execution_id: get(row, 1, "inbox execution_id")?,
        kind: get(row, 2, "inbox kind")?,
        token: get(row, 3, "inbox token")?,
        payload: get_json(row, 4, "inbox payload")?,
        created_at_ms: get_u64(row, 5, "inbox created_at")?,
        done_at_ms: get_opt_u64(row, 6, "inbox done_at")?,
        result: result
            .map(|r| serde_json::from_str(r).map_err(|e| StoreError::corrupt("inbox result", e)))
            .transpose()?,
    })
}

/// Columns: execution_id, run, timer_key, fire_at, payload.
pub(crate) fn timer(row: &Row) -> Result<TimerRow> {
    Ok(TimerRow {
        execution_id: get(row, 0, "timer execution_id")?,
        run: get_u32(row, 1, "timer run")?,
        key: get(row, 2, "timer key")?,
        fire_at_ms: get_u64(row, 3, "timer fire_at")?,
        payload: get_json(row, 4, "timer payload")?,
    })
}

/// Columns: execution_id, root_id, node_id, epoch, since.
pub(crate) fn owner(row: &Row) -> Result<OwnerRow> {
    Ok(OwnerRow {
        execution_id: get(row, 0, "owner execution_id")?,
        root_id: get(row, 1, "owner root_id")?,
        node_id: get(row, 2, "owner node_id")?,
        epoch: get_u64(row, 3, "owner epoch")?,
        since_ms: get_u64(row, 4, "owner since")?,
    })
}

/// Columns: `node_columns!`.
pub(crate) fn node(row: &Row) -> Result<NodeRow> {
    Ok(NodeRow {
        node_id: get(row, 0, "node id")?,
        service: get(row, 1, "node service")?,
        incarnation: get(row, 2, "node incarnation")?,
        addr: get(row, 3, "node addr")?,
        heartbeat_at_ms: get_u64(row, 4, "node heartbeat_at")?,
        started_at_ms: get_u64(row, 5, "node started_at")?,
        sessions: get(row, 6, "node sessions")?,
    })
}

/// Every row through `f`.
pub(crate) fn all<T>(rows: &[Row], f: impl Fn(&Row) -> Result<T>) -> Result<Vec<T>> {
    rows.iter().map(f).collect()
}
