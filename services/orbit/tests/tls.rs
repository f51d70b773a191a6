//! TLS and mutual TLS on the real `orbit dev` binary: the examples run end to end over
//! TLS with a Rust worker and the CLI trusting the test CA; with `--tls-client-ca`, clients
//! without a certificate, with one from another CA, or with an expired one are refused at
//! the handshake; plain text to a TLS port fails quickly; a certificate reload (SIGHUP)
//! serves the new certificate to new connections while open ones keep working.

// Tests read their environment (ORBIT_PYTHON, the database URL) and the wall clock
// (unique names, deadlines of real processes) directly.
#![allow(clippy::disallowed_methods)]

mod common;

use common::scenario::{run_every_example, worker_tls, EXAMPLES};
use common::tls::{connect, handshake_refusal, list, start_dev, tls_address, Pki};
use common::*;
use orbit_api::tls::ClientTls;
use orbit_api::v1 as pb;
use std::process::Command;
use std::time::{Duration, Instant};
use tokio_util::sync::CancellationToken;

/// Far above the server's 10 s handshake timeout and the client's 5 s connect timeout: a
/// hang fails the test instead of blocking it.
const BOUNDED: Duration = Duration::from_secs(30);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn examples_run_over_tls_and_plain_text_is_refused() {
    let dir = TempDir::new("tls-examples");
    let pki = Pki::new(&dir.0.join("pki"));
    let tls = pki.client("ca", None);
    let server = start_dev(&dir.0.join("orbit.db"), &pki.server_flags(false), &tls).await;
    let address = tls_address(&server);

    let mut c = connect(&address, &tls).await.expect("tls client");
    for f in EXAMPLES {
        register_example(&mut c, f).await;
    }
    let stop = CancellationToken::new();
    worker_tls(&address, "tls-examples", &stop, tls.clone());
    let mut d = connect(&address, &tls).await.expect("tls client");
    run_every_example(&mut c, &mut d).await;
    stop.cancel();

    // The CLI with --tls-ca dials https:// and verifies the server.
    let ca = pki.path("ca.pem");
    let (ok, out, err) = run_bounded(
        Command::new(env!("CARGO_BIN_EXE_orbit"))
            .args(["workflow", "list", "--address", &address])
            .arg("--tls-ca")
            .arg(&ca),
        BOUNDED,
    );
    assert!(ok, "orbit workflow list over TLS failed: {err}");
    assert!(out.contains("order-saga"), "{out}");
    // `orbit bench --address` with --tls-ca: its client and its workers go over TLS.
    let (ok, out, err) = run_bounded(
        Command::new(env!("CARGO_BIN_EXE_orbit"))
            .args(["bench", "--address", &address, "--executions", "10", "--steps", "1"])
            .args(["--concurrency", "4", "--workers", "1"])
            .arg("--tls-ca")
            .arg(&ca),
        Duration::from_secs(120),
    );
    assert!(
        ok && out.contains("10 executions x 1 steps") && out.contains("0 failed"),
        "{out}{err}"
    );
    // Without a CA the CLI speaks plain text to the TLS port: an error, not a hang.
    let (ok, _, err) = run_bounded(
        Command::new(env!("CARGO_BIN_EXE_orbit")).args(["workflow", "list", "--address", &address]),
        BOUNDED,
    );
    assert!(!ok, "plain text to a TLS port succeeded");
    assert!(!err.is_empty(), "no error printed");

    // A plain-text gRPC client fails cleanly, within the bound.
    let plain = tokio::time::timeout(BOUNDED, list(&address, &ClientTls::default()))
        .await
        .expect("plain text to a TLS port hung");
    let err = plain.expect_err("plain text to a TLS port answered");
    assert!(!err.contains("status Ok"), "{err}");
    // A client trusting another CA rejects the server's certificate.
    let wrong = tokio::time::timeout(BOUNDED, list(&address, &pki.client("other-ca", None)))
        .await
        .expect("hung");
    let err = wrong.expect_err("a server certificate from an unknown CA was accepted");
    assert!(err.contains("UnknownIssuer"), "{err}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mutual_tls_refuses_bad_client_certificates_at_the_handshake() {
    let dir = TempDir::new("tls-mutual");
    let pki = Pki::new(&dir.0.join("pki"));
    let good = pki.client("ca", Some("client"));
    let server = start_dev(&dir.0.join("orbit.db"), &pki.server_flags(true), &good).await;
    let address = tls_address(&server);
    list(&address, &good).await.expect("a client certificate from the CA is accepted");

    // Each refusal is a TLS alert from the server's handshake (seen by a bare rustls
    // client), and a gRPC client gets a transport error, never a status from a handler.
    for (client, alert) in [
        (None, "CertificateRequired"),
        (Some("other-client"), "UnknownCA"),
        (Some("expired"), "CertificateExpired"),
    ] {
        let raw = tokio::time::timeout(BOUNDED, handshake_refusal(&pki, server.port, "ca", client))
            .await
            .unwrap_or_else(|_| panic!("{client:?}: the handshake hung"));
        assert!(
            raw.contains(&format!("received fatal alert: {alert}")),
            "{client:?}: expected the {alert} alert, got {raw}"
        );
        let refused = tokio::time::timeout(BOUNDED, list(&address, &pki.client("ca", client)))
            .await
            .unwrap_or_else(|_| panic!("{client:?}: the refusal hung"));
        let err = refused.expect_err(&format!("{client:?} was accepted"));
        assert!(err.contains("transport error"), "{client:?}: not a transport error: {err}");
    }
    // The process kept serving.
    list(&address, &good).await.expect("still serving after the refusals");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sighup_reloads_the_certificate_for_new_connections() {
    let dir = TempDir::new("tls-reload");
    let pki = Pki::new(&dir.0.join("pki"));
    let old = pki.client("ca", None);
    let server = start_dev(&dir.0.join("orbit.db"), &pki.server_flags(false), &old).await;
    let address = tls_address(&server);
    let mut open = connect(&address, &old).await.expect("tls client");
    open.list_workflows(pb::ListWorkflowsRequest::default()).await.expect("list");

    // A new CA and a server certificate from it replace the files (renames: atomic).
    pki.ca("new-ca", "Orbit New CA");
    pki.leaf("new-server", "new-ca", "serverAuth", "DNS:localhost,IP:127.0.0.1", "3650");
    for (from, to) in [("new-server-key.pem", "server-key.pem"), ("new-server.pem", "server.pem")] {
        std::fs::rename(pki.path(from), pki.path(to)).expect("replace");
    }
    let hup = Command::new("kill")
        .args(["-HUP", &server.child.id().to_string()])
        .status()
        .expect("kill -HUP");
    assert!(hup.success());

    // New connections get the new certificate (a few polls: the reload is asynchronous).
    let new = pki.client("new-ca", None);
    let deadline = Instant::now() + BOUNDED;
    while let Err(e) = list(&address, &new).await {
        assert!(Instant::now() < deadline, "the new certificate was never served: {e}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let err = list(&address, &old).await.expect_err("the old certificate is still served");
    assert!(err.contains("UnknownIssuer"), "{err}");
    // The connection opened before the reload is still up and serving.
    open.list_workflows(pb::ListWorkflowsRequest::default())
        .await
        .expect("the open connection survived the reload");
}
