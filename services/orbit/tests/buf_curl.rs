//! `buf curl` — not our client — against the real `orbit dev` with mutual TLS and an
//! identities file. With the CA, a client certificate and the bearer token it lists the
//! orbit.v1 services through reflection and calls `ListWorkflows`. Without the token the
//! call is refused UNAUTHENTICATED (reflection stays open: listing services needs only a
//! certificate that passes the handshake). Without a client certificate the handshake
//! fails, so nothing — not even reflection — answers.

// Tests read their environment (ORBIT_PYTHON, the database URL) and the wall clock
// (unique names, deadlines of real processes) directly.
#![allow(clippy::disallowed_methods)]

mod common;

use common::buf::buf_curl_raw;
use common::tls::Pki;
use common::{free_port, Server, TempDir};
use orbit_api::v1::workflow_service_client::WorkflowServiceClient;
use orbit_api::v1::ListWorkflowsRequest;
use orbit_auth::token::hash_token_hex;
use serde_json::Value;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};
use tonic::service::interceptor::InterceptedService;
use tonic::transport::Channel;

const TOKEN: &str = "buf-curl-admin-token";

type Authed = WorkflowServiceClient<
    InterceptedService<
        Channel,
        fn(tonic::Request<()>) -> Result<tonic::Request<()>, tonic::Status>,
    >,
>;

fn with_token(mut request: tonic::Request<()>) -> Result<tonic::Request<()>, tonic::Status> {
    let value = format!("Bearer {TOKEN}").parse().expect("ascii");
    request.metadata_mut().insert("authorization", value);
    Ok(request)
}

/// Our own client over mutual TLS with the token, once `orbit dev` answers it.
async fn ready_client(pki: &Pki, port: u16) -> Authed {
    let tls = pki.client("ca", Some("client"));
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let endpoint = tls.endpoint(&format!("127.0.0.1:{port}")).expect("endpoint");
        if let Ok(channel) = endpoint.connect_timeout(Duration::from_secs(5)).connect().await {
            let interceptor: fn(_) -> _ = with_token;
            let mut client = WorkflowServiceClient::with_interceptor(channel, interceptor);
            if client.list_workflows(ListWorkflowsRequest::default()).await.is_ok() {
                return client;
            }
        }
        assert!(Instant::now() < deadline, "orbit dev with mutual TLS did not become ready");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

fn listed(stdout: &str) -> Vec<String> {
    stdout.lines().map(str::trim).filter(|l| !l.is_empty()).map(str::to_owned).collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn buf_curl_with_mutual_tls_and_a_token_lists_and_calls_and_is_refused_without_them() {
    let dir = TempDir::new("buf-curl");
    let pki = Pki::new(&dir.0.join("pki"));
    // Only a token identity: the client certificate (`client-1`) names nobody, so without
    // the token a request that passes the handshake is still anonymous.
    let identities = dir.0.join("identities.yaml");
    let entry = format!(
        "identities:\n  - {{name: ops, kind: admin, token_sha256: {}}}\n",
        hash_token_hex(TOKEN)
    );
    std::fs::write(&identities, entry).unwrap();
    let port = free_port();
    let db = dir.0.join("orbit.db");
    let child = Command::new(env!("CARGO_BIN_EXE_orbit"))
        .args(["dev", "--db"])
        .arg(&db)
        .args(["--listen", &format!("127.0.0.1:{port}"), "--log", "warn", "--identities"])
        .arg(&identities)
        .args(pki.server_flags(true))
        .stdout(Stdio::null())
        .stderr(Stdio::inherit())
        .spawn()
        .expect("spawn orbit dev");
    let _server = Server { child, port, db };
    let mut client = ready_client(&pki, port).await;
    let document = std::fs::read_to_string(common::example("hello.yaml")).unwrap();
    let register = orbit_api::v1::RegisterWorkflowRequest { document, format: 0 };
    client.register_workflow(register).await.expect("register over mutual TLS");

    let base = format!("https://127.0.0.1:{port}");
    let path = |f: &str| pki.path(f).display().to_string();
    let (ca, cert, key) = (path("ca.pem"), path("client.pem"), path("client-key.pem"));
    let cwd = dir.0.clone();
    let auth = format!("authorization: Bearer {TOKEN}");
    let list = format!("{base}/orbit.v1.WorkflowService/ListWorkflows");
    let results = tokio::task::spawn_blocking(move || {
        let tls = ["--cacert", &ca, "--cert", &cert, "--key", &key];
        let no_cert = ["--cacert", &ca];
        let run = |tls: &[&str], rest: &[&str]| buf_curl_raw(&cwd, &[tls, rest].concat());
        [
            // Everything: the token also goes to the reflection requests (`--reflect-header '*'`).
            run(&tls, &["-H", &auth, "--reflect-header", "*", "--list-services", &base]),
            // Reflection without the token: open in the auth layer.
            run(&tls, &["--list-services", &base]),
            run(&tls, &["-H", &auth, "-d", "{}", &list]),
            // The call without the token.
            run(&tls, &["-v", "-d", "{}", &list]),
            // No client certificate: refused at the handshake, token or not.
            run(&no_cert, &["-v", "-H", &auth, "-d", "{}", &list]),
            run(&no_cert, &["-v", "--list-services", &base]),
        ]
    })
    .await
    .expect("buf curl thread");
    let [with_token, without_token, call, anonymous, no_cert_call, no_cert_list] = results;

    for (what, (ok, out, err)) in [("with the token", &with_token), ("without it", &without_token)]
    {
        assert!(ok, "--list-services {what} failed: {out}{err}");
        let services = listed(out);
        for expected in
            ["orbit.v1.WorkflowService", "orbit.v1.WorkerService", "orbit.v1.AdminService"]
        {
            assert!(
                services.iter().any(|s| s == expected),
                "{what}: {expected} not in {services:?}"
            );
        }
    }

    let (ok, out, err) = &call;
    assert!(ok, "ListWorkflows with certificate and token failed: {out}{err}");
    let answer: Value =
        serde_json::from_str(out).unwrap_or_else(|e| panic!("not JSON ({e}): {out}"));
    let names: Vec<&str> = answer["workflows"]
        .as_array()
        .unwrap_or_else(|| panic!("no workflows array: {answer}"))
        .iter()
        .filter_map(|w| w["name"].as_str())
        .collect();
    assert_eq!(names, ["hello"], "{answer}");

    let (ok, out, err) = &anonymous;
    assert!(!ok, "ListWorkflows without the token answered: {out}");
    assert!(err.contains("unauthenticated"), "expected UNAUTHENTICATED from buf: {out}{err}");

    assert!(err.contains("Orbit-Error-Code: UNAUTHENTICATED"), "Orbit's refusal: {err}");
    // With `-v` buf logs each HTTP response it receives as `buf: < ...`: with a certificate
    // the (open) reflection call was answered — the contrast for the checks below.
    assert!(err.contains("buf: < (#1) HTTP/2.0 200 OK"), "reflection answered over mTLS: {err}");

    // Without a client certificate: with TLS 1.3 the server checks the certificate after
    // the client's side of the handshake, then closes the connection with a
    // `certificate required` alert, which buf reports only as a failed (reflection) call.
    // What matters is visible in its verbose log: it offered no certificate and no HTTP
    // response ever came back — the auth layer never saw the request.
    for (what, (ok, out, err)) in [("call", &no_cert_call), ("list", &no_cert_list)] {
        assert!(!ok && out.is_empty(), "{what} without a client certificate answered: {out}");
        assert!(err.contains("Failure:"), "{what}: no failure reported: {err}");
        assert!(!err.contains("Offering client cert"), "{what}: buf had a certificate: {err}");
        assert!(
            !err.contains("buf: <"),
            "{what}: the server answered without a certificate: {err}"
        );
        assert!(
            !err.contains("unauthenticated"),
            "{what}: refused by auth, not the handshake: {err}"
        );
    }
}
