//! The TypeScript SDK (`sdks/typescript`, npm package `@orbit/worker`) over mutual TLS with
//! a bearer token against the real `orbit dev --identities`: its conformance worker
//! (`sdks/typescript/conformance/worker.mjs`) as a child process, configured by the
//! `ORBIT_TLS_*` and `ORBIT_TOKEN` variables, runs a queued task with a worker token, and a
//! token of another identity or an unknown one makes it exit at once (code 4, the status
//! on stderr) instead of retrying. The conformance scenarios themselves (examples, retry,
//! heartbeat + cancel, SIGKILL, drain, reconnect, refusal, Hello, the language examples)
//! run for every SDK in `sdk_conformance.rs`; this file adds the TLS path the shared runner
//! does not take.
//!
//! Needs the package built first: `cd sdks/typescript && npm ci && npm run build`
//! (scripts/test.sh does it).

// Tests read their environment (ORBIT_PYTHON, the database URL) and the wall clock
// (unique names, deadlines of real processes) directly.
#![allow(clippy::disallowed_methods)]

mod common;

use common::*;
use orbit_api::v1 as pb;
use serde_json::json;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// Generous bound for anything that happens "soon" on a busy 2-core machine.
const WAIT: Duration = Duration::from_secs(60);

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

fn node() -> String {
    std::env::var("NODE").unwrap_or_else(|_| "node".to_string())
}

/// Fails (never skips) when the package was not built.
fn check_built() {
    let dist = repo().join("sdks/typescript/dist/index.js");
    assert!(
        dist.exists(),
        "the TypeScript SDK is not built ({}): run `cd sdks/typescript && npm ci && npm run build`",
        dist.display()
    );
}

/// One conformance worker process, its output in files under the test's directory.
struct TsWorker {
    child: ChildGuard,
    stdout: PathBuf,
    stderr: PathBuf,
}

impl TsWorker {
    fn spawn(dir: &Path, name: &str, env: &[(&str, String)]) -> TsWorker {
        let stdout = dir.join(format!("{name}.out"));
        let stderr = dir.join(format!("{name}.err"));
        let mut cmd = Command::new(node());
        cmd.current_dir(repo())
            .arg("sdks/typescript/conformance/worker.mjs")
            .env_remove("ORBIT_TOKEN")
            .env_remove("ORBIT_TLS_CA")
            .env("CONFORMANCE_DIR", dir.join("markers"))
            .stdin(Stdio::null())
            .stdout(std::fs::File::create(&stdout).expect("stdout file"))
            .stderr(std::fs::File::create(&stderr).expect("stderr file"));
        for (k, v) in env {
            cmd.env(k, v);
        }
        let child =
            ChildGuard(cmd.spawn().expect("spawn node sdks/typescript/conformance/worker.mjs"));
        TsWorker { child, stdout, stderr }
    }

    fn log(&self) -> String {
        std::fs::read_to_string(&self.stderr).unwrap_or_default()
    }

    /// Waits for the `READY` line (printed after the first `Welcome`).
    async fn ready(&mut self) {
        let deadline = Instant::now() + WAIT;
        loop {
            if std::fs::read_to_string(&self.stdout).unwrap_or_default().contains("READY") {
                return;
            }
            if let Ok(Some(status)) = self.child.0.try_wait() {
                panic!("the worker exited ({status}) before READY:\n{}", self.log());
            }
            assert!(Instant::now() < deadline, "no READY within {WAIT:?}:\n{}", self.log());
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    /// Waits (bounded) for the process to exit; its exit status.
    async fn exit(&mut self, within: Duration) -> std::process::ExitStatus {
        let deadline = Instant::now() + within;
        loop {
            if let Some(status) = self.child.0.try_wait().expect("try_wait") {
                return status;
            }
            assert!(
                Instant::now() < deadline,
                "the worker did not exit within {within:?}:\n{}",
                self.log()
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mutual_tls_with_a_token_and_a_refused_identity() {
    use common::secure::*;
    const APP: &str = "ts-test-app-token-5f1e2d3c4b5a69788796a5b4";
    const WORKER: &str = "ts-test-worker-token-0a1b2c3d4e5f607182";
    const BILLING: &str = "ts-test-billing-token-99887766554433221100";
    check_built();
    let dir = TempDir::new("sdk-ts-tls");
    std::fs::create_dir_all(dir.0.join("markers")).expect("markers dir");
    let pki = common::tls::Pki::new(&dir.0.join("pki"));
    let identities = [
        app_client(APP),
        identity("runner", "worker", WORKER, "    tasks: ['*']\n"),
        identity("billing", "worker", BILLING, "    tasks: ['billing.*']\n"),
    ];
    let server = start_secured(&dir.0, &pki, &identities, APP).await;
    let address = common::tls::tls_address(&server);
    let mut c =
        common::tls::connect(&address, &pki.client("ca", Some("client"))).await.expect("client");
    register_example_as(&mut c, "hello.yaml", APP).await;
    start_as(&mut c, "hello", "tls-1", json!({"name": "Ada"}), APP).await;
    let env = |token: &str| {
        vec![
            ("ORBIT_ADDRESSES", address.clone()),
            ("ORBIT_WORKER_ID", "ts-tls".to_string()),
            ("ORBIT_TOKEN", token.to_string()),
            ("ORBIT_TLS_CA", pki.path("ca.pem").display().to_string()),
            ("ORBIT_TLS_CLIENT_CERT", pki.path("client.pem").display().to_string()),
            ("ORBIT_TLS_CLIENT_KEY", pki.path("client-key.pem").display().to_string()),
        ]
    };

    // Refused: a worker identity whose tasks do not cover what it offers, and an unknown
    // token. The worker exits non-zero with the status code, without retrying.
    for (token, code) in [(BILLING, "PERMISSION_DENIED"), ("not-a-known-token", "UNAUTHENTICATED")]
    {
        let mut refused = TsWorker::spawn(&dir.0, code, &env(token));
        let status = refused.exit(WAIT).await;
        let log = refused.log();
        assert_eq!(status.code(), Some(4), "{code}: {log}");
        assert!(log.contains(&format!("refused by the server: {code}")), "{code}: {log}");
        assert!(!log.contains("reconnecting"), "{code}: no retry after a refusal: {log}");
    }

    // Accepted over mutual TLS with the worker's token: the queued task runs.
    let mut worker = TsWorker::spawn(&dir.0, "accepted", &env(WORKER));
    worker.ready().await;
    let (status, out) = result_as(&mut c, "tls-1", APP, WAIT).await;
    assert_eq!(
        (status, out),
        (pb::ExecutionStatus::Completed, json!({"greeting": "Hello, Ada!"})),
        "worker log:\n{}",
        worker.log()
    );
}
