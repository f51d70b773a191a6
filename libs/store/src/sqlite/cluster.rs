//! Membership, owner takeover and orphaned claims on SQLite.
//!
//! `orbit dev` is one process, so nothing here races with another node; the functions exist
//! so the services run the same code on both backends and the conformance suite can check
//! the rules (PostgreSQL holds the row locks that make them safe between processes).

use super::conn::now_ms;
use super::rows::{self, json_text, to_i64, to_u64};
use super::sql;
use crate::error::Result;
use crate::inbox::{InboxKind, InboxMessage, Uncertain, OPERATOR_KINDS};
use crate::model::{InboxEntry, NodeInfo, NodeRow, OrphanRoot, ResumedExecution, TaskRow};
use rusqlite::{params, Connection, Row};
use serde_json::json;

/// Statuses of an execution that still has work.
const OPEN: &str = "('PENDING', 'RUNNING', 'COMPENSATING')";

fn node(row: &Row<'_>) -> Result<NodeRow> {
    Ok(NodeRow {
        node_id: row.get(0)?,
        service: row.get(1)?,
        incarnation: row.get(2)?,
        addr: row.get(3)?,
        heartbeat_at_ms: to_u64(row.get(4)?, "node heartbeat_at")?,
        started_at_ms: to_u64(row.get(5)?, "node started_at")?,
        sessions: row.get(6)?,
    })
}

const NODE_COLUMNS: &str =
    "node_id, service, incarnation, addr, heartbeat_at, started_at, sessions";

pub(crate) fn heartbeat(conn: &mut Connection, n: &NodeInfo) -> Result<u64> {
    let now = now_ms();
    conn.prepare_cached(
        "INSERT INTO nodes (node_id, service, incarnation, addr, heartbeat_at, started_at,
            sessions)
        VALUES (?1, ?2, ?3, ?4, ?5, ?5, ?6)
        ON CONFLICT (node_id) DO UPDATE SET service = excluded.service,
            addr = excluded.addr, heartbeat_at = excluded.heartbeat_at,
            sessions = excluded.sessions,
            started_at = CASE WHEN nodes.incarnation = excluded.incarnation
                THEN nodes.started_at ELSE excluded.started_at END,
            incarnation = excluded.incarnation",
    )?
    .execute(params![
        n.node_id,
        n.service,
        n.incarnation,
        n.addr,
        to_i64(now, "now")?,
        n.sessions
    ])?;
    Ok(now)
}

pub(crate) fn live(
    conn: &Connection,
    service: Option<&str>,
    timeout_ms: u64,
) -> Result<Vec<NodeRow>> {
    let since = to_i64(now_ms().saturating_sub(timeout_ms), "since")?;
    let sql = format!(
        "SELECT {NODE_COLUMNS} FROM nodes WHERE heartbeat_at >= ?1
        AND (?2 IS NULL OR service = ?2) ORDER BY node_id"
    );
    let mut stmt = conn.prepare_cached(&sql)?;
    let mut found = stmt.query(params![since, service])?;
    let mut out = Vec::new();
    while let Some(row) = found.next()? {
        out.push(node(row)?);
    }
    Ok(out)
}

pub(crate) fn list(conn: &Connection) -> Result<Vec<NodeRow>> {
    let mut stmt =
        conn.prepare_cached(&format!("SELECT {NODE_COLUMNS} FROM nodes ORDER BY node_id"))?;
    let mut found = stmt.query([])?;
    let mut out = Vec::new();
    while let Some(row) = found.next()? {
        out.push(node(row)?);
    }
    Ok(out)
}

pub(crate) fn remove(conn: &mut Connection, node_id: &str) -> Result<()> {
    conn.prepare_cached("DELETE FROM nodes WHERE node_id = ?1")?.execute([node_id])?;
    Ok(())
}

pub(crate) fn pending_owned(
    conn: &Connection,
    node_id: &str,
    also: &[String],
    limit: u32,
) -> Result<Vec<InboxEntry>> {
    let sql = format!(
        "SELECT {} FROM inbox i WHERE i.done_at IS NULL AND (
            i.execution_id IN (SELECT value FROM json_each(?2))
            OR EXISTS (SELECT 1 FROM owners o
                WHERE o.execution_id = i.execution_id AND o.node_id = ?1))
        AND (i.kind IN (?4, ?5, ?6, ?7) OR NOT EXISTS (SELECT 1 FROM execution_faults f
            WHERE f.execution_id = i.execution_id AND f.parked_at IS NOT NULL))
        ORDER BY i.seq LIMIT ?3",
        sql::INBOX_COLUMNS_I
    );
    let mut stmt = conn.prepare_cached(&sql)?;
    let [resume, terminate, migrate, reset] = OPERATOR_KINDS.map(InboxKind::as_str);
    let also = json_text(&json!(also));
    let mut found =
        stmt.query(params![node_id, also, i64::from(limit), resume, terminate, migrate, reset])?;
    let mut out = Vec::new();
    while let Some(row) = found.next()? {
        out.push(rows::inbox(row)?);
    }
    Ok(out)
}

/// From the open executions (`executions_by_status`, named: with statistics that say most
/// rows are closed SQLite would scan the table) to their owners rows by key, never every
/// owners row of the node.
pub(crate) fn owned(conn: &Connection, node_id: &str) -> Result<Vec<String>> {
    let sql = format!(
        "SELECT o.execution_id FROM owners o
        WHERE o.execution_id IN (SELECT execution_id FROM executions
                INDEXED BY executions_by_status WHERE status IN {OPEN})
          AND o.node_id = ?1 ORDER BY o.execution_id"
    );
    let mut stmt = conn.prepare_cached(&sql)?;
    let ids =
        stmt.query_map([node_id], |r| r.get(0))?.collect::<rusqlite::Result<Vec<String>>>()?;
    Ok(ids)
}

/// Driven from the work (open executions, pending entries) to the owners rows by key, as on
/// PostgreSQL: never every owners row.
pub(crate) fn orphaned_roots(
    conn: &Connection,
    timeout_ms: u64,
    limit: u32,
) -> Result<Vec<OrphanRoot>> {
    let since = to_i64(now_ms().saturating_sub(timeout_ms), "since")?;
    let sql = format!(
        "SELECT DISTINCT o.root_id, o.node_id FROM (
            SELECT e.execution_id FROM executions e INDEXED BY executions_by_status
            WHERE e.status IN {OPEN}
            UNION SELECT i.execution_id FROM inbox i WHERE i.done_at IS NULL) w
        JOIN owners o ON o.execution_id = w.execution_id
        WHERE o.node_id NOT IN (SELECT node_id FROM nodes
                WHERE service = 'owner' AND heartbeat_at >= ?1)
        ORDER BY o.root_id LIMIT ?2"
    );
    let mut stmt = conn.prepare_cached(&sql)?;
    let roots = stmt
        .query_map(params![since, i64::from(limit)], |r| {
            Ok(OrphanRoot { root_id: r.get(0)?, node_id: r.get(1)? })
        })?
        .collect::<rusqlite::Result<Vec<_>>>()?;
    Ok(roots)
}

pub(crate) fn take_over_root(
    conn: &mut Connection,
    root_id: &str,
    from_node: &str,
    to_node: &str,
) -> Result<Vec<(String, u64)>> {
    let now = to_i64(now_ms(), "now")?;
    let mut stmt = conn.prepare_cached(
        "UPDATE owners SET node_id = ?3, epoch = epoch + 1, since = ?4
        WHERE root_id = ?1 AND node_id = ?2 RETURNING execution_id, epoch",
    )?;
    let mut found = stmt.query(params![root_id, from_node, to_node, now])?;
    let mut out = Vec::new();
    while let Some(row) = found.next()? {
        out.push((row.get::<_, String>(0)?, to_u64(row.get(1)?, "owner epoch")?));
    }
    out.sort();
    Ok(out)
}

/// The next page of `node_id`'s owners rows to the next epoch (see
/// `OwnerWrites::resume_node`); one savepoint of the writer's group transaction. `+node_id`
/// keeps SQLite on the primary key's order (the node index would sort every row of the node
/// for each page), so the pages together read the table once.
pub(crate) fn resume_node(
    conn: &mut Connection,
    node_id: &str,
    after: &str,
    limit: u32,
) -> Result<Vec<ResumedExecution>> {
    let now = to_i64(now_ms(), "now")?;
    let last: Option<String> = conn
        .prepare_cached(
            "SELECT max(execution_id) FROM (SELECT execution_id FROM owners
            WHERE +node_id = ?1 AND execution_id > ?2 ORDER BY execution_id LIMIT ?3)",
        )?
        .query_row(params![node_id, after, limit], |r| r.get(0))?;
    let Some(last) = last else { return Ok(Vec::new()) };
    conn.prepare_cached(
        "UPDATE owners SET epoch = epoch + 1, since = ?4
        WHERE +node_id = ?1 AND execution_id > ?2 AND execution_id <= ?3",
    )?
    .execute(params![node_id, after, last, now])?;
    let sql = format!(
        "SELECT o.execution_id, o.epoch,
            EXISTS (SELECT 1 FROM executions e
                WHERE e.execution_id = o.execution_id AND e.status IN {OPEN}),
            EXISTS (SELECT 1 FROM history_events h
                WHERE h.execution_id = o.execution_id AND h.event_type = 'ChildStarted')
        FROM owners o WHERE +o.node_id = ?1 AND o.execution_id > ?2 AND o.execution_id <= ?3
        ORDER BY o.execution_id"
    );
    let mut stmt = conn.prepare_cached(&sql)?;
    let mut found = stmt.query(params![node_id, after, last])?;
    let mut out = Vec::new();
    while let Some(row) = found.next()? {
        out.push(ResumedExecution {
            execution_id: row.get(0)?,
            epoch: to_u64(row.get(1)?, "owner epoch")?,
            open: row.get(2)?,
            child_started: row.get(3)?,
        });
    }
    Ok(out)
}

pub(crate) fn release_claims(
    conn: &mut Connection,
    claimer: &str,
    reason: &str,
) -> Result<Vec<TaskRow>> {
    let now = to_i64(now_ms(), "now")?;
    let mut released = Vec::new();
    {
        let sql = format!(
            "UPDATE task_queue SET state = 'cancelled', updated_at = ?2
            WHERE state = 'claimed' AND claimed_by = ?1 RETURNING {}",
            sql::TASK_COLUMNS
        );
        let mut stmt = conn.prepare_cached(&sql)?;
        let mut found = stmt.query(params![claimer, now])?;
        while let Some(row) = found.next()? {
            released.push(rows::task(row)?);
        }
    }
    report_uncertain(conn, released, reason, now)
}

/// Writes one `uncertain` entry with `reason` for each released row (by id), and returns
/// them.
fn report_uncertain(
    conn: &Connection,
    mut released: Vec<TaskRow>,
    reason: &str,
    now: i64,
) -> Result<Vec<TaskRow>> {
    released.sort_by_key(|t| t.id);
    let message =
        InboxMessage::Uncertain(Uncertain { token: String::new(), reason: reason.into() });
    let (kind, payload) = (message.kind().as_str(), message.payload_text());
    for t in &released {
        let _seq: i64 = conn
            .prepare_cached(sql::INBOX_INSERT)?
            .query_row(params![t.execution_id, kind, t.token, payload, now], |r| r.get(0))?;
    }
    Ok(released)
}

/// The rows among `tokens` that `claimer` still holds become cancelled, each with one
/// `uncertain` entry (see `TaskQueue::hand_back_claims`).
pub(crate) fn hand_back_claims(
    conn: &mut Connection,
    claimer: &str,
    tokens: &[String],
    reason: &str,
) -> Result<Vec<TaskRow>> {
    let now = to_i64(now_ms(), "now")?;
    let mut released = Vec::new();
    {
        let sql = format!(
            "UPDATE task_queue SET state = 'cancelled', updated_at = ?3
            WHERE state = 'claimed' AND claimed_by = ?1 AND token = ?2 RETURNING {}",
            sql::TASK_COLUMNS
        );
        let mut stmt = conn.prepare_cached(&sql)?;
        for token in tokens {
            let mut found = stmt.query(params![claimer, token, now])?;
            while let Some(row) = found.next()? {
                released.push(rows::task(row)?);
            }
        }
    }
    report_uncertain(conn, released, reason, now)
}

/// The rows among `tokens` still claimed for `worker_id` now name `claimer` and `session`
/// (see `TaskQueue::adopt_claims`).
pub(crate) fn adopt_claims(
    conn: &mut Connection,
    worker_id: &str,
    tokens: &[String],
    claimer: &str,
    session: &str,
) -> Result<Vec<TaskRow>> {
    let now = to_i64(now_ms(), "now")?;
    let sql = format!(
        "UPDATE task_queue SET claimed_by = ?3, session = ?4, updated_at = ?5
        WHERE state = 'claimed' AND worker_id = ?1 AND token = ?2 RETURNING {}",
        sql::TASK_COLUMNS
    );
    let mut stmt = conn.prepare_cached(&sql)?;
    let mut moved = Vec::new();
    for token in tokens {
        let mut found = stmt.query(params![worker_id, token, claimer, session, now])?;
        while let Some(row) = found.next()? {
            moved.push(rows::task(row)?);
        }
    }
    moved.sort_by_key(|t| t.id);
    Ok(moved)
}

pub(crate) fn orphaned_claimers(conn: &Connection, timeout_ms: u64) -> Result<Vec<String>> {
    let since = to_i64(now_ms().saturating_sub(timeout_ms), "since")?;
    let mut stmt = conn.prepare_cached(
        "SELECT DISTINCT claimed_by FROM task_queue
        WHERE state = 'claimed' AND claimed_by IS NOT NULL
          AND claimed_by NOT IN (SELECT node_id FROM nodes WHERE heartbeat_at >= ?1)
        ORDER BY claimed_by",
    )?;
    let ids = stmt.query_map([since], |r| r.get(0))?.collect::<rusqlite::Result<Vec<String>>>()?;
    Ok(ids)
}
