//! The order saga runs to completion with the Python example worker
//! (`examples/python/order_worker.py`) as a child process against the real `orbit dev`.
//!
//! Needs the Python client generated first:
//! `pip install -r examples/python/requirements.txt && examples/python/gen.sh`.

mod common;

use common::*;
use orbit_api::v1 as pb;
use serde_json::json;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

fn python_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../examples/python")
}

fn python() -> String {
    std::env::var("PYTHON").unwrap_or_else(|_| "python3".to_string())
}

/// Fails (never skips) when the generated client or the Python dependencies are missing.
fn check_python_ready(dir: &Path) {
    let generated = dir.join("gen/orbit/v1/worker_pb2.py");
    assert!(
        generated.exists(),
        "the generated Python client is missing ({}): run \
         `pip install -r examples/python/requirements.txt && examples/python/gen.sh` first",
        generated.display()
    );
    let mut cmd = Command::new(python());
    cmd.current_dir(dir).args([
        "-c",
        "import sys; sys.path.insert(0, 'gen'); import grpc; from orbit.v1 import worker_pb2_grpc",
    ]);
    let (ok, _, stderr) = run_bounded(&mut cmd, Duration::from_secs(60));
    assert!(
        ok,
        "the Python worker cannot import grpc or the generated client: run \
         `pip install -r examples/python/requirements.txt && examples/python/gen.sh` first\n{stderr}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn order_saga_completes_with_the_python_worker() {
    let py = python_dir();
    check_python_ready(&py);

    let dir = TempDir::new("python-worker");
    let server = Server::start(&dir.0.join("orbit.db"), &[]).await;
    let mut c = server.client().await;
    register_example(&mut c, "order-saga.yaml").await;

    let log_path = dir.0.join("order_worker.log");
    let log = std::fs::File::create(&log_path).expect("log file");
    let mut child = ChildGuard(
        Command::new(python())
            .current_dir(&py)
            .arg(py.join("order_worker.py"))
            .args(["--address", &format!("127.0.0.1:{}", server.port), "--max-tasks", "3"])
            .args(["--worker-id", "py-order-worker"])
            .stdin(Stdio::null())
            .stdout(log.try_clone().expect("log file"))
            .stderr(log)
            .spawn()
            .expect("spawn python3 order_worker.py"),
    );
    let worker_log = || std::fs::read_to_string(&log_path).unwrap_or_default();

    start(
        &mut c,
        "order-saga",
        "py-order-1",
        json!({"order_id": "o-1", "amount": 500, "items": [{"sku": "a"}, {"sku": "b"}]}),
    )
    .await
    .expect("start");

    // The saga sleeps 10 s in `settle`; if the worker dies early, say so with its log.
    let waited = {
        let mut c2 = server.client().await;
        let wait =
            tokio::spawn(
                async move { result(&mut c2, "py-order-1", Duration::from_secs(40)).await },
            );
        tokio::pin!(wait);
        loop {
            tokio::select! {
                r = &mut wait => break r,
                () = tokio::time::sleep(Duration::from_millis(200)) => {
                    if let Some(status) = child.0.try_wait().expect("try_wait") {
                        if !status.success() {
                            panic!("the Python worker exited with {status} before the saga \
                                    finished; its log:\n{}", worker_log());
                        }
                    }
                }
            }
        }
    };
    let (status, output) = match waited {
        Ok(r) => r,
        Err(e) => panic!("waiting for the result failed ({e}); worker log:\n{}", worker_log()),
    };
    assert_eq!(
        (status, output),
        (
            pb::ExecutionStatus::Completed,
            json!({"order": "o-1", "charge_id": "ch-o-1", "approved_by": "auto", "reservations": ["r-a", "r-b"]})
        ),
        "worker log:\n{}",
        worker_log()
    );

    // With `--max-tasks 3` the worker drains and exits by itself after its three tasks.
    let deadline = Instant::now() + Duration::from_secs(15);
    let exit = loop {
        if let Some(status) = child.0.try_wait().expect("try_wait") {
            break Some(status);
        }
        if Instant::now() >= deadline {
            break None;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    match exit {
        Some(status) => {
            assert!(status.success(), "worker exited with {status}; log:\n{}", worker_log())
        }
        None => panic!(
            "the Python worker did not exit within 15 s of its 3 tasks; log:\n{}",
            worker_log()
        ),
    }
    drop(child); // kills it if still running
}
