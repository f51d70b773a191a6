//! `orbit dev --identities FILE` through the real binary, table-driven over EVERY RPC of
//! the API's descriptor set (public, admin, worker, schedule and internal), so an RPC added
//! later is covered without editing this test: anonymous → UNAUTHENTICATED; an identity
//! without the method's right → PERMISSION_DENIED; the identity holding exactly that right
//! → anything but an auth error. The server speaks mutual TLS (certificates from
//! `common::tls`) and every call goes over it, as a deployment would: the client's
//! certificate names no identity, so the bearer token alone decides.

// Tests read their environment (ORBIT_PYTHON, the database URL) and the wall clock
// (unique names, deadlines of real processes) directly.
#![allow(clippy::disallowed_methods)]

mod common;

use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use common::tls::Pki;
use common::{free_port, TempDir};
use orbit_auth::token::hash_token_hex;
use orbit_auth::{access_of, Access, Action};
use prost::Message as _;
use tonic::codegen::http::uri::PathAndQuery;
use tonic::transport::Channel;
use tonic::{Code, Request, Status};

/// Every `/package.Service/Method` of the descriptor set.
fn every_rpc() -> Vec<String> {
    let fds = prost_types::FileDescriptorSet::decode(orbit_api::FILE_DESCRIPTOR_SET).unwrap();
    let mut paths = Vec::new();
    for file in fds.file.iter().filter(|f| f.package().starts_with("orbit.")) {
        for service in &file.service {
            for method in &service.method {
                paths.push(format!("/{}.{}/{}", file.package(), service.name(), method.name()));
            }
        }
    }
    paths
}

/// The token of an identity named `name` (tokens are derived from names in this test).
fn token(name: &str) -> String {
    format!("token-of-{name}")
}

/// An admin, a worker, a service and one client per action holding only that action.
fn identities_file() -> String {
    let mut text = String::from("identities:\n");
    let mut add = |name: &str, kind: &str, extra: &str| {
        text.push_str(&format!(
            "  - name: {name}\n    kind: {kind}\n    token_sha256: {}\n{extra}",
            hash_token_hex(&token(name))
        ));
    };
    add("ops", "admin", "");
    add("worker", "worker", "    tasks: ['*']\n");
    add("svc", "service", "");
    for action in Action::ALL {
        let rights = format!("    actions: [{action}]\n    workflows: ['*']\n");
        add(&format!("only-{action}"), "client", &rights);
    }
    text
}

/// Calls `path` with an empty request (valid for every message type) as `who`, returning
/// the status, or `None` when the call succeeded or was still running after `patience`
/// (the handler was reached: auth refusals are answered before any handler runs).
async fn call(
    channel: &Channel,
    path: &str,
    who: Option<&str>,
    patience: Duration,
) -> Option<Status> {
    let mut grpc = tonic::client::Grpc::new(channel.clone());
    grpc.ready().await.expect("channel ready");
    let mut request = Request::new(());
    if let Some(name) = who {
        let value = format!("Bearer {}", token(name)).parse().unwrap();
        request.metadata_mut().insert("authorization", value);
    }
    let codec = tonic_prost::ProstCodec::<(), ()>::default();
    let path = PathAndQuery::try_from(path.to_owned()).unwrap();
    match tokio::time::timeout(patience, grpc.unary(request, path, codec)).await {
        Ok(Ok(_)) | Err(_) => None,
        Ok(Err(status)) => Some(status),
    }
}

fn orbit_code(status: &Status) -> Option<String> {
    status.metadata().get("orbit-error-code").map(|v| v.to_str().unwrap().to_owned())
}

#[tokio::test]
async fn every_rpc_is_refused_anonymous_denied_without_its_right_and_admitted_with_it() {
    let dir = TempDir::new("auth");
    let file = dir.0.join("identities.yaml");
    std::fs::write(&file, identities_file()).unwrap();
    let pki = Pki::new(&dir.0.join("pki"));
    let port = free_port();
    let mut child = Command::new(env!("CARGO_BIN_EXE_orbit"))
        .args(["dev", "--db"])
        .arg(dir.0.join("orbit.db"))
        .args(["--listen", &format!("127.0.0.1:{port}"), "--log", "warn", "--identities"])
        .arg(&file)
        .args(pki.server_flags(true))
        .stdout(Stdio::null())
        .stderr(Stdio::inherit())
        .spawn()
        .expect("spawn orbit dev");
    // `host:port` with a CA: the client options dial https:// and verify the server.
    let endpoint = pki.client("ca", Some("client")).endpoint(&format!("127.0.0.1:{port}"));
    let endpoint = endpoint.expect("TLS endpoint").connect_timeout(Duration::from_secs(5));
    assert!(endpoint.uri().scheme_str() == Some("https"), "{:?}", endpoint.uri());
    // Ready once an admitted call answers (anonymous ones are refused by design).
    let deadline = Instant::now() + Duration::from_secs(60);
    let channel = loop {
        if let Ok(channel) = endpoint.connect().await {
            let list = "/orbit.v1.WorkflowService/ListWorkflows";
            if call(&channel, list, Some("ops"), Duration::from_secs(10)).await.is_none() {
                break channel;
            }
        }
        assert!(Instant::now() < deadline, "orbit dev --identities did not become ready");
        tokio::time::sleep(Duration::from_millis(100)).await;
    };

    let rpcs = every_rpc();
    assert!(rpcs.len() > 30, "the descriptor walk found the API: {rpcs:?}");
    for path in &rpcs {
        let access = access_of(path).unwrap_or_else(|| panic!("{path} has no access rule"));
        let (allowed, denied) = match access {
            Access::Client(action) => {
                let other = Action::ALL.iter().find(|a| **a != action).unwrap();
                (format!("only-{action}"), format!("only-{other}"))
            }
            Access::Worker => ("worker".to_owned(), "only-read".to_owned()),
            Access::Service => ("svc".to_owned(), "ops".to_owned()),
            Access::Open => panic!("{path} must not be open"),
        };
        let anonymous = call(&channel, path, None, Duration::from_secs(30)).await.expect("refused");
        assert_eq!(anonymous.code(), Code::Unauthenticated, "{path} anonymous: {anonymous:?}");
        assert_eq!(orbit_code(&anonymous).as_deref(), Some("UNAUTHENTICATED"), "{path}");

        let status =
            call(&channel, path, Some(&denied), Duration::from_secs(30)).await.expect("refused");
        assert_eq!(status.code(), Code::PermissionDenied, "{path} as {denied}: {status:?}");
        assert_eq!(orbit_code(&status).as_deref(), Some("PERMISSION_DENIED"), "{path}");
        assert!(status.message().contains(&denied), "{path}: the refusal names the identity");

        // Admitted: whatever the handler says about an empty request, it is not auth.
        if let Some(status) = call(&channel, path, Some(&allowed), Duration::from_secs(5)).await {
            // (WORKER_MISMATCH is also PERMISSION_DENIED in gRPC terms, so compare Orbit codes.)
            let code = orbit_code(&status);
            assert!(
                status.code() != Code::Unauthenticated
                    && !matches!(code.as_deref(), Some("UNAUTHENTICATED" | "PERMISSION_DENIED")),
                "{path} as {allowed}: {status:?}"
            );
        }
    }
    let _ = child.kill();
    let _ = child.wait();
}
