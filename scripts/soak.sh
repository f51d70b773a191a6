#!/usr/bin/env bash
# A bounded soak of `orbit dev`: a fixed count of 3-step executions at a fixed rate, with
# retention shortened so the sweeper's steady state shows within minutes. Every SAMPLE
# seconds it prints the row count of every table, the SQLite file size (db + WAL) and the
# server's RSS (from /proc), then a verdict: are they flat once the warm-up is over?
#
#   scripts/soak.sh [--minutes M] [--rate R] [--sample S] [--warmup W] [--retention D]
#                   [--done-grace D] [--sweep-interval D] [--bin PATH] [--dir DIR]
#
# Defaults: 30 minutes at 40 executions/s (72,000 executions), samples every 15 s, warm-up
# 5 minutes, retention 1m, done-grace 15s, sweep every 5s, the binary target/release/orbit
# (build it first: cargo build --release -p orbit). After the load, it keeps sampling for
# retention + done-grace + 2 sweeps to show the tables drain. Exit status 0 when flat,
# 1 when something grew, 2 on a setup error. Everything runs on loopback; the state and
# logs stay in DIR (a fresh /tmp directory by default).
set -euo pipefail
repo="$(cd "$(dirname "$0")/.." && pwd)"

minutes=30 rate=40 sample=15 warmup=5 retention=1m grace=15s sweep=5s
bin="${ORBIT_BIN:-$repo/target/release/orbit}" dir=""
while [ $# -gt 0 ]; do
  case "$1" in
    --minutes) minutes="$2"; shift 2 ;;
    --rate) rate="$2"; shift 2 ;;
    --sample) sample="$2"; shift 2 ;;
    --warmup) warmup="$2"; shift 2 ;;
    --retention) retention="$2"; shift 2 ;;
    --done-grace) grace="$2"; shift 2 ;;
    --sweep-interval) sweep="$2"; shift 2 ;;
    --bin) bin="$2"; shift 2 ;;
    --dir) dir="$2"; shift 2 ;;
    *) echo "unknown option $1 (see the header of $0)" >&2; exit 2 ;;
  esac
done
[ -x "$bin" ] || { echo "no orbit binary at $bin: cargo build --release -p orbit" >&2; exit 2; }
dir="${dir:-$(mktemp -d /tmp/orbit-soak.XXXXXX)}"
mkdir -p "$dir"
port="$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')"
executions="$(python3 -c "print(int($rate * $minutes * 60))")"

"$bin" dev --db "$dir/soak.db" --listen "127.0.0.1:$port" --log warn \
  --retention "$retention" --done-grace "$grace" --sweep-interval "$sweep" \
  >"$dir/dev.log" 2>&1 &
dev_pid=$!
bench_pid=""
cleanup() {
  [ -n "$bench_pid" ] && kill "$bench_pid" 2>/dev/null || true
  kill "$dev_pid" 2>/dev/null || true
  wait 2>/dev/null || true
}
trap cleanup EXIT

for _ in $(seq 1 100); do
  python3 -c "import socket; socket.create_connection(('127.0.0.1', $port), 0.2)" 2>/dev/null && break
  sleep 0.1
done

echo "soak: $executions executions at $rate/s over $minutes min; retention $retention," \
  "done-grace $grace, sweep every $sweep; server pid $dev_pid; state in $dir"
"$bin" bench --address "http://127.0.0.1:$port" --executions "$executions" --rate "$rate" \
  --steps 3 --concurrency 512 --workers 2 >"$dir/bench.out" 2>"$dir/bench.err" &
bench_pid=$!

set +e
python3 - "$dir/soak.db" "$dev_pid" "$bench_pid" "$sample" "$warmup" "$retention" "$grace" \
  "$sweep" <<'PY'
import os, re, sqlite3, sys, time

db, dev, bench, sample, warmup = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), float(sys.argv[4]), float(sys.argv[5])

def secs(d):
    units = {"d": 86400, "h": 3600, "m": 60, "s": 1, "ms": 0.001}
    return sum(float(n) * units[u] for n, u in re.findall(r"(\d+)(ms|d|h|m|s)", d))

drain = secs(sys.argv[6]) + secs(sys.argv[7]) + 2 * secs(sys.argv[8]) + sample
tables = ["executions", "history_events", "inbox", "task_queue", "timers", "owners"]
cols = tables + ["pending_inbox", "db_mb", "rss_mb"]

def bench_running():
    try:
        with open(f"/proc/{bench}/stat") as f:
            return f.read().split()[2] != "Z"
    except OSError:
        return False

def snapshot():
    con = sqlite3.connect(f"file:{db}?mode=ro", uri=True, timeout=10)
    row = {t: con.execute(f"SELECT COUNT(*) FROM {t}").fetchone()[0] for t in tables}
    row["pending_inbox"] = con.execute("SELECT COUNT(*) FROM inbox WHERE done_at IS NULL").fetchone()[0]
    con.close()
    size = sum(os.path.getsize(p) for p in (db, db + "-wal") if os.path.exists(p))
    row["db_mb"] = round(size / 2**20, 1)
    with open(f"/proc/{dev}/status") as f:
        rss = int(re.search(r"VmRSS:\s+(\d+)", f.read()).group(1))
    row["rss_mb"] = round(rss / 1024, 1)
    return row

print("  t(s) " + " ".join(f"{c:>14}" for c in cols), flush=True)
start = time.time()
samples, load_end = [], None
while True:
    time.sleep(sample)
    t = time.time() - start
    try:
        row = snapshot()
    except (OSError, sqlite3.Error, AttributeError) as e:
        print(f"sample failed: {e}", flush=True)
        sys.exit(2)
    row["t"] = t
    row["load"] = load_end is None
    samples.append(row)
    print(f"{t:6.0f} " + " ".join(f"{row[c]:>14}" for c in cols) + ("" if row["load"] else "  (drain)"), flush=True)
    if load_end is None and not bench_running():
        load_end = t
    if load_end is not None and t - load_end >= drain:
        break

steady = [s for s in samples if s["load"] and s["t"] >= warmup * 60]
if len(steady) < 4:
    print(f"verdict: TOO SHORT (only {len(steady)} samples under load after the {warmup}-minute warm-up)")
    sys.exit(1)
half = len(steady) // 2
first, second = steady[:half], steady[half:]
grew = []
print(f"\nsteady state: {len(steady)} samples from {steady[0]['t']:.0f} s to {steady[-1]['t']:.0f} s")
print(f"{'':>16} {'min':>10} {'max':>10} {'1st half max':>13} {'2nd half max':>13}")
for c in cols:
    vals = [s[c] for s in steady]
    a, b = max(s[c] for s in first), max(s[c] for s in second)
    print(f"{c:>16} {min(vals):>10} {max(vals):>10} {a:>13} {b:>13}")
    # Flat: the second half of the steady window stays within 15% (plus a little slack for
    # counts that hover near zero) of the first half.
    slack = 8 if c in ("db_mb", "rss_mb") else 200
    if b > a * 1.15 + slack:
        grew.append(f"{c} {a} -> {b}")
last = samples[-1]
print(f"after the drain: " + ", ".join(f"{t}={last[t]}" for t in tables))
print("verdict: FLAT" if not grew else "verdict: GROWING: " + "; ".join(grew))
sys.exit(1 if grew else 0)
PY
status=$?
echo "--- bench"
cat "$dir/bench.out"
echo "--- server warnings/errors (last 20)"
grep -iE "warn|error" "$dir/dev.log" | tail -20 || true
exit $status
