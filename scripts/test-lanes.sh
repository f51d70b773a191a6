#!/usr/bin/env bash
# Runs the workspace's test binaries in parallel lanes: what `cargo test --workspace` does,
# but up to ORBIT_TEST_LANES binaries at a time (default 3) instead of one after another.
# Most of the suite waits (on processes it starts, timers, PostgreSQL): one binary at a time
# kept two cores about a fifth busy for twenty minutes.
#
#   scripts/test-lanes.sh [--skip NAME]... [--alone BIN::NAME]...
#
# (after `cargo test --workspace --no-run`; ORBIT_TEST_LANES=1 runs them one at a time).
#
# Each binary runs from its package's folder, as cargo runs it, with cargo's own test
# threads; its output goes to target/test-logs/<binary>.log and is printed whole when it
# ends, so lanes never interleave. The longest binaries start first (LONG below: a list of
# names, so a stale entry costs only wall time). `--skip NAME` is passed to every binary;
# `--alone BIN::NAME` runs that one test as a job of its own, first, and skips it in BIN.
# Binaries that restart the shared PostgreSQL (EXCLUSIVE) run alone after the lanes; the doc
# tests run last, through cargo. Exit status 1 when any binary failed, naming them.
set -euo pipefail
cd "$(dirname "$0")/.."

lanes="${ORBIT_TEST_LANES:-3}"
skips=()
alone=()
while [ $# -gt 0 ]; do
  case "$1" in
    --skip) skips+=(--skip "$2"); shift 2 ;;
    --alone) alone+=("$2"); shift 2 ;;
    *) echo "test-lanes.sh: unknown argument $1" >&2; exit 2 ;;
  esac
done

# The binaries that take longest, in the order to start them (as measured on a 2-core VM
# when run one at a time, 2026-12-05): the rest follow in cargo's order.
LONG="cluster_batch_query sdk_conformance cluster_idle sim_vs_owner cluster_flow conformance
cluster_batches cluster_loops long_runs console cluster_handoff cluster_schedules
cluster_owner_loss bench_modes workflow_concurrency split_sqlite traces cluster_poison"

# The binaries that stop or restart the shared PostgreSQL server: each runs when no other
# binary does, after the lanes (a test beside it would see its connections closed).
EXCLUSIVE="cluster_pg_restart"

logs=target/test-logs
rm -rf "$logs"
mkdir -p "$logs"

# Every test executable with its package folder: "<dir> <exe> <name>" (cargo's JSON; no
# build happens here when `cargo test --no-run` ran before).
cargo test --workspace --locked --no-run --message-format=json 2>/dev/null | python3 -c '
import json, os, sys
for line in sys.stdin:
    m = json.loads(line)
    if m.get("reason") == "compiler-artifact" and m.get("executable") and m["profile"]["test"]:
        print(os.path.dirname(m["manifest_path"]), m["executable"], m["target"]["name"])
' >"$logs/.binaries"
[ -s "$logs/.binaries" ] || { echo "test-lanes.sh: no test binaries (build first)" >&2; exit 1; }

# The job list: one line per job, "<log name> <dir> <exe> <alone|all> [test]", longest
# first; a job of every test gets the skips.
jobs_file="$logs/.jobs"
: >"$jobs_file"
for spec in "${alone[@]}"; do
  bin="${spec%%::*}" test="${spec#*::}"
  read -r dir exe _ < <(awk -v n="$bin" '$3 == n' "$logs/.binaries" | head -1) || true
  [ -n "${exe:-}" ] || { echo "test-lanes.sh: no binary $bin for --alone $spec" >&2; exit 1; }
  echo "$bin--$test $dir $exe alone $test" >>"$jobs_file"
  skips+=(--skip "$test")
done
for name in $LONG; do
  awk -v n="$name" '$3 == n { print }' "$logs/.binaries"
done >"$logs/.long"
exclusive_file="$logs/.exclusive"
: >"$exclusive_file"
{ cat "$logs/.long"; grep -vxFf "$logs/.long" "$logs/.binaries" || true; } |
  while read -r dir exe name; do
    # A name may repeat (two crates' `long_runs`): the log is named after the executable.
    line="$(basename "$exe") $dir $exe all"
    case " $EXCLUSIVE " in
      *" $name "*) echo "$line" >>"$exclusive_file" ;;
      *) echo "$line" >>"$jobs_file" ;;
    esac
  done

export CARGO="${CARGO:-$(command -v cargo)}"

# One job: runs, then prints its log under a lock so two lanes' outputs never mix.
run_job() {
  local log="$1" dir="$2" exe="$3" mode="$4" test="${5:-}"
  local start rc=0 args=()
  if [ "$mode" = alone ]; then args=("$test" --exact); else args=("${skips[@]}"); fi
  start=$(date +%s)
  (cd "$dir" && exec "$exe" "${args[@]}") >"$logs/$log.log" 2>&1 || rc=$?
  echo "$rc $(($(date +%s) - start))" >"$logs/$log.status"
  {
    flock 9
    printf '     Running %s (%s %s)\n' "$log" "${exe#"$PWD"/}" "${args[*]}"
    cat "$logs/$log.log"
  } 9>"$logs/.print"
}

# Stopped with the script: a lane's binary still running is killed (its tests' own guards
# stop the processes they started, as when cargo test is interrupted).
trap 'kill $(jobs -p) 2>/dev/null || true' EXIT

running=0
while read -r log dir exe mode test; do
  while [ "$running" -ge "$lanes" ]; do
    wait -n || true
    running=$((running - 1))
  done
  run_job "$log" "$dir" "$exe" "$mode" "$test" &
  running=$((running + 1))
done <"$jobs_file"
wait
while read -r log dir exe mode test; do
  run_job "$log" "$dir" "$exe" "$mode" "$test"
done <"$exclusive_file"

echo "     Doc-tests (cargo test --workspace --doc)"
doc_rc=0
cargo test --workspace --locked --doc -- "${skips[@]}" || doc_rc=$?

failed=()
for status in "$logs"/*.status; do
  read -r rc _ <"$status"
  [ "$rc" = 0 ] || failed+=("$(basename "$status" .status)")
done
echo
echo "test-lanes.sh: $(cat "$jobs_file" "$exclusive_file" | wc -l) binaries, $lanes lanes; the longest:"
for status in "$logs"/*.status; do
  read -r _ secs <"$status"
  echo "$secs $(basename "$status" .status)"
done | sort -rn | head -8 | awk '{ printf "  %5d s  %s\n", $1, $2 }'
if [ "${#failed[@]}" -gt 0 ] || [ "$doc_rc" != 0 ]; then
  echo "test-lanes.sh: FAILED: ${failed[*]:-} $([ "$doc_rc" = 0 ] || echo doc-tests)" >&2
  exit 1
fi
