//! Retention on SQLite (see `crate::retention` for the rules): each function is one job of
//! the single writer, so it is atomic and never races an owner's commit; its batch bound
//! keeps the writer's group transaction short.

use super::conn::now_ms;
use super::rows::{json_text, to_i64};
use crate::error::Result;
use crate::retention::{
    finished_reply, DeleteOutcome, DoneRowsDeleted, ExecutionsDeleted, FlowRowsDeleted,
    OwnersReleased,
};
use rusqlite::{params, Connection};
use serde_json::json;

/// Statuses of an execution that still has work.
macro_rules! open_statuses {
    () => {
        "('PENDING', 'RUNNING', 'COMPENSATING', 'SUSPENDED')"
    };
}

/// Entries with a request id stay until their execution is deleted: a retried signal or
/// cancel is answered from them (migration 0007).
const DELETE_DONE_INBOX: &str = "DELETE FROM inbox WHERE seq IN (
    SELECT seq FROM inbox WHERE done_at IS NOT NULL AND done_at < ?1 AND request_id IS NULL
    ORDER BY done_at LIMIT ?2)";
const DELETE_DONE_TASKS: &str = "DELETE FROM task_queue WHERE id IN (
    SELECT id FROM task_queue WHERE state = 'done' AND updated_at < ?1
    ORDER BY updated_at LIMIT ?2)";

/// Roots whose tree is closed, quiet (no pending entry) and closed before `?1`, oldest
/// ownership first (`owners_roots_by_since`, 0011: the walk stops at the batch size).
const RELEASABLE_ROOTS: &str = concat!(
    "SELECT r.execution_id FROM owners o JOIN executions r ON r.execution_id = o.execution_id
    WHERE o.execution_id = o.root_id AND r.status NOT IN ",
    open_statuses!(),
    " AND r.closed_at < ?1
      AND NOT EXISTS (SELECT 1 FROM executions c WHERE c.root_id = r.execution_id
            AND c.status IN ",
    open_statuses!(),
    ")
      AND NOT EXISTS (SELECT 1 FROM executions c JOIN inbox i ON i.execution_id = c.execution_id
            WHERE c.root_id = r.execution_id AND i.done_at IS NULL)
    ORDER BY o.since, o.execution_id LIMIT ?2"
);
const DELETE_TREE_OWNERS: &str =
    "DELETE FROM owners WHERE root_id IN (SELECT value FROM json_each(?1))";
/// Pending entries of closed executions without an owners row: nobody will apply them.
const ANSWER_UNOWNED: &str = concat!(
    "UPDATE inbox SET done_at = ?1, result = ?2 WHERE seq IN (
        SELECT i.seq FROM inbox i JOIN executions e ON e.execution_id = i.execution_id
        WHERE i.done_at IS NULL AND e.status NOT IN ",
    open_statuses!(),
    " AND NOT EXISTS (SELECT 1 FROM owners o WHERE o.execution_id = i.execution_id)
        ORDER BY i.seq LIMIT ?3)"
);

const EXPIRED_ROOTS: &str = concat!(
    "SELECT r.execution_id FROM executions r
    WHERE r.delete_after IS NOT NULL AND r.delete_after < ?1 AND r.parent_id IS NULL
      AND NOT EXISTS (SELECT 1 FROM executions c WHERE c.root_id = r.execution_id
            AND c.status IN ",
    open_statuses!(),
    ")
    ORDER BY r.delete_after LIMIT ?2"
);
const TREE_OF_ROOTS: &str =
    "SELECT execution_id FROM executions WHERE root_id IN (SELECT value FROM json_each(?1))";
/// An execution and its descendants by `parent_id`, with their status.
const SUBTREE: &str = "WITH RECURSIVE tree(id) AS (
        SELECT execution_id FROM executions WHERE execution_id = ?1
        UNION SELECT e.execution_id FROM executions e JOIN tree t ON e.parent_id = t.id)
    SELECT e.execution_id, e.status FROM executions e JOIN tree t ON e.execution_id = t.id
    ORDER BY e.execution_id";

/// One delete per table, each over the execution ids in the JSON array `?1` (the fault rows of
/// the poison quarantine first, then the search attribute rows); executions last.
const DELETE_ROWS: [&str; 8] = [
    "DELETE FROM execution_faults WHERE execution_id IN (SELECT value FROM json_each(?1))",
    "DELETE FROM execution_search WHERE execution_id IN (SELECT value FROM json_each(?1))",
    "DELETE FROM history_events WHERE execution_id IN (SELECT value FROM json_each(?1))",
    "DELETE FROM inbox WHERE execution_id IN (SELECT value FROM json_each(?1))",
    "DELETE FROM task_queue WHERE execution_id IN (SELECT value FROM json_each(?1))",
    "DELETE FROM timers WHERE execution_id IN (SELECT value FROM json_each(?1))",
    "DELETE FROM owners WHERE execution_id IN (SELECT value FROM json_each(?1))",
    "DELETE FROM executions WHERE execution_id IN (SELECT value FROM json_each(?1))",
];

/// Buckets whose window ended by `?1` (rows from before migration 0018 have no
/// `expires_at`: a year, the longest period, after their window started).
/// Items of finished batch jobs past their retention (`?1`), then such jobs with no item
/// left (PostgreSQL's `DELETE_FINISHED_BATCHES`, as two statements of one writer job).
const DELETE_FINISHED_BATCH_ITEMS: &str = "DELETE FROM batch_items WHERE rowid IN (
    SELECT i.rowid FROM batch_items i JOIN batches b ON b.batch_id = i.batch_id
    WHERE b.state IN ('COMPLETED', 'CANCELLED', 'FAILED') AND b.updated_at <= ?1 LIMIT ?2)";

const DELETE_FINISHED_BATCH_ROWS: &str = "DELETE FROM batches WHERE batch_id IN (
    SELECT b.batch_id FROM batches b
    WHERE b.state IN ('COMPLETED', 'CANCELLED', 'FAILED') AND b.updated_at <= ?1
        AND NOT EXISTS (SELECT 1 FROM batch_items i WHERE i.batch_id = b.batch_id)
    LIMIT ?2)";

const DELETE_ENDED_BUCKETS: &str = "DELETE FROM rate_buckets WHERE bucket IN (
    SELECT bucket FROM rate_buckets WHERE expires_at <= ?1
    UNION ALL SELECT bucket FROM rate_buckets
        WHERE expires_at IS NULL AND window_start + 31622400000 <= ?1
    LIMIT ?2)";
/// Served rows of fair keys with no running row and no queued row at a fair head. A key
/// whose queued rows also hold a concurrency key or a rate limit may lose its row too:
/// that only changes which of two equal shares goes first.
const DELETE_IDLE_FAIR: &str = "DELETE FROM fair_served WHERE fair_key IN (
    SELECT s.fair_key FROM fair_served s
    WHERE NOT EXISTS (SELECT 1 FROM task_queue q
            WHERE q.state = 'claimed' AND q.fair_key = s.fair_key)
        AND NOT EXISTS (SELECT 1 FROM task_queue q WHERE q.state = 'queued' AND q.limited
            AND q.concurrency_key IS NULL AND q.rate_key IS NULL AND q.fair_key = s.fair_key)
    ORDER BY s.served_at LIMIT ?1)";

pub(crate) fn delete_idle_flow_rows(conn: &mut Connection, limit: u32) -> Result<FlowRowsDeleted> {
    let now = to_i64(now_ms(), "now")?;
    let buckets =
        conn.prepare_cached(DELETE_ENDED_BUCKETS)?.execute(params![now, i64::from(limit)])?;
    let fair = conn.prepare_cached(DELETE_IDLE_FAIR)?.execute(params![i64::from(limit)])?;
    Ok(FlowRowsDeleted { buckets: count(buckets), fair_keys: count(fair) })
}

pub(crate) fn delete_finished_batches(
    conn: &mut Connection,
    finished_before_ms: u64,
    limit: u32,
) -> Result<crate::BatchesDeleted> {
    let before = to_i64(finished_before_ms, "finished before")?;
    let items = conn
        .prepare_cached(DELETE_FINISHED_BATCH_ITEMS)?
        .execute(params![before, i64::from(limit)])?;
    let batches = conn
        .prepare_cached(DELETE_FINISHED_BATCH_ROWS)?
        .execute(params![before, i64::from(limit)])?;
    Ok(crate::BatchesDeleted { batches: count(batches), items: count(items) })
}

fn cutoff(grace_ms: u64) -> Result<i64> {
    to_i64(now_ms().saturating_sub(grace_ms), "cutoff")
}

fn strings(conn: &Connection, sql: &str, params: impl rusqlite::Params) -> Result<Vec<String>> {
    let mut stmt = conn.prepare_cached(sql)?;
    let found = stmt.query_map(params, |r| r.get(0))?.collect::<rusqlite::Result<Vec<_>>>()?;
    Ok(found)
}

fn count(n: usize) -> u64 {
    u64::try_from(n).unwrap_or(u64::MAX)
}

pub(crate) fn delete_done_rows(
    conn: &mut Connection,
    grace_ms: u64,
    limit: u32,
) -> Result<DoneRowsDeleted> {
    let before = cutoff(grace_ms)?;
    let inbox =
        conn.prepare_cached(DELETE_DONE_INBOX)?.execute(params![before, i64::from(limit)])?;
    let tasks =
        conn.prepare_cached(DELETE_DONE_TASKS)?.execute(params![before, i64::from(limit)])?;
    Ok(DoneRowsDeleted { inbox: count(inbox), tasks: count(tasks) })
}

pub(crate) fn release_closed_owners(
    conn: &mut Connection,
    grace_ms: u64,
    limit: u32,
) -> Result<OwnersReleased> {
    let roots = strings(conn, RELEASABLE_ROOTS, params![cutoff(grace_ms)?, i64::from(limit)])?;
    let owners = if roots.is_empty() {
        0
    } else {
        conn.prepare_cached(DELETE_TREE_OWNERS)?.execute([json_text(&json!(roots))])?
    };
    let answered = conn.prepare_cached(ANSWER_UNOWNED)?.execute(params![
        to_i64(now_ms(), "now")?,
        finished_reply().to_json().to_string(),
        i64::from(limit)
    ])?;
    Ok(OwnersReleased {
        trees: count(roots.len()),
        owners: count(owners),
        answered: count(answered),
    })
}

pub(crate) fn delete_expired(
    conn: &mut Connection,
    now: u64,
    limit: u32,
) -> Result<ExecutionsDeleted> {
    let roots = strings(conn, EXPIRED_ROOTS, params![to_i64(now, "now")?, i64::from(limit)])?;
    if roots.is_empty() {
        return Ok(ExecutionsDeleted::default());
    }
    let ids = strings(conn, TREE_OF_ROOTS, [json_text(&json!(roots))])?;
    delete_rows(conn, &ids)
}

pub(crate) fn delete_execution(conn: &mut Connection, id: &str) -> Result<DeleteOutcome> {
    let mut stmt = conn.prepare_cached(SUBTREE)?;
    let tree = stmt
        .query_map([id], |r| Ok((r.get::<_, String>(0)?, r.get::<_, String>(1)?)))?
        .collect::<rusqlite::Result<Vec<_>>>()?;
    drop(stmt);
    if tree.is_empty() {
        return Ok(DeleteOutcome::NotFound);
    }
    let open: Vec<String> = tree
        .iter()
        .filter(|(_, s)| matches!(s.as_str(), "PENDING" | "RUNNING" | "COMPENSATING" | "SUSPENDED"))
        .map(|(i, _)| i.clone())
        .collect();
    if !open.is_empty() {
        return Ok(DeleteOutcome::NotFinished(open));
    }
    let ids: Vec<String> = tree.into_iter().map(|(i, _)| i).collect();
    Ok(DeleteOutcome::Deleted(delete_rows(conn, &ids)?))
}

fn delete_rows(conn: &Connection, ids: &[String]) -> Result<ExecutionsDeleted> {
    let ids = json_text(&json!(ids));
    // The first two slots count the poison-quarantine fault rows and the search attribute
    // rows, which are not reported.
    let mut n = [0u64; 8];
    for (slot, sql) in n.iter_mut().zip(DELETE_ROWS) {
        *slot = count(conn.prepare_cached(sql)?.execute([&ids])?);
    }
    Ok(ExecutionsDeleted {
        events: n[2],
        inbox: n[3],
        tasks: n[4],
        timers: n[5],
        owners: n[6],
        executions: n[7],
    })
}
