//! The `schedules` table on SQLite. The single writer serialises claims, so a plain
//! `UPDATE ... RETURNING` over the due rows hands each row to one scheduler.

use super::rows::{to_i64, to_u64};
use crate::error::Result;
use crate::schedule::{buffered_text, parse_buffered, ScheduleFire, ScheduleRow, ScheduleUpdate};
use rusqlite::{params, Connection, OptionalExtension, Row};

const COLUMNS: &str = "schedule_id, workflow, spec, paused, note, next_fire_at, due_at, \
    last_fire_at, last_execution_id, fired_count, skipped_count, last_error, remaining, \
    buffered, created_at, updated_at";

fn opt_i64(v: Option<u64>, what: &str) -> Result<Option<i64>> {
    v.map(|v| to_i64(v, what)).transpose()
}

fn opt_u64(v: Option<i64>, what: &str) -> Result<Option<u64>> {
    v.map(|v| to_u64(v, what)).transpose()
}

fn raw(r: &Row<'_>) -> rusqlite::Result<RawRow> {
    Ok(RawRow {
        schedule_id: r.get(0)?,
        workflow: r.get(1)?,
        spec: r.get(2)?,
        paused: r.get(3)?,
        note: r.get(4)?,
        next_fire_at: r.get(5)?,
        due_at: r.get(6)?,
        last_fire_at: r.get(7)?,
        last_execution_id: r.get(8)?,
        fired_count: r.get(9)?,
        skipped_count: r.get(10)?,
        last_error: r.get(11)?,
        remaining: r.get(12)?,
        buffered: r.get(13)?,
        created_at: r.get(14)?,
        updated_at: r.get(15)?,
    })
}

struct RawRow {
    schedule_id: String,
    workflow: String,
    spec: String,
    paused: i64,
    note: String,
    next_fire_at: Option<i64>,
    due_at: Option<i64>,
    last_fire_at: Option<i64>,
    last_execution_id: Option<String>,
    fired_count: i64,
    skipped_count: i64,
    last_error: Option<String>,
    remaining: Option<i64>,
    buffered: String,
    created_at: i64,
    updated_at: i64,
}

impl RawRow {
    fn row(self) -> Result<ScheduleRow> {
        Ok(ScheduleRow {
            schedule_id: self.schedule_id,
            workflow: self.workflow,
            spec: self.spec,
            paused: self.paused != 0,
            note: self.note,
            next_fire_at_ms: opt_u64(self.next_fire_at, "schedule next_fire_at")?,
            due_at_ms: opt_u64(self.due_at, "schedule due_at")?,
            last_fire_at_ms: opt_u64(self.last_fire_at, "schedule last_fire_at")?,
            last_execution_id: self.last_execution_id,
            fired_count: to_u64(self.fired_count, "schedule fired_count")?,
            skipped_count: to_u64(self.skipped_count, "schedule skipped_count")?,
            last_error: self.last_error,
            remaining: opt_u64(self.remaining, "schedule remaining")?,
            buffered: parse_buffered(&self.buffered)?,
            created_at_ms: to_u64(self.created_at, "schedule created_at")?,
            updated_at_ms: to_u64(self.updated_at, "schedule updated_at")?,
        })
    }
}

fn rows(conn: &Connection, sql: &str, params: impl rusqlite::Params) -> Result<Vec<ScheduleRow>> {
    let mut stmt = conn.prepare_cached(sql)?;
    let raw: Vec<RawRow> = stmt.query_map(params, raw)?.collect::<rusqlite::Result<_>>()?;
    raw.into_iter().map(RawRow::row).collect()
}

/// One schedule.
pub(crate) fn get(conn: &Connection, id: &str) -> Result<Option<ScheduleRow>> {
    let sql = format!("SELECT {COLUMNS} FROM schedules WHERE schedule_id = ?1");
    let found = conn.prepare_cached(&sql)?.query_row([id], raw).optional()?;
    found.map(RawRow::row).transpose()
}

/// Inserts unless the id exists.
pub(crate) fn create(conn: &mut Connection, r: &ScheduleRow) -> Result<(ScheduleRow, bool)> {
    let sql = format!(
        "INSERT INTO schedules ({COLUMNS}) VALUES \
         (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14, ?15, ?16) \
         ON CONFLICT (schedule_id) DO NOTHING"
    );
    let inserted = conn.prepare_cached(&sql)?.execute(params![
        r.schedule_id,
        r.workflow,
        r.spec,
        i64::from(r.paused),
        r.note,
        opt_i64(r.next_fire_at_ms, "next_fire_at")?,
        opt_i64(r.due_at_ms, "due_at")?,
        opt_i64(r.last_fire_at_ms, "last_fire_at")?,
        r.last_execution_id,
        to_i64(r.fired_count, "fired_count")?,
        to_i64(r.skipped_count, "skipped_count")?,
        r.last_error,
        opt_i64(r.remaining, "remaining")?,
        buffered_text(&r.buffered),
        to_i64(r.created_at_ms, "created_at")?,
        to_i64(r.updated_at_ms, "updated_at")?,
    ])? == 1;
    let stored = get(conn, &r.schedule_id)?
        .ok_or_else(|| crate::StoreError::Storage("schedule vanished after insert".into()))?;
    Ok((stored, inserted))
}

/// A page by id.
pub(crate) fn list(
    conn: &Connection,
    workflow: Option<&str>,
    after: Option<&str>,
    limit: u32,
) -> Result<Vec<ScheduleRow>> {
    let sql = format!(
        "SELECT {COLUMNS} FROM schedules WHERE (?1 IS NULL OR workflow = ?1) \
         AND (?2 IS NULL OR schedule_id > ?2) ORDER BY schedule_id LIMIT ?3"
    );
    rows(conn, &sql, params![workflow, after, i64::from(limit)])
}

/// Replaces the definition; drops a claim.
pub(crate) fn update(conn: &mut Connection, u: &ScheduleUpdate) -> Result<Option<ScheduleRow>> {
    let sql = "UPDATE schedules SET workflow = ?2, spec = ?3, next_fire_at = ?4, due_at = ?5, \
        remaining = ?6, buffered = '[]', claimed_by = NULL, claimed_until = NULL, \
        updated_at = ?7 WHERE schedule_id = ?1";
    let n = conn.prepare_cached(sql)?.execute(params![
        u.schedule_id,
        u.workflow,
        u.spec,
        opt_i64(u.next_fire_at_ms, "next_fire_at")?,
        opt_i64(u.due_at_ms, "due_at")?,
        opt_i64(u.remaining, "remaining")?,
        to_i64(u.now_ms, "now")?,
    ])?;
    if n == 0 {
        return Ok(None);
    }
    get(conn, &u.schedule_id)
}

/// Pauses or resumes.
pub(crate) fn set_paused(
    conn: &mut Connection,
    id: &str,
    paused: bool,
    note: &str,
    now_ms: u64,
) -> Result<Option<ScheduleRow>> {
    let sql = "UPDATE schedules SET paused = ?2, note = ?3, updated_at = ?4 WHERE schedule_id = ?1";
    let n = conn.prepare_cached(sql)?.execute(params![
        id,
        i64::from(paused),
        note,
        to_i64(now_ms, "now")?
    ])?;
    if n == 0 {
        return Ok(None);
    }
    get(conn, id)
}

/// Deletes one schedule.
pub(crate) fn delete(conn: &mut Connection, id: &str) -> Result<bool> {
    Ok(conn.prepare_cached("DELETE FROM schedules WHERE schedule_id = ?1")?.execute([id])? == 1)
}

/// Claims due rows.
pub(crate) fn claim_due(
    conn: &mut Connection,
    now_ms: u64,
    claimer: &str,
    lease_ms: u64,
    limit: u32,
) -> Result<Vec<ScheduleRow>> {
    let now = to_i64(now_ms, "now")?;
    let until = to_i64(now_ms.saturating_add(lease_ms), "claimed_until")?;
    let sql = format!(
        "UPDATE schedules SET claimed_by = ?2, claimed_until = ?3 WHERE schedule_id IN \
         (SELECT schedule_id FROM schedules WHERE paused = 0 AND due_at IS NOT NULL \
          AND due_at <= ?1 AND (claimed_until IS NULL OR claimed_until <= ?1) \
          ORDER BY due_at LIMIT ?4) RETURNING {COLUMNS}"
    );
    rows(conn, &sql, params![now, claimer, until, i64::from(limit)])
}

/// The next due time of an unpaused row (a claimed one not before its lease ends).
pub(crate) fn next_due(conn: &Connection) -> Result<Option<u64>> {
    let sql = "SELECT MIN(CASE WHEN claimed_until IS NOT NULL AND claimed_until > due_at \
        THEN claimed_until ELSE due_at END) FROM schedules WHERE paused = 0 AND due_at IS NOT NULL";
    let next: Option<i64> = conn.prepare_cached(sql)?.query_row([], |r| r.get(0))?;
    opt_u64(next, "schedule due_at")
}

/// Unpaused rows due at `now`.
pub(crate) fn count_due(conn: &Connection, now_ms: u64) -> Result<u64> {
    let sql = "SELECT COUNT(*) FROM schedules WHERE paused = 0 AND due_at <= ?1";
    let n: i64 = conn.prepare_cached(sql)?.query_row([to_i64(now_ms, "now")?], |r| r.get(0))?;
    to_u64(n, "count")
}

/// Records a fire under the claim.
pub(crate) fn finish(conn: &mut Connection, f: &ScheduleFire) -> Result<bool> {
    let sql = "UPDATE schedules SET next_fire_at = ?3, due_at = ?4, \
        last_fire_at = COALESCE(?5, last_fire_at), \
        last_execution_id = COALESCE(?6, last_execution_id), \
        fired_count = fired_count + ?7, skipped_count = skipped_count + ?8, last_error = ?9, \
        remaining = ?10, buffered = ?11, \
        paused = CASE WHEN ?12 IS NULL THEN paused ELSE 1 END, \
        note = COALESCE(?12, note), claimed_by = NULL, claimed_until = NULL, updated_at = ?13 \
        WHERE schedule_id = ?1 AND claimed_by = ?2";
    let n = conn.prepare_cached(sql)?.execute(params![
        f.schedule_id,
        f.claimer,
        opt_i64(f.next_fire_at_ms, "next_fire_at")?,
        opt_i64(f.due_at_ms, "due_at")?,
        opt_i64(f.last_fire_at_ms, "last_fire_at")?,
        f.last_execution_id,
        to_i64(f.fired, "fired")?,
        to_i64(f.skipped, "skipped")?,
        f.last_error,
        opt_i64(f.remaining, "remaining")?,
        buffered_text(&f.buffered),
        f.pause,
        to_i64(f.now_ms, "now")?,
    ])?;
    Ok(n == 1)
}

/// Drops a claim without firing.
pub(crate) fn release(
    conn: &mut Connection,
    id: &str,
    claimer: &str,
    retry_at_ms: u64,
    error: &str,
    now_ms: u64,
) -> Result<bool> {
    let sql = "UPDATE schedules SET due_at = ?3, last_error = ?4, claimed_by = NULL, \
        claimed_until = NULL, updated_at = ?5 WHERE schedule_id = ?1 AND claimed_by = ?2";
    let n = conn.prepare_cached(sql)?.execute(params![
        id,
        claimer,
        to_i64(retry_at_ms, "retry_at")?,
        error,
        to_i64(now_ms, "now")?
    ])?;
    Ok(n == 1)
}

/// Counts a manual start.
pub(crate) fn record_start(
    conn: &mut Connection,
    id: &str,
    execution_id: &str,
    now_ms: u64,
) -> Result<bool> {
    let sql = "UPDATE schedules SET fired_count = fired_count + 1, last_execution_id = ?2, \
        updated_at = ?3 WHERE schedule_id = ?1";
    let n = conn.prepare_cached(sql)?.execute(params![id, execution_id, to_i64(now_ms, "now")?])?;
    Ok(n == 1)
}
