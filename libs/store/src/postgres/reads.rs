//! Definitions, histories and the executions projection on PostgreSQL.
//!
//! Everything here is one statement; `put_definition` is the only write (an insert that
//! skips a taken (name, version), then the stored hash decides).

use super::conn::{all_ok, pipeline, step, PgConn};
use super::error::PgResult;
use super::rows::{self, get};
use super::sql;
use crate::error::StoreError;
use crate::model::{
    DefinitionRow, ExecutionFilter, ExecutionPage, ExecutionRow, ListOrder, PutOutcome,
};
use orbit_engine::HistoryEvent;
use tokio_postgres::types::ToSql;

/// Registers a definition: the insert and the read of the stored hash are pipelined (each
/// its own statement, one round trip).
pub(crate) async fn put_definition(
    conn: &mut PgConn,
    name: &str,
    version: &str,
    hash: &str,
    document: &str,
) -> PgResult<PutOutcome> {
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
        return Ok(PutOutcome::Created);
    }
    let Some(row) = results.get(1).and_then(|r| r.first()) else {
        return Err(StoreError::Storage(format!("definition {name}@{version} vanished")).into());
    };
    let stored: String = get(row, 0, "definition hash")?;
    if stored == hash {
        Ok(PutOutcome::Unchanged)
    } else {
        Err(StoreError::Conflict(format!(
            "definition {name}@{version} is registered with hash {stored}, not {hash}"
        ))
        .into())
    }
}

/// One version, or the latest (`orbit_definition::version::latest`).
pub(crate) async fn get_definition(
    conn: &mut PgConn,
    name: &str,
    version: Option<&str>,
) -> PgResult<Option<DefinitionRow>> {
    let latest;
    let version = match version {
        Some(v) => v,
        None => match crate::VersionRow::latest(definition_versions(conn, name).await?) {
            Some(v) => {
                latest = v.version;
                &latest
            }
            None => return Ok(None),
        },
    };
    let found = conn.query(sql::DEFINITION_GET, &[&name, &version]).await?;
    Ok(found.first().map(rows::definition).transpose()?)
}

/// The versions of `name` with their hashes, in registration order.
pub(crate) async fn definition_versions(
    conn: &mut PgConn,
    name: &str,
) -> PgResult<Vec<crate::VersionRow>> {
    let found = conn.query(sql::DEFINITION_VERSIONS, &[&name]).await?;
    Ok(rows::all(&found, |r| {
        Ok(crate::VersionRow {
            version: rows::get(r, 0, "definition version")?,
            definition_hash: rows::get(r, 1, "definition hash")?,
        })
    })?)
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

/// The projections of those of `ids` that exist.
pub(crate) async fn get_executions(
    conn: &mut PgConn,
    ids: &[String],
) -> PgResult<Vec<ExecutionRow>> {
    let found = conn.query(sql::EXECUTION_GET_MANY, &[&ids]).await?;
    Ok(rows::all(&found, rows::execution)?)
}

/// A page of executions, newest first.
pub(crate) async fn list_executions(
    conn: &mut PgConn,
    filter: &ExecutionFilter,
) -> PgResult<ExecutionPage> {
    let w = filter.window()?;
    let status = filter.status.map(orbit_engine::Status::as_str);
    let fixed: [&(dyn ToSql + Sync); 7] = [
        &status,
        &filter.workflow,
        &filter.parent_id,
        &w.after_created,
        &w.after_id,
        &w.limit,
        &filter.schedule_id,
    ];
    let first = sql::EXECUTION_LIST_QUERY_FIRST_PARAM;
    let pg = orbit_query::Dialect::Postgres;
    let compiled = match (&filter.query, w.order) {
        (None, _) => None,
        (Some(query), ListOrder::Created { ascending }) => {
            let compiled = orbit_query::compile(query, pg, first);
            Some((sql::execution_list_query(&compiled.where_sql, ascending, None), compiled))
        }
        (Some(query), ListOrder::Keyset(_)) => {
            let compiled = orbit_query::compile_page(query, pg, first, w.after.as_ref());
            let order = compiled.order_sql.as_deref();
            Some((sql::execution_list_query(&compiled.where_sql, false, order), compiled))
        }
    };
    let found = match &compiled {
        None => conn.query(sql::EXECUTION_LIST, &fixed).await?,
        Some((text, compiled)) => {
            let mut params: Vec<&(dyn ToSql + Sync)> = fixed.to_vec();
            params.extend(compiled.params.iter().map(query_param));
            conn.client().query(text.as_str(), &params).await?
        }
    };
    Ok(ExecutionPage::from_rows(rows::all(&found, rows::execution)?, &w))
}

/// A count (`crate::count`): one statement, unprepared (its text is made per query).
pub(crate) async fn count_executions(
    conn: &mut PgConn,
    filter: &crate::CountFilter,
) -> PgResult<crate::ExecutionCounts> {
    let (text, values) = crate::count::count_sql(filter, orbit_query::Dialect::Postgres);
    let params: Vec<&(dyn ToSql + Sync)> = values.iter().map(query_param).collect();
    let found = conn.client().query(text.as_str(), &params).await?;
    let groups = filter.group_by.len();
    let mut rows = Vec::with_capacity(found.len());
    for row in &found {
        let values = (0..groups).map(|i| row.try_get(i)).collect::<Result<Vec<_>, _>>()?;
        rows.push((values, row.try_get::<_, i64>(groups)?));
    }
    Ok(crate::count::from_rows(groups > 0, rows))
}

/// A list query's value as a parameter (the SQL casts each placeholder to its type).
fn query_param(value: &orbit_query::SqlValue) -> &(dyn ToSql + Sync) {
    match value {
        orbit_query::SqlValue::Text(s) => s,
        orbit_query::SqlValue::Int(n) => n,
        orbit_query::SqlValue::Double(x) => x,
        orbit_query::SqlValue::Bool(b) => b,
    }
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
        statements: statements(conn).await,
    })
}

/// [`crate::DbStats::statements`]: `None` when the view is missing or unreadable.
async fn statements(conn: &mut PgConn) -> Option<u64> {
    let exists = "SELECT to_regclass('pg_stat_statements') IS NOT NULL";
    let found = conn.query(exists, &[]).await.ok()?;
    if !found.first()?.try_get::<_, bool>(0).ok()? {
        return None;
    }
    let sum = "SELECT coalesce(sum(calls), 0)::bigint FROM pg_stat_statements \
        WHERE dbid = (SELECT oid FROM pg_database WHERE datname = current_database()) \
        AND query NOT IN ('BEGIN', 'COMMIT', 'ROLLBACK')";
    let found = conn.query(sum, &[]).await.ok()?;
    u64::try_from(found.first()?.try_get::<_, i64>(0).ok()?).ok()
}

/// Executions not closed, through `executions_by_status` (one range per open status).
pub(crate) async fn count_active(conn: &mut PgConn) -> PgResult<u64> {
    let sql = "SELECT COUNT(*) FROM executions \
        WHERE status IN ('PENDING', 'RUNNING', 'COMPENSATING', 'SUSPENDED')";
    let found = conn.query(sql, &[]).await?;
    let n: i64 = found.first().map_or(0, |row| row.get(0));
    Ok(u64::try_from(n).unwrap_or(0))
}
