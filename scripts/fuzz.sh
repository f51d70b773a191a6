#!/usr/bin/env bash
# Builds the fuzz targets of fuzz/ (cargo fuzz, libFuzzer) and runs each for a bounded time;
# exits non-zero when a target crashes (panic, stack overflow, timeout, out of memory).
#
#   scripts/fuzz.sh                      every target, FUZZ_SECONDS (default 30) each
#   scripts/fuzz.sh expression payload   only these targets
#   FUZZ_SECONDS=600 scripts/fuzz.sh     longer runs
#   scripts/fuzz.sh --build-only         only the build (scripts/test.sh runs it beside the
#                                        tests, then this script again for the runs)
#
# Installs cargo-fuzz from crates.io when missing. cargo fuzz passes nightly-only flags
# (-Z sanitizer, -C passes=sancov); on a stable toolchain RUSTC_BOOTSTRAP=1 lets rustc accept
# them (the sanitizer runtimes ship with stable's rust-std).
#
# Inputs: the seeds in fuzz/corpus/<target>/ (kept in the repository) plus a working corpus
# in fuzz/target/corpus/<target>/ (what libFuzzer finds, not committed). A crashing input is
# written to fuzz/artifacts/<target>/: reproduce with
#   RUSTC_BOOTSTRAP=1 cargo fuzz run -O --sanitizer none --codegen-units 16 <target> \
#     artifacts/<target>/<file>   (in fuzz/, under ulimit -s 2048)
# and keep it there as a regression input (the crates' replay tests read that folder; see
# docs/fuzzing.md).
set -euo pipefail
cd "$(dirname "$0")/../fuzz"

seconds="${FUZZ_SECONDS:-30}"
cargo_fuzz_version=0.13.2

if ! cargo fuzz --version >/dev/null 2>&1; then
  echo "==> installing cargo-fuzz $cargo_fuzz_version (crates.io)"
  cargo install cargo-fuzz --version "$cargo_fuzz_version" --locked
fi
if ! rustc --version | grep -q nightly; then
  export RUSTC_BOOTSTRAP=1
fi

build_only=0
if [ "${1:-}" = "--build-only" ]; then
  build_only=1
  shift
fi
targets=("$@")
if [ ${#targets[@]} -eq 0 ]; then
  mapfile -t targets < <(cargo fuzz list)
fi

# Rust code here has no `unsafe` (the workspace forbids it): AddressSanitizer would find
# nothing Rust's checks do not, and doubles build and run time. Panics, stack overflows,
# timeouts and memory limits are caught by libFuzzer itself.
# 16 codegen units instead of cargo fuzz's 1: the build (a release build of every
# dependency, in CI from scratch) is the largest part of this step's time; runs are
# slightly slower per input.
build_flags=(-O --sanitizer none --codegen-units 16)

start=$SECONDS
echo "==> cargo fuzz build (${targets[*]})"
cargo fuzz build "${build_flags[@]}"
echo "    built in $((SECONDS - start)) s"
if [ "$build_only" = 1 ]; then
  exit 0
fi

# One target's run; prints its result line (and a crash's summary); fails on a crash.
fuzz_one() {
  local t=$1
  local log="target/fuzz-$t.log"
  mkdir -p "target/corpus/$t" "artifacts/$t" "corpus/$t"
  # -timeout: one input running longer is a finding (a runaway expression);
  # -rss_limit_mb: so is a runaway allocation; -max_len: documents up to 16 KB.
  # The stack is limited to 2 MB, what a tokio worker thread of the server has: libFuzzer
  # runs inputs on the main thread, whose default 8 MB hides recursion that overflows in
  # the server.
  if (ulimit -s 2048 && cargo fuzz run "${build_flags[@]}" "$t" "target/corpus/$t" "corpus/$t" -- \
    -max_total_time="$seconds" -timeout=10 -rss_limit_mb=2048 -max_len=16384 \
    -artifact_prefix="artifacts/$t/" -print_final_stats=1) >"$log" 2>&1; then
    execs="$(grep -Eo 'stat::number_of_executed_units: *[0-9]+' "$log" | grep -Eo '[0-9]+$' || echo '?')"
    rate="$(grep -Eo 'exec/s: [0-9]+' "$log" | tail -1 | grep -Eo '[0-9]+$' || echo '?')"
    cov="$(grep -Eo 'cov: [0-9]+' "$log" | tail -1 | grep -Eo '[0-9]+$' || echo '?')"
    echo "    $t: no crash, $execs inputs (${rate} exec/s), coverage $cov"
  else
    echo "    $t: CRASH (log: fuzz/$log)"
    grep -E "panicked|overflow|ERROR: libFuzzer|SUMMARY|Test unit written" "$log" | head -10 || true
    return 1
  fi
}

# A libFuzzer run uses one core: the targets run side by side, as many at a time as there
# are CPUs, each for its full time; their results are printed in order once all ended.
parallel="$(nproc 2>/dev/null || echo 1)"
echo "==> fuzzing ${targets[*]} for ${seconds} s each, ${parallel} at a time"
for t in "${targets[@]}"; do
  while [ "$(jobs -rp | wc -l)" -ge "$parallel" ]; do
    wait -n || true
  done
  fuzz_one "$t" >"target/fuzz-$t.result" 2>&1 &
done
wait
failed=()
for t in "${targets[@]}"; do
  cat "target/fuzz-$t.result"
  if grep -q "CRASH" "target/fuzz-$t.result"; then
    failed+=("$t")
  fi
done

echo "==> fuzzing took $((SECONDS - start)) s in all"
if [ ${#failed[@]} -gt 0 ]; then
  echo "fuzz.sh: crashes in ${failed[*]}; the inputs are in fuzz/artifacts/<target>/" >&2
  exit 1
fi
