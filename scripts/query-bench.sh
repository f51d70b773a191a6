#!/usr/bin/env bash
# Queries over N executions (default 1,000,000) on PostgreSQL and on an `orbit dev` SQLite
# file, through the real server's gRPC API (docs/benchmarks.md, "Queries over 1,000,000
# executions"; docs/queries.md).
#
#   scripts/query-bench.sh [--executions N] [--runs R] [--batch B] [--dir DIR]
#                          [--backend both|postgres|sqlite] [--keep]
#
# For each backend:
# 1. an empty schema (`orbit migrate up`; PostgreSQL: a fresh database `query_bench` on the
#    server of scripts/pg.sh, started when needed with ORBIT_PG_PORT);
# 2. N projection rows cloned in SQL (one statement per batch of B, default 100,000):
#    20 workflows `wf-0..19`, 3 versions, statuses 70% COMPLETED, 12% RUNNING, 12%
#    FAILED, 4% CANCELLED, 2% TIMED_OUT, created over 30 days, closed 1 s to ~3 h later,
#    failed runs with one of 5 `failed_step`s and 4 `error_code`s, every 20th from one of
#    1,000 schedules, every 10th a child of one of 10,000 parents, and the selective key:
#    46 FAILED executions whose failed step is `refund` and error code `REFUND_DECLINED`
#    (no other row has either); and their search attributes (`execution_search`): three on
#    every execution — `customer` (keyword, 50,000 values, 20 executions each), `amount`
#    (double), `tier` (int 0..4) — and on every 100th also `note` (text), `vip` (bool),
#    `due` (datetime) and `tags` (keyword_list, two elements), the seven declared in
#    `search_attributes` as a registration would; then ANALYZE;
# 3. the server: `orbit dev --db FILE` or `orbit frontend --database-url URL --insecure`;
# 4. through its API (Python grpcio from $ORBIT_PYTHON, requests encoded by hand so the
#    installed SDK's generated code does not matter), each timed on the client:
#    (a) ListExecutions `failed_step = 'refund' AND workflow STARTS_WITH 'wf-'` (46 matches)
#        `customer = 'c-4242' AND amount > 10` (20 matches, two search attributes) and
#        `amount BETWEEN 10.0 AND 10.02` (30 matches, a range on a double) R times each
#        (default 200): p50, p99, max;
#    (b) CountExecutions grouped by status (every row) 5 times: each time;
# 5. EXPLAIN of one selective condition per system attribute and per search-attribute type
#    (the condition the server compiles), straight on the database: the index each uses.
#
# Stops by itself: every server and psql/sqlite3 call is bounded, servers are killed on
# exit. --keep keeps the SQLite file and the PostgreSQL database. Needs target/debug/orbit
# ($ORBIT), sqlite3, psql. ~1 GB of disk per backend at 1,000,000.
set -euo pipefail

repo="$(cd "$(dirname "$0")/.." && pwd)"
total=1000000
runs=200
batch=100000
dir="$repo/target/query-bench"
backend=both
keep=0
orbit="${ORBIT:-$repo/target/debug/orbit}"
python="${ORBIT_PYTHON:-python3}"
while [ $# -gt 0 ]; do
  case "$1" in
    --executions) total="$2"; shift 2 ;;
    --runs) runs="$2"; shift 2 ;;
    --batch) batch="$2"; shift 2 ;;
    --dir) dir="$2"; shift 2 ;;
    --backend) backend="$2"; shift 2 ;;
    --keep) keep=1; shift ;;
    -h | --help) sed -n '2,34p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "query-bench.sh: unknown argument $1" >&2; exit 2 ;;
  esac
done
mkdir -p "$dir"
pids=()
cleanup() {
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
  if [ "$keep" = 0 ]; then rm -f "$dir/orbit.db" "$dir/orbit.db-wal" "$dir/orbit.db-shm"; fi
}
trap cleanup EXIT
free_port() { "$python" -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }

# The rows of clones $from..$to. `$g` is a clone's number; the text is the same on both
# backends but for the series (SQLite's `generate_series` table-valued function).
fill_sql() {
  local series="$1" g="$2" span=$((30 * 86400000)) t0=1764547200000 # 2025-12-01T00:00:00Z
  cat <<SQL
INSERT INTO executions (execution_id, run, root_id, parent_id, workflow, version,
    definition_hash, status, schedule_id, created_at, updated_at, closed_at, last_seq,
    failed_step, error_code)
SELECT id, 1, CASE WHEN child THEN parent ELSE id END, CASE WHEN child THEN parent END,
    workflow, version, 'sha256:bench', status,
    CASE WHEN n % 20 = 0 THEN 'sched-' || (n / 20 % 1000) END,
    created, COALESCE(closed, created), closed, 5,
    CASE WHEN status = 'FAILED' THEN
      CASE WHEN n % 22222 = 7 THEN 'refund' ELSE 'step-' || (n % 5) END END,
    CASE WHEN n % 22222 = 7 THEN 'REFUND_DECLINED'
         WHEN status = 'FAILED' THEN 'E' || (n % 4)
         WHEN status = 'TIMED_OUT' THEN 'TIMEOUT' END
FROM (
  SELECT n, 'q-' || n AS id, n % 10 = 1 AS child, 'q-' || (n / 10 % 10000 * 10) AS parent,
      'wf-' || (n % 20) AS workflow, 'v' || (n % 3 + 1) AS version,
      CASE WHEN n % 22222 = 7 THEN 'FAILED'
           WHEN n % 50 < 35 THEN 'COMPLETED' WHEN n % 50 < 41 THEN 'RUNNING'
           WHEN n % 50 < 47 THEN 'FAILED' WHEN n % 50 < 49 THEN 'CANCELLED'
           ELSE 'TIMED_OUT' END AS status,
      $t0 + (n * 2591) % $span AS created,
      CASE WHEN n % 22222 = 7 OR NOT (n % 50 >= 35 AND n % 50 < 41)
           THEN $t0 + (n * 2591) % $span + 1000 + (n * 7919) % 10000000 END AS closed
  FROM (SELECT $g AS n FROM $series) s
) x;
SQL
}

# The search attributes of clones $from..$to (see the header), and the catalog rows.
fill_search_sql() {
  local series="$1" g="$2" t0=1764547200000
  cat <<SQL
INSERT INTO execution_search (execution_id, name, kw, ival, num, ts, flag)
SELECT 'q-' || n, a.name,
    CASE a.name WHEN 'customer' THEN 'c-' || (n % 50000)
                WHEN 'note' THEN 'note ' || (n % 1000)
                WHEN 'tags' THEN 'tag-' || (n % 7)
                WHEN 'tags2' THEN 'tag-' || (n % 11 + 7) END,
    CASE a.name WHEN 'tier' THEN n % 5 END,
    CASE a.name WHEN 'amount' THEN (n * 37 % 100000) / 100.0 END,
    CASE a.name WHEN 'due' THEN $t0 + (n * 7919) % 2592000000 END,
    CASE a.name WHEN 'vip' THEN n % 200 = 0 END
FROM (SELECT $g AS n FROM $series) s
CROSS JOIN (SELECT 'customer' AS name, 0 AS every UNION ALL SELECT 'amount', 0
    UNION ALL SELECT 'tier', 0 UNION ALL SELECT 'note', 1 UNION ALL SELECT 'vip', 1
    UNION ALL SELECT 'due', 1 UNION ALL SELECT 'tags', 1 UNION ALL SELECT 'tags2', 1) a
WHERE a.every = 0 OR n % 100 = 0;
SQL
}

catalog_sql() {
  cat <<'SQL'
UPDATE execution_search SET name = 'tags' WHERE name = 'tags2';
INSERT INTO search_attributes (name, attr_type, workflow, created_at) VALUES
  ('customer', 'keyword', 'wf-0', 0), ('amount', 'double', 'wf-0', 0), ('tier', 'int', 'wf-0', 0),
  ('note', 'text', 'wf-0', 0), ('vip', 'bool', 'wf-0', 0), ('due', 'datetime', 'wf-0', 0),
  ('tags', 'keyword_list', 'wf-0', 0);
SQL
}

# One query per system attribute, each selective (few matches), for EXPLAIN.
explain_queries() {
  cat <<'SQL'
execution_id|execution_id = 'q-4242'
workflow|workflow = 'wf-7' AND created_at > 1766966400000
version|version = 'v2' AND created_at > 1766966400000
status|status = 'TIMED_OUT' AND created_at > 1766966400000
created|created_at BETWEEN 1765000000000 AND 1765000600000
updated|updated_at > 1767139200000 AND workflow = 'wf-3'
closed|closed_at BETWEEN 1765000000000 AND 1765000600000
duration|(closed_at - created_at) > 9999000
schedule|schedule_id = 'sched-42'
parent|parent_id = 'q-12340'
root|root_id = 'q-777'
failed_step|failed_step = 'refund'
error_code|error_code = 'REFUND_DECLINED'
SQL
  # Search attributes: the condition libs/query compiles for one predicate of each type —
  # on SQLite the query's driver as an `IN` list (libs/query/src/compile.rs), else EXISTS.
  local e="FROM execution_search s WHERE s.execution_id = executions.execution_id AND s.name"
  local d="execution_id IN (SELECT s.execution_id FROM execution_search s WHERE s.name"
  [ "$1" = sqlite ] || d="EXISTS (SELECT 1 $e"
  cat <<SQL
keyword|$d = 'customer' AND s.kw = 'c-4242')
text|$d = 'note' AND s.kw = 'note 42')
int|$d = 'tier' AND s.ival = 3) AND created_at > 1767139200000
double|$d = 'amount' AND s.num BETWEEN 10.0 AND 10.02)
bool|EXISTS (SELECT 1 $e = 'vip' AND s.flag = true) AND workflow = 'wf-7'
datetime|$d = 'due' AND s.ts BETWEEN 1765000000000 AND 1765000600000)
keyword_list|$d = 'tags' AND s.kw = 'tag-17') AND created_at > 1767139200000
SQL
}

# The client: N list calls and 5 grouped counts through gRPC; prints the figures.
CLIENT='
import sys, time, grpc
target, runs = sys.argv[1], int(sys.argv[2])
def enc(field, text):
    b = text.encode(); out = bytearray([field << 3 | 2]); n = len(b)
    while True:
        out.append((n & 0x7F) | (0x80 if n > 127 else 0)); n >>= 7
        if not n: break
    return bytes(out) + b
def fields(buf):
    i = 0; out = []
    while i < len(buf):
        key = 0; shift = 0
        while True:
            c = buf[i]; i += 1; key |= (c & 0x7F) << shift; shift += 7
            if c < 128: break
        f, wire = key >> 3, key & 7
        if wire == 0:
            v = 0; shift = 0
            while True:
                c = buf[i]; i += 1; v |= (c & 0x7F) << shift; shift += 7
                if c < 128: break
            out.append((f, v))
        elif wire == 2:
            n = 0; shift = 0
            while True:
                c = buf[i]; i += 1; n |= (c & 0x7F) << shift; shift += 7
                if c < 128: break
            out.append((f, buf[i:i + n])); i += n
        else:
            raise ValueError("wire type %d" % wire)
    return out
ch = grpc.insecure_channel(target)
ident = lambda b: b
lst = ch.unary_unary("/orbit.v1.WorkflowService/ListExecutions", request_serializer=ident, response_deserializer=ident)
cnt = ch.unary_unary("/orbit.v1.WorkflowService/CountExecutions", request_serializer=ident, response_deserializer=ident)
for text in ["failed_step = \x27refund\x27 AND workflow STARTS_WITH \x27wf-\x27",
             "customer = \x27c-4242\x27 AND amount > 10",
             "amount BETWEEN 10.0 AND 10.02"]:
    q = enc(11, text) + bytes([9 << 3, 100])
    found = sum(1 for f, _ in fields(lst(q, timeout=60)) if f == 1)
    times = []
    for _ in range(runs):
        t = time.perf_counter(); lst(q, timeout=60); times.append((time.perf_counter() - t) * 1000)
    times.sort()
    pct = lambda p: times[min(len(times) - 1, int(round(p / 100 * len(times) + 0.5)) - 1)]
    print("  list `%s` (%d matches) x%d: p50 %.1f ms, p99 %.1f ms, max %.1f ms" % (text, found, runs, pct(50), pct(99), times[-1]))
counts = []
for _ in range(5):
    t = time.perf_counter(); r = cnt(enc(2, "status"), timeout=120); counts.append((time.perf_counter() - t) * 1000)
top = fields(r)
total = [v for f, v in top if f == 1][0]
groups = []
for f, g in top:
    if f == 2:
        parts = fields(g)
        groups.append("%s %d" % ([v.decode() for k, v in parts if k == 1][0], [v for k, v in parts if k == 2][0]))
print("  count by status (%d executions: %s): %s ms" % (total, ", ".join(groups), ", ".join("%.0f" % c for c in counts)))
'

wait_ready() { # address
  for _ in $(seq 1 300); do
    "$orbit" workflow list --address "$1" >/dev/null 2>&1 && return 0
    sleep 0.2
  done
  echo "query-bench.sh: the server at $1 did not become ready" >&2
  exit 1
}

fill() { # q-function-name series-template column
  local run_sql="$1" from=1 to started
  started=$(date +%s)
  while [ "$from" -le "$total" ]; do
    to=$((from + batch - 1))
    [ "$to" -le "$total" ] || to="$total"
    if [ "$run_sql" = sq ]; then
      fill_sql "generate_series($from, $to)" value | sq
      fill_search_sql "generate_series($from, $to)" value | sq
    else
      fill_sql "generate_series($from::bigint, $to::bigint) AS value" value | pq
      fill_search_sql "generate_series($from::bigint, $to::bigint) AS value" value | pq
    fi
    from=$((to + 1))
  done
  catalog_sql | "$run_sql"
  echo "  filled $total executions and their search attributes in $(( $(date +%s) - started )) s"
}

explain() { # q-function-name prefix dialect
  while IFS='|' read -r attr cond; do
    [ -n "$attr" ] || continue
    local plan
    plan=$(echo "$2 SELECT execution_id FROM executions WHERE $cond;" | "$1" | tr '\n' ' ' | sed 's/  */ /g')
    printf '  %-12s %s\n' "$attr" "$(echo "$plan" | grep -oE '(USING (COVERING )?INDEX [a-z_0-9]+|SEARCH [a-z_0-9]+ USING INTEGER PRIMARY KEY|Index (Only )?Scan( Backward)? using [a-z_0-9]+|Bitmap Index Scan on [a-z_0-9]+|Seq Scan on [a-z_0-9]+|SCAN [a-z_0-9]+)' | sort -u | tr '\n' ';')"
  done < <(explain_queries "$3")
}

if [ "$backend" = both ] || [ "$backend" = sqlite ]; then
  echo "SQLite (orbit dev, $dir/orbit.db)"
  rm -f "$dir/orbit.db" "$dir/orbit.db-wal" "$dir/orbit.db-shm"
  sq() { timeout 900 sqlite3 -bail -cmd ".timeout 60000" "$dir/orbit.db"; }
  timeout 120 "$orbit" migrate up --db "$dir/orbit.db" >/dev/null
  fill sq
  echo "ANALYZE;" | sq
  port=$(free_port)
  timeout 1800 "$orbit" dev --db "$dir/orbit.db" --listen "127.0.0.1:$port" --admin-listen off --log warn >/dev/null 2>&1 &
  pids+=($!)
  wait_ready "127.0.0.1:$port"
  timeout 900 "$python" -c "$CLIENT" "127.0.0.1:$port" "$runs"
  echo "  EXPLAIN QUERY PLAN (per attribute):"
  explain sq "EXPLAIN QUERY PLAN" sqlite
  kill "${pids[-1]}" 2>/dev/null || true
fi

if [ "$backend" = both ] || [ "$backend" = postgres ]; then
  admin=$("$repo/scripts/pg.sh" url)
  "$repo/scripts/pg.sh" start >/dev/null
  url="${admin%/postgres}/query_bench"
  echo "PostgreSQL ($url)"
  timeout 120 psql "$admin" -X -q -v ON_ERROR_STOP=1 -c "DROP DATABASE IF EXISTS query_bench" -c "CREATE DATABASE query_bench"
  pq() { timeout 900 psql "$url" -X -q -tA -v ON_ERROR_STOP=1; }
  timeout 120 "$orbit" migrate up --database-url "$url" >/dev/null
  fill pq
  echo "VACUUM ANALYZE executions; VACUUM ANALYZE execution_search;" | pq
  port=$(free_port)
  timeout 1800 "$orbit" frontend --database-url "$url" --listen "127.0.0.1:$port" --insecure --admin-listen off --log warn >/dev/null 2>&1 &
  pids+=($!)
  wait_ready "127.0.0.1:$port"
  timeout 900 "$python" -c "$CLIENT" "127.0.0.1:$port" "$runs"
  echo "  EXPLAIN (per attribute):"
  explain pq "EXPLAIN" postgres
  kill "${pids[-1]}" 2>/dev/null || true
  if [ "$keep" = 0 ]; then
    timeout 120 psql "$admin" -X -q -c "DROP DATABASE IF EXISTS query_bench" || true
  fi
fi
