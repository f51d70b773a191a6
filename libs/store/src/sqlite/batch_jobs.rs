//! The `batches` and `batch_items` tables on SQLite. The single writer serialises every
//! write, so each function here is one transaction (the writer's savepoint) and a lease
//! check followed by a write cannot race another writer.

use super::rows::{to_i64, to_u64};
use crate::batch_job::{BatchItem, BatchRow, BatchSelector, BatchState, ItemOutcome};
use crate::batch_select::{catalog, needs_search, selection};
use crate::error::Result;
use orbit_query::{Dialect, SqlValue};
use rusqlite::types::ToSql;
use rusqlite::{params, Connection, OptionalExtension, Row};

const COLUMNS: &str = "batch_id, workflow, spec, state, request_id, cursor_id, total, done, \
    succeeded, failed, skipped, reason, lease_holder, lease_until, created_at, updated_at";

struct RawRow {
    batch_id: String,
    workflow: String,
    spec: String,
    state: String,
    request_id: Option<String>,
    cursor: Option<String>,
    counts: [i64; 5],
    reason: String,
    lease_holder: Option<String>,
    lease_until: Option<i64>,
    created_at: i64,
    updated_at: i64,
}

fn raw(r: &Row<'_>) -> rusqlite::Result<RawRow> {
    Ok(RawRow {
        batch_id: r.get(0)?,
        workflow: r.get(1)?,
        spec: r.get(2)?,
        state: r.get(3)?,
        request_id: r.get(4)?,
        cursor: r.get(5)?,
        counts: [r.get(6)?, r.get(7)?, r.get(8)?, r.get(9)?, r.get(10)?],
        reason: r.get(11)?,
        lease_holder: r.get(12)?,
        lease_until: r.get(13)?,
        created_at: r.get(14)?,
        updated_at: r.get(15)?,
    })
}

impl RawRow {
    fn row(self) -> Result<BatchRow> {
        let [total, done, succeeded, failed, skipped] = self.counts;
        Ok(BatchRow {
            batch_id: self.batch_id,
            workflow: self.workflow,
            spec: self.spec,
            state: BatchState::parse(&self.state)?,
            request_id: self.request_id,
            cursor: self.cursor,
            total: to_u64(total, "batch total")?,
            done: to_u64(done, "batch done")?,
            succeeded: to_u64(succeeded, "batch succeeded")?,
            failed: to_u64(failed, "batch failed")?,
            skipped: to_u64(skipped, "batch skipped")?,
            reason: self.reason,
            lease_holder: self.lease_holder,
            lease_until_ms: self.lease_until.map(|v| to_u64(v, "batch lease_until")).transpose()?,
            created_at_ms: to_u64(self.created_at, "batch created_at")?,
            updated_at_ms: to_u64(self.updated_at, "batch updated_at")?,
        })
    }
}

fn one(conn: &Connection, sql: &str, params: impl rusqlite::Params) -> Result<Option<BatchRow>> {
    let found = conn.prepare_cached(sql)?.query_row(params, raw).optional()?;
    found.map(RawRow::row).transpose()
}

/// One batch.
pub(crate) fn get(conn: &Connection, id: &str) -> Result<Option<BatchRow>> {
    one(conn, &format!("SELECT {COLUMNS} FROM batches WHERE batch_id = ?1"), [id])
}

/// Inserts unless the id or the request id exists.
pub(crate) fn create(conn: &mut Connection, r: &BatchRow) -> Result<(BatchRow, bool)> {
    let sql = format!(
        "INSERT INTO batches ({COLUMNS}) VALUES \
         (?1, ?2, ?3, ?4, ?5, NULL, ?6, 0, 0, 0, 0, ?7, NULL, NULL, ?8, ?8) ON CONFLICT DO NOTHING"
    );
    let inserted = conn.prepare_cached(&sql)?.execute(params![
        r.batch_id,
        r.workflow,
        r.spec,
        r.state.as_str(),
        r.request_id,
        to_i64(r.total, "total")?,
        r.reason,
        to_i64(r.created_at_ms, "created_at")?,
    ])? == 1;
    let stored = match (&r.request_id, inserted) {
        (Some(request), false) => {
            one(conn, &format!("SELECT {COLUMNS} FROM batches WHERE request_id = ?1"), [request])?
        }
        _ => None,
    };
    let stored = match stored {
        Some(s) => s,
        None => get(conn, &r.batch_id)?
            .ok_or_else(|| crate::StoreError::Storage("batch vanished after insert".into()))?,
    };
    Ok((stored, inserted))
}

/// A page, newest first.
pub(crate) fn list(conn: &Connection, before: Option<&str>, limit: u32) -> Result<Vec<BatchRow>> {
    let sql = format!(
        "SELECT {COLUMNS} FROM batches WHERE (?1 IS NULL OR batch_id < ?1) \
         ORDER BY batch_id DESC LIMIT ?2"
    );
    let mut stmt = conn.prepare_cached(&sql)?;
    let raw: Vec<RawRow> =
        stmt.query_map(params![before, i64::from(limit)], raw)?.collect::<rusqlite::Result<_>>()?;
    raw.into_iter().map(RawRow::row).collect()
}

/// RUNNING → CANCELLED.
pub(crate) fn cancel(
    conn: &mut Connection,
    id: &str,
    reason: &str,
    now_ms: u64,
) -> Result<Option<BatchRow>> {
    let sql = "UPDATE batches SET state = 'CANCELLED', reason = ?2, updated_at = ?3 \
        WHERE batch_id = ?1 AND state = 'RUNNING'";
    conn.prepare_cached(sql)?.execute(params![id, reason, to_i64(now_ms, "now")?])?;
    get(conn, id)
}

/// Whether a batch is there to lease (a read, so an idle runner writes nothing).
pub(crate) fn leasable(conn: &Connection, holder: &str, now_ms: u64) -> Result<bool> {
    let sql = "SELECT 1 FROM batches WHERE state = 'RUNNING' AND \
        (lease_until IS NULL OR lease_until <= ?1 OR lease_holder = ?2) LIMIT 1";
    let found: Option<i64> = conn
        .prepare_cached(sql)?
        .query_row(params![to_i64(now_ms, "now")?, holder], |r| r.get(0))
        .optional()?;
    Ok(found.is_some())
}

/// Leases one batch.
pub(crate) fn lease(
    conn: &mut Connection,
    holder: &str,
    now_ms: u64,
    lease_ms: u64,
) -> Result<Option<BatchRow>> {
    let sql = format!(
        "UPDATE batches SET lease_holder = ?2, lease_until = ?3 WHERE batch_id = \
         (SELECT batch_id FROM batches WHERE state = 'RUNNING' AND \
          (lease_until IS NULL OR lease_until <= ?1 OR lease_holder = ?2) \
          ORDER BY created_at, batch_id LIMIT 1) RETURNING {COLUMNS}"
    );
    let until = to_i64(now_ms.saturating_add(lease_ms), "lease_until")?;
    one(conn, &sql, params![to_i64(now_ms, "now")?, holder, until])
}

/// Extends a held lease.
pub(crate) fn renew(
    conn: &mut Connection,
    id: &str,
    holder: &str,
    now_ms: u64,
    lease_ms: u64,
) -> Result<Option<BatchRow>> {
    let sql = format!(
        "UPDATE batches SET lease_until = ?3 WHERE batch_id = ?1 AND lease_holder = ?2 \
         RETURNING {COLUMNS}"
    );
    let until = to_i64(now_ms.saturating_add(lease_ms), "lease_until")?;
    one(conn, &sql, params![id, holder, until])
}

/// Whether `holder` holds batch `id` (and, with `running`, whether it is RUNNING).
fn held(conn: &Connection, id: &str, holder: &str, running: bool) -> Result<bool> {
    let sql = "SELECT state FROM batches WHERE batch_id = ?1 AND lease_holder = ?2";
    let state: Option<String> =
        conn.prepare_cached(sql)?.query_row(params![id, holder], |r| r.get(0)).optional()?;
    Ok(state.is_some_and(|s| !running || s == BatchState::Running.as_str()))
}

/// A PENDING item and the cursor, under the lease.
pub(crate) fn begin(
    conn: &mut Connection,
    id: &str,
    holder: &str,
    execution_id: &str,
    now_ms: u64,
) -> Result<bool> {
    if !held(conn, id, holder, true)? {
        return Ok(false);
    }
    conn.prepare_cached(
        "INSERT INTO batch_items (batch_id, execution_id, outcome) VALUES (?1, ?2, 'PENDING') \
         ON CONFLICT DO NOTHING",
    )?
    .execute(params![id, execution_id])?;
    conn.prepare_cached(
        "UPDATE batches SET cursor_id = CASE WHEN cursor_id IS NULL OR cursor_id < ?2 \
         THEN ?2 ELSE cursor_id END, updated_at = ?3 WHERE batch_id = ?1",
    )?
    .execute(params![id, execution_id, to_i64(now_ms, "now")?])?;
    Ok(true)
}

/// An outcome and its counters, under the lease.
pub(crate) fn record(
    conn: &mut Connection,
    holder: &str,
    item: &BatchItem,
    now_ms: u64,
) -> Result<Option<BatchRow>> {
    if !held(conn, &item.batch_id, holder, false)? {
        return Ok(None);
    }
    let changed = conn
        .prepare_cached(
            "UPDATE batch_items SET outcome = ?3, code = ?4, message = ?5, seq = ?6 \
             WHERE batch_id = ?1 AND execution_id = ?2 AND outcome = 'PENDING'",
        )?
        .execute(params![
            item.batch_id,
            item.execution_id,
            item.outcome.as_str(),
            item.code,
            item.message,
            to_i64(item.seq, "seq")?,
        ])?;
    if changed == 1 {
        let n = |o: ItemOutcome| i64::from(item.outcome == o);
        conn.prepare_cached(
            "UPDATE batches SET done = done + 1, succeeded = succeeded + ?2, \
             failed = failed + ?3, skipped = skipped + ?4, updated_at = ?5 WHERE batch_id = ?1",
        )?
        .execute(params![
            item.batch_id,
            n(ItemOutcome::Succeeded),
            n(ItemOutcome::Failed),
            n(ItemOutcome::Skipped),
            to_i64(now_ms, "now")?,
        ])?;
    }
    get(conn, &item.batch_id)
}

/// Ends a run: the state, and the lease dropped.
pub(crate) fn finish(
    conn: &mut Connection,
    id: &str,
    holder: &str,
    state: Option<BatchState>,
    now_ms: u64,
) -> Result<bool> {
    let sql = "UPDATE batches SET \
        state = CASE WHEN state = 'RUNNING' AND ?3 IS NOT NULL THEN ?3 ELSE state END, \
        total = CASE WHEN state = 'RUNNING' AND ?3 = 'COMPLETED' THEN done ELSE total END, \
        lease_holder = NULL, lease_until = NULL, updated_at = ?4 \
        WHERE batch_id = ?1 AND lease_holder = ?2";
    let n = conn.prepare_cached(sql)?.execute(params![
        id,
        holder,
        state.map(BatchState::as_str),
        to_i64(now_ms, "now")?
    ])?;
    Ok(n == 1)
}

/// A page of items by execution id.
pub(crate) fn items(
    conn: &Connection,
    id: &str,
    after: Option<&str>,
    outcome: Option<ItemOutcome>,
    limit: u32,
) -> Result<Vec<BatchItem>> {
    let sql = "SELECT execution_id, outcome, code, message, seq FROM batch_items \
        WHERE batch_id = ?1 AND (?2 IS NULL OR execution_id > ?2) \
        AND (?3 IS NULL OR outcome = ?3) ORDER BY execution_id LIMIT ?4";
    let mut stmt = conn.prepare_cached(sql)?;
    let rows: Vec<(String, String, String, String, i64)> = stmt
        .query_map(params![id, after, outcome.map(ItemOutcome::as_str), i64::from(limit)], |r| {
            Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?, r.get(4)?))
        })?
        .collect::<rusqlite::Result<_>>()?;
    rows.into_iter()
        .map(|(execution_id, outcome, code, message, seq)| {
            Ok(BatchItem {
                batch_id: id.to_string(),
                execution_id,
                outcome: ItemOutcome::parse(&outcome)?,
                code,
                message,
                seq: to_u64(seq, "batch item seq")?,
            })
        })
        .collect()
}

/// The catalog `selector`'s query is compiled against (declared search attributes read
/// only when it names one).
fn catalog_of(conn: &Connection, selector: &BatchSelector) -> Result<orbit_query::Catalog> {
    if needs_search(selector) {
        return Ok(catalog(super::search::list(conn)?));
    }
    Ok(orbit_query::Catalog::system())
}

/// The selected execution ids after `after`.
pub(crate) fn targets(
    conn: &Connection,
    selector: &BatchSelector,
    after: Option<&str>,
    limit: u32,
) -> Result<Vec<String>> {
    let sel = selection(selector, &catalog_of(conn, selector)?, after, Dialect::Sqlite)?;
    // The text varies with the selector: prepared for this call only, so it never evicts
    // the hot path's statements from the connection's cache.
    let mut stmt = conn.prepare(&sel.page_sql(limit))?;
    let values: Vec<&dyn ToSql> = sel.params.iter().map(param).collect();
    let ids = stmt.query_map(values.as_slice(), |r| r.get(0))?.collect::<rusqlite::Result<_>>()?;
    Ok(ids)
}

/// How many executions the selector matches.
pub(crate) fn count_targets(conn: &Connection, selector: &BatchSelector) -> Result<u64> {
    let sel = selection(selector, &catalog_of(conn, selector)?, None, Dialect::Sqlite)?;
    let values: Vec<&dyn ToSql> = sel.params.iter().map(param).collect();
    let n: i64 = conn.prepare(&sel.count_sql())?.query_row(values.as_slice(), |r| r.get(0))?;
    to_u64(n, "count")
}

/// A selection's value as a parameter.
fn param(value: &SqlValue) -> &dyn ToSql {
    match value {
        SqlValue::Text(s) => s,
        SqlValue::Int(n) => n,
        SqlValue::Double(x) => x,
        SqlValue::Bool(b) => b,
    }
}

#[async_trait::async_trait]
impl crate::roles::BatchJobs for super::SqliteStore {
    async fn create_batch(&self, row: &BatchRow) -> Result<(BatchRow, bool)> {
        let row = row.clone();
        self.writer.run(move |c| create(c, &row)).await
    }

    async fn get_batch(&self, batch_id: &str) -> Result<Option<BatchRow>> {
        let id = batch_id.to_string();
        self.readers.run(move |c| get(c, &id)).await
    }

    async fn list_batches(&self, before_id: Option<&str>, limit: u32) -> Result<Vec<BatchRow>> {
        let before = before_id.map(str::to_string);
        self.readers.run(move |c| list(c, before.as_deref(), limit)).await
    }

    async fn cancel_batch(
        &self,
        batch_id: &str,
        reason: &str,
        now_ms: u64,
    ) -> Result<Option<BatchRow>> {
        let (id, reason) = (batch_id.to_string(), reason.to_string());
        self.writer.run(move |c| cancel(c, &id, &reason, now_ms)).await
    }

    async fn lease_batch(
        &self,
        holder: &str,
        now_ms: u64,
        lease_ms: u64,
    ) -> Result<Option<BatchRow>> {
        let holder = holder.to_string();
        let probe = holder.clone();
        // A read first: an idle runner's look-ups never take the writer.
        if !self.readers.run(move |c| leasable(c, &probe, now_ms)).await? {
            return Ok(None);
        }
        self.writer.run(move |c| lease(c, &holder, now_ms, lease_ms)).await
    }

    async fn renew_batch_lease(
        &self,
        batch_id: &str,
        holder: &str,
        now_ms: u64,
        lease_ms: u64,
    ) -> Result<Option<BatchRow>> {
        let (id, holder) = (batch_id.to_string(), holder.to_string());
        self.writer.run(move |c| renew(c, &id, &holder, now_ms, lease_ms)).await
    }

    async fn begin_batch_item(
        &self,
        batch_id: &str,
        holder: &str,
        execution_id: &str,
        now_ms: u64,
    ) -> Result<bool> {
        let (id, holder, execution) =
            (batch_id.to_string(), holder.to_string(), execution_id.to_string());
        self.writer.run(move |c| begin(c, &id, &holder, &execution, now_ms)).await
    }

    async fn record_batch_item(
        &self,
        holder: &str,
        item: &BatchItem,
        now_ms: u64,
    ) -> Result<Option<BatchRow>> {
        let (holder, item) = (holder.to_string(), item.clone());
        self.writer.run(move |c| record(c, &holder, &item, now_ms)).await
    }

    async fn finish_batch(
        &self,
        batch_id: &str,
        holder: &str,
        state: Option<BatchState>,
        now_ms: u64,
    ) -> Result<bool> {
        let (id, holder) = (batch_id.to_string(), holder.to_string());
        self.writer.run(move |c| finish(c, &id, &holder, state, now_ms)).await
    }

    async fn list_batch_items(
        &self,
        batch_id: &str,
        after: Option<&str>,
        outcome: Option<ItemOutcome>,
        limit: u32,
    ) -> Result<Vec<BatchItem>> {
        let (id, after) = (batch_id.to_string(), after.map(str::to_string));
        self.readers.run(move |c| items(c, &id, after.as_deref(), outcome, limit)).await
    }

    async fn batch_targets(
        &self,
        selector: &BatchSelector,
        after: Option<&str>,
        limit: u32,
    ) -> Result<Vec<String>> {
        let (selector, after) = (selector.clone(), after.map(str::to_string));
        self.readers.run(move |c| targets(c, &selector, after.as_deref(), limit)).await
    }

    async fn count_batch_targets(&self, selector: &BatchSelector) -> Result<u64> {
        let selector = selector.clone();
        self.readers.run(move |c| count_targets(c, &selector)).await
    }
}
