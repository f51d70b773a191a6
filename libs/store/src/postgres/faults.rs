//! Poison quarantine rows on PostgreSQL (see `crate::fault` for the rules).
//!
//! Notes are one multi-row upsert; park and unpark are short transactions that lock the
//! owners row `FOR SHARE` first, exactly as a commit does, so a takeover that bumped the
//! epoch fences them and one that runs meanwhile waits for them.

use super::conn::PgConn;
use super::error::PgResult;
use super::rows::{get, get_u64, to_i64};
use crate::error::{Result, StoreError};
use crate::fault::{FaultNote, FaultRow, SUSPENDED};
use std::collections::HashMap;
use tokio_postgres::Row;

/// The database clock, epoch milliseconds (as `sql.rs`'s `now_ms!`).
macro_rules! db_now {
    () => {
        "(extract(epoch from statement_timestamp()) * 1000)::bigint"
    };
}

macro_rules! fault_columns {
    () => {
        "execution_id, inbox_seq, failures, reason, parked_at, resume_status, updated_at"
    };
}

const NOTE: &str = concat!(
    "INSERT INTO execution_faults AS f (execution_id, inbox_seq, failures, reason, updated_at)
    SELECT n.id, n.seq, n.add, n.reason, ",
    db_now!(),
    " FROM unnest($1::text[], $2::bigint[], $3::bigint[], $4::text[]) AS n(id, seq, add, reason)
    ON CONFLICT (execution_id) DO UPDATE SET
        failures = CASE WHEN f.parked_at IS NOT NULL THEN f.failures
            WHEN f.inbox_seq IS NOT DISTINCT FROM excluded.inbox_seq
            THEN f.failures + excluded.failures ELSE excluded.failures END,
        reason = CASE WHEN f.parked_at IS NOT NULL THEN f.reason ELSE excluded.reason END,
        inbox_seq = CASE WHEN f.parked_at IS NOT NULL THEN f.inbox_seq ELSE excluded.inbox_seq END,
        updated_at = excluded.updated_at
    RETURNING ",
    fault_columns!()
);
const GET: &str = concat!(
    "SELECT ",
    fault_columns!(),
    " FROM execution_faults WHERE execution_id = ANY($1::text[]) ORDER BY execution_id"
);
const CLEAR: &str = "DELETE FROM execution_faults WHERE execution_id = ANY($1::text[])";
const LOCK_OWNER: &str = "SELECT epoch FROM owners WHERE execution_id = $1::text FOR SHARE";
const LOCK_EXECUTION: &str =
    "SELECT status FROM executions WHERE execution_id = $1::text FOR NO KEY UPDATE";
const PARK: &str = concat!(
    "INSERT INTO execution_faults AS f
        (execution_id, inbox_seq, failures, reason, parked_at, resume_status, updated_at)
    VALUES ($1::text, $2::bigint, $3::bigint, $4::text, ",
    db_now!(),
    ", $5::text, ",
    db_now!(),
    ") ON CONFLICT (execution_id) DO UPDATE SET
        failures = CASE WHEN f.inbox_seq IS NOT DISTINCT FROM excluded.inbox_seq
            THEN f.failures + excluded.failures ELSE excluded.failures END,
        inbox_seq = excluded.inbox_seq, reason = excluded.reason,
        parked_at = COALESCE(f.parked_at, excluded.parked_at),
        resume_status = COALESCE(f.resume_status, excluded.resume_status),
        updated_at = excluded.updated_at
    RETURNING ",
    fault_columns!()
);
const SET_STATUS: &str = "UPDATE executions SET status = $2::text, updated_at = $3::bigint
    WHERE execution_id = $1::text";
const PARKED: &str = concat!(
    "SELECT ",
    fault_columns!(),
    " FROM execution_faults WHERE execution_id = $1::text AND parked_at IS NOT NULL"
);
const DELETE_ONE: &str = "DELETE FROM execution_faults WHERE execution_id = $1::text";

fn fault(r: &Row) -> Result<FaultRow> {
    let opt = |idx: usize, what: &str| -> Result<Option<u64>> {
        let v: Option<i64> = get(r, idx, what)?;
        v.map(|v| u64::try_from(v).map_err(|_| StoreError::corrupt(what, format!("negative {v}"))))
            .transpose()
    };
    let failures = get_u64(r, 2, "fault failures")?;
    Ok(FaultRow {
        execution_id: get(r, 0, "fault execution_id")?,
        inbox_seq: opt(1, "fault inbox_seq")?,
        failures: u32::try_from(failures)
            .map_err(|_| StoreError::corrupt("fault failures", failures))?,
        reason: get(r, 3, "fault reason")?,
        parked_at_ms: opt(4, "fault parked_at")?,
        resume_status: get(r, 5, "fault resume_status")?,
        updated_at_ms: get_u64(r, 6, "fault updated_at")?,
    })
}

fn seq(v: Option<u64>) -> Result<Option<i64>> {
    v.map(|s| to_i64(s, "inbox seq")).transpose()
}

pub(crate) async fn note(conn: &mut PgConn, notes: &[FaultNote]) -> PgResult<Vec<FaultRow>> {
    // One statement cannot upsert a row twice: the last note of an id wins.
    let mut last: HashMap<&str, &FaultNote> = HashMap::new();
    for n in notes {
        last.insert(n.execution_id.as_str(), n);
    }
    let (mut ids, mut seqs, mut adds, mut reasons) = (vec![], vec![], vec![], vec![]);
    for n in last.values() {
        ids.push(n.execution_id.clone());
        seqs.push(seq(n.inbox_seq)?);
        adds.push(i64::from(n.add));
        reasons.push(n.reason.clone());
    }
    let found = conn.query(NOTE, &[&ids, &seqs, &adds, &reasons]).await?;
    let rows: HashMap<String, FaultRow> = found
        .iter()
        .map(|r| fault(r).map(|f| (f.execution_id.clone(), f)))
        .collect::<Result<_>>()?;
    let out: Result<Vec<FaultRow>> = notes
        .iter()
        .map(|n| {
            rows.get(&n.execution_id)
                .cloned()
                .ok_or_else(|| StoreError::Storage("fault upsert returned no row".into()))
        })
        .collect();
    Ok(out?)
}

pub(crate) async fn get_many(conn: &mut PgConn, ids: &[String]) -> PgResult<Vec<FaultRow>> {
    let found = conn.query(GET, &[&ids]).await?;
    Ok(found.iter().map(fault).collect::<Result<Vec<_>>>()?)
}

pub(crate) async fn clear(conn: &mut PgConn, ids: &[String]) -> PgResult<()> {
    conn.query(CLEAR, &[&ids]).await?;
    Ok(())
}

/// `BEGIN`; the connection is marked so the pool discards it if the caller is dropped.
async fn begin(conn: &mut PgConn) -> PgResult<()> {
    conn.begin_marker();
    conn.client().batch_execute("BEGIN").await?;
    Ok(())
}

/// `COMMIT` after a body that succeeded, `ROLLBACK` after one that failed.
async fn finish<T>(conn: &mut PgConn, outcome: PgResult<T>) -> PgResult<T> {
    match outcome {
        Ok(v) => {
            conn.client().batch_execute("COMMIT").await?;
            conn.end_marker();
            Ok(v)
        }
        Err(e) => {
            conn.rollback().await;
            Err(e)
        }
    }
}

/// The fence and the projection's status, locked in commit order (owners, executions).
async fn lock(conn: &mut PgConn, id: &str, expected: Option<u64>) -> PgResult<String> {
    let owner = conn.query(LOCK_OWNER, &[&id]).await?;
    if let Some(expected) = expected {
        match owner.first() {
            None => {
                return Err(StoreError::Fenced(format!(
                    "execution {id} has no owner; this writer held epoch {expected}"
                ))
                .into())
            }
            Some(r) => {
                let epoch = get_u64(r, 0, "owner epoch")?;
                if epoch != expected {
                    return Err(StoreError::Fenced(format!(
                        "execution {id} is at epoch {epoch}; this writer held epoch {expected}"
                    ))
                    .into());
                }
            }
        }
    }
    let found = conn.query(LOCK_EXECUTION, &[&id]).await?;
    let row = found.first().ok_or_else(|| StoreError::NotFound(format!("execution {id}")))?;
    Ok(get(row, 0, "execution status")?)
}

pub(crate) async fn park(
    conn: &mut PgConn,
    n: &FaultNote,
    expected: Option<u64>,
    updated_at_ms: u64,
) -> PgResult<FaultRow> {
    begin(conn).await?;
    let outcome = park_in(conn, n, expected, updated_at_ms).await;
    finish(conn, outcome).await
}

async fn park_in(
    conn: &mut PgConn,
    n: &FaultNote,
    expected: Option<u64>,
    updated_at_ms: u64,
) -> PgResult<FaultRow> {
    let updated_at = to_i64(updated_at_ms, "updated_at")?;
    let seq = seq(n.inbox_seq)?;
    let id = n.execution_id.as_str();
    let status = lock(conn, id, expected).await?;
    let resume = (status != SUSPENDED).then_some(status);
    let found = conn.query(PARK, &[&id, &seq, &i64::from(n.add), &n.reason, &resume]).await?;
    let row = found.first().ok_or_else(|| StoreError::Storage("park returned no row".into()))?;
    let row = fault(row)?;
    conn.query(SET_STATUS, &[&id, &SUSPENDED, &updated_at]).await?;
    Ok(row)
}

pub(crate) async fn unpark(
    conn: &mut PgConn,
    id: &str,
    expected: Option<u64>,
    updated_at_ms: u64,
) -> PgResult<Option<FaultRow>> {
    begin(conn).await?;
    let outcome = unpark_in(conn, id, expected, updated_at_ms).await;
    finish(conn, outcome).await
}

async fn unpark_in(
    conn: &mut PgConn,
    id: &str,
    expected: Option<u64>,
    updated_at_ms: u64,
) -> PgResult<Option<FaultRow>> {
    let updated_at = to_i64(updated_at_ms, "updated_at")?;
    let status = lock(conn, id, expected).await?;
    let found = conn.query(PARKED, &[&id]).await?;
    let Some(row) = found.first() else { return Ok(None) };
    let row = fault(row)?;
    if status == SUSPENDED {
        let back = row.resume_status.clone().unwrap_or_else(|| "RUNNING".into());
        conn.query(SET_STATUS, &[&id, &back, &updated_at]).await?;
    }
    conn.query(DELETE_ONE, &[&id]).await?;
    Ok(Some(row))
}
