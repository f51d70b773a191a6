//! Every SQL statement of the SQLite backend, one named constant each.
//!
//! Parameters are numbered (`?1`); column lists shared by several queries are macros so the
//! row mappers in `rows.rs` have one column order to follow.

// ------------------------------------------------------------------ migrations

pub(crate) const MIGRATION_APPLIED: &str =
    "SELECT COUNT(*) FROM schema_migrations WHERE version = ?1";
pub(crate) const MIGRATION_RECORD: &str =
    "INSERT INTO schema_migrations (version, name, applied_at) VALUES (?1, ?2, ?3)";
pub(crate) const MIGRATION_TABLE_EXISTS: &str =
    "SELECT COUNT(*) FROM sqlite_master WHERE type = 'table' AND name = 'schema_migrations'";
pub(crate) const MIGRATION_LIST: &str =
    "SELECT version, name, applied_at FROM schema_migrations ORDER BY version";

// ----------------------------------------------------------------- definitions

pub(crate) const DEFINITION_HASH: &str =
    "SELECT definition_hash FROM workflow_definitions WHERE name = ?1 AND version = ?2";
pub(crate) const DEFINITION_INSERT: &str = "INSERT INTO workflow_definitions
    (name, version, definition_hash, document, created_at) VALUES (?1, ?2, ?3, ?4, ?5)";
pub(crate) const DEFINITION_GET: &str =
    "SELECT name, version, definition_hash, document, created_at
    FROM workflow_definitions WHERE name = ?1 AND version = ?2";
pub(crate) const DEFINITION_VERSIONS: &str =
    "SELECT version, definition_hash FROM workflow_definitions WHERE name = ?1 ORDER BY id";
pub(crate) const DEFINITION_LIST: &str =
    "SELECT name, version, definition_hash, document, created_at
    FROM workflow_definitions ORDER BY name, id";

// ------------------------------------------------------------------ executions

macro_rules! execution_columns {
    () => {
        "execution_id, run, root_id, parent_id, workflow, version, definition_hash, status, \
         schedule_id, created_at, updated_at, closed_at, last_seq, failed_step, error_code"
    };
}

/// How many versions of a workflow are registered (`CommitBatch::versions_seen`).
pub(crate) const DEFINITION_COUNT: &str =
    "SELECT count(*) FROM workflow_definitions WHERE name = ?1";
pub(crate) const EXECUTION_INSERT: &str = concat!(
    "INSERT INTO executions (",
    execution_columns!(),
    ") VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, 0, NULL, NULL)
    ON CONFLICT (execution_id) DO NOTHING"
);
pub(crate) const EXECUTION_GET: &str =
    concat!("SELECT ", execution_columns!(), " FROM executions WHERE execution_id = ?1");
/// The first placeholder of a list query (`orbit-query`) in [`execution_list_query`].
pub(crate) const EXECUTION_LIST_QUERY_FIRST_PARAM: usize = 8;

/// The list of executions, newest first, continuing strictly after the keyset
/// (`created_at`, `execution_id`) of the previous page's last row.
///
/// Only the filters given are named (`reads::list_executions`): SQLite
/// plans a statement once, so a `(?1 IS NULL OR status = ?1)` form is planned for "no
/// filter" and walks `executions_by_created` through every row when the filter matches
/// few (a status nothing has: 100,000 rows read for an empty page). Naming only the
/// present filters lets it pick `executions_by_status` / `_by_workflow` / `_by_schedule`.
/// Parameters: ?1 status, ?2 workflow, ?3 parent, ?4/?5 the page token's (created_at,
/// execution_id), ?6 the limit, ?7 schedule id.
///
/// A compiled list query (`orbit-query`, placeholders from `?8`) is ANDed in when given.
/// `keyset` is `Some(ascending)` when a page token continues a list in creation order (the
/// keyset continues in that direction); `order` is the `ORDER BY` text
/// ([`created_order`], or a query's own order whose text carries its keyset).
pub(crate) fn execution_list_query(
    status: bool,
    workflow: bool,
    parent: bool,
    schedule: bool,
    keyset: Option<bool>,
    query: Option<&str>,
    order: &str,
) -> String {
    let mut sql =
        String::from(concat!("SELECT ", execution_columns!(), " FROM executions WHERE 1 = 1"));
    let keyset_sql = if keyset == Some(true) {
        " AND (created_at > ?4 OR (created_at = ?4 AND execution_id > ?5))"
    } else {
        " AND (created_at < ?4 OR (created_at = ?4 AND execution_id < ?5))"
    };
    for (present, condition) in [
        (status, " AND status = ?1"),
        (workflow, " AND workflow = ?2"),
        (parent, " AND parent_id = ?3"),
        (schedule, " AND schedule_id = ?7"),
        (keyset.is_some(), keyset_sql),
    ] {
        if present {
            sql.push_str(condition);
        }
    }
    if let Some(query) = query {
        sql.push_str(" AND (");
        sql.push_str(query);
        sql.push(')');
    }
    // Every numbered parameter is always bound (rusqlite checks the count against the
    // highest number used); these always-true terms keep each one in the statement.
    sql.push_str(" AND (?1 IS NULL OR 1) AND (?2 IS NULL OR 1) AND (?3 IS NULL OR 1) AND (?4 IS NULL OR 1) AND (?5 IS NULL OR 1) AND (?7 IS NULL OR 1)");
    sql.push_str(" ORDER BY ");
    sql.push_str(order);
    sql.push_str(" LIMIT ?6");
    sql
}

/// The `ORDER BY` of a list in creation order.
pub(crate) fn created_order(ascending: bool) -> &'static str {
    if ascending {
        "created_at ASC, execution_id ASC"
    } else {
        "created_at DESC, execution_id DESC"
    }
}
pub(crate) const EXECUTION_RUN_AND_SEQ: &str =
    "SELECT run, last_seq FROM executions WHERE execution_id = ?1";
pub(crate) const EXECUTION_SET_SEQ: &str =
    "UPDATE executions SET run = ?2, last_seq = ?3 WHERE execution_id = ?1";
pub(crate) const EXECUTION_SET_DEFINITION: &str =
    "UPDATE executions SET version = ?2, definition_hash = ?3 WHERE execution_id = ?1";
/// The projection of a commit that leaves the run open, for a row that is open too: only
/// the two columns that change. SQLite rewrites the entries of every index over a column
/// an UPDATE assigns, whether or not its value changed, so assigning `closed_at`,
/// `delete_after`, `failed_step` and `error_code` (NULL to NULL) on every commit of an open
/// run cost six index rewrites per commit (docs/benchmarks.md, issue 28's unused cost).
/// Changes no row when the stored run is closed (a reset or continue-as-new reopening it):
/// then [`EXECUTION_SET_PROJECTION`] runs and clears the closed run's columns.
pub(crate) const EXECUTION_SET_OPEN: &str = "UPDATE executions
    SET status = ?2, updated_at = ?3 WHERE execution_id = ?1 AND closed_at IS NULL";
pub(crate) const EXECUTION_SET_PROJECTION: &str = "UPDATE executions
    SET status = ?2, updated_at = ?3, closed_at = ?4, delete_after = ?5,
        failed_step = CASE WHEN ?2 IN ('FAILED', 'TIMED_OUT') THEN COALESCE(?6, failed_step) END,
        error_code = CASE WHEN ?2 IN ('FAILED', 'TIMED_OUT') THEN COALESCE(?7, error_code) END
    WHERE execution_id = ?1";

// --------------------------------------------------------------------- history

pub(crate) const EVENT_INSERT: &str = "INSERT INTO history_events
    (execution_id, run, seq, event_type, step, origin, payload, timestamp)
    VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8)";
pub(crate) const EVENT_LOAD_AFTER: &str =
    "SELECT seq, origin, payload, timestamp FROM history_events
    WHERE execution_id = ?1 AND run = ?2 AND seq > ?3 ORDER BY seq";

// ---------------------------------------------------------------------- owners

pub(crate) const OWNER_EPOCH: &str = "SELECT epoch FROM owners WHERE execution_id = ?1";
pub(crate) const OWNER_INSERT: &str =
    "INSERT INTO owners (execution_id, root_id, node_id, epoch, since)
    VALUES (?1, ?2, ?3, 1, ?4) ON CONFLICT (execution_id) DO NOTHING";
/// Insert at epoch 1, or take over: the stored root is kept, the epoch moves on.
pub(crate) const OWNER_GET: &str =
    "SELECT execution_id, root_id, node_id, epoch, since FROM owners WHERE execution_id = ?1";

// ------------------------------------------------------------------ task queue

macro_rules! task_columns {
    () => {
        "id, execution_id, run, unit_key, attempt, offer, task, task_version, input, \
         idempotency_key, state, claimed_by, session, token, created_at, claimed_at, worker_id, \
         language, priority, flow"
    };
}

/// `?12..?26`: the flow columns (`flow::FlowColumns`); the rank is the clock `?10` plus
/// `?13`, `sticky_until` the clock plus `?26`.
pub(crate) const TASK_INSERT: &str = "INSERT INTO task_queue
    (execution_id, run, unit_key, attempt, offer, task, task_version, input, idempotency_key,
     state, claim_count, created_at, updated_at, language, priority, dispatch_rank, limited,
     concurrency_key, concurrency_limit, rate_key, rate_starts, rate_period_ms, rate_name, flow,
     fair_key, fair_weight, labels, sticky_worker, sticky_until)
    VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, 'queued', 0, ?10, ?10, ?11, ?12, ?10 + ?13,
        ?14, ?15, ?16, ?17, ?18, ?19, ?20, ?21, ?22, ?23, ?24, ?25, ?10 + ?26)
    ON CONFLICT (execution_id, run, unit_key, attempt, offer) DO NOTHING
    RETURNING id";
/// One row per row cancelled: whether it was claimed holding a concurrency key (a slot
/// freed; only a claimed row has a claim time, claimed rows never go back to `queued`).
pub(crate) const TASK_CANCEL_UNIT: &str =
    "UPDATE task_queue SET state = 'cancelled', updated_at = ?3
    WHERE execution_id = ?1 AND unit_key = ?2 AND state IN ('queued', 'claimed')
    RETURNING concurrency_key IS NOT NULL AND claimed_at IS NOT NULL";
/// The queued rows without a limit a worker may take (a [`ClaimFilter`](crate::ClaimFilter))
/// of one task name `?1`, by rank (`flow.rs`: priority, then age): at any version when `?2`
/// is true, else at one of the versions of the JSON array `?3`; `?4` is the worker's
/// language (NULL: rows of every language), `?6..?8` the worker's labels, id and the clock
/// (`worker_routing!`). One name at a time, so the walk is `task_queue_ready`'s own order
/// and stops after `?5` rows: a list of names (`task IN (...)`) made SQLite read and sort
/// every queued row of those names for each claim (5,000 queued rows: ~5 ms of the single
/// writer per claim). `queue.rs` merges the names' rows by rank. The single writer makes
/// select-then-update atomic here; PostgreSQL uses `FOR UPDATE SKIP LOCKED` for the same
/// guarantee.
pub(crate) const TASK_CLAIMABLE: &str = concat!(
    "SELECT id, dispatch_rank FROM task_queue q INDEXED BY task_queue_ready
    WHERE state = 'queued' AND NOT limited AND task = ?1
      AND (?2 OR task_version IN (SELECT value FROM json_each(?3)))
      AND (?4 IS NULL OR language IS NULL OR language = ?4)
      AND ",
    worker_routing!("q.", "?6", "?7", "?8"),
    "
    ORDER BY dispatch_rank, id LIMIT ?5"
);
/// One claim: a fresh random token (`?5`, see `model::new_task_token`) and the worker the
/// claim is for, who alone may report its result.
pub(crate) const TASK_CLAIM: &str = concat!(
    "UPDATE task_queue SET state = 'claimed', claimed_by = ?2, session = ?3, worker_id = ?4,
        token = ?5, claim_count = claim_count + 1, claimed_at = ?6, updated_at = ?6
    WHERE id = ?1 AND state = 'queued'
    RETURNING ",
    task_columns!()
);
pub(crate) const TASK_CLAIMED_BY: &str = concat!(
    "SELECT ",
    task_columns!(),
    " FROM task_queue WHERE state = 'claimed' AND claimed_by = ?1 ORDER BY id"
);
pub(crate) const TASK_BY_TOKEN: &str =
    concat!("SELECT ", task_columns!(), " FROM task_queue WHERE token = ?1");
/// Queued rows per task name and version, with the oldest row's `created_at`; over the two
/// partial indexes of queued rows (`task_queue_ready`, `task_queue_limited`).
pub(crate) const TASK_BACKLOG: &str = "SELECT task, task_version, COUNT(*), MIN(created_at) FROM (
        SELECT task, task_version, created_at FROM task_queue
        WHERE state = 'queued' AND NOT limited
        UNION ALL SELECT task, task_version, created_at FROM task_queue
        WHERE state = 'queued' AND limited)
    GROUP BY task, task_version ORDER BY task, task_version";
/// Only the worker the row was claimed for (`?3`) finishes it.
/// A result the owner applied without an inbox entry (see `CommitBatch::tasks_done`); the
/// row returns whether it held a concurrency key (a slot freed).
pub(crate) const TASK_DONE_BY_OWNER: &str = "UPDATE task_queue SET state = 'done', updated_at = ?3
    WHERE token = ?1 AND execution_id = ?2 AND state = 'claimed'
    RETURNING concurrency_key IS NOT NULL";
pub(crate) const TASK_DONE: &str = "UPDATE task_queue SET state = 'done', updated_at = ?2
    WHERE token = ?1 AND worker_id = ?3 AND state IN ('claimed', 'cancelled')";

// ----------------------------------------------------------------------- inbox

macro_rules! inbox_columns {
    () => {
        "seq, execution_id, kind, token, payload, created_at, done_at, result"
    };
}

pub(crate) const INBOX_INSERT: &str =
    "INSERT INTO inbox (execution_id, kind, token, payload, created_at)
    VALUES (?1, ?2, ?3, ?4, ?5) RETURNING seq";
/// `enqueue_inbox`: a command with a request id is written once per execution and kind.
pub(crate) const INBOX_INSERT_REQUEST: &str =
    "INSERT INTO inbox (execution_id, kind, token, payload, created_at, request_id)
    VALUES (?1, ?2, ?3, ?4, ?5, ?6)
    ON CONFLICT (execution_id, kind, request_id) WHERE request_id IS NOT NULL DO NOTHING
    RETURNING seq";
/// The entry an earlier command with the same request id wrote.
pub(crate) const INBOX_BY_REQUEST: &str = "SELECT seq, payload FROM inbox
    WHERE execution_id = ?1 AND kind = ?2 AND request_id = ?3";
pub(crate) const INBOX_PENDING_ONE: &str = concat!(
    "SELECT ",
    inbox_columns!(),
    " FROM inbox WHERE done_at IS NULL AND execution_id = ?1 ORDER BY seq LIMIT ?2"
);
pub(crate) const INBOX_PENDING_ALL: &str =
    concat!("SELECT ", inbox_columns!(), " FROM inbox WHERE done_at IS NULL ORDER BY seq LIMIT ?1");
pub(crate) const INBOX_GET: &str =
    concat!("SELECT ", inbox_columns!(), " FROM inbox WHERE seq = ?1");
/// Only a pending entry of the committing execution: an entry is applied at most once.
pub(crate) const INBOX_MARK_DONE: &str = "UPDATE inbox SET done_at = ?3, result = ?4
    WHERE seq = ?1 AND execution_id = ?2 AND done_at IS NULL";

// ---------------------------------------------------------------------- timers

pub(crate) const TIMER_UPSERT: &str =
    "INSERT INTO timers (execution_id, timer_key, run, fire_at, payload)
    VALUES (?1, ?2, ?3, ?4, ?5)
    ON CONFLICT (execution_id, timer_key) DO UPDATE SET run = excluded.run,
        fire_at = excluded.fire_at, payload = excluded.payload";
pub(crate) const TIMER_DELETE: &str =
    "DELETE FROM timers WHERE execution_id = ?1 AND timer_key = ?2";
pub(crate) const TIMER_DUE: &str =
    "SELECT execution_id, run, timer_key, fire_at, payload FROM timers
    WHERE fire_at <= ?1 ORDER BY fire_at, execution_id, timer_key LIMIT ?2";
pub(crate) const TIMER_NEXT: &str = "SELECT MIN(fire_at) FROM timers";

/// The task columns, for statements built at run time.
pub(crate) const TASK_COLUMNS: &str = task_columns!();
/// The inbox columns qualified by the alias `i`.
pub(crate) const INBOX_COLUMNS_I: &str =
    "i.seq, i.execution_id, i.kind, i.token, i.payload, i.created_at, i.done_at, i.result";
