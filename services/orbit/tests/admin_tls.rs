//! The admin HTTP port over TLS (`--admin-tls`): a real `orbit dev` with mutual TLS on its
//! gRPC port serves `/readyz`, `/metrics` and the web console `/ui` over HTTPS with the same
//! certificate, verified against the test CA, without asking for a client certificate;
//! plain HTTP gets no answer there. Without the flag the port stays plain HTTP.

// Tests read their environment (ORBIT_PYTHON, the database URL) and the wall clock
// (unique names, deadlines of real processes) directly.
#![allow(clippy::disallowed_methods)]

mod common;

use common::admin;
use common::tls::{https_get, start_dev, Pki};
use common::*;
use std::time::{Duration, Instant};

/// `flags` plus the mutual-TLS server flags and an explicit admin port.
fn dev_flags(pki: &Pki, admin_port: u16, extra: &[&str]) -> Vec<String> {
    let mut flags = pki.server_flags(true);
    flags.push("--admin-listen".into());
    flags.push(format!("127.0.0.1:{admin_port}"));
    flags.extend(extra.iter().map(ToString::to_string));
    flags
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_admin_port_serves_https_with_admin_tls() {
    let dir = TempDir::new("admin-tls");
    let pki = Pki::new(&dir.0.join("pki"));
    let port = free_port();
    let flags = dev_flags(&pki, port, &["--admin-tls"]);
    let _server =
        start_dev(&dir.0.join("orbit.db"), &flags, &pki.client("ca", Some("client"))).await;

    // Ready once the first readiness probe ran (the gRPC port answers already).
    let deadline = Instant::now() + Duration::from_secs(30);
    let ready = loop {
        let answer = https_get(&pki, port, "ca", "/readyz").await;
        if matches!(answer, Ok((200, _, _))) || Instant::now() > deadline {
            break answer;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    let (status, alpn, body) = ready.expect("/readyz over https");
    assert_eq!(status, 200, "{body}");
    assert!(body.contains(r#""status":"ready""#), "{body}");
    // Offered h2 and http/1.1 like a browser: the admin port picks HTTP/1.1.
    assert_eq!(alpn.as_deref(), Some("http/1.1"));

    let (status, _, page) = https_get(&pki, port, "ca", "/ui").await.expect("/ui over https");
    assert_eq!(status, 200, "{page}");
    assert!(page.contains("<html") || page.contains("<!doctype"), "the console page: {page}");
    let (status, _, metrics) = https_get(&pki, port, "ca", "/metrics").await.expect("/metrics");
    assert_eq!(status, 200);
    assert!(metrics.contains("orbit_"), "{metrics}");

    // A client that does not trust the CA is refused; plain HTTP gets no HTTP answer.
    let refused = https_get(&pki, port, "other-ca", "/readyz").await;
    assert!(refused.is_err(), "another CA's client must not verify: {refused:?}");
    let plain = admin::get(&format!("127.0.0.1:{port}"), "/healthz").await;
    assert!(
        plain.as_ref().is_none_or(|(status, _)| *status != 200),
        "plain HTTP answered: {plain:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_admin_tls_the_admin_port_stays_plain_http() {
    let dir = TempDir::new("admin-plain");
    let pki = Pki::new(&dir.0.join("pki"));
    let port = free_port();
    let flags = dev_flags(&pki, port, &[]);
    let _server =
        start_dev(&dir.0.join("orbit.db"), &flags, &pki.client("ca", Some("client"))).await;
    let addr = format!("127.0.0.1:{port}");
    let deadline = Instant::now() + Duration::from_secs(30);
    while admin::get(&addr, "/healthz").await.map(|(s, _)| s) != Some(200) {
        assert!(Instant::now() < deadline, "plain /healthz did not answer");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(https_get(&pki, port, "ca", "/healthz").await.is_err(), "no TLS without --admin-tls");
}

#[test]
fn admin_tls_without_a_certificate_is_refused() {
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_orbit"))
        .args(["dev", "--db", "/nonexistent/orbit.db", "--listen", "127.0.0.1:0", "--admin-tls"])
        .output()
        .expect("run orbit dev");
    assert_eq!(out.status.code(), Some(2), "{out:?}");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("--admin-tls needs --tls-cert"), "{stderr}");
}

/// `orbit dev` with identities, mutual TLS and its admin port on every interface, plus
/// `extra`; its stderr once the admin port is up.
fn secured_dev_log(dir: &std::path::Path, pki: &Pki, extra: &[&str]) -> String {
    let identities = dir.join("identities.yaml");
    let entry = common::secure::identity("ops", "admin", "ops-token", "");
    std::fs::write(&identities, format!("identities:\n{entry}")).expect("identities");
    let log = dir.join("stderr.log");
    let file = std::fs::File::create(&log).expect("log file");
    let flags = pki.server_flags(true);
    let admin = format!("0.0.0.0:{}", free_port());
    let child = std::process::Command::new(env!("CARGO_BIN_EXE_orbit"))
        .args(["dev", "--db"])
        .arg(dir.join("orbit.db"))
        .args(["--listen", &format!("127.0.0.1:{}", free_port()), "--log", "warn"])
        .arg("--identities")
        .arg(&identities)
        .args(&flags)
        .args(["--admin-listen", &admin])
        .args(extra)
        .stdout(std::process::Stdio::null())
        .stderr(file)
        .spawn()
        .expect("spawn orbit dev");
    let _guard = ChildGuard(child);
    // The warning is logged when the port is bound, before its address is printed.
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let text = std::fs::read_to_string(&log).unwrap_or_default();
        if text.contains(" on 0.0.0.0:") {
            return text;
        }
        assert!(Instant::now() < deadline, "the admin port did not come up: {text}");
        std::thread::sleep(Duration::from_millis(100));
    }
}

#[test]
fn a_plain_admin_port_off_loopback_with_auth_and_tls_is_warned_about() {
    let dir = TempDir::new("admin-warn");
    let pki = Pki::new(&dir.0.join("pki"));
    let warned = secured_dev_log(&dir.0, &pki, &[]);
    assert!(warned.contains("WARN"), "{warned}");
    assert!(warned.contains("token crosses it in clear"), "{warned}");

    let quiet_dir = TempDir::new("admin-warn-tls");
    let quiet = secured_dev_log(&quiet_dir.0, &pki, &["--admin-tls"]);
    assert!(quiet.contains("admin https on 0.0.0.0:"), "{quiet}");
    assert!(!quiet.contains("in clear"), "no warning with --admin-tls: {quiet}");
}
