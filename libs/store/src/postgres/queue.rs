//! The coordination tables on PostgreSQL: task queue, inbox, timers and owners.
//!
//! Every write here is one statement (or one pipelined transaction): one round trip.
//! Claims and timer firing take their rows `FOR UPDATE SKIP LOCKED`, so concurrent callers
//! split the rows between them and never get the same one. Inbox writes wake the owners
//! (`orbit_inbox`) in the same transaction.

use super::conn::{all_ok, command, pipeline, step, PgConn};
use super::error::{connection_lost, PgErr, PgResult};
use super::rows::{self, get, get_u64, to_i64};
use super::sql;
use crate::error::{Result, StoreError};
use crate::inbox::{InboxKind, InboxMessage};

/// The kind the claim statement writes (its payload is built in SQL with the fields of
/// [`Dispatched`](crate::inbox::Dispatched); the conformance suite decodes it).
const DISPATCHED: &str = InboxKind::Dispatched.as_str();
use crate::model::{
    new_task_tokens, ClaimFilter, CompletedTask, InboxEntry, InboxStatus, OwnerRow, QueueBacklog,
    TaskRow, TimerRow, MAX_CLAIM,
};
use tokio_postgres::types::ToSql;

/// Queued → claimed, plus one `dispatched` inbox entry per claimed row, in one statement.
pub(crate) async fn claim_tasks(
    conn: &mut PgConn,
    filter: &ClaimFilter,
    limit: u32,
    claimer: &str,
    session: &str,
    worker_id: &str,
) -> PgResult<Vec<TaskRow>> {
    if filter.is_empty() || limit == 0 {
        return Ok(Vec::new());
    }
    let args = ClaimArgs::new(filter, limit, [claimer, session, worker_id])?;
    let stmts = conn.prepare(&[sql::TASK_CLAIM]).await?;
    let [claim] = &stmts[..] else {
        return Err(PgErr::Store(StoreError::Storage("claim statement missing".into())));
    };
    let params = args.params();
    // The claim commits without waiting for its WAL flush (issue 14: it is on the critical
    // path of every step). A claim lost in a crash is only a redelivery, which
    // at-least-once allows: the row is queued again, and the owner never recorded a
    // dispatch it could not see. Any later synchronous commit (the owner's, a result's)
    // flushes the WAL up to it anyway.
    conn.begin_marker();
    let mut outcomes = {
        let client = conn.client();
        pipeline(vec![
            command(client, "BEGIN"),
            command(client, "SET LOCAL synchronous_commit = off"),
            step(client, claim, &params),
            command(client, "COMMIT"),
        ])
        .await
    };
    let committed = outcomes.pop().unwrap_or_else(|| Ok(Vec::new()));
    match &committed {
        Err(e) if connection_lost(e) => {}
        _ => conn.end_marker(),
    }
    let mut results = all_ok(outcomes)?;
    committed?;
    let found = results.pop().unwrap_or_default();
    Ok(rows::all(&found, rows::task)?)
}

/// What a claim binds, `TASK_CLAIM`'s and `TASK_CLAIM_LIMITED`'s `$1`..`$12`: the filter's
/// task names and versions, the row limit, one fresh token per row the statement may claim
/// (the unused ones are dropped), who claims, and the worker's labels.
pub(super) struct ClaimArgs<'a> {
    names: Vec<String>,
    limit: i64,
    tokens: Vec<String>,
    pinned: Vec<&'a str>,
    versions: Vec<&'a str>,
    labels: Option<String>,
    filter: &'a ClaimFilter,
    /// Claimer (frontend node), session, worker id.
    who: [&'a str; 3],
}

impl<'a> ClaimArgs<'a> {
    pub(super) fn new(filter: &'a ClaimFilter, limit: u32, who: [&'a str; 3]) -> PgResult<Self> {
        let limit = limit.min(MAX_CLAIM);
        let tokens = new_task_tokens(limit).map_err(PgErr::Store)?;
        let (pinned, versions) =
            filter.versions.iter().map(|(n, v)| (n.as_str(), v.as_str())).unzip();
        Ok(ClaimArgs {
            names: filter.task_names(),
            limit: i64::from(limit),
            tokens,
            pinned,
            versions,
            labels: filter.labels_json(),
            filter,
            who,
        })
    }

    pub(super) fn params(&self) -> [&(dyn ToSql + Sync); 12] {
        [
            &self.names,
            &self.limit,
            &self.who[0],
            &self.who[1],
            &self.tokens,
            &self.who[2],
            &DISPATCHED,
            &self.filter.any_version,
            &self.pinned,
            &self.versions,
            &self.filter.language,
            &self.labels,
        ]
    }
}

/// Marks the row of `token` done and records the report for its owner: one pipelined
/// transaction (one round trip).
pub(crate) async fn complete_task_row(
    conn: &mut PgConn,
    token: &str,
    worker_id: &str,
    report: Option<&InboxMessage>,
) -> PgResult<Option<CompletedTask>> {
    let stmts = conn.prepare(&[sql::TASK_DONE, sql::TASK_BY_TOKEN, sql::TASK_REPORT]).await?;
    let [done, by_token, report_stmt] = &stmts[..] else {
        return Err(PgErr::Store(StoreError::Storage("statements missing".into())));
    };
    let payload = report.map(|r| r.payload_text());
    let p_token: [&(dyn ToSql + Sync); 1] = [&token];
    let p_done: [&(dyn ToSql + Sync); 2] = [&token, &worker_id];
    let kind = report.map(|r| r.kind().as_str());
    let p_report: [&(dyn ToSql + Sync); 4] = [&token, &kind, &payload, &worker_id];
    conn.begin_marker();
    let mut outcomes = {
        let client = conn.client();
        let mut steps = vec![
            command(client, "BEGIN"),
            step(client, done, &p_done),
            step(client, by_token, &p_token),
        ];
        if report.is_some() {
            steps.push(step(client, report_stmt, &p_report));
        }
        steps.push(command(client, "COMMIT"));
        pipeline(steps).await
    };
    let committed = outcomes.pop().unwrap_or_else(|| Ok(Vec::new()));
    match &committed {
        Err(e) if connection_lost(e) => {}
        _ => conn.end_marker(),
    }
    let results = all_ok(outcomes)?;
    committed?;
    let newly_done = results.get(1).is_some_and(|r| !r.is_empty());
    let Some(row) = results.get(2).and_then(|r| r.first()) else {
        return Ok(None);
    };
    let task = rows::task(row)?;
    let inbox_seq = match results.get(3).and_then(|r| r.first()) {
        Some(r) => Some(get_u64(r, 0, "inbox seq")?),
        None => None,
    };
    Ok(Some(CompletedTask { task, newly_done, inbox_seq }))
}

/// Appends an inbox entry; returns its seq, or the seq of the entry an earlier message of
/// the same kind and request id wrote for the execution (nothing is written then).
pub(crate) async fn enqueue_inbox(
    conn: &mut PgConn,
    execution_id: &str,
    message: &InboxMessage,
) -> PgResult<u64> {
    let (kind, token) = (message.kind().as_str(), message.token());
    let (payload, request_id) = (message.payload_text(), message.request_id());
    let params: [&(dyn ToSql + Sync); 5] = [&execution_id, &kind, &token, &payload, &request_id];
    let found = conn.query(sql::INBOX_INSERT, &params).await?;
    let row = match found.into_iter().next() {
        Some(row) => row,
        None => {
            // A conflict can only come from a request id: the first entry answers. The
            // insert waited for a concurrent writer of it to commit, so it is visible now.
            let by: [&(dyn ToSql + Sync); 3] = [&execution_id, &kind, &request_id];
            let earlier = conn.query(sql::INBOX_BY_REQUEST, &by).await?;
            let row = earlier.into_iter().next().ok_or_else(|| {
                StoreError::Storage("an inbox insert conflicted with no entry".into())
            })?;
            // It answers only a repeat of the same request.
            message.check_repeat(&rows::get::<String>(&row, 1, "inbox payload")?)?;
            row
        }
    };
    Ok(get_u64(&row, 0, "inbox seq")?)
}

/// Pending entries by seq.
pub(crate) async fn pending_inbox(
    conn: &mut PgConn,
    execution_id: Option<&str>,
    limit: u32,
) -> PgResult<Vec<InboxEntry>> {
    let limit = i64::from(limit);
    let found = match execution_id {
        Some(id) => conn.query(sql::INBOX_PENDING_ONE, &[&id, &limit]).await?,
        None => conn.query(sql::INBOX_PENDING_ALL, &[&limit]).await?,
    };
    Ok(rows::all(&found, rows::inbox)?)
}

/// Pending or done (with the reply) for one entry.
pub(crate) async fn inbox_result(conn: &mut PgConn, seq: u64) -> PgResult<InboxStatus> {
    let Ok(seq_i) = i64::try_from(seq) else {
        return Err(PgErr::Store(StoreError::NotFound(format!("inbox entry {seq}"))));
    };
    let found = conn.query(sql::INBOX_GET, &[&seq_i]).await?;
    let Some(row) = found.first() else {
        return Err(PgErr::Store(StoreError::NotFound(format!("inbox entry {seq}"))));
    };
    let entry = rows::inbox(row)?;
    Ok(match entry.done_at_ms {
        Some(_) => InboxStatus::Done(crate::inbox::stored_reply(entry.result)?),
        None => InboxStatus::Pending,
    })
}

/// Timers due at `now`, by due time.
pub(crate) async fn due_timers(
    conn: &mut PgConn,
    now_ms: u64,
    limit: u32,
) -> PgResult<Vec<TimerRow>> {
    let now = to_i64(now_ms, "now")?;
    let found = conn.query(sql::TIMER_DUE, &[&now, &i64::from(limit)]).await?;
    Ok(rows::all(&found, rows::timer)?)
}

/// Due timers become `timer` inbox entries and are deleted, in one statement.
pub(crate) async fn fire_due_timers(
    conn: &mut PgConn,
    now_ms: u64,
    limit: u32,
) -> PgResult<Vec<(TimerRow, u64)>> {
    if limit == 0 {
        return Ok(Vec::new());
    }
    let now = to_i64(now_ms, "now")?;
    let kind = InboxKind::Timer.as_str();
    let found = conn.query(sql::TIMER_FIRE, &[&now, &i64::from(limit), &kind]).await?;
    let fired: Result<Vec<_>> =
        found.iter().map(|r| Ok((rows::timer(r)?, get_u64(r, 5, "inbox seq")?))).collect();
    Ok(fired?)
}

/// The earliest due time.
pub(crate) async fn next_timer_at(conn: &mut PgConn) -> PgResult<Option<u64>> {
    let found = conn.query(sql::TIMER_NEXT, &[]).await?;
    let Some(row) = found.first() else { return Ok(None) };
    let next: Option<i64> = get(row, 0, "timer fire_at")?;
    Ok(next
        .map(|t| u64::try_from(t).map_err(|_| StoreError::corrupt("timer fire_at", t)))
        .transpose()?)
}

/// The owners row, if any.
pub(crate) async fn get_owner(conn: &mut PgConn, execution_id: &str) -> PgResult<Option<OwnerRow>> {
    let found = conn.query(sql::OWNER_GET, &[&execution_id]).await?;
    Ok(found.first().map(rows::owner).transpose()?)
}

/// Rows still claimed by `claimer`, oldest first.
pub(crate) async fn claimed_by(conn: &mut PgConn, claimer: &str) -> PgResult<Vec<TaskRow>> {
    let found = conn.query(sql::TASK_CLAIMED_BY, &[&claimer]).await?;
    Ok(rows::all(&found, rows::task)?)
}

/// The row a token was issued for.
pub(crate) async fn task_by_token(conn: &mut PgConn, token: &str) -> PgResult<Option<TaskRow>> {
    let found = conn.query(sql::TASK_BY_TOKEN, &[&token]).await?;
    Ok(found.first().map(rows::task).transpose()?)
}

/// Queued rows per task name and version.
pub(crate) async fn queue_backlog(conn: &mut PgConn) -> PgResult<Vec<QueueBacklog>> {
    let found = conn.query(sql::TASK_BACKLOG, &[]).await?;
    let backlog: Result<Vec<_>> = found
        .iter()
        .map(|r| {
            Ok(QueueBacklog {
                task: get(r, 0, "task name")?,
                task_version: get(r, 1, "task version")?,
                queued: get_u64(r, 2, "backlog count")?,
                oldest_created_at_ms: get_u64(r, 3, "task created_at")?,
            })
        })
        .collect();
    Ok(backlog?)
}
