//! Every SQL statement of the PostgreSQL backend, one named constant each.
//!
//! Parameters carry explicit types (`$1::text[]`) so each statement prepares once per
//! connection without guessing. Multi-row writes take one array per column and `UNNEST`
//! them, so a commit of many rows is one statement. Bookkeeping times are the database
//! clock: [`now_ms!`] is the current statement's start in epoch milliseconds. NOTIFYs are
//! `pg_notify` calls evaluated once per written row (the server folds duplicates of one
//! transaction into one notification, delivered at commit).

/// The database clock, epoch milliseconds.
macro_rules! now_ms {
    () => {
        "(extract(epoch from statement_timestamp()) * 1000)::bigint"
    };
}

macro_rules! execution_columns {
    () => {
        "execution_id, run, root_id, parent_id, workflow, version, definition_hash, status, \
         schedule_id, created_at, updated_at, closed_at, last_seq, failed_step, error_code"
    };
}

/// The tail of a statement whose CTE `released` cancelled claimed rows: one `uncertain`
/// entry per row (`$3` kind, `$2` payload), the rows returned, the owners notified.
macro_rules! report_released {
    () => {
        concat!(
            "
    reported AS (
        INSERT INTO inbox (execution_id, kind, token, payload, created_at)
        SELECT r.execution_id, $3::text, r.token, $2::text, ",
            now_ms!(),
            " FROM released r ORDER BY r.id)
    SELECT ",
            task_columns!(),
            ", pg_notify('orbit_inbox', ''), ",
            notify_freed!("concurrency_key IS NOT NULL"),
            " FROM released ORDER BY id"
        )
    };
}

macro_rules! task_columns {
    () => {
        "id, execution_id, run, unit_key, attempt, offer, task, task_version, input, \
         idempotency_key, state, claimed_by, session, token, created_at, claimed_at, worker_id, \
         language, priority, flow"
    };
}

/// Worker pools and sticky workers (issue 27; migration 0014), a condition on the row
/// `$q` (a prefix: `""` or `"q."`): it requires no labels, or the worker's labels `$12` (a
/// JSON object; NULL: none) hold them all; and it sticks to no worker, or to the claiming
/// worker `$6`, or its sticky timeout has passed. Rows that declare neither pass on two
/// NULL tests, so the claims' plans over `task_queue_ready` do not change.
macro_rules! worker_routing {
    ($q:literal) => {
        concat!(
            "(",
            $q,
            "labels IS NULL OR ",
            $q,
            "labels::jsonb <@ $12::text::jsonb) AND (",
            $q,
            "sticky_worker IS NULL OR ",
            $q,
            "sticky_worker = $6::text OR ",
            $q,
            "sticky_until <= ",
            now_ms!(),
            ")"
        )
    };
}

/// The wake-up of flow claims (`orbit_tasks`, payload `limited`, see `listen.rs`) when the
/// row `$row` moved out of `claimed` held a concurrency key: a slot freed. Evaluated per
/// row written (in a `RETURNING` or a select list), so a statement that moves no such row
/// sends nothing and costs nothing more; duplicates fold into one notification.
macro_rules! notify_freed {
    ($held:literal) => {
        concat!("CASE WHEN ", $held, " THEN pg_notify('orbit_tasks', 'limited') END")
    };
}

macro_rules! inbox_columns {
    () => {
        "seq, execution_id, kind, token, payload, created_at, done_at, result"
    };
}

macro_rules! node_columns {
    () => {
        "node_id, service, incarnation, addr, heartbeat_at, started_at, sessions"
    };
}

/// Statuses of an execution that still has work.
macro_rules! open_statuses {
    () => {
        "('PENDING', 'RUNNING', 'COMPENSATING')"
    };
}

// ------------------------------------------------------------------ migrations

pub(crate) const MIGRATION_LOCK: &str = "SELECT pg_advisory_xact_lock($1::bigint)";
pub(crate) const MIGRATION_VERSIONS: &str = "SELECT version FROM schema_migrations";
pub(crate) const MIGRATION_LIST: &str =
    "SELECT version, name, applied_at FROM schema_migrations ORDER BY version";
pub(crate) const MIGRATION_RECORD: &str = concat!(
    "INSERT INTO schema_migrations (version, name, applied_at) VALUES ($1::bigint, $2::text, ",
    now_ms!(),
    ")"
);

// ----------------------------------------------------------------- definitions

/// Inserts unless (name, version) is taken; the hash is compared by the caller.
pub(crate) const DEFINITION_INSERT: &str = concat!(
    "INSERT INTO workflow_definitions (name, version, definition_hash, document, created_at)
    VALUES ($1::text, $2::text, $3::text, $4::text, ",
    now_ms!(),
    ") ON CONFLICT (name, version) DO NOTHING RETURNING id"
);
pub(crate) const DEFINITION_HASH: &str = "SELECT definition_hash FROM workflow_definitions
    WHERE name = $1::text AND version = $2::text";
pub(crate) const DEFINITION_GET: &str =
    "SELECT name, version, definition_hash, document, created_at
    FROM workflow_definitions WHERE name = $1::text AND version = $2::text";
pub(crate) const DEFINITION_VERSIONS: &str = "SELECT version, definition_hash
    FROM workflow_definitions WHERE name = $1::text ORDER BY id";
pub(crate) const DEFINITION_LIST: &str =
    "SELECT name, version, definition_hash, document, created_at
    FROM workflow_definitions ORDER BY name, id";

// ------------------------------------------------------------- reads: history

pub(crate) const EXECUTION_GET: &str =
    concat!("SELECT ", execution_columns!(), " FROM executions WHERE execution_id = $1::text");
pub(crate) const EXECUTION_GET_MANY: &str = concat!(
    "SELECT ",
    execution_columns!(),
    " FROM executions WHERE execution_id = ANY($1::text[])"
);
/// Filters are optional (NULL); the page continues strictly after the keyset
/// (`created_at`, `execution_id`) of the previous page's last row, newest first.
pub(crate) const EXECUTION_LIST: &str = concat!(
    "SELECT ",
    execution_columns!(),
    " FROM executions
    WHERE ($1::text IS NULL OR status = $1::text)
      AND ($2::text IS NULL OR workflow = $2::text)
      AND ($3::text IS NULL OR parent_id = $3::text)
      AND ($7::text IS NULL OR schedule_id = $7::text)
      AND ($4::bigint IS NULL OR created_at < $4::bigint
           OR (created_at = $4::bigint AND execution_id < $5::text))
    ORDER BY created_at DESC, execution_id DESC
    LIMIT $6::bigint"
);
/// [`EXECUTION_LIST`] with a compiled list query (`orbit-query`, placeholders from `$8`)
/// ANDed in, newest or (`ascending`) oldest first; the keyset continues in that direction.
/// With `order` (a query ordering by another attribute, `orbit_query::compile_page`) the
/// page runs in that order and the query's text carries the keyset ($4/$5 are NULL).
/// A text made per query: run unprepared, never cached.
pub(crate) fn execution_list_query(
    where_sql: &str,
    ascending: bool,
    order: Option<&str>,
) -> String {
    let (after, dir) = if ascending { (">", "ASC") } else { ("<", "DESC") };
    let order =
        order.map_or_else(|| format!("created_at {dir}, execution_id {dir}"), str::to_string);
    format!(
        "SELECT {} FROM executions
    WHERE ($1::text IS NULL OR status = $1::text)
      AND ($2::text IS NULL OR workflow = $2::text)
      AND ($3::text IS NULL OR parent_id = $3::text)
      AND ($7::text IS NULL OR schedule_id = $7::text)
      AND ($4::bigint IS NULL OR created_at {after} $4::bigint
           OR (created_at = $4::bigint AND execution_id {after} $5::text))
      AND ({where_sql})
    ORDER BY {order}
    LIMIT $6::bigint",
        execution_columns!()
    )
}
/// The first placeholder of the list query in [`execution_list_query`].
pub(crate) const EXECUTION_LIST_QUERY_FIRST_PARAM: usize = 8;
pub(crate) const EVENT_LOAD_AFTER: &str = "SELECT seq, origin, payload, timestamp
    FROM history_events WHERE execution_id = $1::text AND run = $2::bigint AND seq > $3::bigint
    ORDER BY seq";

// ---------------------------------------------------------------------- commit

/// The commit's three locks, as text for `COMMIT_LOCK_*` and for the CTEs of
/// `COMMIT_LOCK_CHECK` (the parameter that holds the ids or seqs is given).
macro_rules! lock_owners {
    ($ids:literal) => {
        concat!(
            "SELECT execution_id, epoch FROM owners WHERE execution_id = ANY(",
            $ids,
            "::text[]) ORDER BY execution_id FOR SHARE"
        )
    };
}
macro_rules! lock_executions {
    ($ids:literal) => {
        concat!(
            "SELECT execution_id, run, last_seq FROM executions WHERE execution_id = ANY(",
            $ids,
            "::text[]) ORDER BY execution_id FOR NO KEY UPDATE"
        )
    };
}
macro_rules! lock_inbox {
    ($seqs:literal) => {
        concat!(
            "SELECT seq, execution_id FROM inbox WHERE seq = ANY(",
            $seqs,
            "::bigint[]) AND done_at IS NULL ORDER BY seq FOR UPDATE"
        )
    };
}

/// How many versions each of `$1`'s workflows has (`CommitBatch::versions_seen`), read in
/// the two-round-trip commit's first round trip when a start asks for the check.
pub(crate) const COMMIT_DEFINITION_COUNTS: &str = "SELECT name, count(*) FROM workflow_definitions
    WHERE name = ANY($1::text[]) GROUP BY name";
/// Fencing: the owners rows of every execution of the commit, locked (shared) in id order
/// so a takeover waits for the commit and two commits never deadlock.
pub(crate) const COMMIT_LOCK_OWNERS: &str = lock_owners!("$1");
/// The run and last seq of every execution of the commit, locked in id order: commits of
/// one execution queue up here, so the seq check below cannot race.
pub(crate) const COMMIT_LOCK_EXECUTIONS: &str = lock_executions!("$1");
/// The pending entries among the inbox seqs the commit applies, locked.
pub(crate) const COMMIT_LOCK_INBOX: &str = lock_inbox!("$1");

/// The one-round-trip commit's locks and check in ONE statement: the owners, executions
/// and inbox rows of the commit locked as the three `COMMIT_LOCK_*` statements lock them
/// (each set in key order, owners first), then the rows the batches expect
/// (`predict::predict`) compared with them. Counts what differs (an owners epoch, an absent or
/// present row, an executions run or last seq, an inbox entry no longer pending) and fails
/// the statement, so the transaction, when anything does: the commit then takes the two
/// round trips and reports the exact refusal. The failing arm depends on the counted rows,
/// so the planner cannot fold it to an error in advance. `$1`: the ids, `$2`: the inbox
/// seqs; `$3..$9`: the expectations; `$10`/`$11`: the workflow whose latest version a start
/// took from a list, and that list's length (`CommitBatch::versions_seen`: a count that
/// differs means a version was registered since), both NULL for none. Scalars, not arrays:
/// a generic plan counts every array parameter as 10 elements, and two more made the
/// commit that ends an execution look dearer generic than custom again (planned on every
/// call, see `commit::composed`). The commit sends it as the CTE `chk` of its one
/// statement (`commit::composed`), which every write of that statement joins.
pub(crate) const COMMIT_LOCK_CHECK: &str = concat!(
    "WITH o AS MATERIALIZED (",
    lock_owners!("$1"),
    "), e AS MATERIALIZED (",
    lock_executions!("$1"),
    "), i AS MATERIALIZED (",
    lock_inbox!("$2"),
    "),
    locked AS MATERIALIZED (SELECT (SELECT count(*) FROM o) + (SELECT count(*) FROM e)
        + (SELECT count(*) FROM i) AS n),
    moved AS MATERIALIZED (SELECT
      (SELECT count(*) FROM UNNEST($3::text[], $4::bigint[]) AS w(id, epoch)
         LEFT JOIN o ON o.execution_id = w.id WHERE o.epoch IS DISTINCT FROM w.epoch)
    + (SELECT count(*) FROM UNNEST($5::text[], $6::bigint[], $7::bigint[]) AS w(id, run, seq)
         LEFT JOIN e ON e.execution_id = w.id
         WHERE e.run IS DISTINCT FROM w.run OR e.last_seq IS DISTINCT FROM w.seq)
    + (SELECT count(*) FROM UNNEST($8::bigint[], $9::text[]) AS w(seq, id)
         LEFT JOIN i ON i.seq = w.seq WHERE i.execution_id IS DISTINCT FROM w.id)
    + CASE WHEN $10::text IS NULL THEN 0
        WHEN (SELECT count(*) FROM workflow_definitions d WHERE d.name = $10::text) = $11::bigint
        THEN 0 ELSE 1 END AS n)
    SELECT CASE WHEN moved.n = 0 THEN locked.n
        ELSE ('orbit commit check: ' || moved.n || ' row(s) differ from the batch')::bigint END
    FROM locked, moved"
);

// Every commit write reads its rows from its first `UNNEST(`, right after `FROM` or
// `USING`: the one-statement commit (`commit::composed`) joins that with the lock check's
// single row (`chk, UNNEST(`), so no row is written before the locks are held and the check
// passed.

/// Plain insert: an id taken concurrently fails with `executions_pkey`. The row is inserted
/// as the commit leaves it (last seq, projection): no statement of the commit updates it.
pub(crate) const COMMIT_INSERT_EXECUTIONS: &str = concat!(
    "INSERT INTO executions (",
    execution_columns!(),
    ", delete_after) SELECT u.* FROM UNNEST($1::text[], $2::bigint[], $3::text[], $4::text[],
        $5::text[], $6::text[], $7::text[], $8::text[], $9::text[], $10::bigint[],
        $11::bigint[], $12::bigint[], $13::bigint[], $14::text[], $15::text[],
        $16::bigint[]) AS u"
);
/// Plain insert: an owner row created concurrently fails with `owners_pkey`.
pub(crate) const COMMIT_INSERT_OWNERS: &str = concat!(
    "INSERT INTO owners (execution_id, root_id, node_id, epoch, since)
    SELECT u.id, u.root, u.node, 1, ",
    now_ms!(),
    " FROM UNNEST($1::text[], $2::text[], $3::text[]) AS u(id, root, node)"
);
pub(crate) const COMMIT_INSERT_EVENTS: &str = "INSERT INTO history_events
    (execution_id, run, seq, event_type, step, origin, payload, timestamp)
    SELECT u.* FROM UNNEST($1::text[], $2::bigint[], $3::bigint[], $4::text[], $5::text[],
        $6::text[], $7::text[], $8::bigint[]) AS u";
/// Run and last seq always; the projection fields where `proj` is set. The failure
/// columns are kept for a FAILED or TIMED_OUT projection without one (a later commit of the
/// closed run) and cleared by any other status.
pub(crate) const COMMIT_UPDATE_EXECUTIONS: &str = "UPDATE executions e SET
        run = u.run, last_seq = u.last_seq,
        status = CASE WHEN u.proj THEN u.status ELSE e.status END,
        updated_at = CASE WHEN u.proj THEN u.updated_at ELSE e.updated_at END,
        closed_at = CASE WHEN u.proj THEN u.closed_at ELSE e.closed_at END,
        delete_after = CASE WHEN u.proj THEN u.delete_after ELSE e.delete_after END,
        version = COALESCE(u.version, e.version),
        definition_hash = COALESCE(u.hash, e.definition_hash),
        failed_step = CASE WHEN NOT u.proj THEN e.failed_step
            WHEN u.status IN ('FAILED', 'TIMED_OUT') THEN COALESCE(u.failed_step, e.failed_step)
            END,
        error_code = CASE WHEN NOT u.proj THEN e.error_code
            WHEN u.status IN ('FAILED', 'TIMED_OUT') THEN COALESCE(u.error_code, e.error_code)
            END
    FROM UNNEST($1::text[], $2::bigint[], $3::bigint[], $4::bool[], $5::text[], $6::bigint[],
        $7::bigint[], $8::bigint[], $9::text[], $10::text[], $11::text[], $12::text[])
        AS u(id, run, last_seq, proj, status, updated_at, closed_at, delete_after, version, hash,
            failed_step, error_code)
    WHERE e.execution_id = u.id";
/// Results the owner applied without an inbox entry (see `CommitBatch::tasks_done`); a
/// row holding a concurrency key wakes the flow claims (`notify_freed!`).
pub(crate) const COMMIT_TASKS_DONE: &str = concat!(
    "UPDATE task_queue t SET state = 'done', updated_at = ",
    now_ms!(),
    " FROM UNNEST($1::text[], $2::text[]) AS d(token, eid)
    WHERE t.token = d.token AND t.execution_id = d.eid AND t.state = 'claimed'
    RETURNING ",
    notify_freed!("t.concurrency_key IS NOT NULL")
);
/// The rows `COMMIT_TASKS_DONE` marks (`$3`/`$4`: its tokens and executions) are done
/// before the units are cancelled: alone, after it, this statement finds them done already;
/// in the one-statement commit, which sees the rows as they were, it leaves them to it.
/// A claimed row holding a concurrency key wakes the flow claims (`notify_freed!`; only a
/// claimed row has a claim time: claimed rows never go back to `queued`).
pub(crate) const COMMIT_CANCEL_UNITS: &str = concat!(
    "UPDATE task_queue t SET state = 'cancelled', updated_at = ",
    now_ms!(),
    " FROM UNNEST($1::text[], $2::text[]) AS u(eid, unit)
    WHERE t.execution_id = u.eid AND t.unit_key = u.unit AND t.state IN ('queued', 'claimed')
      AND NOT EXISTS (SELECT 1 FROM UNNEST($3::text[], $4::text[]) AS d(token, eid)
        WHERE t.state = 'claimed' AND t.token = d.token AND t.execution_id = d.eid)
    RETURNING ",
    notify_freed!("t.concurrency_key IS NOT NULL AND t.claimed_at IS NOT NULL")
);
/// Offers already present are skipped; the inserted rows come back whole
/// (`task_columns!`). A row with a token (`$14`, task hand-off) is inserted already claimed,
/// as `TASK_CLAIM` would leave it (the batch's events carry its `StepDispatched`); such an
/// offer found already queued fails the statement (the cast in `DO UPDATE`, reached only
/// for a row with a token), so the history never names a token no row carries. `$15..$29`
/// are the flow columns (`flow::FlowColumns`): the rank is the database clock plus `$16`,
/// `sticky_until` the clock plus `$29`.
pub(crate) const COMMIT_INSERT_TASKS: &str = concat!(
    "INSERT INTO task_queue (execution_id, run, unit_key, attempt, offer, task, task_version,
        input, idempotency_key, state, claim_count, created_at, updated_at, language,
        claimed_by, session, worker_id, token, claimed_at, priority, dispatch_rank, limited,
        concurrency_key, concurrency_limit, rate_key, rate_starts, rate_period_ms, rate_name,
        flow, fair_key, fair_weight, labels, sticky_worker, sticky_until)
    SELECT u.eid, u.run, u.unit, u.attempt, u.offer, u.task, u.tv, u.input, u.ik,
        CASE WHEN u.tok IS NULL THEN 'queued' ELSE 'claimed' END,
        CASE WHEN u.tok IS NULL THEN 0 ELSE 1 END, ",
    now_ms!(),
    ", ",
    now_ms!(),
    ", u.lang, u.claimer, u.sess, u.wid, u.tok, CASE WHEN u.tok IS NULL THEN NULL ELSE ",
    now_ms!(),
    " END, u.prio, ",
    now_ms!(),
    " + u.rank_offset, u.limited, u.ckey, u.climit, u.rkey, u.rstarts, u.rperiod, u.rname,
        u.flow, u.fkey, u.fweight, u.labels, u.sticky, ",
    now_ms!(),
    " + u.sticky_ms
    FROM UNNEST($1::text[], $2::bigint[], $3::text[], $4::bigint[], $5::bigint[],
        $6::text[], $7::text[], $8::text[], $9::text[], $10::text[], $11::text[], $12::text[],
        $13::text[], $14::text[], $15::bigint[], $16::bigint[], $17::bool[], $18::text[],
        $19::bigint[], $20::text[], $21::bigint[], $22::bigint[], $23::text[], $24::text[],
        $25::text[], $26::bigint[], $27::text[], $28::text[], $29::bigint[])
        WITH ORDINALITY AS u(eid, run, unit, attempt, offer, task, tv, input, ik, lang, claimer,
            sess, wid, tok, prio, rank_offset, limited, ckey, climit, rkey, rstarts, rperiod,
            rname, flow, fkey, fweight, labels, sticky, sticky_ms, ord)
    ORDER BY u.ord
    ON CONFLICT (execution_id, run, unit_key, attempt, offer) DO UPDATE
        SET claim_count = ('orbit commit: the handed-off offer ' || excluded.unit_key
            || ' was queued before')::bigint
        WHERE excluded.token IS NOT NULL
    RETURNING ",
    task_columns!()
);
pub(crate) const COMMIT_INSERT_INBOX: &str = concat!(
    "INSERT INTO inbox (execution_id, kind, token, payload, created_at)
    SELECT u.eid, u.kind, NULL, u.payload, ",
    now_ms!(),
    " FROM UNNEST($1::text[], $2::text[], $3::text[]) WITH ORDINALITY AS u(eid, kind, payload, ord)
    ORDER BY u.ord"
);
/// Keys are unique per statement, and none is deleted by the same commit (the caller keeps
/// the last write of each).
pub(crate) const COMMIT_UPSERT_TIMERS: &str =
    "INSERT INTO timers (execution_id, timer_key, run, fire_at, payload)
    SELECT u.* FROM UNNEST($1::text[], $2::text[], $3::bigint[], $4::bigint[], $5::text[]) AS u
    ON CONFLICT (execution_id, timer_key) DO UPDATE SET run = excluded.run,
        fire_at = excluded.fire_at, payload = excluded.payload";
pub(crate) const COMMIT_DELETE_TIMERS: &str = "DELETE FROM timers t
    USING UNNEST($1::text[], $2::text[]) AS u(eid, tkey)
    WHERE t.execution_id = u.eid AND t.timer_key = u.tkey";
/// The seqs were checked (pending, of the right execution) and locked by the first round
/// trip, or by the check of the one-statement commit.
pub(crate) const COMMIT_INBOX_DONE: &str = concat!(
    "UPDATE inbox i SET done_at = ",
    now_ms!(),
    ", result = u.result FROM UNNEST($1::bigint[], $2::text[]) AS u(seq, result)
    WHERE i.seq = u.seq"
);
/// The rows of the search attributes a commit upserts (`crate::search`), deleted before
/// [`COMMIT_INSERT_SEARCH`] writes their new values (in the one-statement commit the insert's
/// rows are not visible to this delete: CTEs see the rows as they were).
pub(crate) const COMMIT_DELETE_SEARCH: &str = "DELETE FROM execution_search s
    USING UNNEST($1::text[], $2::text[]) AS u(eid, name)
    WHERE s.execution_id = u.eid AND s.name = u.name";
pub(crate) const COMMIT_INSERT_SEARCH: &str =
    "INSERT INTO execution_search (execution_id, name, kw, ival, num, ts, flag)
    SELECT u.* FROM UNNEST($1::text[], $2::text[], $3::text[], $4::bigint[], $5::float8[],
        $6::bigint[], $7::boolean[]) AS u";
/// In the one-statement commit a plain `SELECT`, which runs only when read: its final select
/// counts these rows (`commit::composed`).
pub(crate) const NOTIFY_MANY: &str = "SELECT pg_notify(u.channel, u.payload)
    FROM UNNEST($1::text[], $2::text[]) AS u(channel, payload)";

// ---------------------------------------------------------------------- owners

/// Insert at epoch 1, or take over: the stored root is kept, the epoch moves on.
pub(crate) const OWNER_GET: &str = "SELECT execution_id, root_id, node_id, epoch, since
    FROM owners WHERE execution_id = $1::text";

// ------------------------------------------------------------------ task queue

/// The `dispatched` CTE both claims end with (`TASK_CLAIM`, `TASK_CLAIM_LIMITED`): one
/// `dispatched` inbox entry per row of `claimed`, with `$3` claimer, `$4` session, `$6`
/// worker and `$7` the entry kind. A fragment of a `concat!` inside a `WITH`.
macro_rules! dispatched_entries {
    () => {
        concat!(
            "dispatched AS (
        INSERT INTO inbox (execution_id, kind, token, payload, created_at)
        SELECT c.execution_id, $7::text, c.token,
            json_build_object('task_id', c.id, 'step', c.unit_key, 'attempt', c.attempt,
                'offer', c.offer, 'token', c.token, 'claimed_by', $3::text,
                'session', $4::text, 'worker_id', $6::text)::text, ",
            now_ms!(),
            " FROM claimed c ORDER BY c.id)"
        )
    };
}

/// Queued rows without a limit (`task_queue_ready`), by rank (`flow.rs`: priority, then
/// age); rows another claimer holds are skipped, never shared. Each task name's range of
/// the index is walked in rank order up to the limit (`LATERAL`) and the names' rows merged:
/// `task = ANY($1)` read and sorted every queued row of those names for each claim (5,000
/// queued: 2.5 ms against 0.3 ms). With several names the rows of one name past the limit
/// are locked until the statement commits, so a concurrent claim skips them meanwhile. The
/// n-th picked row gets the n-th fresh random token of `$5` (see `model::new_task_token`)
/// and the worker `$6` the claim is for. Each claim writes its `dispatched` inbox entry (the
/// payload SQLite writes) in the same statement, and wakes the owners. Which rows: of the
/// task names `$1` (the index narrows on them), at any version for the names `$8` or at the
/// version `$10[i]` for the name `$9[i]`, routed to the language `$11` or to none (`$11`
/// NULL: every language), whose required labels the worker's `$12` hold and which stick to
/// no other worker (`worker_routing!`); see [`ClaimFilter`](crate::ClaimFilter).
pub(crate) const TASK_CLAIM: &str = concat!(
    "WITH picked AS (
        SELECT c.id FROM UNNEST($1::text[]) AS n(name) CROSS JOIN LATERAL (
            SELECT id, dispatch_rank FROM task_queue
            WHERE state = 'queued' AND NOT limited AND task = n.name
              AND (task = ANY($8::text[]) OR (task, task_version) IN
                (SELECT * FROM UNNEST($9::text[], $10::text[])))
              AND ($11::text IS NULL OR language IS NULL OR language = $11::text)
              AND ",
    worker_routing!(""),
    "
            ORDER BY dispatch_rank, id LIMIT $2::bigint
            FOR UPDATE SKIP LOCKED) c
        ORDER BY c.dispatch_rank, c.id LIMIT $2::bigint),
    numbered AS (SELECT id, row_number() OVER (ORDER BY id) AS n FROM picked),
    claimed AS (
        UPDATE task_queue t SET state = 'claimed', claimed_by = $3::text, session = $4::text,
            worker_id = $6::text, token = ($5::text[])[numbered.n::int],
            claim_count = t.claim_count + 1,
            claimed_at = ",
    now_ms!(),
    ", updated_at = ",
    now_ms!(),
    " FROM numbered WHERE t.id = numbered.id
        RETURNING t.*),
    ",
    dispatched_entries!(),
    "
    SELECT ",
    task_columns!(),
    ", pg_notify('orbit_inbox', '') FROM claimed ORDER BY dispatch_rank, id"
);
pub(crate) const TASK_CLAIMED_BY: &str = concat!(
    "SELECT ",
    task_columns!(),
    " FROM task_queue WHERE state = 'claimed' AND claimed_by = $1::text ORDER BY id"
);
pub(crate) const TASK_BY_TOKEN: &str =
    concat!("SELECT ", task_columns!(), " FROM task_queue WHERE token = $1::text");
/// The row of the token `$1`, claimed for `$2` (or cancelled since), done; a row that was
/// claimed and holds a concurrency key wakes the flow claims (`notify_freed!`). The row is
/// locked first to read the state it leaves (a concurrent cancel is waited for).
pub(crate) const TASK_DONE: &str = concat!(
    "WITH old AS (
        SELECT id, state FROM task_queue
        WHERE token = $1::text AND worker_id = $2::text AND state IN ('claimed', 'cancelled')
        FOR UPDATE),
    done AS (
        UPDATE task_queue t SET state = 'done', updated_at = ",
    now_ms!(),
    " FROM old WHERE t.id = old.id
        RETURNING t.id, old.state AS was, t.concurrency_key)
    SELECT id, ",
    notify_freed!("was = 'claimed' AND concurrency_key IS NOT NULL"),
    " FROM done"
);
/// The worker's report for the owner of the row holding the token, if the row was claimed
/// for that worker (`$4`).
pub(crate) const TASK_REPORT: &str = concat!(
    "INSERT INTO inbox (execution_id, kind, token, payload, created_at)
    SELECT execution_id, $2::text, $1::text, $3::text, ",
    now_ms!(),
    " FROM task_queue WHERE token = $1::text AND worker_id = $4::text ORDER BY id LIMIT 1
    RETURNING seq, pg_notify('orbit_inbox', '')"
);
/// Over the two partial indexes of queued rows (`task_queue_ready`, `task_queue_limited`):
/// `state = 'queued'` alone matches neither.
pub(crate) const TASK_BACKLOG: &str =
    "SELECT task, task_version, COUNT(*)::bigint, MIN(created_at) FROM (
        SELECT task, task_version, created_at FROM task_queue
        WHERE state = 'queued' AND NOT limited
        UNION ALL SELECT task, task_version, created_at FROM task_queue
        WHERE state = 'queued' AND limited) q
    GROUP BY task, task_version ORDER BY task, task_version";

// ----------------------------------------------------------------------- inbox

/// A command with a request id (`$5`) is written once per execution and kind; a second
/// one inserts nothing (and notifies nobody) and reads the first with [`INBOX_BY_REQUEST`].
pub(crate) const INBOX_INSERT: &str = concat!(
    "INSERT INTO inbox (execution_id, kind, token, payload, created_at, request_id)
    VALUES ($1::text, $2::text, $3::text, $4::text, ",
    now_ms!(),
    ", $5::text)
    ON CONFLICT (execution_id, kind, request_id) WHERE request_id IS NOT NULL DO NOTHING
    RETURNING seq, pg_notify('orbit_inbox', '')"
);
/// The entry an earlier command with the same request id wrote. A separate statement: in
/// READ COMMITTED it sees a conflicting entry committed after the insert's snapshot.
pub(crate) const INBOX_BY_REQUEST: &str = "SELECT seq, payload FROM inbox
    WHERE execution_id = $1::text AND kind = $2::text AND request_id = $3::text";
pub(crate) const INBOX_PENDING_ONE: &str = concat!(
    "SELECT ",
    inbox_columns!(),
    " FROM inbox WHERE done_at IS NULL AND execution_id = $1::text ORDER BY seq LIMIT $2::bigint"
);
pub(crate) const INBOX_PENDING_ALL: &str = concat!(
    "SELECT ",
    inbox_columns!(),
    " FROM inbox WHERE done_at IS NULL ORDER BY seq LIMIT $1::bigint"
);
pub(crate) const INBOX_GET: &str =
    concat!("SELECT ", inbox_columns!(), " FROM inbox WHERE seq = $1::bigint");

// --------------------------------------------------------------------- cluster

mod cluster;
mod timers;
pub(crate) use cluster::*;
pub(crate) use timers::*;

// ---------------------------------------------------------------- flow control

pub(crate) mod flow;
