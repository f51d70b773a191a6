//! The durable timers' statements: the due ones, the next one, and firing them into the
//! inbox. A child of `sql.rs`, whose clock it uses (re-exported there, so callers name them
//! `sql::…`).

pub(crate) const TIMER_DUE: &str = "SELECT execution_id, run, timer_key, fire_at, payload
    FROM timers WHERE fire_at <= $1::bigint
    ORDER BY fire_at, execution_id, timer_key LIMIT $2::bigint";
pub(crate) const TIMER_NEXT: &str = "SELECT MIN(fire_at) FROM timers";
/// Due timers no other scheduler holds become `timer` inbox entries (seqs in due order)
/// and are deleted, in one statement.
pub(crate) const TIMER_FIRE: &str = concat!(
    "WITH due AS (
        SELECT execution_id, timer_key FROM timers WHERE fire_at <= $1::bigint
        ORDER BY fire_at, execution_id, timer_key LIMIT $2::bigint
        FOR UPDATE SKIP LOCKED),
    fired AS (
        DELETE FROM timers t USING due
        WHERE t.execution_id = due.execution_id AND t.timer_key = due.timer_key
        RETURNING t.execution_id, t.run, t.timer_key, t.fire_at, t.payload),
    entries AS (
        INSERT INTO inbox (execution_id, kind, token, payload, created_at)
        SELECT f.execution_id, $3::text, NULL,
            json_build_object('key', f.timer_key, 'run', f.run, 'fire_at', f.fire_at,
                'payload', f.payload::json)::text, ",
    now_ms!(),
    " FROM fired f ORDER BY f.fire_at, f.execution_id, f.timer_key
        RETURNING seq, execution_id, payload)
    SELECT f.execution_id, f.run, f.timer_key, f.fire_at, f.payload, e.seq,
        pg_notify('orbit_inbox', '')
    FROM fired f JOIN entries e
        ON e.execution_id = f.execution_id AND (e.payload::json ->> 'key') = f.timer_key
    ORDER BY f.fire_at, f.execution_id, f.timer_key"
);
