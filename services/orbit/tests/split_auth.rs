//! Service credentials and the safe defaults, through real processes.
//!
//! - An owner enforcing an identities file whose only `service` identity is a token: a
//!   frontend without `--service-token` gets its starts refused (UNAUTHENTICATED, named as
//!   the frontend's credentials, logged by the owner); a frontend given the token
//!   (`ORBIT_SERVICE_TOKEN`) runs the example end to end. The token is in no log.
//! - A split service without TLS and identities refuses to start (exit 2, a message naming
//!   what is missing and `--insecure`); with `--insecure` it starts and warns. `orbit dev`
//!   refuses a non-loopback address without TLS and identities the same way.

// Tests read their environment (ORBIT_PYTHON, the database URL) and the wall clock
// (unique names, deadlines of real processes) directly.
#![allow(clippy::disallowed_methods)]

mod common;

use common::scenario::worker;
use common::split::{Split, PLAIN};
use common::*;
use orbit_auth::token::hash_token_hex;
use serde_json::json;
use std::process::{Command, Stdio};
use std::time::Duration;
use tokio_util::sync::CancellationToken;

const SERVICE_TOKEN: &str = "svc-token-0123456789abcdef";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn internal_calls_need_the_service_token() {
    let mut s = Split::new("split-auth");
    let identities = s.dir.0.join("identities.yaml");
    let entry = format!(
        "identities:\n- {{name: frontends, kind: service, token_sha256: {}}}\n",
        hash_token_hex(SERVICE_TOKEN)
    );
    std::fs::write(&identities, entry).unwrap();
    let ids = identities.display().to_string();
    // Plain text on loopback (`PLAIN` has --insecure): this test is about the token.
    s.spawn("owner", "owner-1", &[PLAIN, &["--identities", &ids]].concat());
    s.spawn("frontend", "frontend-1", PLAIN);
    let with_token = &[PLAIN, &["--service-token", SERVICE_TOKEN]].concat();
    s.spawn("frontend", "frontend-2", with_token);

    let mut c = s.client("frontend-1").await;
    register_example(&mut c, "hello.yaml").await;
    let refused = tokio::time::timeout(
        Duration::from_secs(60),
        start(&mut c, "hello", "hello-anonymous", json!({"name": "Ada"})),
    )
    .await
    .expect("the start hung")
    .expect_err("a frontend without credentials reached the owner");
    assert_eq!(refused.code(), tonic::Code::Unauthenticated, "{refused:?}");
    assert!(refused.message().contains("refused this service's credentials"), "{refused:?}");
    let owner_log = s.node("owner-1").log();
    assert!(owner_log.contains("refused: no known credentials"), "owner log:\n{owner_log}");
    let frontend_log = s.node("frontend-1").log();
    assert!(frontend_log.contains("--service-token"), "frontend log:\n{frontend_log}");

    let mut d = s.client("frontend-2").await;
    let stop = CancellationToken::new();
    worker(&s.url("frontend-2"), "split-auth", &stop);
    start(&mut d, "hello", "hello-service", json!({"name": "Bo"})).await.expect("start");
    assert_eq!(
        result(&mut d, "hello-service", Duration::from_secs(30)).await,
        (orbit_api::v1::ExecutionStatus::Completed, json!({"greeting": "Hello, Bo!"}))
    );
    stop.cancel();
    for p in &s.procs {
        assert!(!p.log().contains(SERVICE_TOKEN), "{} logged the token", p.node_id);
    }
}

/// Runs `orbit <args>` until it exits (killed after a minute: a start that was not
/// refused serves forever): (exit code, stderr).
fn exits(args: &[&str], env: &[(&str, &str)]) -> (Option<i32>, String) {
    let dir = TempDir::new("exits");
    let log = dir.0.join("stderr.log");
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_orbit"));
    cmd.args(args).env("NO_COLOR", "1").stdin(Stdio::null()).stdout(Stdio::null());
    cmd.stderr(std::fs::File::create(&log).unwrap());
    for (k, v) in env {
        cmd.env(k, v);
    }
    let mut child = cmd.spawn().expect("spawn orbit");
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    let code = loop {
        if let Some(status) = child.try_wait().expect("try_wait") {
            break status.code();
        }
        if std::time::Instant::now() >= deadline {
            let _ = child.kill();
            let _ = child.wait();
            break None;
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    (code, std::fs::read_to_string(&log).unwrap_or_default())
}

#[test]
fn without_tls_and_identities_a_split_service_or_a_public_dev_refuses_to_start() {
    let dir = TempDir::new("safe-defaults");
    let url = format!("sqlite://{}", dir.0.join("orbit.db").display());
    let db = [("ORBIT_DATABASE_URL", url.as_str())];
    for service in ["owner", "frontend", "scheduler"] {
        let (code, err) = exits(&[service, "--listen", "127.0.0.1:0"], &db);
        assert_eq!(code, Some(2), "orbit {service}: {err}");
        assert!(err.contains("TLS") && err.contains("identities"), "{service}: {err}");
        assert!(err.contains("--insecure"), "{service}: {err}");
    }
    let store = dir.0.join("dev.db").display().to_string();
    let (code, err) = exits(&["dev", "--db", &store, "--listen", "0.0.0.0:0"], &[]);
    assert_eq!(code, Some(2), "orbit dev on 0.0.0.0: {err}");
    assert!(err.contains("0.0.0.0:0") && err.contains("--insecure"), "{err}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn insecure_starts_and_warns() {
    let mut s = Split::new("insecure-warns");
    s.spawn("owner", "owner-1", PLAIN);
    let log = s.node("owner-1").log();
    assert!(log.contains("WARN") && log.contains("--insecure"), "owner log:\n{log}");
    assert!(log.contains("TLS") && log.contains("identities"), "names what is off:\n{log}");
}
