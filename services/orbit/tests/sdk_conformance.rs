//! The shared SDK conformance suite (`sdks/conformance/README.md`) against a real
//! `orbit dev`, one test per SDK: each runs the eight scenarios of
//! `conformance/scenarios.rs` with that SDK's conformance worker as a child process.
//!
//! Python: the package installed into a venv by scripts/test.sh (`target/py-venv`); the
//! interpreter is `$ORBIT_PYTHON`, else `python3` (which must then import `orbit_worker`).
//!
//! TypeScript: the package built in place by scripts/test.sh (`npm ci && npm run build` in
//! `sdks/typescript`); the runtime is `$NODE`, else `node`.

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
