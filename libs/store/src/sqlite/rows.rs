//! Conversions between SQLite values and the store's row types.
//!
//! SQLite stores integers as `i64`; the store's API uses `u64`/`u32`. Writing refuses values
//! that do not fit, reading turns negative or oversized values and undecodable JSON into
//! [`StoreError::Storage`] instead of panicking.

use crate::error::{Result, StoreError};
use crate::model::{
    DefinitionRow, ExecutionRow, InboxEntry, OwnerRow, TaskRow, TaskState, TimerRow,
};
use orbit_engine::{Event, HistoryEvent, Origin};
use rusqlite::Row;
use serde_json::Value;

/// A `u64` as an SQLite integer.
pub(crate) fn to_i64(v: u64, what: &str) -> Result<i64> {
    i64::try_from(v).map_err(|_| StoreError::InvalidArgument(format!("{what} {v} is too large")))
}

/// A stored integer as a `u64`.
pub(crate) fn to_u64(v: i64, what: &str) -> Result<u64> {
    u64::try_from(v).map_err(|_| StoreError::corrupt(what, format!("negative value {v}")))
}

/// A stored integer as a `u32`.
pub(crate) fn to_u32(v: i64, what: &str) -> Result<u32> {
    u32::try_from(v).map_err(|_| StoreError::corrupt(what, format!("value {v} out of range")))
}

fn opt_u64(v: Option<i64>, what: &str) -> Result<Option<u64>> {
    v.map(|v| to_u64(v, what)).transpose()
}

/// A JSON value as stored text.
pub(crate) fn json_text(v: &Value) -> String {
    v.to_string()
}

/// Stored text as a JSON value.
pub(crate) fn parse_json(text: &str, what: &str) -> Result<Value> {
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

fn parse_origin(s: &str) -> Result<Origin> {
    match s {
        "recorded" => Ok(Origin::Recorded),
        "decided" => Ok(Origin::Decided),
        "copied" => Ok(Origin::Copied),
        other => Err(StoreError::corrupt("event origin", other)),
    }
}

/// Columns: seq, origin, payload, timestamp.
pub(crate) fn history_event(row: &Row<'_>) -> Result<HistoryEvent> {
    let payload: String = row.get(2)?;
    let event: Event =
        serde_json::from_str(&payload).map_err(|e| StoreError::corrupt("event payload", e))?;
    Ok(HistoryEvent {
        seq: to_u64(row.get(0)?, "event seq")?,
        origin: parse_origin(&row.get::<_, String>(1)?)?,
        event,
        timestamp_ms: to_u64(row.get(3)?, "event timestamp")?,
    })
}

/// Columns: name, version, definition_hash, document, created_at.
pub(crate) fn definition(row: &Row<'_>) -> Result<DefinitionRow> {
    Ok(DefinitionRow {
        name: row.get(0)?,
        version: row.get(1)?,
        definition_hash: row.get(2)?,
        document: row.get(3)?,
        created_at_ms: to_u64(row.get(4)?, "definition created_at")?,
    })
}

/// Columns: see `sql::EXECUTION_COLUMNS`.
pub(crate) fn execution(row: &Row<'_>) -> Result<ExecutionRow> {
    Ok(ExecutionRow {
        execution_id: row.get(0)?,
        run: to_u32(row.get(1)?, "execution run")?,
        root_id: row.get(2)?,
        parent_id: row.get(3)?,
        workflow: row.get(4)?,
        version: row.get(5)?,
        definition_hash: row.get(6)?,
        status: crate::model::parse_status(&row.get::<_, String>(7)?)?,
        schedule_id: row.get(8)?,
        created_at_ms: to_u64(row.get(9)?, "execution created_at")?,
        updated_at_ms: to_u64(row.get(10)?, "execution updated_at")?,
        closed_at_ms: opt_u64(row.get(11)?, "execution closed_at")?,
        last_seq: to_u64(row.get(12)?, "execution last_seq")?,
        failed_step: row.get(13)?,
        error_code: row.get(14)?,
    })
}

/// Columns: see `sql::TASK_COLUMNS`.
pub(crate) fn task(row: &Row<'_>) -> Result<TaskRow> {
    let state: String = row.get(10)?;
    let flow: Option<String> = row.get(19)?;
    let (priority, flow) = crate::flow::read_flow(row.get(18)?, flow.as_deref())?;
    Ok(TaskRow {
        id: to_u64(row.get(0)?, "task id")?,
        execution_id: row.get(1)?,
        run: to_u32(row.get(2)?, "task run")?,
        unit_key: row.get(3)?,
        attempt: to_u32(row.get(4)?, "task attempt")?,
        offer: to_u32(row.get(5)?, "task offer")?,
        task: row.get(6)?,
        task_version: row.get(7)?,
        input: parse_json(&row.get::<_, String>(8)?, "task input")?,
        idempotency_key: row.get(9)?,
        state: TaskState::parse(&state).ok_or_else(|| StoreError::corrupt("task state", state))?,
        claimed_by: row.get(11)?,
        session: row.get(12)?,
        token: row.get(13)?,
        created_at_ms: to_u64(row.get(14)?, "task created_at")?,
        claimed_at_ms: opt_u64(row.get(15)?, "task claimed_at")?,
        worker_id: row.get(16)?,
        language: row.get(17)?,
        priority,
        flow,
    })
}

/// Columns: see `sql::INBOX_COLUMNS`.
pub(crate) fn inbox(row: &Row<'_>) -> Result<InboxEntry> {
    let result: Option<String> = row.get(7)?;
    Ok(InboxEntry {
        seq: to_u64(row.get(0)?, "inbox seq")?,
        execution_id: row.get(1)?,
        kind: row.get(2)?,
        token: row.get(3)?,
        payload: parse_json(&row.get::<_, String>(4)?, "inbox payload")?,
        created_at_ms: to_u64(row.get(5)?, "inbox created_at")?,
        done_at_ms: opt_u64(row.get(6)?, "inbox done_at")?,
        result: result.map(|r| parse_json(&r, "inbox result")).transpose()?,
    })
}

/// Columns: execution_id, run, timer_key, fire_at, payload.
pub(crate) fn timer(row: &Row<'_>) -> Result<TimerRow> {
    Ok(TimerRow {
        execution_id: row.get(0)?,
        run: to_u32(row.get(1)?, "timer run")?,
        key: row.get(2)?,
        fire_at_ms: to_u64(row.get(3)?, "timer fire_at")?,
        payload: parse_json(&row.get::<_, String>(4)?, "timer payload")?,
    })
}

/// Columns: execution_id, root_id, node_id, epoch, since.
pub(crate) fn owner(row: &Row<'_>) -> Result<OwnerRow> {
    Ok(OwnerRow {
        execution_id: row.get(0)?,
        root_id: row.get(1)?,
        node_id: row.get(2)?,
        epoch: to_u64(row.get(3)?, "owner epoch")?,
        since_ms: to_u64(row.get(4)?, "owner since")?,
    })
}
