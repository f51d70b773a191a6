//! `docker/init-certs.sh` (the init service of docker/compose.yaml) run outside Docker into
//! a temporary directory: its node certificate names every compose host, `orbit dev` serves
//! mutual TLS and enforces its identities file with it, the CLI trusting its CA gets in with
//! its admin token (and not without), the service token authenticates internal RPCs, and a
//! second run keeps what the first one wrote.

mod common;

use common::secure::{bearer, start_dev_with_identities};
use common::tls::tls_address;
use common::*;
use orbit_api::tls::ClientTls;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;
use tonic::codegen::http::uri::PathAndQuery;
use tonic::Code;

const BOUNDED: Duration = Duration::from_secs(60);

fn script() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../docker/init-certs.sh")
}

fn run_script(secrets: &Path) -> String {
    let (ok, out, err) = run_bounded(
        Command::new("sh").arg(script()).arg(secrets).env("ORBIT_BIN", env!("CARGO_BIN_EXE_orbit")),
        BOUNDED,
    );
    assert!(ok, "init-certs.sh failed:\n{out}{err}");
    out
}

/// Calls `path` with an empty request as `token`: the status, or None when it succeeded.
async fn raw_call(
    address: &str,
    tls: &ClientTls,
    path: &str,
    token: &str,
) -> Option<tonic::Status> {
    let channel = tls.endpoint(address).expect("endpoint").connect().await.expect("connect");
    let mut grpc = tonic::client::Grpc::new(channel);
    grpc.ready().await.expect("ready");
    let codec = tonic_prost::ProstCodec::<(), ()>::default();
    let path = PathAndQuery::try_from(path.to_owned()).expect("path");
    grpc.unary(bearer((), token), path, codec).await.err()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn init_certs_output_serves_mutual_tls_and_admits_the_admin_token() {
    let dir = TempDir::new("docker-init");
    let secrets = dir.0.join("secrets");
    let out = run_script(&secrets);
    assert!(out.contains("wrote"), "{out}");
    let file = |name: &str| secrets.join(name);
    let read = |name: &str| std::fs::read_to_string(file(name)).expect(name);
    let admin = read("admin.token").trim().to_owned();
    let service = read("service.token").trim().to_owned();
    for token in [&admin, &service] {
        assert!(token.len() == 64 && token.chars().all(|c| c.is_ascii_hexdigit()), "{token}");
    }
    let identities = read("identities.yaml");
    assert!(!identities.contains(&admin) && !identities.contains(&service), "only hashes");

    // The node certificate names every host of the compose file.
    let (ok, sans, err) = run_bounded(
        Command::new("openssl")
            .args(["x509", "-noout", "-ext", "subjectAltName", "-in"])
            .arg(file("node.pem")),
        BOUNDED,
    );
    assert!(ok, "{err}");
    for host in ["frontend-1", "frontend-2", "owner-1", "owner-2", "scheduler-1", "localhost"] {
        assert!(sans.contains(&format!("DNS:{host}")), "{host} missing: {sans}");
    }
    assert!(sans.contains("IP Address:127.0.0.1"), "{sans}");

    // Served as the owners are (mutual TLS with the node certificate on both ends).
    let flags: Vec<String> =
        [("--tls-cert", "node.pem"), ("--tls-key", "node-key.pem"), ("--tls-client-ca", "ca.pem")]
            .iter()
            .flat_map(|(flag, name)| [flag.to_string(), file(name).display().to_string()])
            .collect();
    let node = ClientTls {
        ca: Some(file("ca.pem")),
        cert: Some(file("node.pem")),
        key: Some(file("node-key.pem")),
    };
    let db = dir.0.join("orbit.db");
    let server =
        start_dev_with_identities(&db, &file("identities.yaml"), &flags, &node, &admin).await;
    let port = server.port;

    // The CLI from the host: `localhost` (a DNS name of the certificate), the CA, the token.
    let cli = |token: Option<&str>| {
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_orbit"));
        cmd.args(["workflow", "list", "--address", &format!("localhost:{port}")])
            .arg("--tls-ca")
            .arg(file("ca.pem"))
            .arg("--tls-client-cert")
            .arg(file("node.pem"))
            .arg("--tls-client-key")
            .arg(file("node-key.pem"))
            .env_remove("ORBIT_TOKEN");
        if let Some(token) = token {
            cmd.env("ORBIT_TOKEN", token);
        }
        run_bounded(&mut cmd, BOUNDED)
    };
    let (ok, out, err) = cli(Some(&admin));
    assert!(ok, "orbit workflow list with the admin token failed: {out}{err}");
    // Without the token, the node certificate alone names the `service` identity, which
    // may call internal RPCs only.
    let (ok, _, err) = cli(None);
    assert!(!ok, "orbit workflow list without a token succeeded");
    assert!(err.contains("PERMISSION_DENIED") && err.contains("\"service\""), "{err}");

    // The service token is the `service` identity: admitted on internal RPCs, which the
    // admin is not.
    let status = "/orbit.internal.v1.SchedulerService/Status";
    let address = tls_address(&server);
    if let Some(s) = raw_call(&address, &node, status, &service).await {
        assert!(
            !matches!(s.code(), Code::Unauthenticated | Code::PermissionDenied),
            "the service token was refused: {s:?}"
        );
    }
    let refused = raw_call(&address, &node, status, &admin).await.expect("admin refused");
    assert_eq!(refused.code(), Code::PermissionDenied, "{refused:?}");

    // Run again (every `docker compose up`): nothing is replaced.
    let out = run_script(&secrets);
    assert!(out.contains("keeping"), "{out}");
    assert_eq!(read("admin.token").trim(), admin);
    assert_eq!(read("identities.yaml"), identities);
}
