//! Read-side queries on SQLite: histories and the executions projection.

use super::rows;
use super::sql;
use crate::error::Result;
use crate::model::{ExecutionFilter, ExecutionPage, ExecutionRow, ListOrder};
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

/// The projections of those of `ids` that exist, each once (one prepared lookup per id:
/// SQLite's statements cost no round trip).
pub(crate) fn get_executions(conn: &Connection, ids: &[String]) -> Result<Vec<ExecutionRow>> {
    let ids: std::collections::BTreeSet<&String> = ids.iter().collect();
    let mut out = Vec::with_capacity(ids.len());
    for id in ids {
        out.extend(get_execution(conn, id)?);
    }
    Ok(out)
}

/// A page of executions, newest first.
pub(crate) fn list_executions(
    conn: &Connection,
    filter: &ExecutionFilter,
) -> Result<ExecutionPage> {
    let w = filter.window()?;
    let first = sql::EXECUTION_LIST_QUERY_FIRST_PARAM;
    let lite = orbit_query::Dialect::Sqlite;
    let (compiled, order) = match (&filter.query, w.order) {
        (None, ListOrder::Created { ascending }) => (None, sql::created_order(ascending).into()),
        (Some(q), ListOrder::Created { ascending }) => {
            (Some(orbit_query::compile(q, lite, first)), sql::created_order(ascending).into())
        }
        (_, ListOrder::Keyset(_)) => {
            let q = filter.query.as_ref();
            let compiled = q.map(|q| orbit_query::compile_page(q, lite, first, w.after.as_ref()));
            let order = compiled.as_ref().and_then(|c| c.order_sql.clone()).unwrap_or_default();
            (compiled, order)
        }
    };
    let keyset = match w.order {
        ListOrder::Created { ascending } if w.after_created.is_some() => Some(ascending),
        _ => None,
    };
    let query = sql::execution_list_query(
        filter.status.is_some(),
        filter.workflow.is_some(),
        filter.parent_id.is_some(),
        filter.schedule_id.is_some(),
        keyset,
        compiled.as_ref().map(|c| c.where_sql.as_str()),
        &order,
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

/// A count (`crate::count`): one statement, prepared for this call only.
pub(crate) fn count_executions(
    conn: &Connection,
    filter: &crate::CountFilter,
) -> Result<crate::ExecutionCounts> {
    let (text, values) = crate::count::count_sql(filter, orbit_query::Dialect::Sqlite);
    let params: Vec<&dyn ToSql> = values.iter().map(query_param).collect();
    let mut stmt = conn.prepare(&text)?;
    let groups = filter.group_by.len();
    let mut found = stmt.query(params.as_slice())?;
    let mut rows = Vec::new();
    while let Some(row) = found.next()? {
        let values = (0..groups).map(|i| row.get(i)).collect::<rusqlite::Result<Vec<_>>>()?;
        rows.push((values, row.get::<_, i64>(groups)?));
    }
    Ok(crate::count::from_rows(groups > 0, rows))
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
