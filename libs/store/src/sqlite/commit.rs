//! [`CommitBatch`] on SQLite: one savepoint inside the writer's group transaction, checks
//! first, then writes.
//!
//! Any error returns before `commit()`, and dropping the transaction rolls it back, so a
//! refused batch leaves nothing behind. A commit tells its caller whether it freed a
//! concurrency slot (a claimed row holding a key done or cancelled), which wakes the flow
//! claims (`TaskQueue::flow_wakeups`).

use super::conn::now_ms;
use super::rows::{json_text, origin_name, to_i64, to_u32, to_u64};
use super::sql;
use crate::batch::{CommitBatch, CommitOutcome};
use crate::error::{Result, StoreError};
use rusqlite::{params, Connection, OptionalExtension};

/// Apply the batches atomically: all of them, or none. Returns their outcomes and whether
/// a concurrency slot was freed.
pub(crate) fn commit_all(
    conn: &mut Connection,
    batches: Vec<CommitBatch>,
) -> Result<(Vec<CommitOutcome>, bool)> {
    // The writer runs every job in its own savepoint (see `conn.rs`): no nested one here.
    let tx: &Connection = conn;
    let batches = if crate::slots::any(&batches) { slots(tx, &batches)? } else { batches };
    let mut freed = false;
    let mut outcomes = Vec::with_capacity(batches.len());
    for batch in batches {
        outcomes.push(apply(tx, batch, &mut freed)?);
    }
    Ok((outcomes, freed))
}

/// The workflow-level slot operations of the batches (`crate::slots`): the single writer
/// reads the keys' rows, the plan decides, the rows are written here; the batches come back
/// with the grants' and cancels' inbox entries to write with them.
fn slots(tx: &Connection, batches: &[CommitBatch]) -> Result<Vec<CommitBatch>> {
    let mut rows = Vec::new();
    for key in crate::slots::keys_of(batches) {
        let mut stmt = tx.prepare_cached(
            "SELECT ticket, execution_id, held, slot_limit FROM execution_slots \
             WHERE slot_key = ?1 ORDER BY ticket",
        )?;
        let read = stmt.query_map(params![key], |r| {
            Ok(crate::slots::SlotRow {
                ticket: r.get(0)?,
                key: key.clone(),
                execution_id: r.get(1)?,
                held: r.get(2)?,
                limit: u32::try_from(r.get::<_, i64>(3)?).unwrap_or(u32::MAX),
            })
        })?;
        rows.extend(read.collect::<rusqlite::Result<Vec<_>>>()?);
    }
    let writes = crate::slots::plan(batches, rows);
    let now = to_i64(now_ms(), "now")?;
    for (key, id) in &writes.delete {
        tx.prepare_cached("DELETE FROM execution_slots WHERE slot_key = ?1 AND execution_id = ?2")?
            .execute(params![key, id])?;
    }
    for (key, id) in &writes.grant {
        tx.prepare_cached(
            "UPDATE execution_slots SET held = TRUE WHERE slot_key = ?1 AND execution_id = ?2",
        )?
        .execute(params![key, id])?;
    }
    for r in &writes.insert {
        tx.prepare_cached(
            "INSERT INTO execution_slots (slot_key, execution_id, held, slot_limit, created_at) \
             VALUES (?1, ?2, ?3, ?4, ?5)",
        )?
        .execute(params![r.key, r.execution_id, r.held, i64::from(r.limit), now])?;
    }
    crate::measure::slots_queued(writes.queued);
    Ok(crate::slots::with_entries(batches, &writes))
}

/// Whether any row a statement returned says a slot was freed.
fn any_freed(
    stmt: &mut rusqlite::CachedStatement<'_>,
    params: impl rusqlite::Params,
) -> Result<bool> {
    let freed =
        stmt.query_map(params, |r| r.get::<_, bool>(0))?.collect::<rusqlite::Result<Vec<_>>>()?;
    Ok(freed.into_iter().any(|f| f))
}

/// Apply one batch inside the caller's transaction; `freed` is set when it freed a
/// concurrency slot.
fn apply(tx: &Connection, batch: CommitBatch, freed: &mut bool) -> Result<CommitOutcome> {
    let id = batch.execution_id.as_str();
    let now = to_i64(now_ms(), "now")?;
    let run = i64::from(batch.run);

    check_fence(tx, id, batch.expected_epoch)?;
    if let Some(row) = &batch.new_execution {
        if row.execution_id != id || row.run != batch.run {
            return Err(StoreError::InvalidArgument(format!(
                "new execution {}/run {} does not match batch {id}/run {}",
                row.execution_id, row.run, batch.run
            )));
        }
        if let Some(seen) = batch.versions_seen {
            let n: i64 = tx
                .prepare_cached(sql::DEFINITION_COUNT)?
                .query_row(params![row.workflow], |r| r.get(0))?;
            if n != i64::from(seen) {
                return Err(StoreError::DefinitionChanged(row.workflow.clone()));
            }
        }
        let inserted = tx.prepare_cached(sql::EXECUTION_INSERT)?.execute(params![
            id,
            run,
            row.root_id,
            row.parent_id,
            row.workflow,
            row.version,
            row.definition_hash,
            row.status.as_str(),
            row.schedule_id,
            to_i64(row.created_at_ms, "created_at")?,
            to_i64(row.updated_at_ms, "updated_at")?,
            row.closed_at_ms.map(|t| to_i64(t, "closed_at")).transpose()?,
        ])?;
        if inserted == 0 {
            return Err(StoreError::ExecutionExists(id.to_string()));
        }
    }
    if let Some(owner) = &batch.new_owner {
        if tx.prepare_cached(sql::OWNER_INSERT)?.execute(params![
            id,
            owner.root_id,
            owner.node_id,
            now
        ])? == 0
        {
            return Err(StoreError::Fenced(format!("execution {id} already has an owner")));
        }
    }

    let last_seq = append_events(tx, &batch)?;
    if let Some(d) = &batch.definition {
        tx.prepare_cached(sql::EXECUTION_SET_DEFINITION)?.execute(params![
            id,
            d.version,
            d.definition_hash
        ])?;
    }
    if let Some(p) = &batch.projection {
        let updated_at = to_i64(p.updated_at_ms, "updated_at")?;
        // An open run's commit on an open row assigns only what changes (see the SQL's doc).
        let narrow = p.closed_at_ms.is_none()
            && tx.prepare_cached(sql::EXECUTION_SET_OPEN)?.execute(params![
                id,
                p.status.as_str(),
                updated_at
            ])? == 1;
        if !narrow {
            tx.prepare_cached(sql::EXECUTION_SET_PROJECTION)?.execute(params![
                id,
                p.status.as_str(),
                updated_at,
                p.closed_at_ms.map(|t| to_i64(t, "closed_at")).transpose()?,
                p.delete_after_ms.map(|t| to_i64(t, "delete_after")).transpose()?,
                p.failed_step,
                p.error_code,
            ])?;
        }
    }

    // Results applied directly: their rows are done before the unit's rows are cancelled.
    for token in &batch.tasks_done {
        *freed |=
            any_freed(&mut tx.prepare_cached(sql::TASK_DONE_BY_OWNER)?, params![token, id, now])?;
    }
    // Cancel first: a redelivery cancels the lost offer and queues a new one in one batch.
    for unit in &batch.units_to_cancel {
        *freed |=
            any_freed(&mut tx.prepare_cached(sql::TASK_CANCEL_UNIT)?, params![id, unit, now])?;
    }
    let mut task_ids = Vec::new();
    let mut claimed = Vec::new();
    for t in &batch.tasks_to_insert {
        let f = crate::flow::FlowColumns::of(t.flow.as_ref())?;
        let inserted: Option<i64> = tx
            .prepare_cached(sql::TASK_INSERT)?
            .query_row(
                params![
                    id,
                    run,
                    t.unit,
                    t.attempt,
                    t.offer,
                    t.task,
                    t.task_version,
                    json_text(&t.input),
                    t.idempotency_key,
                    now,
                    t.language,
                    f.priority,
                    f.rank_offset,
                    f.limited,
                    f.concurrency_key,
                    f.concurrency_limit,
                    f.rate_key,
                    f.rate_starts,
                    f.rate_period_ms,
                    f.rate_name,
                    f.flow,
                    f.fair_key,
                    f.fair_weight,
                    f.labels,
                    f.sticky_worker,
                    f.sticky_ms,
                ],
                |r| r.get(0),
            )
            .optional()?;
        let claim = batch
            .task_claims
            .iter()
            .find(|c| c.unit == t.unit && c.attempt == t.attempt && c.offer == t.offer);
        match (inserted, claim) {
            (Some(task_id), claim) => {
                task_ids.push(to_u64(task_id, "task id")?);
                if let Some(c) = claim {
                    claimed.push(super::queue::claim_row(tx, id, task_id, c, now)?);
                }
            }
            // The batch records `StepDispatched` for the claim's token: an offer queued
            // before (another token, or none) must not be recorded as handed off.
            (None, Some(c)) => return Err(crate::handoff::queued_before(id, c)),
            (None, None) => {}
        }
    }
    for entry in &batch.inbox_to_insert {
        let _seq: i64 = tx.prepare_cached(sql::INBOX_INSERT)?.query_row(
            params![
                entry.execution_id,
                entry.message.kind().as_str(),
                entry.message.token(),
                entry.message.payload_text(),
                now
            ],
            |r| r.get(0),
        )?;
    }

    for t in &batch.timers_to_upsert {
        let fire_at = to_i64(t.fire_at_ms, "fire_at")?;
        tx.prepare_cached(sql::TIMER_UPSERT)?.execute(params![
            id,
            t.key,
            run,
            fire_at,
            json_text(&t.payload)
        ])?;
    }
    for key in &batch.timers_to_delete {
        tx.prepare_cached(sql::TIMER_DELETE)?.execute(params![id, key])?;
    }

    for done in &batch.inbox_done {
        let result = done.result.as_ref().map(|r| json_text(&r.to_json()));
        let seq = to_i64(done.seq, "inbox seq")?;
        if tx.prepare_cached(sql::INBOX_MARK_DONE)?.execute(params![seq, id, now, result])? != 1 {
            return Err(StoreError::Conflict(format!(
                "inbox entry {} is not a pending entry of execution {id}",
                done.seq
            )));
        }
    }
    if let Some(search) = crate::search::writes_of(&batch) {
        write_search(tx, id, &search)?;
    }

    Ok(CommitOutcome { last_seq, task_ids, claimed })
}

/// Replaces the rows of the attributes the batch upserts (`crate::search`).
fn write_search(tx: &Connection, id: &str, search: &crate::search::SearchWrites) -> Result<()> {
    for name in &search.names {
        tx.prepare_cached("DELETE FROM execution_search WHERE execution_id = ?1 AND name = ?2")?
            .execute(params![id, name])?;
    }
    for r in &search.rows {
        tx.prepare_cached(
            "INSERT INTO execution_search (execution_id, name, kw, ival, num, ts, flag) \
             VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7)",
        )?
        .execute(params![id, r.name, r.kw, r.ival, r.num, r.ts, r.flag])?;
    }
    Ok(())
}

/// With an expected epoch, the owners row must exist and hold exactly that epoch.
pub(crate) fn check_fence(tx: &Connection, id: &str, expected: Option<u64>) -> Result<()> {
    let Some(expected) = expected else { return Ok(()) };
    let stored: Option<i64> =
        tx.prepare_cached(sql::OWNER_EPOCH)?.query_row([id], |r| r.get(0)).optional()?;
    match stored {
        None => Err(StoreError::Fenced(format!(
            "execution {id} has no owner; this writer held epoch {expected}"
        ))),
        Some(e) if to_u64(e, "owner epoch")? == expected => Ok(()),
        Some(e) => Err(StoreError::Fenced(format!(
            "execution {id} is at epoch {e}; this writer held epoch {expected}"
        ))),
    }
}

/// Check that the events continue the run's history, append them and move the projection's
/// run and `last_seq`. Returns the run's last seq afterwards.
fn append_events(tx: &Connection, batch: &CommitBatch) -> Result<u64> {
    let id = batch.execution_id.as_str();
    let current: Option<(i64, i64)> = tx
        .prepare_cached(sql::EXECUTION_RUN_AND_SEQ)?
        .query_row([id], |r| Ok((r.get(0)?, r.get(1)?)))
        .optional()?;
    let Some((current_run, current_seq)) = current else {
        return Err(StoreError::NotFound(format!("execution {id}")));
    };
    let current_run = to_u32(current_run, "execution run")?;
    let (base, last) =
        batch.continuation(current_run, to_u64(current_seq, "execution last_seq")?)?;
    for ev in &batch.events {
        let payload = serde_json::to_string(&ev.event)
            .map_err(|e| StoreError::InvalidArgument(format!("event does not serialise: {e}")))?;
        tx.prepare_cached(sql::EVENT_INSERT)?.execute(params![
            id,
            i64::from(batch.run),
            to_i64(ev.seq, "seq")?,
            ev.event.type_name(),
            ev.event.step(),
            origin_name(ev.origin),
            payload,
            to_i64(ev.timestamp_ms, "timestamp")?,
        ])?;
    }
    if last != base || batch.run != current_run {
        tx.prepare_cached(sql::EXECUTION_SET_SEQ)?.execute(params![
            id,
            i64::from(batch.run),
            to_i64(last, "seq")?
        ])?;
    }
    Ok(last)
}
