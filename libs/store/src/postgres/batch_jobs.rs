//! The `batches` and `batch_items` tables on PostgreSQL. Every write is ONE statement (its
//! own transaction): the lease check locks the batch row (`FOR UPDATE` in a CTE, so a
//! concurrent takeover is seen before anything is written) and the item and the batch's
//! cursor or counters change together or not at all. Leases are taken with `SKIP LOCKED`.

use super::conn::PgConn;
use super::error::PgResult;
use super::rows::{get, get_u64, to_i64};
use crate::batch_job::{BatchItem, BatchRow, BatchSelector, BatchState, ItemOutcome};
use crate::batch_select::{catalog, needs_search, selection};
use crate::error::{Result, StoreError};
use orbit_query::{Dialect, SqlValue};
use tokio_postgres::types::ToSql;
use tokio_postgres::Row;

macro_rules! columns {
    () => {
        "batch_id, workflow, spec, state, request_id, cursor_id, total, done, succeeded, \
         failed, skipped, reason, lease_holder, lease_until, created_at, updated_at"
    };
}

const GET: &str = concat!("SELECT ", columns!(), " FROM batches WHERE batch_id = $1");
const BY_REQUEST: &str = concat!("SELECT ", columns!(), " FROM batches WHERE request_id = $1");
const INSERT: &str = concat!(
    "INSERT INTO batches (",
    columns!(),
    ") VALUES ($1, $2, $3, $4, $5, NULL, $6, 0, 0, 0, 0, $7, NULL, NULL, $8, $8) \
     ON CONFLICT DO NOTHING RETURNING 1"
);
const LIST: &str = concat!(
    "SELECT ",
    columns!(),
    " FROM batches WHERE ($1::TEXT IS NULL OR batch_id < $1) ORDER BY batch_id DESC LIMIT $2"
);
const CANCEL: &str = concat!(
    "UPDATE batches SET state = 'CANCELLED', reason = $2, updated_at = $3 \
     WHERE batch_id = $1 AND state = 'RUNNING' RETURNING ",
    columns!()
);
const LEASE: &str = concat!(
    "UPDATE batches SET lease_holder = $2, lease_until = $3 WHERE batch_id = \
     (SELECT batch_id FROM batches WHERE state = 'RUNNING' AND \
      (lease_until IS NULL OR lease_until <= $1 OR lease_holder = $2) \
      ORDER BY created_at, batch_id LIMIT 1 FOR UPDATE SKIP LOCKED) RETURNING ",
    columns!()
);
const RENEW: &str = concat!(
    "UPDATE batches SET lease_until = $3 WHERE batch_id = $1 AND lease_holder = $2 RETURNING ",
    columns!()
);
const BEGIN_ITEM: &str = "WITH b AS (SELECT batch_id AS held FROM batches \
      WHERE batch_id = $1 AND lease_holder = $2 AND state = 'RUNNING' FOR UPDATE), \
    ins AS (INSERT INTO batch_items (batch_id, execution_id, outcome) \
      SELECT held, $3, 'PENDING' FROM b ON CONFLICT DO NOTHING) \
    UPDATE batches SET cursor_id = CASE WHEN cursor_id IS NULL OR cursor_id < $3 \
      THEN $3 ELSE cursor_id END, updated_at = $4 FROM b WHERE batch_id = b.held RETURNING 1";
const RECORD: &str = concat!(
    "WITH b AS (SELECT batch_id AS held FROM batches \
       WHERE batch_id = $1 AND lease_holder = $2 FOR UPDATE), \
     up AS (UPDATE batch_items SET outcome = $4, code = $5, message = $6, seq = $7 \
       WHERE batch_id = (SELECT held FROM b) AND execution_id = $3 AND outcome = 'PENDING' \
       RETURNING outcome) \
     UPDATE batches SET done = done + (SELECT COUNT(*) FROM up), \
       succeeded = succeeded + (SELECT COUNT(*) FROM up WHERE outcome = 'SUCCEEDED'), \
       failed = failed + (SELECT COUNT(*) FROM up WHERE outcome = 'FAILED'), \
       skipped = skipped + (SELECT COUNT(*) FROM up WHERE outcome = 'SKIPPED'), \
       updated_at = $8 FROM b WHERE batch_id = b.held RETURNING ",
    columns!()
);
const FINISH: &str = "UPDATE batches SET \
    state = CASE WHEN state = 'RUNNING' AND $3::TEXT IS NOT NULL THEN $3::TEXT ELSE state END, \
    total = CASE WHEN state = 'RUNNING' AND $3::TEXT = 'COMPLETED' THEN done ELSE total END, \
    lease_holder = NULL, lease_until = NULL, updated_at = $4 \
    WHERE batch_id = $1 AND lease_holder = $2";
const ITEMS: &str = "SELECT execution_id, outcome, code, message, seq FROM batch_items \
    WHERE batch_id = $1 AND ($2::TEXT IS NULL OR execution_id > $2) \
    AND ($3::TEXT IS NULL OR outcome = $3) ORDER BY execution_id LIMIT $4";
fn batch(r: &Row) -> Result<BatchRow> {
    let state: String = get(r, 3, "batch state")?;
    let lease_until: Option<i64> = get(r, 13, "batch lease_until")?;
    Ok(BatchRow {
        batch_id: get(r, 0, "batch_id")?,
        workflow: get(r, 1, "batch workflow")?,
        spec: get(r, 2, "batch spec")?,
        state: BatchState::parse(&state)?,
        request_id: get(r, 4, "batch request_id")?,
        cursor: get(r, 5, "batch cursor_id")?,
        total: get_u64(r, 6, "batch total")?,
        done: get_u64(r, 7, "batch done")?,
        succeeded: get_u64(r, 8, "batch succeeded")?,
        failed: get_u64(r, 9, "batch failed")?,
        skipped: get_u64(r, 10, "batch skipped")?,
        reason: get(r, 11, "batch reason")?,
        lease_holder: get(r, 12, "batch lease_holder")?,
        lease_until_ms: lease_until
            .map(|v| u64::try_from(v).map_err(|_| StoreError::corrupt("batch lease_until", v)))
            .transpose()?,
        created_at_ms: get_u64(r, 14, "batch created_at")?,
        updated_at_ms: get_u64(r, 15, "batch updated_at")?,
    })
}

fn first(found: &[Row]) -> Result<Option<BatchRow>> {
    found.first().map(batch).transpose()
}

/// One batch.
pub(crate) async fn get_one(conn: &mut PgConn, id: &str) -> PgResult<Option<BatchRow>> {
    Ok(first(&conn.query(GET, &[&id]).await?)?)
}

/// Inserts unless the id or the request id exists.
pub(crate) async fn create(conn: &mut PgConn, r: &BatchRow) -> PgResult<(BatchRow, bool)> {
    let total = to_i64(r.total, "total")?;
    let created = to_i64(r.created_at_ms, "created_at")?;
    let inserted = !conn
        .query(
            INSERT,
            &[
                &r.batch_id,
                &r.workflow,
                &r.spec,
                &r.state.as_str(),
                &r.request_id,
                &total,
                &r.reason,
                &created,
            ],
        )
        .await?
        .is_empty();
    let mut stored = None;
    if let (Some(request), false) = (&r.request_id, inserted) {
        stored = first(&conn.query(BY_REQUEST, &[request]).await?)?;
    }
    let stored = match stored {
        Some(s) => s,
        None => get_one(conn, &r.batch_id)
            .await?
            .ok_or_else(|| StoreError::Storage("batch vanished after insert".into()))?,
    };
    Ok((stored, inserted))
}

/// A page, newest first.
pub(crate) async fn list(
    conn: &mut PgConn,
    before: Option<&str>,
    limit: u32,
) -> PgResult<Vec<BatchRow>> {
    let found = conn.query(LIST, &[&before, &i64::from(limit)]).await?;
    Ok(found.iter().map(batch).collect::<Result<_>>()?)
}

/// RUNNING → CANCELLED; the row in any case.
pub(crate) async fn cancel(
    conn: &mut PgConn,
    id: &str,
    reason: &str,
    now_ms: u64,
) -> PgResult<Option<BatchRow>> {
    let now = to_i64(now_ms, "now")?;
    if let Some(row) = first(&conn.query(CANCEL, &[&id, &reason, &now]).await?)? {
        return Ok(Some(row));
    }
    get_one(conn, id).await
}

/// Leases one batch.
pub(crate) async fn lease(
    conn: &mut PgConn,
    holder: &str,
    now_ms: u64,
    lease_ms: u64,
) -> PgResult<Option<BatchRow>> {
    let now = to_i64(now_ms, "now")?;
    let until = to_i64(now_ms.saturating_add(lease_ms), "lease_until")?;
    Ok(first(&conn.query(LEASE, &[&now, &holder, &until]).await?)?)
}

/// Extends a held lease.
pub(crate) async fn renew(
    conn: &mut PgConn,
    id: &str,
    holder: &str,
    now_ms: u64,
    lease_ms: u64,
) -> PgResult<Option<BatchRow>> {
    let until = to_i64(now_ms.saturating_add(lease_ms), "lease_until")?;
    Ok(first(&conn.query(RENEW, &[&id, &holder, &until]).await?)?)
}

/// A PENDING item and the cursor, under the lease.
pub(crate) async fn begin(
    conn: &mut PgConn,
    id: &str,
    holder: &str,
    execution_id: &str,
    now_ms: u64,
) -> PgResult<bool> {
    let now = to_i64(now_ms, "now")?;
    Ok(!conn.query(BEGIN_ITEM, &[&id, &holder, &execution_id, &now]).await?.is_empty())
}

/// An outcome and its counters, under the lease.
pub(crate) async fn record(
    conn: &mut PgConn,
    holder: &str,
    item: &BatchItem,
    now_ms: u64,
) -> PgResult<Option<BatchRow>> {
    let (seq, now) = (to_i64(item.seq, "seq")?, to_i64(now_ms, "now")?);
    let found = conn
        .query(
            RECORD,
            &[
                &item.batch_id,
                &holder,
                &item.execution_id,
                &item.outcome.as_str(),
                &item.code,
                &item.message,
                &seq,
                &now,
            ],
        )
        .await?;
    Ok(first(&found)?)
}

/// Ends a run.
pub(crate) async fn finish(
    conn: &mut PgConn,
    id: &str,
    holder: &str,
    state: Option<BatchState>,
    now_ms: u64,
) -> PgResult<bool> {
    let (state, now) = (state.map(BatchState::as_str), to_i64(now_ms, "now")?);
    let stmt = conn.prepare_one(FINISH).await?;
    Ok(conn.client().execute(&stmt, &[&id, &holder, &state, &now]).await? == 1)
}

/// A page of items.
pub(crate) async fn items(
    conn: &mut PgConn,
    id: &str,
    after: Option<&str>,
    outcome: Option<ItemOutcome>,
    limit: u32,
) -> PgResult<Vec<BatchItem>> {
    let outcome = outcome.map(ItemOutcome::as_str);
    let found = conn.query(ITEMS, &[&id, &after, &outcome, &i64::from(limit)]).await?;
    let item = |r: &Row| -> Result<BatchItem> {
        let outcome: String = get(r, 1, "batch item outcome")?;
        Ok(BatchItem {
            batch_id: id.to_string(),
            execution_id: get(r, 0, "batch item execution_id")?,
            outcome: ItemOutcome::parse(&outcome)?,
            code: get(r, 2, "batch item code")?,
            message: get(r, 3, "batch item message")?,
            seq: get_u64(r, 4, "batch item seq")?,
        })
    };
    Ok(found.iter().map(item).collect::<Result<_>>()?)
}

/// The selected ids after `after`.
pub(crate) async fn targets(
    conn: &mut PgConn,
    s: &BatchSelector,
    after: Option<&str>,
    limit: u32,
) -> PgResult<Vec<String>> {
    let sel = selection(s, &catalog_of(conn, s).await?, after, Dialect::Postgres)?;
    let params: Vec<&(dyn ToSql + Sync)> = sel.params.iter().map(param).collect();
    let found = conn.client().query(sel.page_sql(limit).as_str(), &params).await?;
    Ok(found.iter().map(|r| get(r, 0, "execution_id")).collect::<Result<_>>()?)
}

/// The catalog `s`'s query is compiled against (declared search attributes read only when
/// it names one).
async fn catalog_of(conn: &mut PgConn, s: &BatchSelector) -> PgResult<orbit_query::Catalog> {
    if needs_search(s) {
        return Ok(catalog(super::search::list(conn).await?));
    }
    Ok(orbit_query::Catalog::system())
}

/// How many executions the selector matches.
pub(crate) async fn count_targets(conn: &mut PgConn, s: &BatchSelector) -> PgResult<u64> {
    let sel = selection(s, &catalog_of(conn, s).await?, None, Dialect::Postgres)?;
    let params: Vec<&(dyn ToSql + Sync)> = sel.params.iter().map(param).collect();
    let found = conn.client().query(sel.count_sql().as_str(), &params).await?;
    let Some(row) = found.first() else { return Ok(0) };
    Ok(get_u64(row, 0, "count")?)
}

/// A selection's value as a parameter (the SQL casts each placeholder to its type).
fn param(value: &SqlValue) -> &(dyn ToSql + Sync) {
    match value {
        SqlValue::Text(s) => s,
        SqlValue::Int(n) => n,
        SqlValue::Double(x) => x,
        SqlValue::Bool(b) => b,
    }
}

use super::{conn, error, Kind, PgStore};

#[async_trait::async_trait]
impl crate::roles::BatchJobs for PgStore {
    async fn create_batch(&self, row: &BatchRow) -> Result<(BatchRow, bool)> {
        run!(self, Kind::Write, |c| create(c, row))
    }

    async fn get_batch(&self, batch_id: &str) -> Result<Option<BatchRow>> {
        run!(self, Kind::Read, |c| get_one(c, batch_id))
    }

    async fn list_batches(&self, before_id: Option<&str>, limit: u32) -> Result<Vec<BatchRow>> {
        run!(self, Kind::Read, |c| list(c, before_id, limit))
    }

    async fn cancel_batch(
        &self,
        batch_id: &str,
        reason: &str,
        now_ms: u64,
    ) -> Result<Option<BatchRow>> {
        run!(self, Kind::Write, |c| cancel(c, batch_id, reason, now_ms))
    }

    async fn lease_batch(
        &self,
        holder: &str,
        now_ms: u64,
        lease_ms: u64,
    ) -> Result<Option<BatchRow>> {
        run!(self, Kind::Write, |c| lease(c, holder, now_ms, lease_ms))
    }

    async fn renew_batch_lease(
        &self,
        batch_id: &str,
        holder: &str,
        now_ms: u64,
        lease_ms: u64,
    ) -> Result<Option<BatchRow>> {
        run!(self, Kind::Write, |c| renew(c, batch_id, holder, now_ms, lease_ms))
    }

    async fn begin_batch_item(
        &self,
        batch_id: &str,
        holder: &str,
        execution_id: &str,
        now_ms: u64,
    ) -> Result<bool> {
        run!(self, Kind::Write, |c| begin(c, batch_id, holder, execution_id, now_ms))
    }

    async fn record_batch_item(
        &self,
        holder: &str,
        item: &BatchItem,
        now_ms: u64,
    ) -> Result<Option<BatchRow>> {
        run!(self, Kind::Write, |c| record(c, holder, item, now_ms))
    }

    async fn finish_batch(
        &self,
        batch_id: &str,
        holder: &str,
        state: Option<BatchState>,
        now_ms: u64,
    ) -> Result<bool> {
        run!(self, Kind::Write, |c| finish(c, batch_id, holder, state, now_ms))
    }

    async fn list_batch_items(
        &self,
        batch_id: &str,
        after: Option<&str>,
        outcome: Option<ItemOutcome>,
        limit: u32,
    ) -> Result<Vec<BatchItem>> {
        run!(self, Kind::Read, |c| items(c, batch_id, after, outcome, limit))
    }

    async fn batch_targets(
        &self,
        selector: &BatchSelector,
        after: Option<&str>,
        limit: u32,
    ) -> Result<Vec<String>> {
        run!(self, Kind::Read, |c| targets(c, selector, after, limit))
    }

    async fn count_batch_targets(&self, selector: &BatchSelector) -> Result<u64> {
        run!(self, Kind::Read, |c| count_targets(c, selector))
    }
}
