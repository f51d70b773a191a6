//! The flow-control statements (issue 27, see `crate::flow`): the flow claim, the reads
//! of why limited rows wait, named rate limits. A child of `sql.rs`, whose column lists
//! and clock it uses.

/// The advisory lock every flow claim of every process takes first (its key:
/// `FLOW_LOCK_KEY`): one flow claim at a time, so each counts the claims committed before
/// it (READ COMMITTED: the claim statement's snapshot is taken after the lock is granted).
pub(crate) const FLOW_LOCK: &str = "SELECT pg_advisory_xact_lock($1::bigint)";

/// The current window of a bucket whose period is `$period`, aligned to the epoch.
macro_rules! window_start {
    ($period:literal) => {
        concat!("(", now_ms!(), " - ", now_ms!(), " % ", $period, ")")
    };
}

/// The share of each queued row `$x` of a fair key (`$x.fkey`, `$x.fweight`) among its
/// key's claimed rows (`$x.queued = 0`, numbered first) and queued rows (`$x.queued = 1`,
/// then in the order `$then` rank, id): its number over its weight. One sort by key
/// (bytewise: only equality matters) gives the key's running count and the row's number
/// at once: no join.
macro_rules! fair_share {
    ($x:literal, $then:literal) => {
        concat!(
            "row_number() OVER (PARTITION BY ",
            $x,
            ".fkey COLLATE \"C\" ORDER BY ",
            $x,
            ".queued, ",
            $then,
            $x,
            ".dispatch_rank, ",
            $x,
            ".id)::float8 / GREATEST(",
            $x,
            ".fweight, 1)"
        )
    };
}

/// The rows (of `task_queue`, with the prefix `$q`) that carry only a fair key: no
/// concurrency key, no rate limit (`task_queue_fair_head`).
macro_rules! fair_head {
    () => {
        fair_head!("")
    };
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

/// The rows `q` the session's `ClaimFilter` admits (`$1`, `$8`..`$12`, the worker `$6`).
macro_rules! claim_filter {
    () => {
        concat!(
            "q.task = ANY($1::text[])
                    AND (q.task = ANY($8::text[]) OR (q.task, q.task_version) IN
                        (SELECT * FROM UNNEST($9::text[], $10::text[])))
                    AND ($11::text IS NULL OR q.language IS NULL OR q.language = $11::text)
                    AND ",
            worker_routing!("q.")
        )
    };
}

/// The flow claim, run under [`FLOW_LOCK`]. Parameters as `TASK_CLAIM`'s: `$1` every task
/// name, `$2` the limit, `$3` claimer, `$4` session, `$5` the fresh tokens, `$6` the worker,
/// `$7` the `dispatched` kind, `$8`..`$12` the rest of the `ClaimFilter`.
///
/// * `fair_keys`/`cand`: the queued limited rows the filter admits: every row under a
///   concurrency key or a rate limit (`task_queue_limited_keyed`), and of the rows with
///   only a fair key, each key's first `$2` by rank (a loose scan of the keys, then each
///   key's head, on `task_queue_fair_head`: a claim of `$2` rows never picks a key's
///   later rows, which come after its earlier ones by share), so a claim behind a fair
///   queue of 100,000 rows reads a few rows per key, not the queue. Each row with its key's
///   claimed rows (`running`, from `task_queue_running_key`) and its bucket's limit
///   (inline, or the named limit; none: unknown).
/// * `bucket_use`: per bucket its limit (the smallest its rows declare, over the longest
///   window), the current window and the starts taken in it (a stored older window: 0).
/// * `judged`: a row whose key is full or whose bucket is empty is out, so rows behind it
///   of other keys are not held back.
/// * `held`/`ranked`/`verdict`: the rows under a concurrency key or a bucket get a first
///   share (`fair_share!` among their fair key's claimed rows, from
///   `task_queue_running_fair`, and its held rows; 0 without a fair key) and are numbered
///   per key and per bucket by share, then rank; a row passes while its number fits what
///   its key and bucket have left. Every limit holds for the rows that pass together, and a
///   key or bucket shared by several fair keys goes to the one of least share first. A row
///   with only a fair key always passes.
/// * `fair`/`picked`: the passing rows get their share among their fair key's claimed and
///   passing rows (0 without a fair key), and the first `$2` by (share, the key's last
///   service in `fair_served`, never served first, rank, id) are picked
///   (docs/flow-control.md, "Fair queues"): of keys with equal shares, the one served
///   longest ago goes first, so two keys on one worker slot alternate.
/// * `claimed`/`dispatched`: the picked rows claimed as `TASK_CLAIM` claims (a row the
///   owner cancelled meanwhile no longer matches); `durability`: the transaction commits
///   synchronously only when it claimed a row under a concurrency key or a rate limit (a
///   claim of those lost in a crash could let a key run twice or a window be used twice);
///   a claim of fair rows alone commits as the ordinary claim does, without waiting for its
///   WAL flush (a lost one is a redelivery); `served`: each claimed fair key's last
///   service, numbered after every earlier one in pick order; `taken`: their starts added
///   to the buckets (counted from the rows actually claimed).
/// * the result: the claimed rows in pick order (`task_columns!`, one all-NULL row when
///   none), each with `blocked` (a row stayed queued by a limit) and `retry_at` (the next
///   window of a bucket that held a row back).
///
/// Sessions plan with hash and merge joins off (`conn.rs`): every join here has a small
/// inner side (running keys, buckets, named limits); the fair keys' counts come from the
/// same sort as their rows' numbers (`fair_share!`), not from a join.
pub(crate) const TASK_CLAIM_LIMITED: &str = concat!(
    "WITH RECURSIVE running AS MATERIALIZED (
        SELECT concurrency_key AS k, count(*) AS n FROM task_queue
        WHERE state = 'claimed' AND concurrency_key IS NOT NULL GROUP BY concurrency_key),
    fair_keys (fkey) AS (
        (SELECT fair_key FROM task_queue WHERE ",
    fair_head!(),
    " ORDER BY fair_key LIMIT 1)
        UNION ALL
        SELECT (SELECT q.fair_key FROM task_queue q WHERE ",
    fair_head!("q."),
    " AND q.fair_key > k.fkey ORDER BY q.fair_key LIMIT 1)
        FROM fair_keys k WHERE k.fkey IS NOT NULL),
    cand AS MATERIALIZED (
        SELECT q.id, q.dispatch_rank, q.concurrency_key AS ckey, q.concurrency_limit AS climit,
            COALESCE(r.n, 0) AS running, q.rate_key AS bucket,
            COALESCE(q.rate_starts, l.max_starts) AS starts,
            GREATEST(COALESCE(q.rate_period_ms, l.period_ms), 1) AS period,
            q.fair_key AS fkey, q.fair_weight AS fweight
        FROM (SELECT q.* FROM task_queue q
                WHERE q.state = 'queued' AND q.limited
                    AND (q.concurrency_key IS NOT NULL OR q.rate_key IS NOT NULL) AND ",
    claim_filter!(),
    "
            UNION ALL
            SELECT h.* FROM fair_keys k CROSS JOIN LATERAL (
                SELECT q.* FROM task_queue q WHERE ",
    fair_head!("q."),
    " AND q.fair_key = k.fkey AND ",
    claim_filter!(),
    "
                ORDER BY q.dispatch_rank, q.id LIMIT $2::bigint) h) q
        LEFT JOIN running r ON r.k = q.concurrency_key
        LEFT JOIN rate_limits l ON l.name = q.rate_name),
    bucket_use AS MATERIALIZED (
        SELECT b.bucket, b.starts, b.period, b.ws,
            CASE WHEN rb.window_start = b.ws THEN rb.used ELSE 0 END AS used
        FROM (SELECT bucket, min(starts) AS starts, max(period) AS period, ",
    window_start!("max(period)"),
    " AS ws
            FROM cand WHERE bucket IS NOT NULL AND starts IS NOT NULL GROUP BY bucket) b
        LEFT JOIN rate_buckets rb ON rb.bucket = b.bucket),
    judged AS NOT MATERIALIZED (
        SELECT c.id, c.dispatch_rank, c.ckey, c.climit, c.running, c.bucket, u.starts, u.used,
            u.ws, u.period, c.fkey, c.fweight,
            (c.ckey IS NULL OR c.running < c.climit) AS key_free,
            (c.bucket IS NULL OR COALESCE(u.used < u.starts, false)) AS bucket_free
        FROM cand c LEFT JOIN bucket_use u ON u.bucket = c.bucket),
    fair_running AS MATERIALIZED (
        SELECT fair_key AS fkey FROM task_queue WHERE state = 'claimed' AND fair_key IS NOT NULL),
    held AS (
        SELECT s.id, s.dispatch_rank, s.ckey, s.climit, s.running, s.bucket, s.starts, s.used,
            s.ws, s.period, s.fkey, s.fweight, s.key_free, s.bucket_free, s.share0
        FROM (SELECT x.*, ",
    fair_share!("x", "x.key_free AND x.bucket_free DESC, "),
    " AS share0
            FROM (SELECT j.*, 1 AS queued FROM judged j
                WHERE j.fkey IS NOT NULL AND (j.ckey IS NOT NULL OR j.bucket IS NOT NULL)
                UNION ALL SELECT NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL,
                    f.fkey, NULL, NULL, NULL, 0 FROM fair_running f) x) s
        WHERE s.queued = 1
        UNION ALL
        SELECT j.*, 0::float8 FROM judged j WHERE j.fkey IS NULL),
    ranked AS (
        SELECT h.*,
            row_number() OVER (PARTITION BY h.key_free AND h.bucket_free, h.ckey
                ORDER BY h.share0, h.dispatch_rank, h.id) AS kn,
            row_number() OVER (PARTITION BY h.key_free AND h.bucket_free, h.bucket
                ORDER BY h.share0, h.dispatch_rank, h.id) AS bn
        FROM held h),
    verdict AS MATERIALIZED (
        SELECT r.id, r.dispatch_rank, r.fkey, r.fweight,
            COALESCE(r.key_free AND r.bucket_free
                AND (r.ckey IS NULL OR r.running + r.kn <= r.climit)
                AND (r.bucket IS NULL OR r.used + r.bn <= r.starts), false) AS passes,
            CASE WHEN r.starts IS NOT NULL
                AND (NOT r.bucket_free OR (r.key_free AND r.used + r.bn > r.starts))
                THEN r.ws + r.period END AS retry_at
        FROM ranked r
        UNION ALL
        SELECT id, dispatch_rank, fkey, fweight, true, NULL::bigint FROM judged
        WHERE fkey IS NOT NULL AND ckey IS NULL AND bucket IS NULL),
    fair AS (
        SELECT s.id, s.dispatch_rank, s.fkey, s.share
        FROM (SELECT x.*, ",
    fair_share!("x", ""),
    " AS share
            FROM (SELECT v.id, v.dispatch_rank, v.fkey, v.fweight, 1 AS queued FROM verdict v
                WHERE v.passes AND v.fkey IS NOT NULL
                UNION ALL SELECT NULL, NULL, f.fkey, NULL, 0 FROM fair_running f) x) s
        WHERE s.queued = 1
        UNION ALL
        SELECT id, dispatch_rank, NULL, 0::float8 FROM verdict WHERE passes AND fkey IS NULL),
    picked AS (
        SELECT p.id, row_number() OVER (ORDER BY p.share, p.served NULLS FIRST, p.dispatch_rank,
            p.id) AS n
        FROM (SELECT f.id, f.dispatch_rank, f.share, s.served_at AS served FROM fair f
            LEFT JOIN fair_served s ON s.fair_key = f.fkey
            ORDER BY f.share, served NULLS FIRST, f.dispatch_rank, f.id LIMIT $2::bigint) p),
    claimed AS (
        UPDATE task_queue t SET state = 'claimed', claimed_by = $3::text, session = $4::text,
            worker_id = $6::text, token = ($5::text[])[picked.n::int],
            claim_count = t.claim_count + 1,
            claimed_at = ",
    now_ms!(),
    ", updated_at = ",
    now_ms!(),
    " FROM picked WHERE t.id = picked.id AND t.state = 'queued'
        RETURNING t.*, picked.n AS pick),
    ",
    dispatched_entries!(),
    ",
    served AS (
        INSERT INTO fair_served (fair_key, served_at)
        SELECT c.fair_key, (SELECT COALESCE(max(served_at), 0) FROM fair_served) + min(c.pick)
        FROM claimed c WHERE c.fair_key IS NOT NULL GROUP BY c.fair_key
        ON CONFLICT (fair_key) DO UPDATE SET served_at = excluded.served_at),
    taken AS (
        INSERT INTO rate_buckets (bucket, window_start, used, expires_at)
        SELECT c.rate_key, u.ws, count(*), u.ws + u.period
        FROM claimed c JOIN bucket_use u ON u.bucket = c.rate_key
        GROUP BY c.rate_key, u.ws, u.period
        ON CONFLICT (bucket) DO UPDATE SET
            used = CASE WHEN rate_buckets.window_start = excluded.window_start
                THEN rate_buckets.used + excluded.used ELSE excluded.used END,
            window_start = excluded.window_start, expires_at = excluded.expires_at),
    summary AS (
        SELECT COALESCE(bool_or(NOT passes), false) AS blocked, min(retry_at) AS retry_at
        FROM verdict),
    durability AS (
        SELECT set_config('synchronous_commit', CASE WHEN EXISTS (SELECT 1 FROM claimed
            WHERE concurrency_key IS NOT NULL OR rate_key IS NOT NULL) THEN 'on' ELSE 'off' END,
            true) AS mode)
    SELECT ",
    task_columns!(),
    ", CASE WHEN id IS NOT NULL THEN pg_notify('orbit_inbox', '') END, blocked, retry_at
    FROM summary CROSS JOIN durability LEFT JOIN claimed ON true ORDER BY pick"
);

/// Whether limited rows are queued or hold a concurrency key (the two partial indexes).
pub(crate) const LIMITED_EXISTS: &str =
    "SELECT EXISTS (SELECT 1 FROM task_queue WHERE state = 'queued' AND limited)
        OR EXISTS (SELECT 1 FROM task_queue
            WHERE state = 'claimed' AND concurrency_key IS NOT NULL)";

/// Why a queued limited row `q` waits (see `TaskQueue::flow_waiting`), given `running` (its
/// key's claimed rows), the named limit `l` and its bucket `b`.
macro_rules! wait_reason {
    ($running:literal) => {
        concat!(
            "CASE WHEN q.concurrency_key IS NOT NULL AND ",
            $running,
            " >= q.concurrency_limit THEN 'concurrency'
            WHEN q.rate_key IS NOT NULL AND (COALESCE(q.rate_starts, l.max_starts) IS NULL
                OR COALESCE(CASE WHEN b.window_start = ",
            window_start!("GREATEST(COALESCE(q.rate_period_ms, l.period_ms), 1)"),
            " THEN b.used END, 0) >= COALESCE(q.rate_starts, l.max_starts))
                THEN 'rate_limit'
            ELSE 'ready' END"
        )
    };
}

/// The queued limited rows counted by reason (`reason` rows), and the busiest concurrency
/// keys (`key` rows: running, queued, limit), at most `$1` of them. Reads the queued limited
/// rows (`task_queue_limited`) and the claimed ones holding a key
/// (`task_queue_running_key`) once each.
pub(crate) const FLOW_WAITING: &str = concat!(
    "WITH running AS MATERIALIZED (
        SELECT concurrency_key AS k, count(*) AS n, max(concurrency_limit) AS lim
        FROM task_queue WHERE state = 'claimed' AND concurrency_key IS NOT NULL
        GROUP BY concurrency_key),
    judged AS MATERIALIZED (
        SELECT q.concurrency_key AS k, q.concurrency_limit AS lim, ",
    wait_reason!("COALESCE(r.n, 0)"),
    " AS reason
        FROM task_queue q
        LEFT JOIN running r ON r.k = q.concurrency_key
        LEFT JOIN rate_limits l ON l.name = q.rate_name
        LEFT JOIN rate_buckets b ON b.bucket = q.rate_key
        WHERE q.state = 'queued' AND q.limited),
    keys AS (
        SELECT k, sum(n)::bigint AS running, sum(queued)::bigint AS queued,
            max(lim)::bigint AS lim
        FROM (SELECT k, n, 0 AS queued, lim FROM running
            UNION ALL SELECT k, 0, count(*), max(lim) FROM judged
                WHERE k IS NOT NULL GROUP BY k) x
        GROUP BY k ORDER BY 2 DESC, 3 DESC, k LIMIT $1::bigint)
    SELECT 'reason', reason, count(*)::bigint, 0::bigint, 0::bigint FROM judged GROUP BY reason
    UNION ALL SELECT 'key', k, running, queued, lim FROM keys"
);

/// The queued limited rows of the execution `$1` (`task_queue_by_execution`) with why
/// they wait, by id; each key counted by its own lookup (`task_queue_running_key`).
pub(crate) const WAITING_ON: &str = concat!(
    "SELECT q.unit_key, ",
    wait_reason!(
        "(SELECT count(*) FROM task_queue c
            WHERE c.state = 'claimed' AND c.concurrency_key = q.concurrency_key)"
    ),
    " FROM task_queue q
    LEFT JOIN rate_limits l ON l.name = q.rate_name
    LEFT JOIN rate_buckets b ON b.bucket = q.rate_key
    WHERE q.execution_id = $1::text AND q.state = 'queued' AND q.limited
    ORDER BY q.id"
);

/// Creates or replaces a named limit, and wakes the flow claims (rows may wait on it).
pub(crate) const RATE_LIMIT_SET: &str = concat!(
    "INSERT INTO rate_limits (name, max_starts, period_ms, updated_at)
    VALUES ($1::text, $2::bigint, $3::bigint, ",
    now_ms!(),
    ") ON CONFLICT (name) DO UPDATE SET max_starts = excluded.max_starts,
        period_ms = excluded.period_ms, updated_at = excluded.updated_at
    RETURNING name, max_starts, period_ms, updated_at, pg_notify('orbit_tasks', 'limited')"
);
pub(crate) const RATE_LIMIT_LIST: &str =
    "SELECT name, max_starts, period_ms, updated_at FROM rate_limits ORDER BY name";
pub(crate) const RATE_LIMIT_DELETE: &str =
    "DELETE FROM rate_limits WHERE name = $1::text RETURNING name";
