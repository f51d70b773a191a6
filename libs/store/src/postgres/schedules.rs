//! The `schedules` table on PostgreSQL. Claims take due rows with `FOR UPDATE SKIP LOCKED`,
//! so concurrent schedulers take disjoint rows, and each claim is a lease (`claimed_until`):
//! a scheduler that dies or stops holding one only delays its row until the lease ends. A
//! write that moves a due time (create, update, resume) notifies `orbit_timers`, which
//! every scheduler already listens to.

use super::conn::PgConn;
use super::error::PgResult;
use super::rows::{get, get_u64, to_i64};
use crate::error::{Result, StoreError};
use crate::schedule::{buffered_text, parse_buffered, ScheduleFire, ScheduleRow, ScheduleUpdate};
use tokio_postgres::Row;

macro_rules! columns {
    () => {
        "schedule_id, workflow, spec, paused, note, next_fire_at, due_at, last_fire_at, \
         last_execution_id, fired_count, skipped_count, last_error, remaining, buffered, \
         created_at, updated_at"
    };
}

const GET: &str = concat!("SELECT ", columns!(), " FROM schedules WHERE schedule_id = $1");
const INSERT: &str = concat!(
    "INSERT INTO schedules (",
    columns!(),
    ") VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, $15, $16) \
     ON CONFLICT (schedule_id) DO NOTHING"
);
const LIST: &str = concat!(
    "SELECT ",
    columns!(),
    " FROM schedules WHERE ($1::TEXT IS NULL OR workflow = $1) \
     AND ($2::TEXT IS NULL OR schedule_id > $2) ORDER BY schedule_id LIMIT $3"
);
const UPDATE: &str = "UPDATE schedules SET workflow = $2, spec = $3, next_fire_at = $4, \
    due_at = $5, remaining = $6, buffered = '[]', claimed_by = NULL, claimed_until = NULL, \
    updated_at = $7 WHERE schedule_id = $1";
const SET_PAUSED: &str =
    "UPDATE schedules SET paused = $2, note = $3, updated_at = $4 WHERE schedule_id = $1";
const DELETE: &str = "DELETE FROM schedules WHERE schedule_id = $1";
const CLAIM: &str = concat!(
    "UPDATE schedules SET claimed_by = $2, claimed_until = $3 WHERE schedule_id IN \
     (SELECT schedule_id FROM schedules WHERE paused = 0 AND due_at IS NOT NULL \
      AND due_at <= $1 AND (claimed_until IS NULL OR claimed_until <= $1) \
      ORDER BY due_at LIMIT $4 FOR UPDATE SKIP LOCKED) RETURNING ",
    columns!()
);
const NEXT_DUE: &str = "SELECT MIN(CASE WHEN claimed_until IS NOT NULL AND claimed_until > due_at \
    THEN claimed_until ELSE due_at END) FROM schedules WHERE paused = 0 AND due_at IS NOT NULL";
const COUNT_DUE: &str = "SELECT COUNT(*) FROM schedules WHERE paused = 0 AND due_at <= $1";
const FINISH: &str = "UPDATE schedules SET next_fire_at = $3, due_at = $4, \
    last_fire_at = COALESCE($5, last_fire_at), \
    last_execution_id = COALESCE($6, last_execution_id), \
    fired_count = fired_count + $7, skipped_count = skipped_count + $8, last_error = $9, \
    remaining = $10, buffered = $11, \
    paused = CASE WHEN $12::TEXT IS NULL THEN paused ELSE 1 END, \
    note = COALESCE($12::TEXT, note), claimed_by = NULL, claimed_until = NULL, updated_at = $13 \
    WHERE schedule_id = $1 AND claimed_by = $2";
const RELEASE: &str = "UPDATE schedules SET due_at = $3, last_error = $4, claimed_by = NULL, \
    claimed_until = NULL, updated_at = $5 WHERE schedule_id = $1 AND claimed_by = $2";
const RECORD_START: &str = "UPDATE schedules SET fired_count = fired_count + 1, \
    last_execution_id = $2, updated_at = $3 WHERE schedule_id = $1";
const NOTIFY: &str = "SELECT pg_notify('orbit_timers', '')";

fn opt_i64(v: Option<u64>, what: &str) -> Result<Option<i64>> {
    v.map(|v| to_i64(v, what)).transpose()
}

fn opt_u64(row: &Row, idx: usize, what: &str) -> Result<Option<u64>> {
    let v: Option<i64> = get(row, idx, what)?;
    v.map(|v| u64::try_from(v).map_err(|_| StoreError::corrupt(what, format!("negative {v}"))))
        .transpose()
}

fn schedule(r: &Row) -> Result<ScheduleRow> {
    let paused: i64 = get(r, 3, "schedule paused")?;
    let buffered: String = get(r, 13, "schedule buffered")?;
    Ok(ScheduleRow {
        schedule_id: get(r, 0, "schedule_id")?,
        workflow: get(r, 1, "schedule workflow")?,
        spec: get(r, 2, "schedule spec")?,
        paused: paused != 0,
        note: get(r, 4, "schedule note")?,
        next_fire_at_ms: opt_u64(r, 5, "schedule next_fire_at")?,
        due_at_ms: opt_u64(r, 6, "schedule due_at")?,
        last_fire_at_ms: opt_u64(r, 7, "schedule last_fire_at")?,
        last_execution_id: get(r, 8, "schedule last_execution_id")?,
        fired_count: get_u64(r, 9, "schedule fired_count")?,
        skipped_count: get_u64(r, 10, "schedule skipped_count")?,
        last_error: get(r, 11, "schedule last_error")?,
        remaining: opt_u64(r, 12, "schedule remaining")?,
        buffered: parse_buffered(&buffered)?,
        created_at_ms: get_u64(r, 14, "schedule created_at")?,
        updated_at_ms: get_u64(r, 15, "schedule updated_at")?,
    })
}

fn schedules(found: &[Row]) -> Result<Vec<ScheduleRow>> {
    found.iter().map(schedule).collect()
}

/// One schedule.
pub(crate) async fn get_one(conn: &mut PgConn, id: &str) -> PgResult<Option<ScheduleRow>> {
    let found = conn.query(GET, &[&id]).await?;
    Ok(found.first().map(schedule).transpose()?)
}

async fn notify(conn: &mut PgConn) -> PgResult<()> {
    conn.query(NOTIFY, &[]).await?;
    Ok(())
}

/// Inserts unless the id exists.
pub(crate) async fn create(conn: &mut PgConn, r: &ScheduleRow) -> PgResult<(ScheduleRow, bool)> {
    let paused = i64::from(r.paused);
    let next = opt_i64(r.next_fire_at_ms, "next_fire_at")?;
    let due = opt_i64(r.due_at_ms, "due_at")?;
    let last = opt_i64(r.last_fire_at_ms, "last_fire_at")?;
    let fired = to_i64(r.fired_count, "fired_count")?;
    let skipped = to_i64(r.skipped_count, "skipped_count")?;
    let remaining = opt_i64(r.remaining, "remaining")?;
    let buffered = buffered_text(&r.buffered);
    let created = to_i64(r.created_at_ms, "created_at")?;
    let updated = to_i64(r.updated_at_ms, "updated_at")?;
    let stmt = conn.prepare_one(INSERT).await?;
    let inserted = conn
        .client()
        .execute(
            &stmt,
            &[
                &r.schedule_id,
                &r.workflow,
                &r.spec,
                &paused,
                &r.note,
                &next,
                &due,
                &last,
                &r.last_execution_id,
                &fired,
                &skipped,
                &r.last_error,
                &remaining,
                &buffered,
                &created,
                &updated,
            ],
        )
        .await?
        == 1;
    if inserted {
        notify(conn).await?;
    }
    let stored = get_one(conn, &r.schedule_id)
        .await?
        .ok_or_else(|| StoreError::Storage("schedule vanished after insert".into()))?;
    Ok((stored, inserted))
}

/// A page by id.
pub(crate) async fn list(
    conn: &mut PgConn,
    workflow: Option<&str>,
    after: Option<&str>,
    limit: u32,
) -> PgResult<Vec<ScheduleRow>> {
    let found = conn.query(LIST, &[&workflow, &after, &i64::from(limit)]).await?;
    Ok(schedules(&found)?)
}

async fn changed(conn: &mut PgConn, n: u64, id: &str) -> PgResult<Option<ScheduleRow>> {
    if n == 0 {
        return Ok(None);
    }
    notify(conn).await?;
    get_one(conn, id).await
}

/// Replaces the definition; drops a claim.
pub(crate) async fn update(conn: &mut PgConn, u: &ScheduleUpdate) -> PgResult<Option<ScheduleRow>> {
    let next = opt_i64(u.next_fire_at_ms, "next_fire_at")?;
    let due = opt_i64(u.due_at_ms, "due_at")?;
    let remaining = opt_i64(u.remaining, "remaining")?;
    let now = to_i64(u.now_ms, "now")?;
    let stmt = conn.prepare_one(UPDATE).await?;
    let n = conn
        .client()
        .execute(&stmt, &[&u.schedule_id, &u.workflow, &u.spec, &next, &due, &remaining, &now])
        .await?;
    changed(conn, n, &u.schedule_id).await
}

/// Pauses or resumes.
pub(crate) async fn set_paused(
    conn: &mut PgConn,
    id: &str,
    paused: bool,
    note: &str,
    now_ms: u64,
) -> PgResult<Option<ScheduleRow>> {
    let (flag, now) = (i64::from(paused), to_i64(now_ms, "now")?);
    let stmt = conn.prepare_one(SET_PAUSED).await?;
    let n = conn.client().execute(&stmt, &[&id, &flag, &note, &now]).await?;
    changed(conn, n, id).await
}

/// Deletes one schedule.
pub(crate) async fn delete(conn: &mut PgConn, id: &str) -> PgResult<bool> {
    let stmt = conn.prepare_one(DELETE).await?;
    Ok(conn.client().execute(&stmt, &[&id]).await? == 1)
}

/// Claims due rows.
pub(crate) async fn claim_due(
    conn: &mut PgConn,
    now_ms: u64,
    claimer: &str,
    lease_ms: u64,
    limit: u32,
) -> PgResult<Vec<ScheduleRow>> {
    let now = to_i64(now_ms, "now")?;
    let until = to_i64(now_ms.saturating_add(lease_ms), "claimed_until")?;
    let found = conn.query(CLAIM, &[&now, &claimer, &until, &i64::from(limit)]).await?;
    Ok(schedules(&found)?)
}

/// The next due time.
pub(crate) async fn next_due(conn: &mut PgConn) -> PgResult<Option<u64>> {
    let found = conn.query(NEXT_DUE, &[]).await?;
    let Some(row) = found.first() else { return Ok(None) };
    Ok(opt_u64(row, 0, "schedule due_at")?)
}

/// Unpaused rows due at `now`.
pub(crate) async fn count_due(conn: &mut PgConn, now_ms: u64) -> PgResult<u64> {
    let found = conn.query(COUNT_DUE, &[&to_i64(now_ms, "now")?]).await?;
    let Some(row) = found.first() else { return Ok(0) };
    Ok(get_u64(row, 0, "count")?)
}

/// Records a fire under the claim.
pub(crate) async fn finish(conn: &mut PgConn, f: &ScheduleFire) -> PgResult<bool> {
    let next = opt_i64(f.next_fire_at_ms, "next_fire_at")?;
    let due = opt_i64(f.due_at_ms, "due_at")?;
    let last = opt_i64(f.last_fire_at_ms, "last_fire_at")?;
    let fired = to_i64(f.fired, "fired")?;
    let skipped = to_i64(f.skipped, "skipped")?;
    let remaining = opt_i64(f.remaining, "remaining")?;
    let buffered = buffered_text(&f.buffered);
    let now = to_i64(f.now_ms, "now")?;
    let stmt = conn.prepare_one(FINISH).await?;
    let n = conn
        .client()
        .execute(
            &stmt,
            &[
                &f.schedule_id,
                &f.claimer,
                &next,
                &due,
                &last,
                &f.last_execution_id,
                &fired,
                &skipped,
                &f.last_error,
                &remaining,
                &buffered,
                &f.pause,
                &now,
            ],
        )
        .await?;
    Ok(n == 1)
}

/// Drops a claim without firing.
pub(crate) async fn release(
    conn: &mut PgConn,
    id: &str,
    claimer: &str,
    retry_at_ms: u64,
    error: &str,
    now_ms: u64,
) -> PgResult<bool> {
    let (retry, now) = (to_i64(retry_at_ms, "retry_at")?, to_i64(now_ms, "now")?);
    let stmt = conn.prepare_one(RELEASE).await?;
    Ok(conn.client().execute(&stmt, &[&id, &claimer, &retry, &error, &now]).await? == 1)
}

/// Counts a manual start.
pub(crate) async fn record_start(
    conn: &mut PgConn,
    id: &str,
    execution_id: &str,
    now_ms: u64,
) -> PgResult<bool> {
    let now = to_i64(now_ms, "now")?;
    let stmt = conn.prepare_one(RECORD_START).await?;
    Ok(conn.client().execute(&stmt, &[&id, &execution_id, &now]).await? == 1)
}
