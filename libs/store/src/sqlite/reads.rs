//! Read-side queries on SQLite: histories and the executions projection.

use super::rows::{self, to_i64};
use super::sql;
use crate::error::{Result, StoreError};
use crate::model::{ExecutionFilter, ExecutionPage, ExecutionRow};
use orbit_engine::HistoryEvent;
use rusqlite::{params, Connection};

const DEFAULT_PAGE_SIZE: u32 = 100;
const MAX_PAGE_SIZE: u32 = 1000;

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

/// The page token is the keyset of the last row: `<created_at>:<execution_id>`.
fn page_token(row: &ExecutionRow) -> String {
    format!("{}:{}", row.created_at_ms, row.execution_id)
}

fn parse_page_token(token: &str) -> Result<(i64, String)> {
    let bad = || StoreError::InvalidArgument(format!("bad page token {token:?}"));
    let (created, id) = token.split_once(':').ok_or_else(bad)?;
    Ok((created.parse().map_err(|_| bad())?, id.to_string()))
}

/// A page of executions, newest first.
pub(crate) fn list_executions(
    conn: &Connection,
    filter: &ExecutionFilter,
) -> Result<ExecutionPage> {
    let size = match filter.page_size {
        0 => DEFAULT_PAGE_SIZE,
        n => n.min(MAX_PAGE_SIZE),
    };
    let after = filter.page_token.as_deref().map(parse_page_token).transpose()?;
    let (after_created, after_id) = match after {
        Some((c, id)) => (Some(c), Some(id)),
        None => (None, None),
    };
    let mut stmt = conn.prepare_cached(sql::EXECUTION_LIST)?;
    // One extra row tells whether another page follows.
    let mut found = stmt.query(params![
        filter.status,
        filter.workflow,
        filter.parent_id,
        after_created,
        after_id,
        to_i64(u64::from(size) + 1, "page size")?,
    ])?;
    let mut executions = Vec::new();
    while let Some(row) = found.next()? {
        executions.push(rows::execution(row)?);
    }
    let more = executions.len() > size as usize;
    executions.truncate(size as usize);
    let next_page_token = if more { executions.last().map(page_token) } else { None };
    Ok(ExecutionPage { executions, next_page_token })
}
