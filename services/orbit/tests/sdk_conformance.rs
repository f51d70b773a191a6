//! The shared SDK conformance suite (`sdks/conformance/README.md`) against a real
//! `orbit dev`, one test per SDK: each runs the nine scenarios of
//! `conformance/scenarios.rs` (the ninth, the language examples, in `conformance/language.rs`)
//! with that SDK's conformance worker as a child process.
//!
//! Rust: the `conformance-worker` example of `orbit-worker`, built by the test.
//!
//! Python: the package installed into a venv by scripts/test.sh (`target/py-venv`); the
//! interpreter is `$ORBIT_PYTHON`, else `python3` (which must then import `orbit_worker`).
//!
//! TypeScript: the package built in place by scripts/test.sh (`npm ci && npm run build` in
//! `sdks/typescript`); the runtime is `$NODE`, else `node`.

// Tests read their environment (ORBIT_PYTHON, the database URL) and the wall clock
// (unique names, deadlines of real processes) directly.
#![allow(clippy::disallowed_methods)]

mod common;
mod conformance;

use conformance::{repo_root, WorkerSpec};

#[test]
fn python() {
    let root = repo_root();
    let program = std::env::var("ORBIT_PYTHON").unwrap_or_else(|_| "python3".to_string());
    let spec = WorkerSpec {
        program: program.into(),
        args: vec!["sdks/python/conformance/worker.py".into()],
        env: vec![],
        cwd: root,
        sdk: "orbit-python",
        runtime: "python 3.",
    };
    spec.check_installed(&["-c", "import orbit_worker"], "pip install sdks/python (scripts/test.sh installs it into target/py-venv and sets ORBIT_PYTHON)");
    conformance::run_all(&spec);
}

#[test]
fn typescript() {
    let root = repo_root();
    let program = std::env::var("NODE").unwrap_or_else(|_| "node".to_string());
    let spec = WorkerSpec {
        program: program.into(),
        args: vec!["sdks/typescript/conformance/worker.mjs".into()],
        env: vec![],
        cwd: root,
        sdk: "orbit-typescript",
        runtime: "node ",
    };
    spec.check_installed(
        &["-e", "import('./sdks/typescript/dist/index.js')"],
        "cd sdks/typescript && npm ci && npm run build (scripts/test.sh does it)",
    );
    conformance::run_all(&spec);
}

/// Rust: the `conformance-worker` example of `orbit-worker`, built here (a no-op when up to
/// date) in the profile of the `orbit` binary under test, and run from its target directory.
#[test]
fn rust() {
    let root = repo_root();
    let bin_dir = std::path::Path::new(env!("CARGO_BIN_EXE_orbit")).parent().expect("bin dir");
    let mut build = std::process::Command::new(std::env::var("CARGO").unwrap_or("cargo".into()));
    build.current_dir(&root).args(["build", "-q", "-p", "orbit-worker", "--example"]);
    build.arg("conformance-worker");
    if bin_dir.ends_with("release") {
        build.arg("--release");
    }
    let status = build.status().expect("run cargo build");
    assert!(status.success(), "cargo build -p orbit-worker --example conformance-worker failed");
    let spec = WorkerSpec {
        program: bin_dir.join("examples").join("conformance-worker"),
        args: vec![],
        env: vec![],
        cwd: root,
        sdk: "orbit-rust",
        runtime: "rust ",
    };
    conformance::run_all(&spec);
}
