//! Poison quarantine rows on SQLite (see `crate::fault` for the rules). Every function runs
//! inside one writer job (one savepoint), so a refused park changes nothing.

use super::commit::check_fence;
use super::conn::now_ms;
use super::rows::{to_i64, to_u32, to_u64};
use crate::error::{Result, StoreError};
use crate::fault::{FaultNote, FaultRow, SUSPENDED};
use rusqlite::{params, Connection, OptionalExtension, Row};

const COLUMNS: &str =
    "execution_id, inbox_seq, failures, reason, parked_at, resume_status, updated_at";

fn fault(r: &Row<'_>) -> Result<FaultRow> {
    Ok(FaultRow {
        execution_id: r.get(0)?,
        inbox_seq: r.get::<_, Option<i64>>(1)?.map(|v| to_u64(v, "fault inbox_seq")).transpose()?,
        failures: to_u32(r.get(2)?, "fault failures")?,
        reason: r.get(3)?,
        parked_at_ms: r.get::<_, Option<i64>>(4)?.map(|v| to_u64(v, "parked_at")).transpose()?,
        resume_status: r.get(5)?,
        updated_at_ms: to_u64(r.get(6)?, "fault updated_at")?,
    })
}

/// The count restarts when the first pending entry moved on; parked rows keep everything.
fn upsert_note() -> String {
    format!(
        "INSERT INTO execution_faults (execution_id, inbox_seq, failures, reason, updated_at)
        VALUES (?1, ?2, ?3, ?4, ?5)
        ON CONFLICT (execution_id) DO UPDATE SET
            failures = CASE WHEN execution_faults.parked_at IS NOT NULL THEN execution_faults.failures
                WHEN execution_faults.inbox_seq IS excluded.inbox_seq
                THEN execution_faults.failures + excluded.failures
                ELSE excluded.failures END,
            reason = CASE WHEN execution_faults.parked_at IS NOT NULL THEN execution_faults.reason
                ELSE excluded.reason END,
            inbox_seq = CASE WHEN execution_faults.parked_at IS NOT NULL
                THEN execution_faults.inbox_seq ELSE excluded.inbox_seq END,
            updated_at = excluded.updated_at
        RETURNING {COLUMNS}"
    )
}

fn seq(v: Option<u64>) -> Result<Option<i64>> {
    v.map(|s| to_i64(s, "inbox seq")).transpose()
}

pub(crate) fn note(conn: &Connection, notes: &[FaultNote]) -> Result<Vec<FaultRow>> {
    let now = to_i64(now_ms(), "now")?;
    let sql = upsert_note();
    let mut out = Vec::with_capacity(notes.len());
    for n in notes {
        let row = conn.prepare_cached(&sql)?.query_row(
            params![n.execution_id, seq(n.inbox_seq)?, i64::from(n.add), n.reason, now],
            |r| Ok(fault(r)),
        )??;
        out.push(row);
    }
    Ok(out)
}

pub(crate) fn get(conn: &Connection, ids: &[String]) -> Result<Vec<FaultRow>> {
    let sql = format!(
        "SELECT {COLUMNS} FROM execution_faults
        WHERE execution_id IN (SELECT value FROM json_each(?1)) ORDER BY execution_id"
    );
    let mut stmt = conn.prepare_cached(&sql)?;
    let mut found = stmt.query([serde_json::json!(ids).to_string()])?;
    let mut out = Vec::new();
    while let Some(r) = found.next()? {
        out.push(fault(r)?);
    }
    Ok(out)
}

pub(crate) fn clear(conn: &Connection, ids: &[String]) -> Result<()> {
    conn.prepare_cached(
        "DELETE FROM execution_faults WHERE execution_id IN (SELECT value FROM json_each(?1))",
    )?
    .execute([serde_json::json!(ids).to_string()])?;
    Ok(())
}

fn projection_status(conn: &Connection, id: &str) -> Result<String> {
    conn.prepare_cached("SELECT status FROM executions WHERE execution_id = ?1")?
        .query_row([id], |r| r.get(0))
        .optional()?
        .ok_or_else(|| StoreError::NotFound(format!("execution {id}")))
}

pub(crate) fn park(
    conn: &Connection,
    n: &FaultNote,
    expected: Option<u64>,
    updated_at_ms: u64,
) -> Result<FaultRow> {
    let id = n.execution_id.as_str();
    check_fence(conn, id, expected)?;
    let status = projection_status(conn, id)?;
    let resume = (status != SUSPENDED).then_some(status);
    let now = to_i64(now_ms(), "now")?;
    let sql = format!(
        "INSERT INTO execution_faults
            (execution_id, inbox_seq, failures, reason, parked_at, resume_status, updated_at)
        VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?5)
        ON CONFLICT (execution_id) DO UPDATE SET
            failures = CASE WHEN execution_faults.inbox_seq IS excluded.inbox_seq
                THEN execution_faults.failures + excluded.failures ELSE excluded.failures END,
            inbox_seq = excluded.inbox_seq, reason = excluded.reason,
            parked_at = COALESCE(execution_faults.parked_at, excluded.parked_at),
            resume_status = COALESCE(execution_faults.resume_status, excluded.resume_status),
            updated_at = excluded.updated_at
        RETURNING {COLUMNS}"
    );
    let row = conn.prepare_cached(&sql)?.query_row(
        params![id, seq(n.inbox_seq)?, i64::from(n.add), n.reason, now, resume],
        |r| Ok(fault(r)),
    )??;
    conn.prepare_cached(
        "UPDATE executions SET status = ?2, updated_at = ?3 WHERE execution_id = ?1",
    )?
    .execute(params![id, SUSPENDED, to_i64(updated_at_ms, "updated_at")?])?;
    Ok(row)
}

pub(crate) fn unpark(
    conn: &Connection,
    id: &str,
    expected: Option<u64>,
    updated_at_ms: u64,
) -> Result<Option<FaultRow>> {
    check_fence(conn, id, expected)?;
    projection_status(conn, id)?;
    let sql = format!(
        "SELECT {COLUMNS} FROM execution_faults WHERE execution_id = ?1 AND parked_at IS NOT NULL"
    );
    let Some(row) = conn.prepare_cached(&sql)?.query_row([id], |r| Ok(fault(r))).optional()? else {
        return Ok(None);
    };
    let row = row?;
    let status = row.resume_status.clone().unwrap_or_else(|| "RUNNING".into());
    conn.prepare_cached(
        "UPDATE executions SET status = ?2, updated_at = ?3 WHERE execution_id = ?1 AND status = ?4",
    )?
    .execute(params![id, status, to_i64(updated_at_ms, "updated_at")?, SUSPENDED])?;
    conn.prepare_cached("DELETE FROM execution_faults WHERE execution_id = ?1")?.execute([id])?;
    Ok(Some(row))
}
