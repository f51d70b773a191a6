//! The `start_dedupe` and `start_debounce_fires` tables on PostgreSQL (see `crate::dedupe`).
//! Every method is ONE statement: the claim is an `INSERT … ON CONFLICT DO UPDATE` whose
//! `CASE`s decide from the row it locks, so concurrent starts of one key serialize on it;
//! the fire claim moves due rows and leases fires in one statement of data-modifying CTEs
//! (`SKIP LOCKED`: schedulers take disjoint rows). A claim that opens a debounce also
//! notifies `orbit_timers`, a second statement only then.

use super::conn::PgConn;
use super::error::PgResult;
use super::rows::{get, get_u64, to_i64};
use crate::dedupe::{keep_of, DebounceFire, DedupeClaim, DedupeRow, DedupeStart, Keep};
use crate::error::{Result, StoreError};
use tokio_postgres::Row;

/// `$1` workflow, `$2` key, `$3` keep, `$4` proposed id, `$5` now, `$6` window, `$7`
/// version, `$8` hash, `$9` input, `$10` priority, `$11` the longest debounce delay, `$12`
/// memo (the input's companion: every `CASE` keeps or replaces both).
/// `live`: a `last` row until it is moved, a `first` row until its window ends.
const CLAIM: &str = "INSERT INTO start_dedupe AS d (workflow, dedupe_key, keep, execution_id,
        first_at, window_end_at, version, definition_hash, input, priority, memo)
    VALUES ($1, $2, $3, $4, $5::BIGINT, $5::BIGINT + $6::BIGINT, $7, $8, $9, $10, $12)
    ON CONFLICT (workflow, dedupe_key) DO UPDATE SET
        keep = CASE WHEN d.keep = 'last' OR d.window_end_at > $5 THEN d.keep
            ELSE excluded.keep END,
        execution_id = CASE WHEN d.keep = 'last' OR d.window_end_at > $5 THEN d.execution_id
            ELSE excluded.execution_id END,
        first_at = CASE WHEN d.keep = 'last' OR d.window_end_at > $5 THEN d.first_at
            ELSE excluded.first_at END,
        window_end_at = CASE
            WHEN d.keep = 'last' AND excluded.keep = 'last'
                THEN LEAST(excluded.window_end_at, d.first_at + $11::BIGINT)
            WHEN d.keep = 'last' OR d.window_end_at > $5 THEN d.window_end_at
            ELSE excluded.window_end_at END,
        version = CASE WHEN d.keep = 'first' AND d.window_end_at > $5 THEN d.version
            WHEN d.keep = 'last' AND excluded.keep = 'first' THEN d.version
            ELSE excluded.version END,
        definition_hash = CASE WHEN d.keep = 'first' AND d.window_end_at > $5
                THEN d.definition_hash
            WHEN d.keep = 'last' AND excluded.keep = 'first' THEN d.definition_hash
            ELSE excluded.definition_hash END,
        input = CASE WHEN d.keep = 'first' AND d.window_end_at > $5 THEN d.input
            WHEN d.keep = 'last' AND excluded.keep = 'first' THEN d.input
            ELSE excluded.input END,
        priority = CASE WHEN d.keep = 'first' AND d.window_end_at > $5 THEN d.priority
            WHEN d.keep = 'last' AND excluded.keep = 'first' THEN d.priority
            ELSE excluded.priority END,
        memo = CASE WHEN d.keep = 'first' AND d.window_end_at > $5 THEN d.memo
            WHEN d.keep = 'last' AND excluded.keep = 'first' THEN d.memo
            ELSE excluded.memo END
    RETURNING keep, execution_id, first_at, window_end_at, version, definition_hash, input,
        priority, memo";

/// Wakes the schedulers (`orbit_timers`), as a schedule write does.
const NOTIFY: &str = "SELECT pg_notify('orbit_timers', '')";

const PENDING: &str = "SELECT window_end_at FROM start_dedupe
        WHERE execution_id = $1 AND keep = 'last'
    UNION ALL SELECT fire_at FROM start_debounce_fires WHERE execution_id = $1";

/// `$1` now, `$2` lease, `$3` limit.
const FIRES: &str = "WITH due AS (
        SELECT workflow, dedupe_key FROM start_dedupe
        WHERE keep = 'last' AND window_end_at <= $1
        ORDER BY window_end_at LIMIT $3 FOR UPDATE SKIP LOCKED),
    moved AS (
        DELETE FROM start_dedupe d USING due
        WHERE d.workflow = due.workflow AND d.dedupe_key = due.dedupe_key
        RETURNING d.execution_id, d.workflow, d.version, d.definition_hash, d.input,
            d.priority, d.window_end_at, d.memo),
    added AS (
        INSERT INTO start_debounce_fires (execution_id, workflow, version, definition_hash,
            input, priority, fire_at, attempt_at, memo)
        SELECT execution_id, workflow, version, definition_hash, input, priority,
            window_end_at, $1::BIGINT + $2::BIGINT, memo FROM moved
        ON CONFLICT (execution_id) DO NOTHING
        RETURNING execution_id, workflow, version, definition_hash, input, priority, fire_at,
            memo),
    retried AS (
        UPDATE start_debounce_fires f SET attempt_at = $1::BIGINT + $2::BIGINT
        WHERE f.execution_id IN (SELECT execution_id FROM start_debounce_fires
            WHERE attempt_at <= $1 ORDER BY attempt_at LIMIT $3 FOR UPDATE SKIP LOCKED)
        RETURNING f.execution_id, f.workflow, f.version, f.definition_hash, f.input,
            f.priority, f.fire_at, f.memo)
    SELECT * FROM added UNION ALL SELECT * FROM retried";

const FINISH: &str = "DELETE FROM start_debounce_fires WHERE execution_id = $1 RETURNING 1";

const NEXT: &str = "SELECT MIN(t) FROM (
        SELECT MIN(window_end_at) AS t FROM start_dedupe WHERE keep = 'last'
        UNION ALL SELECT MIN(attempt_at) FROM start_debounce_fires) x";

const SWEEP: &str = "DELETE FROM start_dedupe WHERE ctid IN (
        SELECT ctid FROM start_dedupe WHERE keep = 'first' AND window_end_at <= $1 LIMIT $2)";

fn json_of(row: &Row, idx: usize, what: &str) -> Result<serde_json::Value> {
    let text: &str = get(row, idx, what)?;
    serde_json::from_str(text).map_err(|e| StoreError::corrupt(what, e))
}

fn memo_of(row: &Row, idx: usize, what: &str) -> Result<Option<serde_json::Value>> {
    let text: Option<&str> = get(row, idx, what)?;
    text.map(|t| serde_json::from_str(t).map_err(|e| StoreError::corrupt(what, e))).transpose()
}

fn priority_of(row: &Row, idx: usize) -> Result<u32> {
    let p: i64 = get(row, idx, "start priority")?;
    u32::try_from(p).map_err(|_| StoreError::corrupt("start priority", p))
}

async fn claim(conn: &mut PgConn, start: &DedupeStart, now_ms: u64) -> PgResult<DedupeClaim> {
    let input = start.input.to_string();
    let memo = start.memo.as_ref().map(ToString::to_string);
    let found = conn
        .query(
            CLAIM,
            &[
                &start.workflow,
                &start.key,
                &start.keep.as_str(),
                &start.execution_id,
                &to_i64(now_ms, "now")?,
                &to_i64(start.window_ms, "window")?,
                &start.version,
                &start.definition_hash,
                &input,
                &i64::from(start.priority),
                &to_i64(start.max_delay_ms, "max delay")?,
                &memo,
            ],
        )
        .await?;
    let r = found.first().ok_or_else(|| StoreError::Storage("dedupe claim not stored".into()))?;
    let row = DedupeRow {
        keep: keep_of(get(r, 0, "start_dedupe keep")?)?,
        execution_id: get(r, 1, "start_dedupe execution_id")?,
        first_at_ms: get_u64(r, 2, "start_dedupe first_at")?,
        window_end_ms: get_u64(r, 3, "start_dedupe window_end_at")?,
        version: get(r, 4, "start_dedupe version")?,
        definition_hash: get(r, 5, "start_dedupe definition_hash")?,
        input: json_of(r, 6, "start_dedupe input")?,
        priority: priority_of(r, 7)?,
        memo: memo_of(r, 8, "start_dedupe memo")?,
    };
    let claimed = row.execution_id == start.execution_id;
    if claimed && row.keep == Keep::Last {
        // A new fire time: schedulers compute their next wake-up again.
        conn.query(NOTIFY, &[]).await?;
    }
    Ok(DedupeClaim { row, claimed })
}

async fn pending(conn: &mut PgConn, execution_id: &str) -> PgResult<Option<u64>> {
    let found = conn.query(PENDING, &[&execution_id]).await?;
    Ok(found.first().map(|r| get_u64(r, 0, "pending start fire time")).transpose()?)
}

async fn fires(
    conn: &mut PgConn,
    now_ms: u64,
    lease_ms: u64,
    limit: u32,
) -> PgResult<Vec<DebounceFire>> {
    let now = to_i64(now_ms, "now")?;
    let lease = to_i64(lease_ms, "lease")?;
    let found = conn.query(FIRES, &[&now, &lease, &i64::from(limit)]).await?;
    let fire = |r: &Row| -> Result<DebounceFire> {
        Ok(DebounceFire {
            execution_id: get(r, 0, "fire execution_id")?,
            workflow: get(r, 1, "fire workflow")?,
            version: get(r, 2, "fire version")?,
            definition_hash: get(r, 3, "fire definition_hash")?,
            input: json_of(r, 4, "fire input")?,
            priority: priority_of(r, 5)?,
            fire_at_ms: get_u64(r, 6, "fire fire_at")?,
            memo: memo_of(r, 7, "fire memo")?,
        })
    };
    Ok(found.iter().map(fire).collect::<Result<Vec<_>>>()?)
}

async fn finish(conn: &mut PgConn, execution_id: &str) -> PgResult<bool> {
    Ok(!conn.query(FINISH, &[&execution_id]).await?.is_empty())
}

async fn next(conn: &mut PgConn) -> PgResult<Option<u64>> {
    let found = conn.query(NEXT, &[]).await?;
    let Some(row) = found.first() else { return Ok(None) };
    let next: Option<i64> = get(row, 0, "next debounce")?;
    Ok(next
        .map(|t| u64::try_from(t).map_err(|_| StoreError::corrupt("next debounce", t)))
        .transpose()?)
}

async fn sweep(conn: &mut PgConn, now_ms: u64, limit: u32) -> PgResult<u64> {
    let now = to_i64(now_ms, "now")?;
    let stmt = conn.prepare_one(SWEEP).await?;
    Ok(conn.client().execute(&stmt, &[&now, &i64::from(limit)]).await?)
}

use super::{conn, error, Kind, PgStore};

#[async_trait::async_trait]
impl crate::dedupe::StartDedupe for PgStore {
    async fn claim_dedupe(&self, start: &DedupeStart, now_ms: u64) -> Result<DedupeClaim> {
        run!(self, Kind::Write, |c| claim(c, start, now_ms))
    }

    async fn pending_start(&self, execution_id: &str) -> Result<Option<u64>> {
        run!(self, Kind::Read, |c| pending(c, execution_id))
    }

    async fn claim_debounce_fires(
        &self,
        now_ms: u64,
        lease_ms: u64,
        limit: u32,
    ) -> Result<Vec<DebounceFire>> {
        run!(self, Kind::Write, |c| fires(c, now_ms, lease_ms, limit))
    }

    async fn finish_debounce_fire(&self, execution_id: &str) -> Result<bool> {
        run!(self, Kind::Write, |c| finish(c, execution_id))
    }

    async fn next_debounce_at(&self) -> Result<Option<u64>> {
        run!(self, Kind::Read, |c| next(c))
    }

    async fn sweep_start_dedupe(&self, now_ms: u64, limit: u32) -> Result<u64> {
        run!(self, Kind::Write, |c| sweep(c, now_ms, limit))
    }
}
