#!/usr/bin/env bash
# Runs the chaos suite (the `cluster_*` end-to-end tests of services/orbit: owner kill and
# pause, frontend loss, timers, examples, PostgreSQL restart) several times in a row and
# prints one line per run (binary results and duration), stopping at the first failure.
#
#   scripts/chaos.sh                 10 runs of every cluster_* binary
#   CHAOS_RUNS=3 scripts/chaos.sh    3 runs
#   CHAOS_SKIP="cluster_pg_restart" scripts/chaos.sh
#                                    skip binaries (cluster_pg_restart stops and starts the
#                                    PostgreSQL server of scripts/pg.sh: skip it where that
#                                    server is shared with others)
#   CHAOS_HOGS=2 scripts/chaos.sh    also keep 2 busy-looping processes (nice 10) running
#                                    for the whole loop, to try it on a loaded machine
#
# Needs PostgreSQL (`eval "$(scripts/pg.sh env)"`). Logs: target/chaos/run-<n>-<binary>.log;
# the failing topology's service logs are kept in $TMPDIR/orbit-logs-* (see
# services/orbit/tests/common/cluster.rs).
set -euo pipefail
cd "$(dirname "$0")/.."

runs="${CHAOS_RUNS:-10}"
skip=" ${CHAOS_SKIP:-} "
hogs="${CHAOS_HOGS:-0}"
out=target/chaos
mkdir -p "$out"

binaries=()
for f in services/orbit/tests/cluster_*.rs; do
  b="$(basename "$f" .rs)"
  case "$skip" in *" $b "*) continue ;; esac
  binaries+=("$b")
done
test_args=()
for b in "${binaries[@]}"; do test_args+=(--test "$b"); done

cargo test -p orbit --locked "${test_args[@]}" --no-run

hog_pids=()
stop_hogs() { [ ${#hog_pids[@]} -eq 0 ] || kill "${hog_pids[@]}" 2>/dev/null || true; }
trap stop_hogs EXIT
for ((h = 0; h < hogs; h++)); do
  # Bounded: each hog ends by itself after 2 hours even if this script is killed.
  timeout 7200 nice -n 10 sh -c 'while :; do :; done' &
  hog_pids+=($!)
done

total_start=$SECONDS
for ((run = 1; run <= runs; run++)); do
  start=$SECONDS
  line="run $run:"
  for b in "${binaries[@]}"; do
    b_start=$SECONDS
    log="$out/run-$run-$b.log"
    if ! cargo test -p orbit --locked --test "$b" >"$log" 2>&1; then
      echo "$line $b FAILED after $((SECONDS - b_start)) s (load: $(cut -d' ' -f1-3 /proc/loadavg)); see $log"
      grep -E "panicked|still owned|FAILED|logs of the topology" "$log" | head -20 || true
      exit 1
    fi
    passed="$(grep -Eo '[0-9]+ passed' "$log" | awk '{s += $1} END {print s + 0}')"
    line="$line $b ${passed}ok $((SECONDS - b_start))s,"
  done
  echo "$line total $((SECONDS - start)) s, load $(cut -d' ' -f1-3 /proc/loadavg)"
done
echo "$runs runs of ${#binaries[@]} binaries passed in $((SECONDS - total_start)) s"
