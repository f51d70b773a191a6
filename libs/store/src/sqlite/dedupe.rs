//! The `start_dedupe` and `start_debounce_fires` tables on SQLite (see `crate::dedupe`).
//! The single writer serialises every write, so the claim (the same upsert as
//! PostgreSQL's) and the fire claim (move the due rows, then lease the fires) are each one
//! transaction, the writer's savepoint.

use super::rows::{parse_json, to_i64, to_u32, to_u64};
use crate::dedupe::{keep_of, DebounceFire, DedupeClaim, DedupeRow, DedupeStart};
use crate::error::Result;
use rusqlite::{params, Connection, Row};

/// As PostgreSQL's `CLAIM` (`MIN` for `LEAST`).
const CLAIM: &str = "INSERT INTO start_dedupe AS d (workflow, dedupe_key, keep, execution_id,
        first_at, window_end_at, version, definition_hash, input, priority, memo)
    VALUES (?1, ?2, ?3, ?4, ?5, ?5 + ?6, ?7, ?8, ?9, ?10, ?12)
    ON CONFLICT (workflow, dedupe_key) DO UPDATE SET
        keep = CASE WHEN d.keep = 'last' OR d.window_end_at > ?5 THEN d.keep
            ELSE excluded.keep END,
        execution_id = CASE WHEN d.keep = 'last' OR d.window_end_at > ?5 THEN d.execution_id
            ELSE excluded.execution_id END,
        first_at = CASE WHEN d.keep = 'last' OR d.window_end_at > ?5 THEN d.first_at
            ELSE excluded.first_at END,
        window_end_at = CASE
            WHEN d.keep = 'last' AND excluded.keep = 'last'
                THEN MIN(excluded.window_end_at, d.first_at + ?11)
            WHEN d.keep = 'last' OR d.window_end_at > ?5 THEN d.window_end_at
            ELSE excluded.window_end_at END,
        version = CASE WHEN d.keep = 'first' AND d.window_end_at > ?5 THEN d.version
            WHEN d.keep = 'last' AND excluded.keep = 'first' THEN d.version
            ELSE excluded.version END,
        definition_hash = CASE WHEN d.keep = 'first' AND d.window_end_at > ?5
                THEN d.definition_hash
            WHEN d.keep = 'last' AND excluded.keep = 'first' THEN d.definition_hash
            ELSE excluded.definition_hash END,
        input = CASE WHEN d.keep = 'first' AND d.window_end_at > ?5 THEN d.input
            WHEN d.keep = 'last' AND excluded.keep = 'first' THEN d.input
            ELSE excluded.input END,
        priority = CASE WHEN d.keep = 'first' AND d.window_end_at > ?5 THEN d.priority
            WHEN d.keep = 'last' AND excluded.keep = 'first' THEN d.priority
            ELSE excluded.priority END,
        memo = CASE WHEN d.keep = 'first' AND d.window_end_at > ?5 THEN d.memo
            WHEN d.keep = 'last' AND excluded.keep = 'first' THEN d.memo
            ELSE excluded.memo END
    RETURNING keep, execution_id, first_at, window_end_at, version, definition_hash, input,
        priority, memo";

const PENDING: &str = "SELECT window_end_at FROM start_dedupe
        WHERE execution_id = ?1 AND keep = 'last'
    UNION ALL SELECT fire_at FROM start_debounce_fires WHERE execution_id = ?1";

const DUE: &str = "SELECT workflow, dedupe_key FROM start_dedupe
    WHERE keep = 'last' AND window_end_at <= ?1 ORDER BY window_end_at LIMIT ?2";

const MOVE: &str = "INSERT OR IGNORE INTO start_debounce_fires (execution_id, workflow, version,
        definition_hash, input, priority, fire_at, attempt_at, memo)
    SELECT execution_id, workflow, version, definition_hash, input, priority, window_end_at, ?3,
        memo
    FROM start_dedupe WHERE workflow = ?1 AND dedupe_key = ?2";

const DELETE_ROW: &str = "DELETE FROM start_dedupe WHERE workflow = ?1 AND dedupe_key = ?2";

const CLAIMABLE: &str = "UPDATE start_debounce_fires SET attempt_at = ?1 + ?2
    WHERE execution_id IN (SELECT execution_id FROM start_debounce_fires
        WHERE attempt_at <= ?1 ORDER BY attempt_at LIMIT ?3)
    RETURNING execution_id, workflow, version, definition_hash, input, priority, fire_at, memo";

const FINISH: &str = "DELETE FROM start_debounce_fires WHERE execution_id = ?1";

const NEXT: &str = "SELECT MIN(t) FROM (
        SELECT MIN(window_end_at) AS t FROM start_dedupe WHERE keep = 'last'
        UNION ALL SELECT MIN(attempt_at) FROM start_debounce_fires)";

const SWEEP: &str = "DELETE FROM start_dedupe WHERE rowid IN (
        SELECT rowid FROM start_dedupe WHERE keep = 'first' AND window_end_at <= ?1 LIMIT ?2)";

pub(crate) fn claim(
    conn: &mut Connection,
    start: &DedupeStart,
    now_ms: u64,
) -> Result<DedupeClaim> {
    let mut stmt = conn.prepare_cached(CLAIM)?;
    let mut found = stmt.query(params![
        start.workflow,
        start.key,
        start.keep.as_str(),
        start.execution_id,
        to_i64(now_ms, "now")?,
        to_i64(start.window_ms, "window")?,
        start.version,
        start.definition_hash,
        start.input.to_string(),
        i64::from(start.priority),
        to_i64(start.max_delay_ms, "max delay")?,
        start.memo.as_ref().map(ToString::to_string),
    ])?;
    let r = found
        .next()?
        .ok_or_else(|| crate::StoreError::Storage("dedupe claim not stored".into()))?;
    let row = DedupeRow {
        keep: keep_of(&r.get::<_, String>(0)?)?,
        execution_id: r.get(1)?,
        first_at_ms: to_u64(r.get(2)?, "start_dedupe first_at")?,
        window_end_ms: to_u64(r.get(3)?, "start_dedupe window_end_at")?,
        version: r.get(4)?,
        definition_hash: r.get(5)?,
        input: parse_json(&r.get::<_, String>(6)?, "start_dedupe input")?,
        priority: to_u32(r.get(7)?, "start priority")?,
        memo: memo_of(r.get(8)?, "start_dedupe memo")?,
    };
    let claimed = row.execution_id == start.execution_id;
    Ok(DedupeClaim { row, claimed })
}

/// A stored memo (NULL: the start gave none).
fn memo_of(text: Option<String>, what: &str) -> Result<Option<serde_json::Value>> {
    text.map(|t| parse_json(&t, what)).transpose()
}

pub(crate) fn pending(conn: &Connection, execution_id: &str) -> Result<Option<u64>> {
    let mut stmt = conn.prepare_cached(PENDING)?;
    let mut found = stmt.query(params![execution_id])?;
    match found.next()? {
        Some(r) => Ok(Some(to_u64(r.get(0)?, "pending start fire time")?)),
        None => Ok(None),
    }
}

fn fire(r: &Row<'_>) -> Result<DebounceFire> {
    Ok(DebounceFire {
        execution_id: r.get(0)?,
        workflow: r.get(1)?,
        version: r.get(2)?,
        definition_hash: r.get(3)?,
        input: parse_json(&r.get::<_, String>(4)?, "fire input")?,
        priority: to_u32(r.get(5)?, "start priority")?,
        fire_at_ms: to_u64(r.get(6)?, "fire fire_at")?,
        memo: memo_of(r.get(7)?, "fire memo")?,
    })
}

pub(crate) fn fires(
    conn: &mut Connection,
    now_ms: u64,
    lease_ms: u64,
    limit: u32,
) -> Result<Vec<DebounceFire>> {
    let now = to_i64(now_ms, "now")?;
    let lease = to_i64(lease_ms, "lease")?;
    let due: Vec<(String, String)> = {
        let mut stmt = conn.prepare_cached(DUE)?;
        let rows =
            stmt.query_map(params![now, i64::from(limit)], |r| Ok((r.get(0)?, r.get(1)?)))?;
        rows.collect::<rusqlite::Result<_>>()?
    };
    // Moved with `attempt_at = now`, then leased with the fires already waiting.
    for (workflow, key) in &due {
        conn.prepare_cached(MOVE)?.execute(params![workflow, key, now])?;
        conn.prepare_cached(DELETE_ROW)?.execute(params![workflow, key])?;
    }
    let mut stmt = conn.prepare_cached(CLAIMABLE)?;
    let mut found = stmt.query(params![now, lease, i64::from(limit)])?;
    let mut out = Vec::new();
    while let Some(r) = found.next()? {
        out.push(fire(r)?);
    }
    Ok(out)
}

pub(crate) fn finish(conn: &mut Connection, execution_id: &str) -> Result<bool> {
    Ok(conn.prepare_cached(FINISH)?.execute(params![execution_id])? > 0)
}

pub(crate) fn next(conn: &Connection) -> Result<Option<u64>> {
    let next: Option<i64> = conn.prepare_cached(NEXT)?.query_row([], |r| r.get(0))?;
    next.map(|t| to_u64(t, "next debounce")).transpose()
}

pub(crate) fn sweep(conn: &mut Connection, now_ms: u64, limit: u32) -> Result<u64> {
    let n =
        conn.prepare_cached(SWEEP)?.execute(params![to_i64(now_ms, "now")?, i64::from(limit)])?;
    Ok(n as u64)
}

#[async_trait::async_trait]
impl crate::dedupe::StartDedupe for super::SqliteStore {
    async fn claim_dedupe(&self, start: &DedupeStart, now_ms: u64) -> Result<DedupeClaim> {
        let start = start.clone();
        self.writer.run(move |c| claim(c, &start, now_ms)).await
    }

    async fn pending_start(&self, execution_id: &str) -> Result<Option<u64>> {
        let id = execution_id.to_string();
        self.readers.run(move |c| pending(c, &id)).await
    }

    async fn claim_debounce_fires(
        &self,
        now_ms: u64,
        lease_ms: u64,
        limit: u32,
    ) -> Result<Vec<DebounceFire>> {
        self.writer.run(move |c| fires(c, now_ms, lease_ms, limit)).await
    }

    async fn finish_debounce_fire(&self, execution_id: &str) -> Result<bool> {
        let id = execution_id.to_string();
        self.writer.run(move |c| finish(c, &id)).await
    }

    async fn next_debounce_at(&self) -> Result<Option<u64>> {
        self.readers.run(next).await
    }

    async fn sweep_start_dedupe(&self, now_ms: u64, limit: u32) -> Result<u64> {
        self.writer.run(move |c| sweep(c, now_ms, limit)).await
    }
}
