//! The coordination tables on SQLite: task queue, inbox, timers and owners.

use super::conn::now_ms;
use super::rows::{self, json_text, to_i64, to_u64};
use super::sql;
use crate::error::{Result, StoreError};
use crate::handoff::TaskClaim;
use crate::inbox::{Dispatched, InboxMessage, Timer};
use crate::model::{
    new_task_tokens, ClaimFilter, CompletedTask, InboxEntry, InboxStatus, OwnerRow, QueueBacklog,
    TaskRow, TaskState, TimerRow, MAX_CLAIM,
};
use rusqlite::{params, Connection, OptionalExtension};
use serde_json::json;

/// Queued → claimed, plus one `dispatched` inbox entry per claimed row, in one transaction.
pub(crate) fn claim_tasks(
    conn: &mut Connection,
    filter: &ClaimFilter,
    limit: u32,
    claimer: &str,
    session: &str,
    worker_id: &str,
) -> Result<Vec<TaskRow>> {
    if filter.is_empty() || limit == 0 {
        return Ok(Vec::new());
    }
    let now = to_i64(now_ms(), "now")?;
    // The writer runs every job in its own savepoint (see `conn.rs`): no nested one here.
    let tx: &Connection = conn;
    let ids = claimable(tx, filter, limit.min(MAX_CLAIM), worker_id, now)?;
    let tokens = new_task_tokens(u32::try_from(ids.len()).unwrap_or(MAX_CLAIM))?;
    let mut claimed = Vec::with_capacity(ids.len());
    for (id, token) in ids.iter().zip(&tokens) {
        let mut stmt = tx.prepare_cached(sql::TASK_CLAIM)?;
        let mut found = stmt.query(params![id, claimer, session, worker_id, token, now])?;
        if let Some(row) = found.next()? {
            claimed.push(rows::task(row)?);
        }
    }
    for t in &claimed {
        insert_dispatched(tx, t, claimer, session, worker_id, now)?;
    }
    Ok(claimed)
}

/// The ids of the best `limit` queued rows without a limit `filter` admits, by rank: the
/// first `limit` of each task name (`sql::TASK_CLAIMABLE` walks one name's index range),
/// merged.
fn claimable(
    tx: &Connection,
    filter: &ClaimFilter,
    limit: u32,
    worker_id: &str,
    now: i64,
) -> Result<Vec<i64>> {
    let labels = filter.labels_json();
    let mut ranked: Vec<(i64, i64)> = Vec::new();
    let mut stmt = tx.prepare_cached(sql::TASK_CLAIMABLE)?;
    for name in filter.task_names() {
        let any = filter.any_version.contains(&name);
        let versions: Vec<&str> =
            filter.versions.iter().filter(|(n, _)| *n == name).map(|(_, v)| v.as_str()).collect();
        let rows = stmt.query_map(
            params![
                name,
                any,
                json_text(&json!(versions)),
                filter.language,
                i64::from(limit),
                labels,
                worker_id,
                now
            ],
            |r| Ok((r.get::<_, i64>(1)?, r.get::<_, i64>(0)?)),
        )?;
        for row in rows {
            ranked.push(row?);
        }
    }
    ranked.sort_unstable();
    ranked.truncate(usize::try_from(limit).unwrap_or(usize::MAX));
    Ok(ranked.into_iter().map(|(_, id)| id).collect())
}

/// The `dispatched` inbox entry of a claimed row: how its owner learns of the claim.
pub(crate) fn insert_dispatched(
    tx: &Connection,
    t: &TaskRow,
    claimer: &str,
    session: &str,
    worker_id: &str,
    now: i64,
) -> Result<()> {
    let message = InboxMessage::Dispatched(Dispatched {
        task_id: t.id,
        step: t.unit_key.clone(),
        attempt: t.attempt,
        offer: t.offer,
        token: t.token.clone().unwrap_or_default(),
        claimed_by: claimer.to_string(),
        session: session.to_string(),
        worker_id: worker_id.to_string(),
    });
    let (kind, payload) = (message.kind().as_str(), message.payload_text());
    let _seq: i64 = tx
        .prepare_cached(sql::INBOX_INSERT)?
        .query_row(params![t.execution_id, kind, t.token, payload, now], |r| r.get(0))?;
    Ok(())
}

/// A row a commit just inserted, claimed for a hand-off (see [`crate::handoff`]): the same
/// update as [`claim_tasks`], inside the commit's transaction (its `StepDispatched` is in
/// the batch's events, so no `dispatched` entry).
pub(crate) fn claim_row(
    tx: &Connection,
    execution_id: &str,
    task_id: i64,
    c: &TaskClaim,
    now: i64,
) -> Result<TaskRow> {
    let mut stmt = tx.prepare_cached(sql::TASK_CLAIM)?;
    let mut found =
        stmt.query(params![task_id, c.claimer, c.session, c.worker_id, c.token, now])?;
    let Some(row) = found.next()? else {
        return Err(StoreError::Conflict(format!(
            "task {task_id} of execution {execution_id} is no longer queued"
        )));
    };
    // No `dispatched` entry: the committing owner records `StepDispatched` in the same
    // commit (see `CommitBatch::task_claims`).
    rows::task(row)
}

/// Mark the row of `token` done and record the report for its owner, in one transaction;
/// only when the row was claimed for `worker_id` (otherwise nothing is written). Also says
/// whether a concurrency slot was freed (the row was claimed and holds a key).
pub(crate) fn complete_task_row(
    conn: &mut Connection,
    token: &str,
    worker_id: &str,
    report: Option<InboxMessage>,
) -> Result<(Option<CompletedTask>, bool)> {
    let now = to_i64(now_ms(), "now")?;
    // The writer runs every job in its own savepoint (see `conn.rs`): no nested one here.
    let tx: &Connection = conn;
    // Read before the update (the single writer keeps it current): the state it leaves
    // says whether a slot frees.
    let mut task = {
        let mut stmt = tx.prepare_cached(sql::TASK_BY_TOKEN)?;
        let mut found = stmt.query([token])?;
        match found.next()? {
            Some(row) => rows::task(row)?,
            None => return Ok((None, false)),
        }
    };
    let newly_done =
        tx.prepare_cached(sql::TASK_DONE)?.execute(params![token, now, worker_id])? > 0;
    let freed = newly_done
        && task.state == TaskState::Claimed
        && task.flow.as_ref().is_some_and(|f| f.concurrency.is_some());
    if newly_done {
        task.state = TaskState::Done;
    }
    if task.worker_id.as_deref() != Some(worker_id) {
        return Ok((Some(CompletedTask { task, newly_done: false, inbox_seq: None }), false));
    }
    let inbox_seq = match report {
        Some(r) => {
            let seq: i64 = tx.prepare_cached(sql::INBOX_INSERT)?.query_row(
                params![task.execution_id, r.kind().as_str(), token, r.payload_text(), now],
                |row| row.get(0),
            )?;
            Some(to_u64(seq, "inbox seq")?)
        }
        None => None,
    };
    Ok((Some(CompletedTask { task, newly_done, inbox_seq }), freed))
}

/// Append an inbox entry; returns its seq, or the seq of the entry an earlier message of
/// the same kind and request id wrote for the execution (nothing is written then).
pub(crate) fn enqueue_inbox(
    conn: &mut Connection,
    execution_id: &str,
    message: &InboxMessage,
) -> Result<u64> {
    let now = to_i64(now_ms(), "now")?;
    let (kind, token, payload) = (message.kind().as_str(), message.token(), message.payload_text());
    let request_id = message.request_id();
    let inserted: Option<i64> = conn
        .prepare_cached(sql::INBOX_INSERT_REQUEST)?
        .query_row(params![execution_id, kind, token, payload, now, request_id], |r| r.get(0))
        .optional()?;
    let seq = match inserted {
        Some(seq) => seq,
        // Only a request id conflicts; the writer thread is the only writer, so the entry
        // that did is there to read. It answers only a repeat of the same request.
        None => {
            let (seq, earlier): (i64, String) = conn
                .prepare_cached(sql::INBOX_BY_REQUEST)?
                .query_row(params![execution_id, kind, request_id], |r| {
                    Ok((r.get(0)?, r.get(1)?))
                })?;
            message.check_repeat(&earlier)?;
            seq
        }
    };
    to_u64(seq, "inbox seq")
}

/// Pending entries by seq.
pub(crate) fn pending_inbox(
    conn: &Connection,
    execution_id: Option<&str>,
    limit: u32,
) -> Result<Vec<InboxEntry>> {
    let limit = i64::from(limit);
    let mut stmt;
    let mut found = match execution_id {
        Some(id) => {
            stmt = conn.prepare_cached(sql::INBOX_PENDING_ONE)?;
            stmt.query(params![id, limit])?
        }
        None => {
            stmt = conn.prepare_cached(sql::INBOX_PENDING_ALL)?;
            stmt.query(params![limit])?
        }
    };
    let mut out = Vec::new();
    while let Some(row) = found.next()? {
        out.push(rows::inbox(row)?);
    }
    Ok(out)
}

/// Pending or done (with the reply) for one entry.
pub(crate) fn inbox_result(conn: &Connection, seq: u64) -> Result<InboxStatus> {
    let mut stmt = conn.prepare_cached(sql::INBOX_GET)?;
    let mut found = stmt.query([to_i64(seq, "inbox seq")?])?;
    let Some(row) = found.next()? else {
        return Err(StoreError::NotFound(format!("inbox entry {seq}")));
    };
    let entry = rows::inbox(row)?;
    Ok(match entry.done_at_ms {
        Some(_) => InboxStatus::Done(crate::inbox::stored_reply(entry.result)?),
        None => InboxStatus::Pending,
    })
}

/// Timers due at `now`, by due time.
pub(crate) fn due_timers(conn: &Connection, now_ms: u64, limit: u32) -> Result<Vec<TimerRow>> {
    let mut stmt = conn.prepare_cached(sql::TIMER_DUE)?;
    let mut found = stmt.query(params![to_i64(now_ms, "now")?, i64::from(limit)])?;
    let mut out = Vec::new();
    while let Some(row) = found.next()? {
        out.push(rows::timer(row)?);
    }
    Ok(out)
}

/// Due timers become `timer` inbox entries and are deleted, in one transaction.
pub(crate) fn fire_due_timers(
    conn: &mut Connection,
    now_ms: u64,
    limit: u32,
) -> Result<Vec<(TimerRow, u64)>> {
    let now = to_i64(super::conn::now_ms(), "now")?;
    // The writer runs every job in its own savepoint (see `conn.rs`): no nested one here.
    let tx: &Connection = conn;
    let due = due_timers(tx, now_ms, limit)?;
    let mut fired = Vec::with_capacity(due.len());
    for t in due {
        let message = InboxMessage::Timer(Timer {
            key: t.key.clone(),
            run: t.run,
            fire_at: t.fire_at_ms,
            payload: t.payload.clone(),
        });
        let (kind, payload) = (message.kind().as_str(), message.payload_text());
        let seq: i64 = tx
            .prepare_cached(sql::INBOX_INSERT)?
            .query_row(params![t.execution_id, kind, Option::<&str>::None, payload, now], |r| {
                r.get(0)
            })?;
        tx.prepare_cached(sql::TIMER_DELETE)?.execute(params![t.execution_id, t.key])?;
        fired.push((t, to_u64(seq, "inbox seq")?));
    }
    Ok(fired)
}

/// The earliest due time.
pub(crate) fn next_timer_at(conn: &Connection) -> Result<Option<u64>> {
    let next: Option<i64> = conn.prepare_cached(sql::TIMER_NEXT)?.query_row([], |r| r.get(0))?;
    next.map(|t| to_u64(t, "timer fire_at")).transpose()
}

/// The owners row, if any.
pub(crate) fn get_owner(conn: &Connection, execution_id: &str) -> Result<Option<OwnerRow>> {
    let mut stmt = conn.prepare_cached(sql::OWNER_GET)?;
    let found = stmt.query_row([execution_id], |r| Ok(rows::owner(r))).optional()?;
    found.transpose()
}

/// Rows still claimed by `claimer`, oldest first.
pub(crate) fn claimed_by(conn: &Connection, claimer: &str) -> Result<Vec<TaskRow>> {
    let mut stmt = conn.prepare_cached(sql::TASK_CLAIMED_BY)?;
    let mut found = stmt.query(params![claimer])?;
    let mut out = Vec::new();
    while let Some(row) = found.next()? {
        out.push(rows::task(row)?);
    }
    Ok(out)
}

/// Queued rows per task name and version.
pub(crate) fn queue_backlog(conn: &Connection) -> Result<Vec<QueueBacklog>> {
    let mut stmt = conn.prepare_cached(sql::TASK_BACKLOG)?;
    let mut found = stmt.query([])?;
    let mut out = Vec::new();
    while let Some(row) = found.next()? {
        let (queued, oldest): (i64, i64) = (row.get(2)?, row.get(3)?);
        out.push(QueueBacklog {
            task: row.get(0)?,
            task_version: row.get(1)?,
            queued: to_u64(queued, "backlog count")?,
            oldest_created_at_ms: to_u64(oldest, "task created_at")?,
        });
    }
    Ok(out)
}

/// The row a token was issued for.
pub(crate) fn task_by_token(conn: &Connection, token: &str) -> Result<Option<TaskRow>> {
    let mut stmt = conn.prepare_cached(sql::TASK_BY_TOKEN)?;
    let mut found = stmt.query(params![token])?;
    found.next()?.map(rows::task).transpose()
}
