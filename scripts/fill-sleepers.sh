#!/usr/bin/env bash
# Puts N sleeping executions on one owner, fast, for measuring the owner's memory and a
# common wake (docs/benchmarks.md, "Sleeping executions: owner memory and a common wake").
#
#   scripts/fill-sleepers.sh --address HOST:PORT (--sqlite FILE | --database-url URL)
#       [--executions N] [--due D] [--due-at EPOCH_S | --due-in S] [--batch B]
#
# 1. Through the API of the running server at --address (`orbit dev`, or a frontend of the
#    split): registers `bench-sleep` (one `until: ${{ input.at }}` step, no task) and starts
#    two real templates, `sleep-tpl-due` (sleeping until the due instant T) and
#    `sleep-tpl-far` (sleeping for a year), then waits until both have their timer row.
# 2. Directly in the store (sqlite3 on the `orbit dev` file, psql on PostgreSQL): clones the
#    templates' rows under new ids `sleep-<n>` (n = 1..N): clones 1..D of `sleep-tpl-due`,
#    the others of `sleep-tpl-far`. A sleeping execution is exactly these rows, so the
#    clones have the shapes the server writes:
#      executions      one row (root of its own tree, RUNNING, last_seq 3);
#      history_events  WorkflowCreated (execution id and input's `n` replaced),
#                      WorkflowStarted, TimerStarted (the template's fire_at);
#      owners          one row on the template's node at the template's epoch;
#      timers          one `next` row at the template's fire_at.
#    Each batch of B clones (default 100,000) is one transaction; ANALYZE runs at the end.
#
# Then restart the owner with the same node id (`orbit dev` on the same file, or the split's
# owner with its --node-id): it resumes the N + 2 executions as its own. At T the
# scheduler fires the D due timers at once; the others stay asleep.
#
# On the split run ONE owner (the clones take the templates' owner). Defaults: N = 1,000,000,
# D = 10,000, T = now + 900 s (--due-in). Needs the orbit binary ($ORBIT, default
# target/debug/orbit of this checkout) and sqlite3 or psql. 1,000,000 clones take 17-93 s
# and ~1.1 GB (SQLite) / ~1.7 GB (PostgreSQL); drop the file or database afterwards.
set -euo pipefail

total=1000000
due=10000
due_at=""
due_in=900
batch=100000
address=""
sqlite=""
url=""
orbit="${ORBIT:-$(dirname "$0")/../target/debug/orbit}"
while [ $# -gt 0 ]; do
  case "$1" in
    --address) address="$2"; shift 2 ;;
    --sqlite) sqlite="$2"; shift 2 ;;
    --database-url) url="$2"; shift 2 ;;
    --executions) total="$2"; shift 2 ;;
    --due) due="$2"; shift 2 ;;
    --due-at) due_at="$2"; shift 2 ;;
    --due-in) due_in="$2"; shift 2 ;;
    --batch) batch="$2"; shift 2 ;;
    -h | --help) sed -n '2,29p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "fill-sleepers.sh: unknown argument $1" >&2; exit 2 ;;
  esac
done
[ -n "$address" ] || { echo "fill-sleepers.sh: --address is required" >&2; exit 2; }
if { [ -n "$sqlite" ] && [ -n "$url" ]; } || { [ -z "$sqlite" ] && [ -z "$url" ]; }; then
  echo "fill-sleepers.sh: give exactly one of --sqlite FILE and --database-url URL" >&2
  exit 2
fi
[ "$due" -le "$total" ] || { echo "fill-sleepers.sh: --due exceeds --executions" >&2; exit 2; }
[ -n "$due_at" ] || due_at=$(($(date +%s) + due_in))
far_at=$((due_at + 365 * 86400))
iso() { date -u -d "@$1" +%Y-%m-%dT%H:%M:%S.000Z; }

# --- 1. the templates, through the API --------------------------------------------------
wf="$(mktemp --suffix .yaml)"
trap 'rm -f "$wf"' EXIT
cat >"$wf" <<'EOF'
name: bench-sleep
version: "1"
steps:
  - { id: nap, until: "${{ input.at }}" }
output: "${{ input.n }}"
EOF
"$orbit" workflow register --address "$address" "$wf" >/dev/null
"$orbit" execution start --address "$address" bench-sleep --id sleep-tpl-due \
  --input "{\"n\":0,\"at\":\"$(iso "$due_at")\"}" >/dev/null
"$orbit" execution start --address "$address" bench-sleep --id sleep-tpl-far \
  --input "{\"n\":0,\"at\":\"$(iso "$far_at")\"}" >/dev/null

# q SQL: one statement's result; qs: statements on stdin.
if [ -n "$sqlite" ]; then
  q() { sqlite3 -cmd ".timeout 60000" "$sqlite" "$1"; }
  qs() { sqlite3 -cmd ".timeout 60000" -bail "$sqlite"; }
else
  q() { psql "$url" -X -q -tA -v ON_ERROR_STOP=1 -c "$1"; }
  qs() { psql "$url" -X -q -tA -v ON_ERROR_STOP=1; }
fi
for _ in $(seq 1 100); do
  [ "$(q "SELECT count(*) FROM timers
    WHERE execution_id IN ('sleep-tpl-due', 'sleep-tpl-far')")" = 2 ] && break
  sleep 0.2
done
echo "fill-sleepers.sh: templates sleep until $(iso "$due_at") (due) and $(iso "$far_at") (far)"
echo "fill-sleepers.sh: cloning sleep-1 .. sleep-$total ($due due at $due_at s)"

# --- 2. the clones, in SQL --------------------------------------------------------------
# One statement text for both backends: $SERIES (the batch's numbers as `g`), $DUE and the
# column `$1` (a clone's number) differ only in spelling.
clone_sql() {
  local g="$1" n="$1"
  cat <<SQL
BEGIN;
INSERT INTO executions (execution_id, run, root_id, parent_id, workflow, version,
    definition_hash, status, schedule_id, created_at, updated_at, closed_at, last_seq,
    delete_after)
  SELECT 'sleep-' || $n, e.run, 'sleep-' || $n, NULL, e.workflow, e.version,
    e.definition_hash, e.status, e.schedule_id, e.created_at, e.updated_at, e.closed_at,
    e.last_seq, e.delete_after
  FROM $SERIES g JOIN executions e
    ON e.execution_id = CASE WHEN $g <= $DUE THEN 'sleep-tpl-due' ELSE 'sleep-tpl-far' END;
INSERT INTO history_events (execution_id, run, seq, event_type, step, origin, payload,
    timestamp)
  SELECT 'sleep-' || $n, h.run, h.seq, h.event_type, h.step, h.origin,
    replace(replace(h.payload, '"execution_id":"' || h.execution_id || '"',
      '"execution_id":"sleep-' || $n || '"'), '"n":0', '"n":' || $n),
    h.timestamp
  FROM $SERIES g JOIN history_events h
    ON h.execution_id = CASE WHEN $g <= $DUE THEN 'sleep-tpl-due' ELSE 'sleep-tpl-far' END;
INSERT INTO owners (execution_id, root_id, node_id, epoch, since)
  SELECT 'sleep-' || $n, 'sleep-' || $n, o.node_id, o.epoch, o.since
  FROM $SERIES g JOIN owners o
    ON o.execution_id = CASE WHEN $g <= $DUE THEN 'sleep-tpl-due' ELSE 'sleep-tpl-far' END;
INSERT INTO timers (execution_id, timer_key, run, fire_at, payload)
  SELECT 'sleep-' || $n, t.timer_key, t.run, t.fire_at, t.payload
  FROM $SERIES g JOIN timers t
    ON t.execution_id = CASE WHEN $g <= $DUE THEN 'sleep-tpl-due' ELSE 'sleep-tpl-far' END;
COMMIT;
SQL
}

started=$(date +%s)
from=1
while [ "$from" -le "$total" ]; do
  to=$((from + batch - 1))
  [ "$to" -le "$total" ] || to="$total"
  if [ -n "$sqlite" ]; then
    SERIES="generate_series($from, $to)" DUE="$due"
    clone_sql g.value | qs
  else
    SERIES="generate_series($from::bigint, $to::bigint)" DUE="$due"
    clone_sql g | qs
  fi
  echo "  sleep-$to ($(( $(date +%s) - started )) s)"
  from=$((to + 1))
done
q "ANALYZE"
q "SELECT 'executions ' || (SELECT count(*) FROM executions) || ', events ' ||
  (SELECT count(*) FROM history_events) || ', owners ' || (SELECT count(*) FROM owners) ||
  ', timers ' || (SELECT count(*) FROM timers)"
echo "fill-sleepers.sh: done in $(( $(date +%s) - started )) s; restart the owner with the same node id"
