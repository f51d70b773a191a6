//! Service-mesh mode through the real `orbit` binary. `orbit dev --tls-from-mesh
//! --mesh-identity linkerd|xfcc --identities F` authorises a request carrying the mesh's
//! header (`l5d-client-id`, `x-forwarded-client-cert`) as the identity it names: allowed on
//! that identity's action, PERMISSION_DENIED naming it on another — proof it was the one
//! identified; only the LAST XFCC element counts; a bearer token takes precedence. Without
//! `--mesh-identity` the same headers give UNAUTHENTICATED: a client sending them itself
//! gains nothing. Conflicting flags stop the start with exit code 2.

// Tests read their environment (ORBIT_PYTHON, the database URL) and the wall clock
// (unique names, deadlines of real processes) directly.
#![allow(clippy::disallowed_methods)]

mod common;

use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use common::{free_port, run_bounded, Server, TempDir};
use orbit_auth::token::hash_token_hex;
use tonic::codegen::http::uri::PathAndQuery;
use tonic::metadata::{MetadataKey, MetadataValue};
use tonic::transport::Channel;
use tonic::{Code, Request, Status};

const LIST: &str = "/orbit.v1.WorkflowService/ListWorkflows";
const REGISTER: &str = "/orbit.v1.WorkflowService/RegisterWorkflow";
const ADMIN: &str = "/orbit.v1.AdminService/ClusterStatus";
const LINKERD: &str = "l5d-client-id";
const XFCC: &str = "x-forwarded-client-cert";
const BILLING_LINKERD: &str = "billing.prod.serviceaccount.identity.linkerd.cluster.local";
const SHIPPING_SPIFFE: &str = "spiffe://cluster.local/ns/prod/sa/shipping";
const ADMIN_SPIFFE: &str = "spiffe://cluster.local/ns/ops/sa/admin";
/// What an Istio sidecar's XFCC looks like: the sidecar's own URI in `By`, the verified
/// client certificate's hash, (empty) subject and SPIFFE URI SAN.
const SHIPPING_XFCC: &str = "By=spiffe://cluster.local/ns/prod/sa/orbit;\
    Hash=468ed33be74eee6556d90c0149c1309e9ba61d6425303443c0748a02dd8de688;\
    Subject=\"\";URI=spiffe://cluster.local/ns/prod/sa/shipping";

/// Readers named by mesh identities, an admin named by a SPIFFE id, and two token holders.
fn identities_file() -> String {
    format!(
        "identities:\n\
         - {{name: ops, kind: admin, token_sha256: {ops}}}\n\
         - {{name: starter, kind: client, token_sha256: {starter}, actions: [start], workflows: ['*']}}\n\
         - {{name: billing, kind: client, cert_names: [{BILLING_LINKERD}], actions: [read], workflows: ['*']}}\n\
         - {{name: shipping, kind: client, cert_names: ['{SHIPPING_SPIFFE}'], actions: [read], workflows: ['*']}}\n\
         - {{name: mesh-admin, kind: admin, cert_names: ['{ADMIN_SPIFFE}']}}\n",
        ops = hash_token_hex("ops-token"),
        starter = hash_token_hex("starter-token"),
    )
}

/// Calls `path` with an empty request and these metadata entries: the status, or `None`
/// when the call was admitted (it succeeded, or failed with anything but an auth error).
async fn call(channel: &Channel, path: &str, metadata: &[(&str, &str)]) -> Option<Status> {
    let mut grpc = tonic::client::Grpc::new(channel.clone());
    grpc.ready().await.expect("channel ready");
    let mut request = Request::new(());
    for (name, value) in metadata {
        let key = MetadataKey::from_bytes(name.as_bytes()).expect("metadata key");
        request.metadata_mut().insert(key, MetadataValue::try_from(*value).expect("ascii"));
    }
    let codec = tonic_prost::ProstCodec::<(), ()>::default();
    let path = PathAndQuery::try_from(path.to_owned()).unwrap();
    let call = grpc.unary(request, path, codec);
    match tokio::time::timeout(Duration::from_secs(30), call).await.expect("bounded call") {
        Ok(_) => None,
        Err(status) if matches!(status.code(), Code::Unauthenticated | Code::PermissionDenied) => {
            Some(status)
        }
        Err(_) => None,
    }
}

/// `orbit dev --identities F` plus `flags`, ready once the admin token lists workflows.
async fn start(dir: &TempDir, flags: &[&str]) -> (Server, Channel) {
    let file = dir.0.join("identities.yaml");
    std::fs::write(&file, identities_file()).unwrap();
    let port = free_port();
    let db = dir.0.join("orbit.db");
    let child = Command::new(env!("CARGO_BIN_EXE_orbit"))
        .args(["dev", "--db"])
        .arg(&db)
        .args(["--listen", &format!("127.0.0.1:{port}"), "--log", "warn", "--identities"])
        .arg(&file)
        .args(flags)
        .stdout(Stdio::null())
        .stderr(Stdio::inherit())
        .spawn()
        .expect("spawn orbit dev");
    let server = Server { child, port, db };
    let deadline = Instant::now() + Duration::from_secs(60);
    let address = format!("http://127.0.0.1:{port}");
    loop {
        if let Ok(channel) = Channel::from_shared(address.clone()).unwrap().connect().await {
            if call(&channel, LIST, &[("authorization", "Bearer ops-token")]).await.is_none() {
                return (server, channel);
            }
        }
        assert!(Instant::now() < deadline, "orbit dev {flags:?} did not become ready");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

fn assert_refused(status: Option<Status>, code: Code, names: Option<&str>, what: &str) {
    let status = status.unwrap_or_else(|| panic!("{what}: admitted, expected {code:?}"));
    assert_eq!(status.code(), code, "{what}: {status:?}");
    if let Some(name) = names {
        assert!(status.message().contains(&format!("{name:?}")), "{what}: {status:?}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn linkerd_client_id_is_the_caller_when_trusted() {
    let dir = TempDir::new("mesh-linkerd");
    let (_server, ch) = start(&dir, &["--tls-from-mesh", "--mesh-identity", "linkerd"]).await;
    let billing = [(LINKERD, BILLING_LINKERD)];
    assert!(call(&ch, LIST, &billing).await.is_none(), "billing may read");
    let denied = call(&ch, REGISTER, &billing).await;
    assert_refused(denied, Code::PermissionDenied, Some("billing"), "billing registering");

    // Unknown or malformed names, and the other mesh's header, identify nobody.
    let unknown = [(LINKERD, "nobody.prod.serviceaccount.identity.linkerd.cluster.local")];
    assert_refused(call(&ch, LIST, &unknown).await, Code::Unauthenticated, None, "unknown id");
    let malformed = [(LINKERD, "billing, ops")];
    assert_refused(call(&ch, LIST, &malformed).await, Code::Unauthenticated, None, "malformed");
    let xfcc = [(XFCC, SHIPPING_XFCC)];
    assert_refused(call(&ch, LIST, &xfcc).await, Code::Unauthenticated, None, "xfcc in linkerd");

    // A bearer token takes precedence over the mesh identity: the token's holder (start
    // only) is the one refused a read.
    let both = [(LINKERD, BILLING_LINKERD), ("authorization", "Bearer starter-token")];
    let status = call(&ch, LIST, &both).await;
    assert_refused(status, Code::PermissionDenied, Some("starter"), "token with header");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn xfcc_last_element_is_the_caller_when_trusted() {
    let dir = TempDir::new("mesh-xfcc");
    let (_server, ch) = start(&dir, &["--tls-from-mesh", "--mesh-identity", "xfcc"]).await;
    let shipping = [(XFCC, SHIPPING_XFCC)];
    assert!(call(&ch, LIST, &shipping).await.is_none(), "shipping may read");
    let denied = call(&ch, REGISTER, &shipping).await;
    assert_refused(denied, Code::PermissionDenied, Some("shipping"), "shipping registering");

    // The admin's SPIFFE id as the (only) element is an admin ...
    let admin = format!("By=spiffe://cluster.local/ns/prod/sa/orbit;URI={ADMIN_SPIFFE}");
    assert!(call(&ch, ADMIN, &[(XFCC, &admin)]).await.is_none(), "mesh-admin is admin");
    // ... but as an EARLIER element (sent by the client, then appended to by the sidecar)
    // it is not the peer: the last element, shipping, is the one refused.
    let forged = format!("URI={ADMIN_SPIFFE},{SHIPPING_XFCC}");
    let status = call(&ch, ADMIN, &[(XFCC, &forged)]).await;
    assert_refused(status, Code::PermissionDenied, Some("shipping"), "forged first element");

    let malformed = [(XFCC, "URI=\"spiffe://cluster.local/ns/ops/sa/admin")];
    assert_refused(call(&ch, ADMIN, &malformed).await, Code::Unauthenticated, None, "malformed");
    let linkerd = [(LINKERD, BILLING_LINKERD)];
    assert_refused(call(&ch, LIST, &linkerd).await, Code::Unauthenticated, None, "l5d in xfcc");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mesh_headers_gain_nothing_when_mesh_identity_is_off() {
    // Plain `--identities`, and `--tls-from-mesh` alone: the headers are never read.
    for flags in [&[][..], &["--tls-from-mesh"][..]] {
        let dir = TempDir::new("mesh-off");
        let (_server, ch) = start(&dir, flags).await;
        for (path, header, value) in [
            (LIST, LINKERD, BILLING_LINKERD),
            (LIST, XFCC, SHIPPING_XFCC),
            (ADMIN, XFCC, &format!("URI={ADMIN_SPIFFE}")[..]),
        ] {
            let status = call(&ch, path, &[(header, value)]).await;
            assert_refused(status, Code::Unauthenticated, None, &format!("{flags:?} {header}"));
        }
    }
}

#[test]
fn conflicting_mesh_flags_stop_the_start() {
    let dir = TempDir::new("mesh-flags");
    let db = dir.0.join("orbit.db");
    let run = |args: &[&str], env: &[(&str, &str)]| {
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_orbit"));
        cmd.args(["dev", "--listen", "127.0.0.1:0", "--db"])
            .arg(&db)
            .args(args)
            .envs(env.iter().copied());
        let (ok, _, err) = run_bounded(&mut cmd, Duration::from_secs(60));
        (ok, err)
    };
    let tls = ["--tls-cert", "server.pem", "--tls-key", "server-key.pem"];
    let combined = [&["--tls-from-mesh"][..], &tls].concat();
    let from_env = [("ORBIT_TLS_FROM_MESH", "true")];
    let cases = [
        (&combined[..], &[][..], "cannot be combined with --tls-cert"),
        (&tls[..], &from_env[..], "cannot be combined with --tls-cert"),
        (&["--mesh-identity", "linkerd"][..], &[][..], "needs --tls-from-mesh"),
        (&["--tls-from-mesh", "--mesh-identity", "xfcc"][..], &[][..], "needs --identities"),
    ];
    for (args, env, expected) in cases {
        let (ok, err) = run(args, env);
        assert!(!ok, "{args:?} {env:?} started");
        assert!(err.contains(expected), "{args:?} {env:?}: {err}");
    }
    // ORBIT_TLS_FROM_MESH=false is off, not a conflict: the start goes on to read the
    // (missing) certificate files and fails there instead.
    let (ok, err) = run(&tls, &[("ORBIT_TLS_FROM_MESH", "false")]);
    assert!(!ok && !err.contains("--tls-from-mesh") && err.contains("server.pem"), "{err}");
}
