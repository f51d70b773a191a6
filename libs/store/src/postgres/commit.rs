//! [`CommitBatch`]es on PostgreSQL: any number of batches in one transaction, in two round
//! trips.
//!
//! 1. `BEGIN`, then, pipelined: the owners rows of every execution of the call `FOR SHARE`
//!    (the fence: a takeover's epoch bump waits until this transaction ends), their
//!    `executions` rows `FOR NO KEY UPDATE` (run and last seq; commits of one execution
//!    queue here) and the pending inbox entries the batches apply `FOR UPDATE`, each in a
//!    stable order so two commits never deadlock.
//! 2. Every check of the batch contract runs in memory on what was read (see `plan.rs`),
//!    batch after batch, exactly in the order the SQLite backend checks; a refusal rolls back
//!    before anything was written.
//! 3. Pipelined: one multi-row (`UNNEST`) statement per kind of write, the NOTIFYs, and
//!    `COMMIT`. If a statement fails (a concurrent writer created the same execution or
//!    owner row), the server refuses the rest and the `COMMIT` becomes a rollback.
//!
//! Statements are prepared once per connection; on a fresh connection that is one more
//! round trip, once.

use super::conn::{all_ok, command, pipeline, step, PgConn};
use super::error::{connection_lost, PgErr, PgResult};
use super::plan::{plan, Plan, Read, WriteKind};
use super::rows::get;
use super::sql;
use crate::batch::{CommitBatch, CommitOutcome};
use crate::error::StoreError;
use std::collections::HashMap;
use tokio_postgres::types::ToSql;

/// Every statement a commit may use, prepared together.
const STATEMENTS: &[&str] = &[
    sql::COMMIT_LOCK_OWNERS,
    sql::COMMIT_LOCK_EXECUTIONS,
    sql::COMMIT_LOCK_INBOX,
    sql::COMMIT_INSERT_EXECUTIONS,
    sql::COMMIT_INSERT_OWNERS,
    sql::COMMIT_INSERT_EVENTS,
    sql::COMMIT_UPDATE_EXECUTIONS,
    sql::COMMIT_TASKS_DONE,
    sql::COMMIT_CANCEL_UNITS,
    sql::COMMIT_INSERT_TASKS,
    sql::COMMIT_DISPATCH_CLAIMED,
    sql::COMMIT_INSERT_INBOX,
    sql::COMMIT_UPSERT_TIMERS,
    sql::COMMIT_DELETE_TIMERS,
    sql::COMMIT_INBOX_DONE,
    sql::NOTIFY_MANY,
];

/// Applies the batches atomically: all of them, or none.
pub(crate) async fn commit_all(
    conn: &mut PgConn,
    batches: &[CommitBatch],
) -> PgResult<Vec<CommitOutcome>> {
    if batches.is_empty() {
        return Ok(Vec::new());
    }
    let prepared = conn.prepare(STATEMENTS).await?;
    let statements: HashMap<&'static str, tokio_postgres::Statement> =
        STATEMENTS.iter().copied().zip(prepared).collect();
    let stmt = |sql: &'static str| {
        statements
            .get(sql)
            .ok_or_else(|| PgErr::Store(StoreError::Storage("commit statement missing".into())))
    };

    let mut ids: Vec<String> = batches.iter().map(|b| b.execution_id.clone()).collect();
    ids.sort_unstable();
    ids.dedup();
    let mut seqs: Vec<i64> = Vec::new();
    for b in batches {
        for d in &b.inbox_done {
            // A seq beyond i64 cannot be stored: no such entry (the plan refuses it).
            seqs.extend(i64::try_from(d.seq).ok());
        }
    }
    seqs.sort_unstable();
    seqs.dedup();

    // Round trip 1: begin, lock and read.
    conn.begin_marker();
    let read = {
        let client = conn.client();
        let (owners, execs, inbox) = (
            stmt(sql::COMMIT_LOCK_OWNERS)?,
            stmt(sql::COMMIT_LOCK_EXECUTIONS)?,
            stmt(sql::COMMIT_LOCK_INBOX)?,
        );
        let p_ids: [&(dyn ToSql + Sync); 1] = [&ids];
        let p_seqs: [&(dyn ToSql + Sync); 1] = [&seqs];
        let outcomes = pipeline(vec![
            command(client, "BEGIN"),
            step(client, owners, &p_ids),
            step(client, execs, &p_ids),
            step(client, inbox, &p_seqs),
        ])
        .await;
        all_ok(outcomes).and_then(|rows| read_state(&rows))
    };
    let read = match read {
        Ok(r) => r,
        Err(e) => {
            conn.rollback().await;
            return Err(e);
        }
    };

    // The contract, checked in memory.
    let Plan { writes, outcomes: mut result, task_keys } = match plan(batches, read) {
        Ok(p) => p,
        Err(e) => {
            conn.rollback().await;
            return Err(PgErr::Store(e));
        }
    };

    // Round trip 2: every write, the notifications and the commit.
    let refs: Vec<Vec<&(dyn ToSql + Sync)>> = writes
        .iter()
        .map(|w| w.params.iter().map(|p| p.as_ref() as &(dyn ToSql + Sync)).collect())
        .collect();
    let mut kinds = Vec::with_capacity(writes.len());
    let outcomes = {
        let client = conn.client();
        let mut steps = Vec::with_capacity(writes.len() + 1);
        for (w, params) in writes.iter().zip(&refs) {
            steps.push(step(client, stmt(w.sql)?, params));
            kinds.push(w.kind);
        }
        steps.push(command(client, "COMMIT"));
        pipeline(steps).await
    };
    let mut outcomes = outcomes;
    let committed = outcomes.pop().unwrap_or_else(|| Ok(Vec::new()));
    match &committed {
        Err(e) if connection_lost(e) => {} // the pool discards the connection
        _ => conn.end_marker(),
    }
    let rows = all_ok(outcomes)?;
    committed?;

    // Ids of the inserted task rows, to the first batch that offered each.
    let mut inserted: HashMap<(String, i64, String, i64, i64), u64> = HashMap::new();
    let mut claimed: HashMap<String, crate::model::TaskRow> = HashMap::new();
    for (rows, kind) in rows.iter().zip(&kinds) {
        if *kind == WriteKind::ClaimedTasks {
            for row in rows {
                let t = super::rows::task(row)?;
                claimed.insert(t.token.clone().unwrap_or_default(), t);
            }
        }
        if *kind != WriteKind::InsertTasks {
            continue;
        }
        for row in rows {
            let id: i64 = get(row, 0, "task id")?;
            let key = (
                get(row, 1, "task execution_id")?,
                get(row, 2, "task run")?,
                get(row, 3, "task unit_key")?,
                get(row, 4, "task attempt")?,
                get(row, 5, "task offer")?,
            );
            let id = u64::try_from(id).map_err(|_| StoreError::corrupt("task id", id))?;
            inserted.insert(key, id);
        }
    }
    for ((outcome, keys), batch) in result.iter_mut().zip(task_keys).zip(batches) {
        outcome.task_ids = keys.into_iter().filter_map(|k| inserted.remove(&k)).collect();
        outcome.claimed =
            batch.task_claims.iter().filter_map(|c| claimed.remove(&c.token)).collect();
    }
    Ok(result)
}

/// The rows of round trip 1 as the plan's input.
fn read_state(rows: &[Vec<tokio_postgres::Row>]) -> PgResult<Read> {
    let mut read = Read::default();
    let (Some(owners), Some(execs), Some(inbox)) = (rows.get(1), rows.get(2), rows.get(3)) else {
        return Err(PgErr::Store(StoreError::Storage("commit read lost a result".into())));
    };
    for r in owners {
        let epoch: i64 = get(r, 1, "owner epoch")?;
        let epoch = u64::try_from(epoch).map_err(|_| StoreError::corrupt("owner epoch", epoch))?;
        read.owners.insert(get(r, 0, "owner execution_id")?, epoch);
    }
    for r in execs {
        let (run, seq): (i64, i64) = (get(r, 1, "execution run")?, get(r, 2, "last_seq")?);
        let run = u32::try_from(run).map_err(|_| StoreError::corrupt("execution run", run))?;
        let seq = u64::try_from(seq).map_err(|_| StoreError::corrupt("last_seq", seq))?;
        read.executions.insert(get(r, 0, "execution id")?, (run, seq));
    }
    for r in inbox {
        let seq: i64 = get(r, 0, "inbox seq")?;
        let seq = u64::try_from(seq).map_err(|_| StoreError::corrupt("inbox seq", seq))?;
        read.pending.insert(seq, get(r, 1, "inbox execution_id")?);
    }
    Ok(read)
}
