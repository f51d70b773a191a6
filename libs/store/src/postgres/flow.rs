//! Flow control on PostgreSQL (see `crate::flow`): the flow claim, serialized across
//! processes by an advisory lock, the reads of why limited rows wait, named rate limits.
//!
//! The flow claim is one pipelined transaction (one round trip): `BEGIN`, the advisory
//! lock, the claim statement (`sql::flow::TASK_CLAIM_LIMITED`, which judges every queued
//! limited row the session may take, claims, writes the `dispatched` entries and takes the
//! starts), `COMMIT`. Under READ COMMITTED the claim statement's snapshot is taken after
//! the lock is granted, so it counts every claim committed before it: two flow claims never
//! both take a key's last slot or a bucket's last start. Ordinary claims never take limited
//! rows, and rows leaving `claimed` only free slots, so nothing else can push a key over
//! (but a hand-off of a limited offer, which no flow claim checks: see `crate::flow`).

use super::conn::{all_ok, command, pipeline, step, PgConn};
use super::error::{connection_lost, PgErr, PgResult};
use super::queue::ClaimArgs;
use super::rows::{self, get, get_u64, to_i64};
use super::sql::flow as sql;
use crate::error::{Result, StoreError};
use crate::flow::{FlowWaiting, KeyLoad, LimitedClaim, RateLimitRow, WaitReason, FLOW_TOP_KEYS};
use crate::model::ClaimFilter;
use tokio_postgres::types::ToSql;
use tokio_postgres::Row;

/// The advisory lock key of flow claims ("orbitflw" as ASCII bytes).
const FLOW_LOCK_KEY: i64 = 0x6f72_6269_7466_6c77;

/// Queued limited rows → claimed, within their limits, in one transaction that holds the
/// flow lock.
pub(crate) async fn claim_limited(
    conn: &mut PgConn,
    filter: &ClaimFilter,
    limit: u32,
    claimer: &str,
    session: &str,
    worker_id: &str,
) -> PgResult<LimitedClaim> {
    if filter.is_empty() || limit == 0 {
        return Ok(LimitedClaim::default());
    }
    let args = ClaimArgs::new(filter, limit, [claimer, session, worker_id])?;
    let stmts = conn.prepare(&[sql::FLOW_LOCK, sql::TASK_CLAIM_LIMITED]).await?;
    let [lock, claim] = &stmts[..] else {
        return Err(PgErr::Store(StoreError::Storage("flow claim statements missing".into())));
    };
    let key: [&(dyn ToSql + Sync); 1] = [&FLOW_LOCK_KEY];
    let params = args.params();
    // Committed synchronously when it claimed a row under a concurrency key or a rate limit
    // (the statement sets `synchronous_commit` for its transaction, `durability`): the
    // starts taken from the buckets and the slots taken must survive a crash, or a window
    // could be used twice and a key run twice. Fair rows alone commit as the ordinary claim.
    conn.begin_marker();
    let mut outcomes = {
        let client = conn.client();
        pipeline(vec![
            command(client, "BEGIN"),
            step(client, lock, &key),
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
    Ok(limited_claim(&results.pop().unwrap_or_default())?)
}

/// The claim statement's rows: the claimed rows (an all-NULL one when none), each with
/// the claim's `blocked` and `retry_at` after the task columns and the NOTIFY.
fn limited_claim(found: &[Row]) -> Result<LimitedClaim> {
    let mut out = LimitedClaim::default();
    for row in found {
        let n = row.len();
        out.blocked = get(row, n - 2, "flow claim blocked")?;
        let retry: Option<i64> = get(row, n - 1, "flow claim retry_at")?;
        out.retry_at_ms = retry
            .map(|t| u64::try_from(t).map_err(|_| StoreError::corrupt("retry_at", t)))
            .transpose()?;
        if get::<Option<i64>>(row, 0, "task id")?.is_some() {
            out.rows.push(rows::task(row)?);
        }
    }
    Ok(out)
}

/// Whether limited rows are queued or hold a key.
pub(crate) async fn limited_exists(conn: &mut PgConn) -> PgResult<bool> {
    let found = conn.query(sql::LIMITED_EXISTS, &[]).await?;
    let row = found.first().ok_or_else(|| StoreError::Storage("no EXISTS row".into()))?;
    Ok(get(row, 0, "limited rows exist")?)
}

/// The queued limited rows by reason and the busiest keys.
pub(crate) async fn flow_waiting(conn: &mut PgConn) -> PgResult<FlowWaiting> {
    let top = i64::try_from(FLOW_TOP_KEYS).unwrap_or(i64::MAX);
    let found = conn.query(sql::FLOW_WAITING, &[&top]).await?;
    let mut counts = [0u64; WaitReason::ALL.len()];
    let mut keys = Vec::new();
    for row in &found {
        let name: String = get(row, 1, "flow key")?;
        match get::<&str>(row, 0, "flow row kind")? {
            "reason" => {
                let reason = WaitReason::parse(&name)?;
                let i = WaitReason::ALL.iter().position(|r| *r == reason).unwrap_or(0);
                counts[i] = get_u64(row, 2, "waiting count")?;
            }
            _ => keys.push(KeyLoad {
                key: name,
                running: get_u64(row, 2, "key running")?,
                queued: get_u64(row, 3, "key queued")?,
                limit: get_u64(row, 4, "key limit")?,
            }),
        }
    }
    keys.sort_by(|a, b| {
        b.running.cmp(&a.running).then(b.queued.cmp(&a.queued)).then(a.key.cmp(&b.key))
    });
    Ok(FlowWaiting { by_reason: WaitReason::ALL.into_iter().zip(counts).collect(), keys })
}

/// The queued limited rows of one execution and why they wait.
pub(crate) async fn waiting_on(
    conn: &mut PgConn,
    execution_id: &str,
) -> PgResult<Vec<(String, WaitReason)>> {
    let found = conn.query(sql::WAITING_ON, &[&execution_id]).await?;
    let waiting: Result<Vec<_>> = found
        .iter()
        .map(|r| Ok((get(r, 0, "unit key")?, WaitReason::parse(get(r, 1, "wait reason")?)?)))
        .collect();
    Ok(waiting?)
}

fn rate_limit(row: &Row) -> Result<RateLimitRow> {
    let limit: i64 = get(row, 1, "rate limit")?;
    Ok(RateLimitRow {
        name: get(row, 0, "rate limit name")?,
        limit: u32::try_from(limit).map_err(|_| StoreError::corrupt("rate limit", limit))?,
        period_ms: get_u64(row, 2, "rate limit period")?,
        updated_at_ms: get_u64(row, 3, "rate limit updated_at")?,
    })
}

/// Creates or replaces a named limit (and wakes the flow claims).
pub(crate) async fn set_rate_limit(
    conn: &mut PgConn,
    name: &str,
    limit: u32,
    period_ms: u64,
) -> PgResult<RateLimitRow> {
    crate::flow::check_rate_limit(name, limit, period_ms)?;
    let (limit, period) = (i64::from(limit), to_i64(period_ms, "period")?);
    let found = conn.query(sql::RATE_LIMIT_SET, &[&name, &limit, &period]).await?;
    let row = found.first().ok_or_else(|| StoreError::Storage("rate limit not stored".into()))?;
    Ok(rate_limit(row)?)
}

/// Every named limit, by name.
pub(crate) async fn list_rate_limits(conn: &mut PgConn) -> PgResult<Vec<RateLimitRow>> {
    let found = conn.query(sql::RATE_LIMIT_LIST, &[]).await?;
    Ok(rows::all(&found, rate_limit)?)
}

/// Deletes a named limit; false when there was none.
pub(crate) async fn delete_rate_limit(conn: &mut PgConn, name: &str) -> PgResult<bool> {
    Ok(!conn.query(sql::RATE_LIMIT_DELETE, &[&name]).await?.is_empty())
}
