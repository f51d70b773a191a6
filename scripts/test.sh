#!/usr/bin/env bash
# Runs every check and test of the workspace: formatting, clippy, buf lint, cargo test.
# Installs what it needs when missing (buf from PyPI). Safe to run repeatedly.
set -euo pipefail
cd "$(dirname "$0")/.."

step() { printf '\n==> %s\n' "$*"; }

# buf lints the protobuf API. pip puts it in the interpreter's scripts folder, which may
# not be on PATH (pyenv shims need a rehash), so call it by its full path.
BUF=$(command -v buf || true)
if [ -z "$BUF" ]; then
  step "installing buf (PyPI buf-bin)"
  python3 -m pip install --quiet --disable-pip-version-check buf-bin==1.75.0
  BUF="$(python3 -c 'import sysconfig; print(sysconfig.get_path("scripts"))')/buf"
fi

step "cargo fmt --check"
cargo fmt --all --check

step "cargo clippy -D warnings"
cargo clippy --workspace --all-targets --locked -- -D warnings

step "buf lint"
"$BUF" lint

step "cargo test"
cargo test --workspace --locked
