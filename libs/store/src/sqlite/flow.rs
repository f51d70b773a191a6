//! Flow control on SQLite (see `crate::flow`): the flow claim, the reads of why limited
//! rows wait, named rate limits.
//!
//! The flow claim runs on the single writer, in one transaction, so nothing else claims or
//! moves a row meanwhile: [`JUDGE`] says of every queued limited row the session may take
//! whether it passes its limits and orders them by share (the same rules as PostgreSQL's
//! `TASK_CLAIM_LIMITED`), then the first passing rows are claimed as an ordinary claim
//! claims and their starts taken from the buckets.

use super::conn::now_ms;
use super::rows::{self, json_text, to_i64, to_u32, to_u64};
use super::sql;
use crate::error::Result;
use crate::flow::{FlowWaiting, KeyLoad, LimitedClaim, RateLimitRow, WaitReason, FLOW_TOP_KEYS};
use crate::model::{new_task_tokens, ClaimFilter, MAX_CLAIM};
use rusqlite::{params, Connection};
use serde_json::json;
use std::collections::BTreeMap;

/// The share of each queued row `x` of a fair key among its key's claimed rows
/// (`x.queued = 0`, numbered first) and queued rows (then by `$then` rank, id): its number
/// over its weight. As PostgreSQL's `fair_share!`.
macro_rules! fair_share {
    ($then:literal) => {
        concat!(
            "CAST(row_number() OVER (PARTITION BY x.fkey ORDER BY x.queued, ",
            $then,
            "x.dispatch_rank, x.id) AS REAL) / MAX(x.fweight, 1)"
        )
    };
}

/// The rows (of `task_queue`, with the prefix `$q`) that carry only a fair key: no
/// concurrency key, no rate limit (`task_queue_fair_head`).
macro_rules! fair_head {
    ($q:literal) => {
        concat!(
            $q,
            "state = 'queued' AND ",
            $q,
            "limited AND ",
            $q,
            "concurrency_key IS NULL AND ",
            $q,
            "rate_key IS NULL"
        )
    };
}

/// The rows `$q` the session's `ClaimFilter` admits (`?1..?4`, the worker's labels `?7`
/// and id `?8`, the clock `?5`).
macro_rules! claim_filter {
    ($q:literal) => {
        concat!(
            $q,
            ".task IN (SELECT value FROM json_each(?1))
                    AND (",
            $q,
            ".task IN (SELECT value FROM json_each(?2))
                        OR EXISTS (SELECT 1 FROM json_each(?3) v
                            WHERE v.value ->> 0 = ",
            $q,
            ".task AND v.value ->> 1 = ",
            $q,
            ".task_version))
                    AND (?4 IS NULL OR ",
            $q,
            ".language IS NULL OR ",
            $q,
            ".language = ?4) AND ",
            // Every caller names the row `q`.
            worker_routing!("q.", "?7", "?8", "?5")
        )
    };
}

/// Every queued limited row the filter admits (`?1` the JSON array of the filter's task
/// names, `?2` the names served at any version, `?3` the `[name, version]` pairs served at
/// that version only, `?4` the worker's language, `?5` the clock, `?6` the most rows the claim takes, `?7` the worker's labels,
/// `?8` its id), in pick order: `id`, its bucket and the bucket's current window, whether
/// it passes its limits together with the rows before it, the next window of a bucket that
/// holds it back, and its fair key. The rules of PostgreSQL's
/// `TASK_CLAIM_LIMITED` (also which rows it reads: each fair key's first `?6` rows),
/// step by step: a row whose key is full or whose bucket is empty is out (it never holds
/// back the rows of other keys behind it); the rows under a key or bucket are numbered per
/// key and per bucket by their first share, then rank, and pass while their number fits
/// what is left; a row with only a fair key passes; the passing rows come by share (0
/// without a fair key), then their key's last service (`fair_served`, never served
/// first), then rank, the others first (the caller skips them).
pub(super) const JUDGE: &str = concat!(
    "WITH RECURSIVE running AS (
        SELECT concurrency_key AS k, COUNT(*) AS n FROM task_queue
        WHERE state = 'claimed' AND concurrency_key IS NOT NULL GROUP BY concurrency_key),
    fair_keys (fkey) AS (
        SELECT (SELECT fair_key FROM task_queue WHERE ",
    fair_head!(""),
    " ORDER BY fair_key LIMIT 1)
        UNION ALL
        SELECT (SELECT q.fair_key FROM task_queue q WHERE ",
    fair_head!("q."),
    " AND q.fair_key > k.fkey ORDER BY q.fair_key LIMIT 1)
        FROM fair_keys k WHERE k.fkey IS NOT NULL),
    cand AS (
        SELECT q.id, q.dispatch_rank, q.concurrency_key AS ckey, q.concurrency_limit AS climit,
            COALESCE(r.n, 0) AS running, q.rate_key AS bucket,
            COALESCE(q.rate_starts, l.max_starts) AS starts,
            MAX(COALESCE(q.rate_period_ms, l.period_ms, 1), 1) AS period,
            q.fair_key AS fkey, q.fair_weight AS fweight
        FROM (SELECT q.* FROM task_queue q
                WHERE q.state = 'queued' AND q.limited
                    AND (q.concurrency_key IS NOT NULL OR q.rate_key IS NOT NULL) AND ",
    claim_filter!("q"),
    "
            UNION ALL
            SELECT h.* FROM fair_keys k JOIN task_queue h ON h.id IN (
                SELECT q.id FROM task_queue q WHERE ",
    fair_head!("q."),
    " AND q.fair_key = k.fkey AND ",
    claim_filter!("q"),
    "
                ORDER BY q.dispatch_rank, q.id LIMIT ?6)) q
        LEFT JOIN running r ON r.k = q.concurrency_key
        LEFT JOIN rate_limits l ON l.name = q.rate_name),
    bucket_use AS (
        SELECT b.bucket, b.starts, b.period, b.ws,
            CASE WHEN rb.window_start = b.ws THEN rb.used ELSE 0 END AS used
        FROM (SELECT bucket, MIN(starts) AS starts, MAX(period) AS period,
                ?5 - ?5 % MAX(period) AS ws
            FROM cand WHERE bucket IS NOT NULL AND starts IS NOT NULL GROUP BY bucket) b
        LEFT JOIN rate_buckets rb ON rb.bucket = b.bucket),
    judged AS MATERIALIZED (
        SELECT c.id, c.dispatch_rank, c.ckey, c.climit, c.running, c.bucket, u.starts, u.used,
            u.ws, u.period, c.fkey, c.fweight,
            (c.ckey IS NULL OR c.running < c.climit) AS key_free,
            (c.bucket IS NULL OR COALESCE(u.used < u.starts, 0)) AS bucket_free
        FROM cand c LEFT JOIN bucket_use u ON u.bucket = c.bucket),
    fair_running AS (
        SELECT fair_key AS fkey FROM task_queue WHERE state = 'claimed' AND fair_key IS NOT NULL),
    held AS (
        SELECT id, dispatch_rank, ckey, climit, running, bucket, starts, used, ws, period, fkey,
            fweight, key_free, bucket_free, share0
        FROM (SELECT x.*, ",
    fair_share!("x.key_free AND x.bucket_free DESC, "),
    " AS share0
            FROM (SELECT j.*, 1 AS queued FROM judged j
                WHERE j.fkey IS NOT NULL AND (j.ckey IS NOT NULL OR j.bucket IS NOT NULL)
                UNION ALL SELECT NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL,
                    f.fkey, NULL, NULL, NULL, 0 FROM fair_running f) x)
        WHERE queued = 1
        UNION ALL
        SELECT j.*, 0.0 FROM judged j WHERE j.fkey IS NULL),
    ranked AS (
        SELECT h.*,
            row_number() OVER (PARTITION BY h.key_free AND h.bucket_free, h.ckey
                ORDER BY h.share0, h.dispatch_rank, h.id) AS kn,
            row_number() OVER (PARTITION BY h.key_free AND h.bucket_free, h.bucket
                ORDER BY h.share0, h.dispatch_rank, h.id) AS bn
        FROM held h),
    verdict AS MATERIALIZED (
        SELECT id, dispatch_rank, bucket, ws, fkey, fweight,
            COALESCE(key_free AND bucket_free
                AND (ckey IS NULL OR running + kn <= climit)
                AND (bucket IS NULL OR used + bn <= starts), 0) AS passes,
            CASE WHEN starts IS NOT NULL
                AND (NOT bucket_free OR (key_free AND used + bn > starts))
                THEN ws + period END AS retry_at
        FROM ranked
        UNION ALL
        SELECT id, dispatch_rank, bucket, ws, fkey, fweight, 1, NULL FROM judged
        WHERE fkey IS NOT NULL AND ckey IS NULL AND bucket IS NULL),
    fair AS (
        SELECT id, bucket, ws, passes, retry_at, dispatch_rank, fkey, share
        FROM (SELECT x.*, ",
    fair_share!(""),
    " AS share
            FROM (SELECT v.*, 1 AS queued FROM verdict v WHERE v.passes AND v.fkey IS NOT NULL
                UNION ALL SELECT NULL, NULL, NULL, NULL, f.fkey, NULL, NULL, NULL, 0
                FROM fair_running f) x)
        WHERE queued = 1)
    SELECT o.id, o.bucket, o.ws, o.passes, o.retry_at, o.fkey FROM (
        SELECT id, bucket, ws, passes, retry_at, dispatch_rank, fkey, share FROM fair
        UNION ALL
        SELECT id, bucket, ws, passes, retry_at, dispatch_rank, NULL, 0.0 FROM verdict
        WHERE NOT passes OR fkey IS NULL) o
    LEFT JOIN fair_served s ON s.fair_key = o.fkey
    ORDER BY o.share, s.served_at IS NOT NULL, s.served_at, o.dispatch_rank, o.id"
);

/// Records that the fair key `?1` was served now: after every earlier service.
const SERVED: &str = "INSERT INTO fair_served (fair_key, served_at)
    VALUES (?1, (SELECT COALESCE(MAX(served_at), 0) + 1 FROM fair_served))
    ON CONFLICT (fair_key) DO UPDATE SET served_at = excluded.served_at";

/// Takes `?3` starts from the bucket `?1` in the window `?2` (a stored older window
/// starts over). The window ends one period of the claimed row `?4` later (the row's own
/// period or its named limit's, as the judge read it): the sweeper's `expires_at`.
const TAKE_STARTS: &str = "INSERT INTO rate_buckets (bucket, window_start, used, expires_at)
    VALUES (?1, ?2, ?3, ?2 + (SELECT MAX(COALESCE(q.rate_period_ms, l.period_ms, 1), 1)
        FROM task_queue q LEFT JOIN rate_limits l ON l.name = q.rate_name WHERE q.id = ?4))
    ON CONFLICT (bucket) DO UPDATE SET
        used = CASE WHEN window_start = excluded.window_start
            THEN used + excluded.used ELSE excluded.used END,
        window_start = excluded.window_start, expires_at = excluded.expires_at";

const LIMITED_EXISTS: &str = "SELECT EXISTS (SELECT 1 FROM task_queue
        WHERE state = 'queued' AND limited)
    OR EXISTS (SELECT 1 FROM task_queue WHERE state = 'claimed' AND concurrency_key IS NOT NULL)";

/// Why a queued limited row `q` waits, given `running` (its key's claimed rows), the named
/// limit `l`, its bucket `b` and the clock `?1`.
macro_rules! wait_reason {
    ($running:literal) => {
        concat!(
            "CASE WHEN q.concurrency_key IS NOT NULL AND ",
            $running,
            " >= q.concurrency_limit THEN 'concurrency'
            WHEN q.rate_key IS NOT NULL AND (COALESCE(q.rate_starts, l.max_starts) IS NULL
                OR COALESCE(CASE WHEN b.window_start =
                    ?1 - ?1 % MAX(COALESCE(q.rate_period_ms, l.period_ms, 1), 1)
                    THEN b.used END, 0) >= COALESCE(q.rate_starts, l.max_starts))
                THEN 'rate_limit'
            ELSE 'ready' END"
        )
    };
}

/// As PostgreSQL's `FLOW_WAITING`: `?1` the clock, `?2` how many keys.
const FLOW_WAITING: &str = concat!(
    "WITH running AS (
        SELECT concurrency_key AS k, COUNT(*) AS n, MAX(concurrency_limit) AS lim
        FROM task_queue WHERE state = 'claimed' AND concurrency_key IS NOT NULL
        GROUP BY concurrency_key),
    judged AS (
        SELECT q.concurrency_key AS k, q.concurrency_limit AS lim, ",
    wait_reason!("COALESCE(r.n, 0)"),
    " AS reason
        FROM task_queue q
        LEFT JOIN running r ON r.k = q.concurrency_key
        LEFT JOIN rate_limits l ON l.name = q.rate_name
        LEFT JOIN rate_buckets b ON b.bucket = q.rate_key
        WHERE q.state = 'queued' AND q.limited),
    keys AS (
        SELECT k, SUM(n) AS running, SUM(queued) AS queued, MAX(lim) AS lim
        FROM (SELECT k, n, 0 AS queued, lim FROM running
            UNION ALL SELECT k, 0, COUNT(*), MAX(lim) FROM judged
                WHERE k IS NOT NULL GROUP BY k)
        GROUP BY k ORDER BY 2 DESC, 3 DESC, k LIMIT ?2)
    SELECT 'reason', reason, COUNT(*), 0, 0 FROM judged GROUP BY reason
    UNION ALL SELECT 'key', k, running, queued, lim FROM keys"
);

/// As PostgreSQL's `WAITING_ON`: `?1` the clock, `?2` the execution.
const WAITING_ON: &str = concat!(
    "SELECT q.unit_key, ",
    wait_reason!(
        "(SELECT COUNT(*) FROM task_queue c
            WHERE c.state = 'claimed' AND c.concurrency_key = q.concurrency_key)"
    ),
    " FROM task_queue q
    LEFT JOIN rate_limits l ON l.name = q.rate_name
    LEFT JOIN rate_buckets b ON b.bucket = q.rate_key
    WHERE q.execution_id = ?2 AND q.state = 'queued' AND q.limited
    ORDER BY q.id"
);

const RATE_LIMIT_SET: &str = "INSERT INTO rate_limits (name, max_starts, period_ms, updated_at)
    VALUES (?1, ?2, ?3, ?4)
    ON CONFLICT (name) DO UPDATE SET max_starts = excluded.max_starts,
        period_ms = excluded.period_ms, updated_at = excluded.updated_at
    RETURNING name, max_starts, period_ms, updated_at";
const RATE_LIMIT_LIST: &str =
    "SELECT name, max_starts, period_ms, updated_at FROM rate_limits ORDER BY name";
const RATE_LIMIT_DELETE: &str = "DELETE FROM rate_limits WHERE name = ?1";

/// One row of [`JUDGE`].
struct Judged {
    id: i64,
    bucket: Option<String>,
    window: Option<i64>,
    passes: bool,
    retry_at: Option<i64>,
    fair_key: Option<String>,
}

/// Queued limited rows → claimed, within their limits, in one transaction.
pub(crate) fn claim_limited(
    conn: &mut Connection,
    filter: &ClaimFilter,
    limit: u32,
    claimer: &str,
    session: &str,
    worker_id: &str,
) -> Result<LimitedClaim> {
    if filter.is_empty() || limit == 0 {
        return Ok(LimitedClaim::default());
    }
    let names = json_text(&json!(filter.task_names()));
    let any_version = json_text(&json!(filter.any_version));
    let versions = json_text(&json!(filter.versions));
    let now = to_i64(now_ms(), "now")?;
    // The writer runs every job in its own savepoint (see `conn.rs`): no nested one here.
    let tx: &Connection = conn;
    let judged: Vec<Judged> = tx
        .prepare_cached(JUDGE)?
        .query_map(
            params![
                names,
                any_version,
                versions,
                filter.language,
                now,
                limit,
                filter.labels_json(),
                worker_id
            ],
            |r| {
                Ok(Judged {
                    id: r.get(0)?,
                    bucket: r.get(1)?,
                    window: r.get(2)?,
                    passes: r.get(3)?,
                    retry_at: r.get(4)?,
                    fair_key: r.get(5)?,
                })
            },
        )?
        .collect::<rusqlite::Result<_>>()?;
    let mut out = LimitedClaim {
        blocked: judged.iter().any(|j| !j.passes),
        retry_at_ms: judged
            .iter()
            .filter_map(|j| j.retry_at)
            .min()
            .map(|t| to_u64(t, "retry_at"))
            .transpose()?,
        ..LimitedClaim::default()
    };
    let picked: Vec<&Judged> =
        judged.iter().filter(|j| j.passes).take(limit.min(MAX_CLAIM) as usize).collect();
    let tokens = new_task_tokens(u32::try_from(picked.len()).unwrap_or(MAX_CLAIM))?;
    // Per (bucket, window): the starts taken and one claimed row of it (its period).
    let mut taken: BTreeMap<(&str, i64), (i64, i64)> = BTreeMap::new();
    let mut served = std::collections::BTreeSet::new();
    for (j, token) in picked.iter().zip(&tokens) {
        let mut stmt = tx.prepare_cached(sql::TASK_CLAIM)?;
        let mut found = stmt.query(params![j.id, claimer, session, worker_id, token, now])?;
        if let Some(row) = found.next()? {
            out.rows.push(rows::task(row)?);
            if let (Some(bucket), Some(window)) = (&j.bucket, j.window) {
                taken.entry((bucket.as_str(), window)).or_insert((0, j.id)).0 += 1;
            }
            // As PostgreSQL's `served`: each key once, at its first row in pick order.
            if let Some(key) = j.fair_key.as_deref().filter(|k| served.insert(*k)) {
                tx.prepare_cached(SERVED)?.execute(params![key])?;
            }
        }
    }
    for t in &out.rows {
        super::queue::insert_dispatched(tx, t, claimer, session, worker_id, now)?;
    }
    for ((bucket, window), (used, row)) in taken {
        tx.prepare_cached(TAKE_STARTS)?.execute(params![bucket, window, used, row])?;
    }
    Ok(out)
}

/// Whether limited rows are queued or hold a key.
pub(crate) fn limited_exists(conn: &Connection) -> Result<bool> {
    Ok(conn.prepare_cached(LIMITED_EXISTS)?.query_row([], |r| r.get(0))?)
}

/// The queued limited rows by reason and the busiest keys.
pub(crate) fn flow_waiting(conn: &Connection) -> Result<FlowWaiting> {
    let now = to_i64(now_ms(), "now")?;
    let top = i64::try_from(FLOW_TOP_KEYS).unwrap_or(i64::MAX);
    let mut stmt = conn.prepare_cached(FLOW_WAITING)?;
    let mut found = stmt.query(params![now, top])?;
    let mut counts = [0u64; WaitReason::ALL.len()];
    let mut keys = Vec::new();
    while let Some(row) = found.next()? {
        let (kind, name): (String, String) = (row.get(0)?, row.get(1)?);
        let (a, b, c): (i64, i64, i64) = (row.get(2)?, row.get(3)?, row.get(4)?);
        if kind == "reason" {
            let reason = WaitReason::parse(&name)?;
            let i = WaitReason::ALL.iter().position(|r| *r == reason).unwrap_or(0);
            counts[i] = to_u64(a, "waiting count")?;
        } else {
            keys.push(KeyLoad {
                key: name,
                running: to_u64(a, "key running")?,
                queued: to_u64(b, "key queued")?,
                limit: to_u64(c, "key limit")?,
            });
        }
    }
    keys.sort_by(|a, b| {
        b.running.cmp(&a.running).then(b.queued.cmp(&a.queued)).then(a.key.cmp(&b.key))
    });
    Ok(FlowWaiting { by_reason: WaitReason::ALL.into_iter().zip(counts).collect(), keys })
}

/// The queued limited rows of one execution and why they wait.
pub(crate) fn waiting_on(
    conn: &Connection,
    execution_id: &str,
) -> Result<Vec<(String, WaitReason)>> {
    let now = to_i64(now_ms(), "now")?;
    let mut stmt = conn.prepare_cached(WAITING_ON)?;
    let mut found = stmt.query(params![now, execution_id])?;
    let mut out = Vec::new();
    while let Some(row) = found.next()? {
        out.push((row.get(0)?, WaitReason::parse(&row.get::<_, String>(1)?)?));
    }
    Ok(out)
}

fn rate_limit(row: &rusqlite::Row<'_>) -> Result<RateLimitRow> {
    Ok(RateLimitRow {
        name: row.get(0)?,
        limit: to_u32(row.get(1)?, "rate limit")?,
        period_ms: to_u64(row.get(2)?, "rate limit period")?,
        updated_at_ms: to_u64(row.get(3)?, "rate limit updated_at")?,
    })
}

/// Creates or replaces a named limit.
pub(crate) fn set_rate_limit(
    conn: &mut Connection,
    name: &str,
    limit: u32,
    period_ms: u64,
) -> Result<RateLimitRow> {
    crate::flow::check_rate_limit(name, limit, period_ms)?;
    let now = to_i64(now_ms(), "now")?;
    let period = to_i64(period_ms, "period")?;
    let mut stmt = conn.prepare_cached(RATE_LIMIT_SET)?;
    let mut found = stmt.query(params![name, i64::from(limit), period, now])?;
    let row =
        found.next()?.ok_or_else(|| crate::StoreError::Storage("rate limit not stored".into()))?;
    rate_limit(row)
}

/// Every named limit, by name.
pub(crate) fn list_rate_limits(conn: &Connection) -> Result<Vec<RateLimitRow>> {
    let mut stmt = conn.prepare_cached(RATE_LIMIT_LIST)?;
    let mut found = stmt.query([])?;
    let mut out = Vec::new();
    while let Some(row) = found.next()? {
        out.push(rate_limit(row)?);
    }
    Ok(out)
}

/// Deletes a named limit; false when there was none.
pub(crate) fn delete_rate_limit(conn: &mut Connection, name: &str) -> Result<bool> {
    Ok(conn.prepare_cached(RATE_LIMIT_DELETE)?.execute([name])? > 0)
}
