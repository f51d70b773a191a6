#!/usr/bin/env bash
# Fills an Orbit PostgreSQL database with finished executions, fast, for measuring how the
# hot path scales with stored history (docs/benchmarks.md, "Scale with stored history").
#
#   scripts/fill-history.sh [--executions N] [--swept] [--batch B] [DATABASE_URL]
#
# DATABASE_URL defaults to $ORBIT_DATABASE_URL. The database must already hold at least one
# COMPLETED root execution written by the real server (the templates): e.g. run
# `orbit bench --executions 300` against a topology on it first. Every template's rows are
# cloned, round robin, under new ids `hist-<n>` (n = 1..N, continuing after earlier fills),
# so the clones have exactly the shapes the server writes:
#
#   executions      one row per clone (root of its own tree), times shifted into the past:
#                   clone n was created (N - n + 1) / 2 s before the oldest template, so
#                   100,000 clones span ~14 h; `delete_after` shifts with them (still ahead);
#   history_events  the template's events, the execution id replaced in ids and payloads;
#   owners          one row per clone on the template's node (like a tree the sweeper has
#                   not released yet), unless --swept;
#   task_queue      the template's `done` rows, unless --swept (fresh ids, tokens
#                   md5(id || template token), idempotency keys with the new id);
#   inbox           the template's applied (`done_at` set) entries, unless --swept (fresh
#                   seqs, tokens as above; the payload's `task_id` still names the template's
#                   row: nothing reads it after the entry was applied).
#
# Without --swept the database looks like one whose sweeper has not run for all that history
# (the worst case: every done row and owners row still stored); with --swept like a
# steady state after the done grace (only executions and their histories remain). Each
# batch of B clones (default 10,000) is one transaction; ANALYZE runs at the end. Nothing
# but the new rows is written. Rows per 3-step template: 1 execution, 12 events, 1 owners
# row, 3 task rows, 3 inbox entries.
set -euo pipefail

total=100000
swept=0
batch=10000
url="${ORBIT_DATABASE_URL:-}"
while [ $# -gt 0 ]; do
  case "$1" in
    --executions) total="$2"; shift 2 ;;
    --swept) swept=1; shift ;;
    --batch) batch="$2"; shift 2 ;;
    -h | --help) sed -n '2,30p' "$0"; exit 0 ;;
    -*) echo "fill-history.sh: unknown option $1" >&2; exit 2 ;;
    *) url="$1"; shift ;;
  esac
done
[ -n "$url" ] || { echo "fill-history.sh: no database URL (argument or ORBIT_DATABASE_URL)" >&2; exit 2; }

psql=(psql "$url" -X -q -v ON_ERROR_STOP=1)
templates="$("${psql[@]}" -tAc "SELECT count(*) FROM executions
  WHERE status = 'COMPLETED' AND parent_id IS NULL AND execution_id NOT LIKE 'hist-%'")"
[ "$templates" -gt 0 ] || {
  echo "fill-history.sh: no COMPLETED root execution to clone; run orbit bench on it first" >&2
  exit 1
}
# Continue numbering after an earlier fill.
first="$("${psql[@]}" -tAc "SELECT COALESCE(MAX(substr(execution_id, 6)::bigint), 0) + 1
  FROM executions WHERE execution_id LIKE 'hist-%'")"
last=$((first + total - 1))
echo "fill-history.sh: cloning $templates templates into hist-$first .. hist-$last"

from="$first"
while [ "$from" -le "$last" ]; do
  to=$((from + batch - 1))
  [ "$to" -le "$last" ] || to="$last"
  "${psql[@]}" -v from="$from" -v to="$to" -v last="$last" -v swept="$swept" <<'SQL'
BEGIN;
CREATE TEMP TABLE tpl ON COMMIT DROP AS
  SELECT row_number() OVER (ORDER BY execution_id) - 1 AS k, execution_id AS tid
  FROM executions
  WHERE status = 'COMPLETED' AND parent_id IS NULL AND execution_id NOT LIKE 'hist-%';
-- Clone n of template n mod T, shifted so it closed (last - n + 1) / 2 s before the oldest
-- template was created.
CREATE TEMP TABLE m ON COMMIT DROP AS
  SELECT g AS n, 'hist-' || g AS id, t.tid,
    (SELECT min(created_at) FROM executions WHERE execution_id IN (SELECT tid FROM tpl))
      - (:last - g + 1) * 500 - e.closed_at AS shift
  FROM generate_series(:from::bigint, :to::bigint) g
  JOIN tpl t ON t.k = g % (SELECT count(*) FROM tpl)
  JOIN executions e ON e.execution_id = t.tid;
INSERT INTO executions (execution_id, run, root_id, parent_id, workflow, version,
    definition_hash, status, schedule_id, created_at, updated_at, closed_at, last_seq,
    delete_after)
  SELECT m.id, e.run, m.id, NULL, e.workflow, e.version, e.definition_hash, e.status,
    e.schedule_id, e.created_at + m.shift, e.updated_at + m.shift, e.closed_at + m.shift,
    e.last_seq, e.delete_after + m.shift
  FROM m JOIN executions e ON e.execution_id = m.tid;
INSERT INTO history_events (execution_id, run, seq, event_type, step, origin, payload,
    timestamp)
  SELECT m.id, h.run, h.seq, h.event_type, h.step, h.origin,
    replace(h.payload, '"' || m.tid || '"', '"' || m.id || '"'), h.timestamp + m.shift
  FROM m JOIN history_events h ON h.execution_id = m.tid;
INSERT INTO owners (execution_id, root_id, node_id, epoch, since)
  SELECT m.id, m.id, o.node_id, o.epoch, o.since + m.shift
  FROM m JOIN owners o ON o.execution_id = m.tid WHERE :swept = 0;
INSERT INTO task_queue (execution_id, run, unit_key, attempt, offer, task, task_version, input,
    idempotency_key, state, claimed_by, session, token, claim_count, created_at, claimed_at,
    updated_at, worker_id, language)
  SELECT m.id, q.run, q.unit_key, q.attempt, q.offer, q.task, q.task_version, q.input,
    replace(q.idempotency_key, m.tid || ':', m.id || ':'), q.state, q.claimed_by, q.session,
    md5(m.id || q.token), q.claim_count, q.created_at + m.shift, q.claimed_at + m.shift,
    q.updated_at + m.shift, q.worker_id, q.language
  FROM m JOIN task_queue q ON q.execution_id = m.tid
  WHERE :swept = 0 AND q.state = 'done'
  ORDER BY m.n, q.id;
INSERT INTO inbox (execution_id, kind, token, payload, created_at, done_at, result, request_id)
  SELECT m.id, i.kind, md5(m.id || i.token),
    CASE WHEN i.token IS NULL THEN i.payload
      ELSE replace(i.payload, i.token, md5(m.id || i.token)) END,
    i.created_at + m.shift, i.done_at + m.shift, i.result, i.request_id
  FROM m JOIN inbox i ON i.execution_id = m.tid
  WHERE :swept = 0 AND i.done_at IS NOT NULL
  ORDER BY m.n, i.seq;
COMMIT;
SQL
  echo "  hist-$to"
  from=$((to + 1))
done
"${psql[@]}" -c "ANALYZE"
"${psql[@]}" -c "SELECT (SELECT count(*) FROM executions) AS executions,
  (SELECT count(*) FROM history_events) AS events, (SELECT count(*) FROM owners) AS owners,
  (SELECT count(*) FROM task_queue) AS task_rows, (SELECT count(*) FROM inbox) AS inbox"
