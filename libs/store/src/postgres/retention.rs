//! Retention on PostgreSQL (see `crate::retention` for the rules). Any number of sweepers
//! may run: each picks its rows with `FOR UPDATE SKIP LOCKED`, so they take disjoint
//! batches instead of queueing on each other. Deleting a tree first locks its `executions`
//! rows (an owner's commit updates them, so a commit in flight finishes first), then deletes
//! in a second statement whose snapshot sees that commit's rows; a commit that comes later
//! finds no owners row and is fenced.

use super::conn::PgConn;
use super::error::PgResult;
use super::rows::{get, get_u64, to_i64};
use crate::retention::{
    finished_reply, DeleteOutcome, DoneRowsDeleted, ExecutionsDeleted, FlowRowsDeleted,
    OwnersReleased,
};
use tokio_postgres::types::ToSql;

/// The database clock, epoch milliseconds.
macro_rules! now_ms {
    () => {
        "(extract(epoch from statement_timestamp()) * 1000)::bigint"
    };
}

/// Statuses of an execution that still has work.
macro_rules! open_statuses {
    () => {
        "('PENDING', 'RUNNING', 'COMPENSATING', 'SUSPENDED')"
    };
}

pub(super) const DELETE_DONE: &str = concat!(
    "WITH i AS (DELETE FROM inbox WHERE seq IN (
            SELECT seq FROM inbox WHERE done_at IS NOT NULL AND request_id IS NULL AND done_at < ",
    now_ms!(),
    " - $1::bigint ORDER BY done_at LIMIT $2::bigint FOR UPDATE SKIP LOCKED) RETURNING 1),
    t AS (DELETE FROM task_queue WHERE id IN (
            SELECT id FROM task_queue WHERE state = 'done' AND updated_at < ",
    now_ms!(),
    " - $1::bigint ORDER BY updated_at LIMIT $2::bigint FOR UPDATE SKIP LOCKED) RETURNING 1)
    SELECT (SELECT count(*) FROM i), (SELECT count(*) FROM t)"
);

/// Rate buckets whose window ended and served rows of idle fair keys (the rules of
/// `sqlite/retention.rs`'s statements), each batch locked with `SKIP LOCKED`.
pub(super) const DELETE_IDLE_FLOW: &str = concat!(
    "WITH b AS (DELETE FROM rate_buckets WHERE bucket IN (
            SELECT bucket FROM rate_buckets WHERE expires_at <= ",
    now_ms!(),
    " OR (expires_at IS NULL AND window_start + 31622400000 <= ",
    now_ms!(),
    ") LIMIT $1::bigint FOR UPDATE SKIP LOCKED) RETURNING 1),
    f AS (DELETE FROM fair_served WHERE fair_key IN (
            SELECT s.fair_key FROM fair_served s
            WHERE NOT EXISTS (SELECT 1 FROM task_queue q
                    WHERE q.state = 'claimed' AND q.fair_key = s.fair_key)
                AND NOT EXISTS (SELECT 1 FROM task_queue q WHERE q.state = 'queued'
                    AND q.limited AND q.concurrency_key IS NULL AND q.rate_key IS NULL
                    AND q.fair_key = s.fair_key)
            ORDER BY s.served_at LIMIT $1::bigint FOR UPDATE SKIP LOCKED) RETURNING 1)
    SELECT (SELECT count(*) FROM b), (SELECT count(*) FROM f)"
);

/// Finished batch jobs past their retention (`$1`: last change at or before, the runner's
/// clock; `$2`: the batch size): their items first, then the jobs with no item left, each
/// batch locked with `SKIP LOCKED`. `batches_by_state` (0012) finds the finished jobs.
pub(super) const DELETE_FINISHED_BATCHES: &str = "WITH done AS (
        SELECT batch_id FROM batches
        WHERE state IN ('COMPLETED', 'CANCELLED', 'FAILED') AND updated_at <= $1),
    i AS (DELETE FROM batch_items WHERE ctid IN (
            SELECT ctid FROM batch_items WHERE batch_id IN (SELECT batch_id FROM done)
            LIMIT $2::bigint FOR UPDATE SKIP LOCKED) RETURNING 1),
    b AS (DELETE FROM batches WHERE batch_id IN (
            SELECT batch_id FROM batches
            WHERE batch_id IN (SELECT batch_id FROM done)
                AND NOT EXISTS (SELECT 1 FROM batch_items i WHERE i.batch_id = batches.batch_id)
            LIMIT $2::bigint FOR UPDATE SKIP LOCKED) RETURNING 1)
    SELECT (SELECT count(*) FROM i), (SELECT count(*) FROM b)";

/// Owners rows of closed, quiet trees (roots closed before now - `$1`), in one statement:
/// the roots' rows are locked (skipping those another sweeper holds), the tree's rows go.
/// Roots are walked oldest ownership first through `owners_roots_by_since` (0011) and the
/// walk stops at the batch size, so a batch never reads or sorts every owners row.
pub(super) const RELEASE_OWNERS: &str = concat!(
    "WITH roots AS (
        SELECT o.root_id FROM owners o JOIN executions r ON r.execution_id = o.execution_id
        WHERE o.execution_id = o.root_id AND r.status NOT IN ",
    open_statuses!(),
    " AND r.closed_at < ",
    now_ms!(),
    " - $1::bigint
          AND NOT EXISTS (SELECT 1 FROM executions c WHERE c.root_id = r.execution_id
                AND c.status IN ",
    open_statuses!(),
    ")
          AND NOT EXISTS (SELECT 1 FROM executions c
                JOIN inbox i ON i.execution_id = c.execution_id
                WHERE c.root_id = r.execution_id AND i.done_at IS NULL)
        ORDER BY o.since, o.execution_id LIMIT $2::bigint FOR UPDATE OF o SKIP LOCKED),
    d AS (DELETE FROM owners o USING roots WHERE o.root_id = roots.root_id RETURNING 1)
    SELECT (SELECT count(*) FROM roots), (SELECT count(*) FROM d)"
);
/// Pending entries of closed executions without an owners row: nobody will apply them.
/// The entries are picked (and locked) once, materialized: as an `IN` subquery of the
/// update the planner could run the pick again for every pending entry.
pub(super) const ANSWER_UNOWNED: &str = concat!(
    "WITH picked AS MATERIALIZED (
        SELECT i.seq FROM inbox i JOIN executions e ON e.execution_id = i.execution_id
        WHERE i.done_at IS NULL AND e.status NOT IN ",
    open_statuses!(),
    " AND NOT EXISTS (SELECT 1 FROM owners o WHERE o.execution_id = i.execution_id)
        ORDER BY i.seq LIMIT $2::bigint FOR UPDATE OF i SKIP LOCKED),
    a AS (UPDATE inbox SET done_at = ",
    now_ms!(),
    ", result = $1::text FROM picked WHERE inbox.seq = picked.seq AND inbox.done_at IS NULL
        RETURNING 1)
    SELECT count(*) FROM a"
);

/// Expired roots whose trees are closed, locked; a root another sweeper holds is skipped.
pub(super) const EXPIRED_ROOTS: &str = concat!(
    "SELECT r.execution_id FROM executions r
    WHERE r.delete_after IS NOT NULL AND r.delete_after < $1::bigint AND r.parent_id IS NULL
      AND NOT EXISTS (SELECT 1 FROM executions c WHERE c.root_id = r.execution_id
            AND c.status IN ",
    open_statuses!(),
    ")
    ORDER BY r.delete_after LIMIT $2::bigint FOR UPDATE OF r SKIP LOCKED"
);
/// Every execution of the given roots' trees, locked in id order, with its status.
const LOCK_TREES: &str = "SELECT execution_id, status FROM executions
    WHERE root_id = ANY($1::text[]) ORDER BY execution_id FOR UPDATE";
/// An execution and its descendants by `parent_id`, locked, with their status.
const LOCK_SUBTREE: &str = "WITH RECURSIVE tree(id) AS (
        SELECT execution_id FROM executions WHERE execution_id = $1::text
        UNION SELECT e.execution_id FROM executions e JOIN tree t ON e.parent_id = t.id)
    SELECT e.execution_id, e.status FROM executions e JOIN tree t ON e.execution_id = t.id
    ORDER BY e.execution_id FOR UPDATE OF e";
/// Every row of the executions `$1`, in one statement; counts per table. A claimed row
/// holding a concurrency key frees a slot: the flow claims are woken (`orbit_tasks`,
/// `limited`; see `listen.rs`).
const DELETE_ROWS: &str = "WITH
    ef AS (DELETE FROM execution_faults WHERE execution_id = ANY($1::text[]) RETURNING 1),
    es AS (DELETE FROM execution_search WHERE execution_id = ANY($1::text[]) RETURNING 1),
    ev AS (DELETE FROM history_events WHERE execution_id = ANY($1::text[]) RETURNING 1),
    ib AS (DELETE FROM inbox WHERE execution_id = ANY($1::text[]) RETURNING 1),
    tq AS (DELETE FROM task_queue WHERE execution_id = ANY($1::text[])
        RETURNING state = 'claimed' AND concurrency_key IS NOT NULL AS freed),
    tm AS (DELETE FROM timers WHERE execution_id = ANY($1::text[]) RETURNING 1),
    ow AS (DELETE FROM owners WHERE execution_id = ANY($1::text[]) RETURNING 1),
    ex AS (DELETE FROM executions WHERE execution_id = ANY($1::text[]) RETURNING 1)
    SELECT (SELECT count(*) FROM ev), (SELECT count(*) FROM ib), (SELECT count(*) FROM tq),
        (SELECT count(*) FROM tm), (SELECT count(*) FROM ow), (SELECT count(*) FROM ex),
        (SELECT pg_notify('orbit_tasks', 'limited') FROM tq WHERE freed LIMIT 1)";

fn is_open(status: &str) -> bool {
    matches!(status, "PENDING" | "RUNNING" | "COMPENSATING" | "SUSPENDED")
}

fn counts(rows: &[tokio_postgres::Row], n: usize) -> PgResult<Vec<u64>> {
    let Some(row) = rows.first() else { return Ok(vec![0; n]) };
    let out: crate::error::Result<Vec<u64>> = (0..n).map(|i| get_u64(row, i, "count")).collect();
    Ok(out?)
}

pub(crate) async fn delete_finished_batches(
    conn: &mut PgConn,
    finished_before_ms: u64,
    limit: u32,
) -> PgResult<crate::BatchesDeleted> {
    let before = to_i64(finished_before_ms, "finished before")?;
    let c = counts(&conn.query(DELETE_FINISHED_BATCHES, &[&before, &i64::from(limit)]).await?, 2)?;
    Ok(crate::BatchesDeleted { items: c[0], batches: c[1] })
}

pub(crate) async fn delete_done_rows(
    conn: &mut PgConn,
    grace_ms: u64,
    limit: u32,
) -> PgResult<DoneRowsDeleted> {
    let params: [&(dyn ToSql + Sync); 2] = [&to_i64(grace_ms, "grace")?, &i64::from(limit)];
    let c = counts(&conn.query(DELETE_DONE, &params).await?, 2)?;
    Ok(DoneRowsDeleted { inbox: c[0], tasks: c[1] })
}

pub(crate) async fn delete_idle_flow_rows(
    conn: &mut PgConn,
    limit: u32,
) -> PgResult<FlowRowsDeleted> {
    let c = counts(&conn.query(DELETE_IDLE_FLOW, &[&i64::from(limit)]).await?, 2)?;
    Ok(FlowRowsDeleted { buckets: c[0], fair_keys: c[1] })
}

pub(crate) async fn release_closed_owners(
    conn: &mut PgConn,
    grace_ms: u64,
    limit: u32,
) -> PgResult<OwnersReleased> {
    let grace = to_i64(grace_ms, "grace")?;
    let limit = i64::from(limit);
    let released = counts(&conn.query(RELEASE_OWNERS, &[&grace, &limit]).await?, 2)?;
    let reply = finished_reply().to_json().to_string();
    let answered = counts(&conn.query(ANSWER_UNOWNED, &[&reply, &limit]).await?, 1)?;
    Ok(OwnersReleased { trees: released[0], owners: released[1], answered: answered[0] })
}

/// Runs `body` in a transaction on `conn`: committed when it returns `Ok`, else rolled back.
macro_rules! in_transaction {
    ($conn:ident, $body:expr) => {{
        $conn.begin_marker();
        let outcome = async {
            $conn.client().batch_execute("BEGIN").await?;
            $body.await
        }
        .await;
        match outcome {
            Ok(v) => {
                $conn.client().batch_execute("COMMIT").await?;
                $conn.end_marker();
                Ok(v)
            }
            Err(e) => {
                $conn.rollback().await;
                Err(e)
            }
        }
    }};
}

pub(crate) async fn delete_expired(
    conn: &mut PgConn,
    now_ms: u64,
    limit: u32,
) -> PgResult<ExecutionsDeleted> {
    let now = to_i64(now_ms, "now")?;
    in_transaction!(conn, async {
        let found = conn.query(EXPIRED_ROOTS, &[&now, &i64::from(limit)]).await?;
        let roots: Vec<String> =
            found.iter().map(|r| get(r, 0, "root id")).collect::<crate::error::Result<_>>()?;
        if roots.is_empty() {
            return Ok(ExecutionsDeleted::default());
        }
        let tree = conn.query(LOCK_TREES, &[&roots]).await?;
        let mut ids = Vec::new();
        let mut reopened = Vec::new();
        for row in &tree {
            let id: String = get(row, 0, "execution id")?;
            let status: String = get(row, 1, "status")?;
            if is_open(&status) {
                reopened.push(id.clone());
            }
            ids.push(id);
        }
        // Nothing reopens a closed tree; should a child have started meanwhile, the tree
        // waits for the next sweep.
        if !reopened.is_empty() {
            return Ok(ExecutionsDeleted::default());
        }
        delete_rows(conn, &ids).await
    })
}

pub(crate) async fn delete_execution(conn: &mut PgConn, id: &str) -> PgResult<DeleteOutcome> {
    in_transaction!(conn, async {
        let tree = conn.query(LOCK_SUBTREE, &[&id]).await?;
        if tree.is_empty() {
            return Ok(DeleteOutcome::NotFound);
        }
        let mut ids = Vec::new();
        let mut open = Vec::new();
        for row in &tree {
            let id: String = get(row, 0, "execution id")?;
            if is_open(&get::<String>(row, 1, "status")?) {
                open.push(id.clone());
            }
            ids.push(id);
        }
        if !open.is_empty() {
            return Ok(DeleteOutcome::NotFinished(open));
        }
        Ok(DeleteOutcome::Deleted(delete_rows(conn, &ids).await?))
    })
}

async fn delete_rows(conn: &mut PgConn, ids: &[String]) -> PgResult<ExecutionsDeleted> {
    let c = counts(&conn.query(DELETE_ROWS, &[&ids]).await?, 6)?;
    Ok(ExecutionsDeleted {
        events: c[0],
        inbox: c[1],
        tasks: c[2],
        timers: c[3],
        owners: c[4],
        executions: c[5],
    })
}
