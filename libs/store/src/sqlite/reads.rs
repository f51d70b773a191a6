//! Read-side queries on SQLite: histories and the executions projection.

use super::rows;
use super::sql;
use crate::error::Result;
use crate::model::{ExecutionFilter, ExecutionPage, ExecutionRow};
use orbit_engine::HistoryEvent;
use rusqlite::types::ToSql;
use rusqlite::{params, Connection};

/// The events of one run, by seq.
pub(crate) fn load_history(conn: &Connection, id: &str, run: u32) -> Result<Vec<HistoryEvent>> {
    history_after(conn, id, run, 0)
}

/// The events of one run after `after_seq`, by seq.
pub(crate) fn history_after(
    conn: &Connection,
    id: &str,
    run: u32,
    after_seq: u64,
) -> Result<Vec<HistoryEvent>> {
    let mut stmt = conn.prepare_cached(sql::EVENT_LOAD_AFTER)?;
    let after = i64::try_from(after_seq).unwrap_or(i64::MAX);
    let mut found = stmt.query(params![id, i64::from(run), after])?;
    let mut out = Vec::new();
    while let Some(row) = found.next()? {
        out.push(rows::history_event(row)?);
    }
    Ok(out)
}

/// One execution's projection.
pub(crate) fn get_execution(conn: &Connection, id: &str) -> Result<Option<ExecutionRow>> {
    let mut stmt = conn.prepare_cached(sql::EXECUTION_GET)?;
    let mut found = stmt.query([id])?;
    found.next()?.map(rows::execution).transpose()
}

/// A page of executions, newest first.
pub(crate) fn list_executions(
    conn: &Connection,
    filter: &ExecutionFilter,
) -> Result<ExecutionPage> {
    let w = filter.window()?;
    let ascending = filter.ascending()?;
    let first = sql::EXECUTION_LIST_QUERY_FIRST_PARAM;
    let compiled =
        filter.query.as_ref().map(|q| orbit_query::compile(q, orbit_query::Dialect::Sqlite, first));
    let query = sql::execution_list_query(
        filter.status.is_some(),
        filter.workflow.is_some(),
        filter.parent_id.is_some(),
        filter.schedule_id.is_some(),
        w.after_created.is_some(),
        compiled.as_ref().map(|c| c.where_sql.as_str()),
        ascending,
    );
    // A list query's text is made per query: prepared for this call only, so it never
    // evicts the hot path's statements from the connection's cache.
    let mut uncached;
    let mut cached;
    let stmt: &mut rusqlite::Statement<'_> = if compiled.is_some() {
        uncached = conn.prepare(&query)?;
        &mut uncached
    } else {
        cached = conn.prepare_cached(&query)?;
        &mut cached
    };
    let status = filter.status.map(orbit_engine::Status::as_str);
    let mut values: Vec<&dyn ToSql> = vec![
        &status,
        &filter.workflow,
        &filter.parent_id,
        &w.after_created,
        &w.after_id,
        &w.limit,
        &filter.schedule_id,
    ];
    if let Some(c) = &compiled {
        values.extend(c.params.iter().map(query_param));
    }
    let mut found = stmt.query(values.as_slice())?;
    let mut executions = Vec::new();
    while let Some(row) = found.next()? {
        executions.push(rows::execution(row)?);
    }
    Ok(ExecutionPage::from_rows(executions, &w))
}

/// A list query's value as a parameter.
fn query_param(value: &orbit_query::SqlValue) -> &dyn ToSql {
    match value {
        orbit_query::SqlValue::Text(s) => s,
        orbit_query::SqlValue::Int(n) => n,
        orbit_query::SqlValue::Double(x) => x,
        orbit_query::SqlValue::Bool(b) => b,
    }
}

/// Executions not closed, through `executions_by_status` (one range per open status).
pub(crate) fn count_active(conn: &Connection) -> Result<u64> {
    let sql = "SELECT COUNT(*) FROM executions \
        WHERE status IN ('PENDING', 'RUNNING', 'COMPENSATING', 'SUSPENDED')";
    let n: i64 = conn.prepare_cached(sql)?.query_row([], |r| r.get(0))?;
    Ok(u64::try_from(n).unwrap_or(0))
}
