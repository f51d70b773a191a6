//! `orbit bench --address` against an `orbit dev` that enforces an identities file over
//! mutual TLS: with an admin token (flag or `ORBIT_TOKEN`) its client calls and its workers
//! are admitted and every execution completes; without a token it is refused.

mod common;

use common::secure::{identity, start_secured};
use common::tls::{tls_address, Pki};
use common::*;
use std::process::Command;
use std::time::Duration;

const ADMIN_TOKEN: &str = "bench-test-admin-token-7c6b5a4938271605f4e3";

/// `orbit bench` against `address` with the client certificate, a few executions.
fn bench(pki: &Pki, address: &str) -> Command {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_orbit"));
    cmd.args(["bench", "--address", address, "--executions", "6", "--steps", "2"])
        .args(["--concurrency", "3", "--workers", "2", "--worker-concurrency", "4"])
        .arg("--tls-ca")
        .arg(pki.path("ca.pem"))
        .arg("--tls-client-cert")
        .arg(pki.path("client.pem"))
        .arg("--tls-client-key")
        .arg(pki.path("client-key.pem"))
        .env_remove("ORBIT_TOKEN");
    cmd
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bench_runs_with_an_admin_token_over_mutual_tls_and_is_refused_without() {
    let dir = TempDir::new("bench-auth");
    let pki = Pki::new(&dir.0.join("pki"));
    let identities = [identity("ops", "admin", ADMIN_TOKEN, "")];
    let server = start_secured(&dir.0, &pki, &identities, ADMIN_TOKEN).await;
    let address = tls_address(&server);
    // Generous: a few executions take well under a second; the machine may be busy.
    let within = Duration::from_secs(120);

    let (ok, out, err) = run_bounded(bench(&pki, &address).args(["--token", ADMIN_TOKEN]), within);
    assert!(ok, "orbit bench --token failed:\n{out}{err}");
    assert!(out.contains("6 executions x 2 steps") && out.contains(", 0 failed"), "{out}{err}");

    // The same from ORBIT_TOKEN (its workers read it too).
    let (ok, out, err) = run_bounded(bench(&pki, &address).env("ORBIT_TOKEN", ADMIN_TOKEN), within);
    assert!(ok, "orbit bench with ORBIT_TOKEN failed:\n{out}{err}");
    assert!(out.contains("6 executions x 2 steps") && out.contains(", 0 failed"), "{out}{err}");

    // No token: the first call (registering the benchmark workflow) is refused.
    let (ok, out, err) = run_bounded(&mut bench(&pki, &address), within);
    assert!(!ok, "orbit bench without a token succeeded:\n{out}");
    // (tonic prints the status code by its description.)
    assert!(err.contains("valid authentication credentials"), "{err}");
}
