//! The Python SDK (`sdks/python`, package `orbit-worker`) for the end-to-end tests that run
//! Python workers: the interpreter of the venv scripts/test.sh installs it into.

// Tests read their environment (ORBIT_PYTHON, the database URL) and the wall clock
// (unique names, deadlines of real processes) directly.
#![allow(clippy::disallowed_methods)]

use super::run_bounded;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

/// How to install what [`check_sdk`] needs.
pub const INSTALL: &str = "python3 -m venv target/py-venv && \
    target/py-venv/bin/pip install 'sdks/python[test,otel]' and set \
    ORBIT_PYTHON=target/py-venv/bin/python (scripts/test.sh does)";

/// The interpreter: `$ORBIT_PYTHON`, else `$PYTHON`, else `python3`.
pub fn python() -> String {
    std::env::var("ORBIT_PYTHON")
        .or_else(|_| std::env::var("PYTHON"))
        .unwrap_or_else(|_| "python3".to_string())
}

/// `examples/python`, the example workers.
pub fn examples_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../examples/python")
}

/// Fails (never skips) unless the interpreter imports `orbit_worker` and `extra` (more
/// Python import statements, e.g. the OpenTelemetry packages).
pub fn check_sdk(extra: &str) {
    let code =
        format!("import orbit_worker; from orbit_worker._proto import worker_pb2_grpc\n{extra}");
    let mut cmd = Command::new(python());
    cmd.args(["-c", &code]);
    let (ok, _, stderr) = run_bounded(&mut cmd, Duration::from_secs(60));
    assert!(ok, "the Python SDK is not installed for `{}`: {INSTALL}\n{stderr}", python());
}
