//! The shared SDK conformance suite (`sdks/conformance/README.md`) against a real
//! `orbit dev`, one test per SDK: each runs the eight scenarios of
//! `conformance/scenarios.rs` with that SDK's conformance worker as a child process.
//!
//! Python: the package installed into a venv by scripts/test.sh (`target/py-venv`); the
//! interpreter is `$ORBIT_PYTHON`, else `python3` (which must then import `orbit_worker`).

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
