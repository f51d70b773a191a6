//! What the shared conformance suite (`sdk_conformance.rs`, plain text, one address) leaves
//! out for the Rust conformance worker: its connection options together — several
//! frontends (a dead one first), mutual TLS from `ORBIT_TLS_CA`/`ORBIT_TLS_CLIENT_*`, a
//! bearer token from `ORBIT_TOKEN` — a refusal over them, and an identity's runtime pin
//! `rust` admitting the worker's `Hello.runtime` `rust <version>`; and `orbit bench
//! --workers 0` served by the conformance worker (the per-SDK throughput figure).
//!
//! The worker binary is built by the test (`cargo build -p orbit-worker --example
//! conformance-worker`, a no-op when up to date) next to the `orbit` binary under test.

// Tests read their environment (ORBIT_PYTHON, the database URL) and the wall clock
// (unique names, deadlines of real processes) directly.
#![allow(clippy::disallowed_methods)]

mod common;

use common::*;
use orbit_api::v1 as pb;
use orbit_worker::client::Client;
use serde_json::{json, Value};
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

/// Generous for a busy two-core machine; every wait below is bounded by it.
const WITHIN: Duration = Duration::from_secs(60);

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// The example binary, built once per test process in the profile of the `orbit` binary.
fn worker_binary() -> &'static Path {
    static BINARY: OnceLock<PathBuf> = OnceLock::new();
    BINARY.get_or_init(|| {
        let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
        let bin_dir = Path::new(env!("CARGO_BIN_EXE_orbit")).parent().expect("bin dir");
        let mut build = Command::new(cargo);
        build.current_dir(repo());
        build.args(["build", "-q", "-p", "orbit-worker", "--example", "conformance-worker"]);
        if bin_dir.ends_with("release") {
            build.arg("--release");
        }
        let status = build.status().expect("run cargo build");
        assert!(status.success(), "building the conformance worker failed");
        let binary = bin_dir.join("examples").join("conformance-worker");
        assert!(binary.exists(), "{} missing after the build", binary.display());
        binary
    })
}

/// A running conformance worker; killed on drop. Its stderr goes to `log`.
struct WorkerProcess {
    child: ChildGuard,
    log: PathBuf,
}

impl WorkerProcess {
    /// Starts the worker with `env` (besides a clean `ORBIT_*` environment) and waits for
    /// `READY`, or for its exit when `expect_ready` is false.
    fn spawn(dir: &Path, name: &str, env: &[(&str, String)], expect_ready: bool) -> Self {
        let log = dir.join(format!("{name}.log"));
        let mut cmd = Command::new(worker_binary());
        for var in ["ORBIT_TOKEN", "ORBIT_TLS_CA", "ORBIT_TLS_CLIENT_CERT", "ORBIT_TLS_CLIENT_KEY"]
        {
            cmd.env_remove(var);
        }
        cmd.env("CONFORMANCE_DIR", dir).env("RUST_LOG", "info");
        for (k, v) in env {
            cmd.env(k, v);
        }
        let stderr = std::fs::File::create(&log).expect("log file");
        let mut child = cmd
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(stderr)
            .spawn()
            .expect("spawn the conformance worker");
        let stdout = child.stdout.take().expect("stdout");
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines().map_while(Result::ok) {
                if line == "READY" {
                    let _ = tx.send(());
                }
            }
        });
        let worker = WorkerProcess { child: ChildGuard(child), log };
        if expect_ready {
            let ready = rx.recv_timeout(WITHIN);
            assert!(ready.is_ok(), "no READY within {WITHIN:?}; log:\n{}", worker.log());
        }
        worker
    }

    fn log(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    fn signal(&self, signal: &str) {
        let pid = self.child.0.id().to_string();
        let status = Command::new("kill").args(["-s", signal, &pid]).status().expect("kill");
        assert!(status.success());
    }

    /// Waits for the exit (bounded) and returns its code.
    fn wait_exit(&mut self) -> Option<i32> {
        let deadline = Instant::now() + WITHIN;
        loop {
            if let Some(status) = self.child.0.try_wait().expect("try_wait") {
                return status.code();
            }
            assert!(Instant::now() < deadline, "the worker did not exit; log:\n{}", self.log());
            std::thread::sleep(Duration::from_millis(50));
        }
    }
}

fn env(address: &str, worker_id: &str) -> Vec<(&'static str, String)> {
    vec![("ORBIT_ADDRESSES", address.to_owned()), ("ORBIT_WORKER_ID", worker_id.to_owned())]
}

/// Registers the conformance definitions and the two examples.
async fn register_all(client: &Client) {
    let mut files: Vec<PathBuf> = std::fs::read_dir(repo().join("sdks/conformance/definitions"))
        .expect("definitions")
        .map(|e| e.expect("entry").path())
        .collect();
    files.push(example("hello.yaml"));
    files.push(example("order-saga.yaml"));
    for file in files {
        let document = std::fs::read_to_string(&file).expect("definition");
        let request = pb::RegisterWorkflowRequest { document, format: 0 };
        client.raw().register_workflow(request).await.expect("register");
    }
}

async fn run(
    client: &Client,
    workflow: &str,
    id: &str,
    input: Value,
) -> (pb::ExecutionStatus, Value, Option<pb::TaskError>) {
    client.start(workflow, Some(id), input).await.expect("start");
    let r =
        tokio::time::timeout(WITHIN, client.result(id)).await.expect("in time").expect("result");
    (r.status, r.output, r.error)
}

const APP_TOKEN: &str = "rust-sdk-app-token-3c4d5e6f7a8b9c0d1e2f";
const WORKER_TOKEN: &str = "rust-sdk-worker-token-a1b2c3d4e5f60718";
const BILLING_TOKEN: &str = "rust-sdk-billing-token-0f1e2d3c4b5a6978";

/// Over mutual TLS with a dead frontend listed first: a worker identity whose tasks do not
/// cover the worker's exits non-zero printing `PERMISSION_DENIED` without retrying; the
/// right token (an identity pinned to runtime `rust`) runs the task.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_refused_identity_exits_and_the_right_one_serves_over_mutual_tls() {
    use common::secure::*;
    let dir = TempDir::new("sdk-rust-auth");
    let pki = common::tls::Pki::new(&dir.0.join("pki"));
    let identities = [
        app_client(APP_TOKEN),
        identity("rust-workers", "worker", WORKER_TOKEN, "    tasks: ['*']\n    runtime: rust\n"),
        identity("billing", "worker", BILLING_TOKEN, "    tasks: ['billing.*']\n"),
    ];
    let server = start_secured(&dir.0, &pki, &identities, APP_TOKEN).await;
    let address = common::tls::tls_address(&server);
    let tls = pki.client("ca", Some("client"));
    let client = Client::connect_with(&address, &tls, Some(APP_TOKEN)).await.expect("client");
    register_all(&client).await;
    let addresses = format!("127.0.0.1:{},{address}", free_port());
    let tls_env = |token: &str| {
        let mut e = env(&addresses, "rust-auth");
        e.push(("ORBIT_TOKEN", token.to_owned()));
        e.push(("ORBIT_TLS_CA", pki.path("ca.pem").display().to_string()));
        e.push(("ORBIT_TLS_CLIENT_CERT", pki.path("client.pem").display().to_string()));
        e.push(("ORBIT_TLS_CLIENT_KEY", pki.path("client-key.pem").display().to_string()));
        e
    };

    let mut refused = WorkerProcess::spawn(&dir.0, "refused", &tls_env(BILLING_TOKEN), false);
    assert_eq!(refused.wait_exit(), Some(1), "log:\n{}", refused.log());
    let log = refused.log();
    assert!(log.contains("error: PERMISSION_DENIED"), "log:\n{log}");
    // One move on, from the dead frontend to the live one; none after the refusal.
    assert_eq!(log.matches("reconnecting").count(), 1, "no retry after a refusal:\n{log}");

    // The runtime pin `rust` admits `rust <version>`.
    let mut worker = WorkerProcess::spawn(&dir.0, "accepted", &tls_env(WORKER_TOKEN), true);
    let (status, output, _) = run(&client, "hello", "tls-1", json!({"name": "Ada"})).await;
    assert_eq!(
        (status, output),
        (pb::ExecutionStatus::Completed, json!({"greeting": "Hello, Ada!"}))
    );
    worker.signal("TERM");
    assert_eq!(worker.wait_exit(), Some(0), "drained; log:\n{}", worker.log());
}

/// `orbit bench --workers 0` runs no worker of its own: the conformance worker serves
/// `bench.step` (the per-SDK throughput figure of docs/benchmarks.md), and the tasks are
/// counted from the completed executions. Without `--address` it is refused.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bench_with_no_workers_of_its_own_is_served_by_the_conformance_worker() {
    let dir = TempDir::new("sdk-rust-bench");
    let server = Server::start(&dir.0.join("orbit.db"), &[]).await;
    let address = format!("127.0.0.1:{}", server.port);
    let mut worker = WorkerProcess::spawn(&dir.0, "bench", &env(&address, "rust-bench"), true);
    let bench = |args: &[&str]| {
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_orbit"));
        cmd.arg("bench").args(args).env_remove("ORBIT_TOKEN");
        run_bounded(&mut cmd, WITHIN)
    };
    let (ok, stdout, stderr) = bench(&[
        "--address",
        &address,
        "--workers",
        "0",
        "--executions",
        "20",
        "--steps",
        "2",
        "--concurrency",
        "8",
        "--output",
        "json",
    ]);
    assert!(ok, "{stderr}\nworker log:\n{}", worker.log());
    let report: Value = serde_json::from_str(stdout.trim()).expect("one JSON document");
    assert_eq!(report["failures"], json!(0), "{report}");
    let seconds = report["seconds"].as_f64().expect("seconds");
    let tasks = report["tasks_per_s"].as_f64().expect("tasks/s") * seconds;
    assert!((tasks - 40.0).abs() < 0.5, "20 executions x 2 steps, got {tasks}: {report}");
    worker.signal("TERM");
    assert_eq!(worker.wait_exit(), Some(0), "log:\n{}", worker.log());

    let (ok, _, stderr) = bench(&["--workers", "0", "--executions", "1"]);
    assert!(!ok, "--workers 0 without --address must be refused");
    assert!(stderr.contains("--workers 0 needs --address"), "{stderr}");
}
