//! The cluster's statements: node heartbeats and liveness, what an owner holds, takeover
//! and the claims of frontends that are gone. A child of `sql.rs`, whose column lists and
//! clock it uses (re-exported there, so callers name them `sql::…`).

/// The upsert of a node's heartbeat row (`$1` node id … `$5` sessions), without RETURNING.
macro_rules! node_upsert {
    () => {
        concat!(
            "INSERT INTO nodes (",
            node_columns!(),
            ") VALUES ($1::text, $2::text, $3::text, $4::text, ",
            now_ms!(),
            ", ",
            now_ms!(),
            ", $5::text) ON CONFLICT (node_id) DO UPDATE SET service = excluded.service,
        addr = excluded.addr, heartbeat_at = excluded.heartbeat_at,
        sessions = excluded.sessions,
        started_at = CASE WHEN nodes.incarnation = excluded.incarnation
            THEN nodes.started_at ELSE excluded.started_at END,
        incarnation = excluded.incarnation"
        )
    };
}
pub(crate) const NODE_HEARTBEAT: &str = concat!(node_upsert!(), " RETURNING heartbeat_at");
/// A heartbeat and the live nodes after it, in ONE statement (one transaction): the beat's
/// own row comes from RETURNING, the others from the snapshot the statement reads (which
/// does not see the upsert, hence `node_id <> $1`). `$6`: the node timeout.
pub(crate) const NODE_BEAT_LIVE: &str = concat!(
    "WITH beat AS (",
    node_upsert!(),
    " RETURNING ",
    node_columns!(),
    ") SELECT ",
    node_columns!(),
    " FROM beat UNION ALL SELECT ",
    node_columns!(),
    " FROM nodes WHERE node_id <> $1::text AND heartbeat_at >= ",
    now_ms!(),
    " - $6::bigint ORDER BY node_id"
);
pub(crate) const NODE_LIVE: &str = concat!(
    "SELECT ",
    node_columns!(),
    " FROM nodes WHERE heartbeat_at >= ",
    now_ms!(),
    " - $1::bigint AND ($2::text IS NULL OR service = $2::text) ORDER BY node_id"
);
pub(crate) const NODE_LIST: &str =
    concat!("SELECT ", node_columns!(), " FROM nodes ORDER BY node_id");
pub(crate) const NODE_REMOVE: &str = "DELETE FROM nodes WHERE node_id = $1::text";
/// The pending entries of the given executions or of any this node owns. The owner is
/// looked up per pending entry (a scalar subquery on `owners_pkey`): an `EXISTS` here may
/// be planned as a hash of every owners row of the node, which grows with what it owns.
pub(crate) const INBOX_PENDING_OWNED: &str = concat!(
    "SELECT ",
    inbox_columns!(),
    " FROM inbox i WHERE i.done_at IS NULL AND (
        i.execution_id = ANY($2::text[])
        OR (SELECT o.node_id FROM owners o WHERE o.execution_id = i.execution_id) = $1::text)
    AND (i.kind = ANY($4::text[]) OR NOT EXISTS (SELECT 1 FROM execution_faults f
        WHERE f.execution_id = i.execution_id AND f.parked_at IS NOT NULL))
    ORDER BY i.seq LIMIT $3::bigint"
);
/// From the open executions (`executions_by_status`), as an array, to their owners rows by
/// key: never the `owners_by_node` range, which holds every closed execution the sweeper
/// has not released yet.
pub(crate) const OWNED_EXECUTIONS: &str = concat!(
    "SELECT o.execution_id FROM owners o
    WHERE o.execution_id = ANY (ARRAY(SELECT execution_id FROM executions WHERE status IN ",
    open_statuses!(),
    ")) AND o.node_id = $1::text ORDER BY o.execution_id"
);
/// Driven from the work, not from `owners`: the open executions (`executions_by_status`)
/// and the pending entries (`inbox_pending_by_seq`), as an array, then their owners rows by
/// key. So a round reads what still has work, never the owners rows of closed trees the
/// sweeper has not released yet (before, every round read all of `owners`). The lookup is
/// materialized so the planner cannot walk `owners_by_root` whole for the ORDER BY.
pub(crate) const ORPHANED_ROOTS: &str = concat!(
    "WITH orphaned AS MATERIALIZED (
        SELECT o.root_id, o.node_id FROM owners o
        WHERE o.execution_id = ANY (ARRAY(
                SELECT execution_id FROM executions WHERE status IN ",
    open_statuses!(),
    "
                UNION SELECT execution_id FROM inbox WHERE done_at IS NULL))
          AND o.node_id NOT IN (SELECT node_id FROM nodes
                WHERE service = 'owner' AND heartbeat_at >= ",
    now_ms!(),
    " - $1::bigint))
    SELECT DISTINCT root_id, node_id FROM orphaned ORDER BY root_id, node_id LIMIT $2::bigint"
);
/// Locks the tree's rows in id order first (as commits do), then moves them; rows another
/// node took meanwhile no longer match. Wakes the frontends: the tree's queued tasks have
/// a new owner to report to.
pub(crate) const TAKE_OVER_ROOT: &str = concat!(
    "WITH locked AS (
        SELECT execution_id FROM owners WHERE root_id = $1::text AND node_id = $2::text
        ORDER BY execution_id FOR UPDATE),
    moved AS (
        UPDATE owners o SET node_id = $3::text, epoch = o.epoch + 1, since = ",
    now_ms!(),
    " FROM locked WHERE o.execution_id = locked.execution_id
        RETURNING o.execution_id, o.epoch)
    SELECT execution_id, epoch, pg_notify('orbit_tasks', '') FROM moved ORDER BY execution_id"
);
/// A page of a restarted node's rows: the next `$3` after `$2` in id order (the primary
/// key's order, so the pages together read the table once) to the next epoch (locks taken
/// in id order, waiting for commits that hold the old epoch, as a takeover does). One
/// NOTIFY per page (queued tasks announced again), not one per row.
///
/// Every step is by key, so a page costs the same whatever the table holds: the update
/// takes the page as an array (a join let the planner hash all of `owners`), and the
/// execution row and the child start are LATERAL ... LIMIT 1 probes (an EXISTS was run as
/// a hashed subplan over every history event, once per page).
pub(crate) const RESUME_NODE: &str = concat!(
    "WITH page AS (
        SELECT execution_id FROM owners WHERE node_id = $1::text AND execution_id > $2::text
        ORDER BY execution_id LIMIT $3::bigint FOR UPDATE),
    moved AS (
        UPDATE owners o SET epoch = o.epoch + 1, since = ",
    now_ms!(),
    " WHERE o.execution_id = ANY (ARRAY(SELECT execution_id FROM page))
        RETURNING o.execution_id, o.epoch),
    notified AS (SELECT pg_notify('orbit_tasks', '') AS n)
    SELECT m.execution_id, m.epoch, COALESCE(e.open, false), COALESCE(c.child, false)
    FROM moved m CROSS JOIN notified
    LEFT JOIN LATERAL (SELECT x.status IN ",
    open_statuses!(),
    " AS open FROM executions x WHERE x.execution_id = m.execution_id LIMIT 1) e ON true
    LEFT JOIN LATERAL (SELECT true AS child FROM history_events h
        WHERE h.execution_id = m.execution_id AND h.event_type = 'ChildStarted' LIMIT 1) c
        ON true
    ORDER BY m.execution_id"
);
/// Rows released concurrently by another caller no longer match `state = 'claimed'` once
/// their lock is granted, so each row is released (and reported) once.
pub(crate) const RELEASE_CLAIMS: &str = concat!(
    "WITH released AS (
        UPDATE task_queue SET state = 'cancelled', updated_at = ",
    now_ms!(),
    " WHERE state = 'claimed' AND claimed_by = $1::text
        RETURNING *),",
    report_released!()
);
/// [`RELEASE_CLAIMS`] for the rows among `$4` that `$1` still holds: a row another
/// frontend adopted meanwhile (its worker reconnected there, [`ADOPT_CLAIMS`]) no longer
/// matches once its lock is granted, so it is never handed back behind the new holder.
pub(crate) const HAND_BACK_CLAIMS: &str = concat!(
    "WITH released AS (
        UPDATE task_queue SET state = 'cancelled', updated_at = ",
    now_ms!(),
    " WHERE state = 'claimed' AND claimed_by = $1::text AND token = ANY($4::text[])
        RETURNING *),",
    report_released!()
);
/// The rows among `$2` still claimed for worker `$1`, moved to the frontend `$3` and the
/// session `$4` that the worker's stream now reaches.
pub(crate) const ADOPT_CLAIMS: &str = concat!(
    "UPDATE task_queue SET claimed_by = $3::text, session = $4::text, updated_at = ",
    now_ms!(),
    " WHERE state = 'claimed' AND worker_id = $1::text AND token = ANY($2::text[])
    RETURNING ",
    task_columns!()
);
pub(crate) const ORPHANED_CLAIMERS: &str = concat!(
    "SELECT DISTINCT claimed_by FROM task_queue
    WHERE state = 'claimed' AND claimed_by IS NOT NULL
      AND claimed_by NOT IN (SELECT node_id FROM nodes WHERE heartbeat_at >= ",
    now_ms!(),
    " - $1::bigint)
    ORDER BY claimed_by"
);
