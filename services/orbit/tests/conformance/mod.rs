//! The SDK conformance runner (`sdks/conformance/README.md`), generic over the SDK: a
//! [`WorkerSpec`] says how to start that SDK's conformance worker; [`run_all`] runs every
//! scenario of [`scenarios`] against a fresh `orbit dev` each and fails with the list of
//! the scenarios that failed (each with the worker's log), so one broken scenario does not
//! hide the others.
//!
//! Waits derive from the definitions' timeouts with generous margins (a busy 2-core
//! machine): [`STEP`] for anything a worker does in well under a second, and the
//! scenario's own sleep on top where a task sleeps.

// Tests read their environment (ORBIT_PYTHON, the database URL) and the wall clock
// (unique names, deadlines of real processes) directly.
#![allow(clippy::disallowed_methods)]

pub mod language;
pub mod scenarios;

use crate::common::{ChildGuard, Server, TempDir};
use orbit_api::v1 as pb;
use orbit_api::v1::admin_service_client::AdminServiceClient;
use orbit_api::v1::workflow_service_client::WorkflowServiceClient;
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Command, ExitStatus, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tonic::transport::Channel;

/// Anything a worker does in well under a second (a task, a connect, an exit), including
/// interpreter start-up, on a loaded machine.
pub const STEP: Duration = Duration::from_secs(60);

/// How to start one SDK's conformance worker (run from `cwd`, usually the repository root).
pub struct WorkerSpec {
    pub program: PathBuf,
    pub args: Vec<String>,
    /// Extra environment on top of what the runner sets (`ORBIT_ADDRESSES`, ...).
    pub env: Vec<(String, String)>,
    pub cwd: PathBuf,
    /// The SDK name the worker sends first in `Hello.sdk` (`orbit-python`).
    pub sdk: &'static str,
    /// The prefix of its `Hello.runtime` (`python 3.`).
    pub runtime: &'static str,
}

impl WorkerSpec {
    /// Fails (never skips) when the SDK is not installed: runs `program check_args`.
    pub fn check_installed(&self, check_args: &[&str], install: &str) {
        let mut cmd = Command::new(&self.program);
        cmd.args(check_args).current_dir(&self.cwd).envs(self.env.iter().cloned());
        let (ok, _, stderr) = crate::common::run_bounded(&mut cmd, STEP);
        assert!(
            ok,
            "the SDK is not ready ({:?} {check_args:?} failed): {install}\n{stderr}",
            self.program
        );
    }
}

/// The repository root.
pub fn repo_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..").canonicalize().expect("repository root")
}

/// Runs every scenario; panics at the end listing those that failed.
pub fn run_all(spec: &WorkerSpec) {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("tokio runtime");
    let mut failed = Vec::new();
    for (name, scenario) in scenarios::ALL {
        eprintln!("conformance [{}]: {name} ...", spec.sdk);
        let outcome = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            rt.block_on(scenario(spec));
        }));
        match outcome {
            Ok(()) => eprintln!("conformance [{}]: {name} ok", spec.sdk),
            Err(e) => {
                let message = e
                    .downcast_ref::<String>()
                    .cloned()
                    .or_else(|| e.downcast_ref::<&str>().map(|s| (*s).to_string()))
                    .unwrap_or_default();
                eprintln!("conformance [{}]: {name} FAILED: {message}", spec.sdk);
                failed.push(name);
            }
        }
    }
    assert!(failed.is_empty(), "{}: scenarios failed: {failed:?} (details above)", spec.sdk);
}

/// One scenario's `orbit dev` with the conformance and example definitions registered,
/// and its marker directory.
pub struct Env {
    pub dir: TempDir,
    pub markers: PathBuf,
    pub server: Server,
}

impl Env {
    pub async fn start(name: &str) -> Env {
        Env::start_with(name, &[]).await
    }

    /// [`Env::start`] with extra `orbit dev` flags.
    pub async fn start_with(name: &str, flags: &[&str]) -> Env {
        let dir = TempDir::new(&format!("conformance-{name}"));
        let markers = dir.0.join("markers");
        std::fs::create_dir_all(&markers).expect("marker dir");
        let server = Server::start(&dir.0.join("orbit.db"), flags).await;
        let mut c = server.client().await;
        register_all(&mut c).await;
        Env { dir, markers, server }
    }

    pub fn address(&self) -> String {
        format!("127.0.0.1:{}", self.server.port)
    }

    pub async fn client(&self) -> WorkflowServiceClient<Channel> {
        self.server.client().await
    }

    /// A worker of `spec` with `worker_id` dialling this server.
    pub fn worker(&self, spec: &WorkerSpec, worker_id: &str) -> WorkerProc {
        WorkerProc::spawn(spec, &self.address(), worker_id, &self.markers, &self.dir.0, &[])
    }

    /// The `*.started` markers: (idempotency key, attempt) of each attempt that began.
    pub fn started(&self) -> Vec<(String, u32)> {
        let mut out = Vec::new();
        for entry in std::fs::read_dir(&self.markers).expect("marker dir").flatten() {
            let name = entry.file_name().to_string_lossy().to_string();
            if let Some(stem) = name.strip_suffix(".started") {
                if let Some((key, attempt)) = stem.rsplit_once('.') {
                    out.push((key.to_string(), attempt.parse().unwrap_or(0)));
                }
            }
        }
        out.sort();
        out
    }

    pub fn done_marker(&self, key: &str, attempt: u32) -> bool {
        self.markers.join(format!("{key}.{attempt}.done")).exists()
    }

    /// Waits until `pred` holds for the started markers; returns them.
    pub async fn wait_started(
        &self,
        worker: &WorkerProc,
        pred: impl Fn(&[(String, u32)]) -> bool,
    ) -> Vec<(String, u32)> {
        let deadline = Instant::now() + STEP;
        loop {
            let started = self.started();
            if pred(&started) {
                return started;
            }
            assert!(
                Instant::now() < deadline,
                "markers not written within {STEP:?}: {started:?}; worker log:\n{}",
                worker.log()
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    /// The workers the server knows, by id.
    pub async fn workers(&self) -> Vec<pb::WorkerInfo> {
        let mut admin = AdminServiceClient::connect(self.server.address()).await.expect("admin");
        admin
            .list_workers(pb::ListWorkersRequest::default())
            .await
            .expect("list workers")
            .into_inner()
            .workers
    }
}

/// Registers `sdks/conformance/definitions/*.yaml`, `hello.yaml` and `order-saga.yaml`.
pub async fn register_all(c: &mut WorkflowServiceClient<Channel>) {
    let root = repo_root();
    let mut files: Vec<PathBuf> = std::fs::read_dir(root.join("sdks/conformance/definitions"))
        .expect("sdks/conformance/definitions")
        .flatten()
        .map(|e| e.path())
        .filter(|p| p.extension().is_some_and(|x| x == "yaml"))
        .collect();
    files.sort();
    assert_eq!(files.len(), 3, "the conformance definitions: {files:?}");
    files.push(root.join("examples/definitions/hello.yaml"));
    files.push(root.join("examples/definitions/order-saga.yaml"));
    for file in files {
        let doc = std::fs::read_to_string(&file).expect("definition");
        crate::common::register(c, &doc).await;
    }
}

/// A running conformance worker: its stdout is watched for `READY`; stdout and stderr are
/// kept for the failure messages. Killed on drop.
pub struct WorkerProc {
    pub child: ChildGuard,
    stdout: Arc<Mutex<String>>,
    stderr_log: PathBuf,
}

impl WorkerProc {
    pub fn spawn(
        spec: &WorkerSpec,
        addresses: &str,
        worker_id: &str,
        markers: &Path,
        log_dir: &Path,
        extra_env: &[(&str, &str)],
    ) -> WorkerProc {
        let stderr_log = log_dir.join(format!("{worker_id}-{}.stderr", crate::common::free_port()));
        let stderr = std::fs::File::create(&stderr_log).expect("log file");
        let mut cmd = Command::new(&spec.program);
        cmd.args(&spec.args)
            .current_dir(&spec.cwd)
            // Only what the runner says: nothing from the environment of the test run.
            .env_remove("ORBIT_TOKEN")
            .env_remove("ORBIT_TLS_CA")
            .env_remove("ORBIT_TLS_CLIENT_CERT")
            .env_remove("ORBIT_TLS_CLIENT_KEY")
            .env("ORBIT_ADDRESSES", addresses)
            .env("ORBIT_WORKER_ID", worker_id)
            .env("ORBIT_MAX_CONCURRENCY", "8")
            .env("CONFORMANCE_DIR", markers)
            .envs(spec.env.iter().cloned())
            .envs(extra_env.iter().copied())
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(stderr);
        let mut child = cmd.spawn().unwrap_or_else(|e| panic!("spawn {:?}: {e}", spec.program));
        let out = child.stdout.take().expect("stdout");
        let stdout = Arc::new(Mutex::new(String::new()));
        let sink = stdout.clone();
        std::thread::spawn(move || {
            for line in BufReader::new(out).lines().map_while(Result::ok) {
                let mut s = sink.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
                s.push_str(&line);
                s.push('\n');
            }
        });
        WorkerProc { child: ChildGuard(child), stdout, stderr_log }
    }

    /// Its stdout and stderr so far.
    pub fn log(&self) -> String {
        let out = self.stdout.lock().unwrap_or_else(std::sync::PoisonError::into_inner).clone();
        let err = std::fs::read_to_string(&self.stderr_log).unwrap_or_default();
        format!("--- stdout\n{out}--- stderr\n{err}")
    }

    fn is_ready(&self) -> bool {
        let out = self.stdout.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        out.lines().any(|l| l.trim() == "READY")
    }

    /// Waits for `READY` (its first `Welcome`); fails at once when the worker exits.
    pub async fn ready(mut self) -> WorkerProc {
        let deadline = Instant::now() + STEP;
        while !self.is_ready() {
            assert!(
                Instant::now() < deadline,
                "the worker did not print READY within {STEP:?}; its log:\n{}",
                self.log()
            );
            if let Some(status) = self.exited() {
                panic!("the worker exited ({status}) before READY; its log:\n{}", self.log());
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        self
    }

    pub fn exited(&mut self) -> Option<ExitStatus> {
        self.child.0.try_wait().expect("try_wait")
    }

    pub fn sigterm(&self) {
        let status = Command::new("kill")
            .args(["-TERM", &self.child.0.id().to_string()])
            .status()
            .expect("kill -TERM");
        assert!(status.success(), "kill -TERM failed");
    }

    pub fn sigkill(&mut self) {
        let _ = self.child.0.kill();
        let _ = self.child.0.wait();
    }

    /// Waits (bounded) for the exit.
    pub async fn wait_exit(&mut self, within: Duration) -> ExitStatus {
        let deadline = Instant::now() + within;
        loop {
            if let Some(status) = self.exited() {
                return status;
            }
            assert!(
                Instant::now() < deadline,
                "the worker did not exit within {within:?}; its log:\n{}",
                self.log()
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }
}

/// `(type, step)` of each event, for failure messages.
pub fn types(events: &[pb::HistoryEvent]) -> Vec<String> {
    events.iter().map(|e| format!("{}({})", e.event_type, e.step)).collect()
}
