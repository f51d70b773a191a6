//! Definitions, histories and the executions projection on PostgreSQL.
//!
//! Everything here is one statement; `put_definition` is the only write (an insert that
//! skips a taken (name, version), then the stored hash decides).

use super::conn::{all_ok, pipeline, step, PgConn};
use super::error::PgResult;
use super::rows::{self, get, to_i64};
use super::sql;
use crate::error::StoreError;
use crate::model::{DefinitionRow, ExecutionFilter, ExecutionPage, ExecutionRow, PutOutcome};
use orbit_engine::HistoryEvent;
use tokio_postgres::types::ToSql;

const DEFAULT_PAGE_SIZE: u32 = 100;
const MAX_PAGE_SIZE: u32 = 1000;

/// Registers a definition: the insert and the read of the stored hash are pipelined (each
/// its own statement, one round trip). Returns whether a row was written, and the outcome.
pub(crate) async fn put_definition(
    conn: &mut PgConn,
    name: &str,
    version: &str,
    hash: &str,
    document: &str,
) -> PgResult<(bool, PutOutcome)> {
    let stmts = conn.prepare(&[sql::DEFINITION_INSERT, sql::DEFINITION_HASH]).await?;
    let [insert, stored] = &stmts[..] else {
        return Err(StoreError::Storage("statements missing".into()).into());
    };
    let p_insert: [&(dyn ToSql + Sync); 4] = [&name, &version, &hash, &document];
    let p_hash: [&(dyn ToSql + Sync); 2] = [&name, &version];
    let client = conn.client();
    let results = all_ok(
        pipeline(vec![step(client, insert, &p_insert), step(client, stored, &p_hash)]).await,
    )?;
    if results.first().is_some_and(|r| !r.is_empty()) {
        return Ok((true, PutOutcome::Created));
    }
    let Some(row) = results.get(1).and_then(|r| r.first()) else {
        return Err(StoreError::Storage(format!("definition {name}@{version} vanished")).into());
    };
    let stored: String = get(row, 0, "definition hash")?;
    if stored == hash {
        Ok((false, PutOutcome::Unchanged))
    } else {
        Err(StoreError::Conflict(format!(
            "definition {name}@{version} is registered with hash {stored}, not {hash}"
        ))
        .into())
    }
}

/// One version, or the latest registered one.
pub(crate) async fn get_definition(
    conn: &mut PgConn,
    name: &str,
    version: Option<&str>,
) -> PgResult<Option<DefinitionRow>> {
    let found = match version {
        Some(v) => conn.query(sql::DEFINITION_GET, &[&name, &v]).await?,
        None => conn.query(sql::DEFINITION_LATEST, &[&name]).await?,
    };
    Ok(found.first().map(rows::definition).transpose()?)
}

/// Every definition, by name then registration order.
pub(crate) async fn list_definitions(conn: &mut PgConn) -> PgResult<Vec<DefinitionRow>> {
    let found = conn.query(sql::DEFINITION_LIST, &[]).await?;
    Ok(rows::all(&found, rows::definition)?)
}

/// The events of one run after `after_seq`, by seq.
pub(crate) async fn history_after(
    conn: &mut PgConn,
    id: &str,
    run: u32,
    after_seq: u64,
) -> PgResult<Vec<HistoryEvent>> {
    let after = i64::try_from(after_seq).unwrap_or(i64::MAX);
    let found = conn.query(sql::EVENT_LOAD_AFTER, &[&id, &i64::from(run), &after]).await?;
    Ok(rows::all(&found, rows::history_event)?)
}

/// One execution's projection.
pub(crate) async fn get_execution(conn: &mut PgConn, id: &str) -> PgResult<Option<ExecutionRow>> {
    let found = conn.query(sql::EXECUTION_GET, &[&id]).await?;
    Ok(found.first().map(rows::execution).transpose()?)
}

/// The page token is the keyset of the last row: `<created_at>:<execution_id>` (the
/// SQLite backend's format).
fn page_token(row: &ExecutionRow) -> String {
    format!("{}:{}", row.created_at_ms, row.execution_id)
}

fn parse_page_token(token: &str) -> Result<(i64, String), StoreError> {
    let bad = || StoreError::InvalidArgument(format!("bad page token {token:?}"));
    let (created, id) = token.split_once(':').ok_or_else(bad)?;
    Ok((created.parse().map_err(|_| bad())?, id.to_string()))
}

/// A page of executions, newest first.
pub(crate) async fn list_executions(
    conn: &mut PgConn,
    filter: &ExecutionFilter,
) -> PgResult<ExecutionPage> {
    let size = match filter.page_size {
        0 => DEFAULT_PAGE_SIZE,
        n => n.min(MAX_PAGE_SIZE),
    };
    let after = filter.page_token.as_deref().map(parse_page_token).transpose()?;
    let (after_created, after_id) = match after {
        Some((c, id)) => (Some(c), Some(id)),
        None => (None, None),
    };
    // One extra row tells whether another page follows.
    let limit = to_i64(u64::from(size) + 1, "page size")?;
    let found = conn
        .query(
            sql::EXECUTION_LIST,
            &[
                &filter.status,
                &filter.workflow,
                &filter.parent_id,
                &after_created,
                &after_id,
                &limit,
            ],
        )
        .await?;
    let mut executions = rows::all(&found, rows::execution)?;
    let more = executions.len() > size as usize;
    executions.truncate(size as usize);
    let next_page_token = if more { executions.last().map(page_token) } else { None };
    Ok(ExecutionPage { executions, next_page_token })
}

/// The database's transaction counters (see [`crate::DbStats`]). `pg_current_xact_id()`
/// assigns this statement an id, so each reading counts itself once.
pub(crate) async fn stats(conn: &mut PgConn) -> PgResult<crate::DbStats> {
    let found = conn
        .query(
            "SELECT pg_current_xact_id()::text::bigint,
                (SELECT xact_commit FROM pg_stat_database WHERE datname = current_database())",
            &[],
        )
        .await?;
    let row = found.first().ok_or_else(|| {
        super::error::PgErr::Store(crate::StoreError::Storage("no statistics row".into()))
    })?;
    let (xid, commits): (i64, i64) = (row.try_get(0)?, row.try_get(1)?);
    Ok(crate::DbStats {
        write_transactions: u64::try_from(xid).unwrap_or(0),
        commits: u64::try_from(commits).unwrap_or(0),
    })
}
