#!/usr/bin/env bash
# Measures the web console's list endpoint (POST /ui/api/orbit.v1.WorkflowService/
# ListExecutions, what the executions page calls) on an `orbit dev` holding many
# executions. docs/benchmarks.md has the figures and the method.
#
#   scripts/console-bench.sh [TARGET=100000] [REAL=2000]
#
# 1. `orbit bench` runs REAL real executions (one task step each) into a fresh SQLite file.
# 2. Their closed rows (executions, history_events, owners) are copied with new ids
#    (`<id>-c<k>`) and earlier creation times until TARGET executions are stored: the list
#    reads the same rows and indexes a real execution leaves, at the volume of TARGET
#    (running TARGET executions through the API takes too long on a small machine).
# 3. `orbit dev` serves that file; each list request below is timed with curl 30 times
#    (first page, filters, a deep page reached with page tokens).
# Needs: a built target/debug/orbit (or ORBIT=path), sqlite3, curl, python3.
set -euo pipefail
cd "$(dirname "$0")/.."
TARGET=${1:-100000}
REAL=${2:-2000}
ORBIT=${ORBIT:-target/debug/orbit}
DIR=$(mktemp -d /tmp/orbit-console-bench.XXXXXX)
DB=${SEED_DB:-$DIR/orbit.db}
ADMIN=127.0.0.1:${ADMIN_PORT:-19733}
GRPC=127.0.0.1:${GRPC_PORT:-17733}
trap 'kill "$DEV" 2>/dev/null || true; [ -z "${KEEP:-}" ] && rm -rf "$DIR"' EXIT
DEV=

if [ -z "${SEED_DB:-}" ]; then
  echo "== $REAL real executions (orbit bench)" >&2
  "$ORBIT" bench --executions "$REAL" --steps 1 --concurrency 128 --worker-concurrency 128 --db "$DB" >&2
fi

echo "== copying closed executions up to $TARGET" >&2
sqlite3 "$DB" <<SQL
PRAGMA journal_mode=WAL;
CREATE TEMP TABLE base AS SELECT * FROM executions WHERE closed_at IS NOT NULL AND execution_id NOT LIKE '%-c%';
CREATE TEMP TABLE span AS SELECT MAX(created_at) - MIN(created_at) + 1000 AS ms, COUNT(*) AS n FROM base;
CREATE TEMP TABLE k AS WITH RECURSIVE k(n) AS (SELECT 1 WHERE (SELECT COUNT(*) FROM executions) < $TARGET UNION ALL SELECT n + 1 FROM k
  WHERE n < (($TARGET - (SELECT COUNT(*) FROM executions)) + (SELECT n FROM span) - 1) / (SELECT n FROM span))
  SELECT n FROM k;
BEGIN;
INSERT INTO executions SELECT b.execution_id || '-c' || k.n, b.run, b.root_id || '-c' || k.n,
  CASE WHEN b.parent_id IS NULL THEN NULL ELSE b.parent_id || '-c' || k.n END, b.workflow, b.version,
  b.definition_hash, b.status, b.schedule_id, b.created_at - k.n * s.ms, b.updated_at - k.n * s.ms,
  b.closed_at - k.n * s.ms, b.last_seq, b.delete_after
  FROM base b, k, span s;
INSERT INTO history_events SELECT h.execution_id || '-c' || k.n, h.run, h.seq, h.event_type, h.step, h.origin,
  h.payload, h.timestamp - k.n * s.ms FROM history_events h JOIN base b USING (execution_id), k, span s;
INSERT INTO owners SELECT o.execution_id || '-c' || k.n, o.root_id || '-c' || k.n, o.node_id, o.epoch, o.since
  FROM owners o JOIN base b USING (execution_id), k;
COMMIT;
-- The last copy overshoots: drop its oldest rows (and their history) down to TARGET.
CREATE TEMP TABLE extra AS SELECT execution_id FROM executions WHERE execution_id LIKE '%-c%'
  ORDER BY created_at LIMIT MAX(0, (SELECT COUNT(*) FROM executions) - $TARGET);
BEGIN;
DELETE FROM history_events WHERE execution_id IN (SELECT execution_id FROM extra);
DELETE FROM owners WHERE execution_id IN (SELECT execution_id FROM extra);
DELETE FROM executions WHERE execution_id IN (SELECT execution_id FROM extra);
COMMIT;
SQL
WORKFLOW=$(sqlite3 "$DB" 'SELECT workflow FROM executions LIMIT 1')
echo "stored: $(sqlite3 "$DB" 'SELECT status, COUNT(*) FROM executions GROUP BY 1' | tr '\n' ' ')" >&2

"$ORBIT" dev --db "$DB" --listen "$GRPC" --admin-listen "$ADMIN" --log warn >"$DIR/dev.log" 2>&1 &
DEV=$!
for _ in $(seq 1 600); do
  curl -sf "http://$ADMIN/readyz" >/dev/null 2>&1 && break
  sleep 0.1
done

list() { curl -s -o "$DIR/out.json" -w '%{time_total}\n' -X POST -H 'content-type: application/json' \
  --data "$1" "http://$ADMIN/ui/api/orbit.v1.WorkflowService/ListExecutions"; }
# The page token of the page after `pages` pages of 50 (newest first).
deep_token() {
  local body='{"pageSize":50}' token
  for _ in $(seq 1 "$1"); do
    list "$body" >/dev/null
    token=$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["nextPageToken"])' "$DIR/out.json")
    body="{\"pageSize\":50,\"pageToken\":\"$token\"}"
  done
  echo "$body"
}
measure() { # name body
  local times
  times=$(for _ in $(seq 1 30); do list "$2"; done)
  local rows
  rows=$(python3 -c 'import json,sys; print(len(json.load(open(sys.argv[1]))["executions"]))' "$DIR/out.json")
  python3 - "$1" "$rows" $times <<'PY'
import sys
name, rows, t = sys.argv[1], sys.argv[2], sorted(float(x) * 1000 for x in sys.argv[3:])
print(f"| {name} | {rows} | {t[len(t)//2]:.1f} | {t[int(len(t)*0.95)-1]:.1f} | {t[-1]:.1f} |")
PY
}
echo "| request (page of 50) | rows | p50 ms | p95 ms | max ms |"
echo "|---|---|---|---|---|"
measure "first page, no filter" '{"pageSize":50}'
measure "workflow filter" "{\"pageSize\":50,\"workflow\":\"$WORKFLOW\"}"
measure "status COMPLETED" '{"pageSize":50,"statuses":["EXECUTION_STATUS_COMPLETED"]}'
measure "status RUNNING" '{"pageSize":50,"statuses":["EXECUTION_STATUS_RUNNING"]}'
measure "status FAILED (none stored)" '{"pageSize":50,"statuses":["EXECUTION_STATUS_FAILED"]}'
measure "created in a 1-hour window" "{\"pageSize\":50,\"createdAfter\":\"$(date -u -d '-1 hour' +%FT%TZ)\"}"
measure "page 200 (after 199 page tokens)" "$(deep_token 199)"
