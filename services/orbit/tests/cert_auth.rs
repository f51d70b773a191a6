//! Client certificates authenticate over mutual TLS, through the real `orbit dev` binary
//! with `--identities`: an identity matched only by a certificate name (its subject CN, a
//! DNS SAN or a URI SAN such as `spiffe://…`) is admitted with exactly its rights; a
//! certificate of the right CA whose names are in no identity is UNAUTHENTICATED; and when
//! a request carries both a bearer token and a certificate, the TOKEN decides (a token of
//! another identity is authorised as that identity, an unknown token is refused even with
//! a known certificate).

mod common;

use common::tls::{connect, start_dev, tls_address, Pki};
use common::TempDir;
use orbit_api::v1 as pb;
use orbit_auth::token::hash_token_hex;
use tonic::{Code, Request, Status};

const SPIFFE: &str = "spiffe://orbit.test/ns/apps/sa/billing";

/// `ops` (admin) by DNS SAN, `billing` (client, read only) by URI SAN, `cn-app` (client,
/// read only) by subject CN, `starter` (client, start only) by token.
fn identities() -> String {
    format!(
        "identities:\n\
         - name: ops\n  kind: admin\n  cert_names: [client-1]\n\
         - name: billing\n  kind: client\n  cert_names: ['{SPIFFE}']\n  actions: [read]\n  workflows: ['*']\n\
         - name: cn-app\n  kind: client\n  cert_names: [cn-app]\n  actions: [read]\n  workflows: ['*']\n\
         - name: starter\n  kind: client\n  token_sha256: {}\n  actions: [start]\n  workflows: ['*']\n",
        hash_token_hex("starter-token")
    )
}

/// `ListWorkflows` with the client certificate `cert` and, if given, a bearer token.
async fn list(address: &str, pki: &Pki, cert: &str, token: Option<&str>) -> Result<(), Status> {
    let mut client = connect(address, &pki.client("ca", Some(cert))).await.expect("mTLS connect");
    let mut request = Request::new(pb::ListWorkflowsRequest::default());
    if let Some(token) = token {
        request.metadata_mut().insert("authorization", format!("Bearer {token}").parse().unwrap());
    }
    client.list_workflows(request).await.map(|_| ())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn certificate_names_authenticate_and_a_token_wins_over_a_certificate() {
    let dir = TempDir::new("cert-auth");
    let pki = Pki::new(&dir.0.join("pki"));
    // CN `spiffe`, URI SAN only; CN `cn-app` with a SAN no identity names; a stranger.
    pki.leaf("spiffe", "ca", "clientAuth", &format!("URI:{SPIFFE}"), "3650");
    pki.leaf("cn-app", "ca", "clientAuth", "DNS:nobody.example", "3650");
    pki.leaf("stranger", "ca", "clientAuth", "DNS:stranger.example", "3650");
    let file = dir.0.join("identities.yaml");
    std::fs::write(&file, identities()).unwrap();
    let mut flags = pki.server_flags(true);
    flags.extend(["--identities".to_owned(), file.display().to_string()]);
    // Ready once `ops` (admin by its DNS SAN) lists workflows.
    let server =
        start_dev(&dir.0.join("orbit.db"), &flags, &pki.client("ca", Some("client"))).await;
    let address = tls_address(&server);

    // Matched by the URI SAN, and held to that identity's rights.
    list(&address, &pki, "spiffe", None).await.expect("billing (URI SAN) may read");
    let mut billing = connect(&address, &pki.client("ca", Some("spiffe"))).await.unwrap();
    let start = pb::StartExecutionRequest {
        workflow: "hello".into(),
        execution_id: "e1".into(),
        ..Default::default()
    };
    let denied = billing.start_execution(start.clone()).await.expect_err("billing may not start");
    assert_eq!(denied.code(), Code::PermissionDenied, "{denied:?}");
    assert!(denied.message().contains("\"billing\""), "the identity is named: {denied:?}");

    // Matched by the subject CN.
    list(&address, &pki, "cn-app", None).await.expect("cn-app (subject CN) may read");

    // A certificate from the right CA whose names are in no identity.
    let stranger = list(&address, &pki, "stranger", None).await.expect_err("stranger refused");
    assert_eq!(stranger.code(), Code::Unauthenticated, "{stranger:?}");

    // Token and certificate: the token decides. `client` is the admin `ops` by certificate,
    // but the token is `starter`'s, who may not read.
    let token_wins =
        list(&address, &pki, "client", Some("starter-token")).await.expect_err("token");
    assert_eq!(token_wins.code(), Code::PermissionDenied, "{token_wins:?}");
    assert!(
        token_wins.message().contains("\"starter\""),
        "authorised as the token: {token_wins:?}"
    );
    // ... and `billing`'s certificate with `starter`'s token may start (past auth: the
    // workflow does not exist).
    let mut as_starter = connect(&address, &pki.client("ca", Some("spiffe"))).await.unwrap();
    let mut request = Request::new(start);
    request.metadata_mut().insert("authorization", "Bearer starter-token".parse().unwrap());
    let past_auth = as_starter.start_execution(request).await.expect_err("no such workflow");
    assert!(
        !matches!(past_auth.code(), Code::Unauthenticated | Code::PermissionDenied),
        "the token's start right applied: {past_auth:?}"
    );
    // An unknown token is refused even with the admin's certificate.
    let unknown = list(&address, &pki, "client", Some("nobody")).await.expect_err("unknown token");
    assert_eq!(unknown.code(), Code::Unauthenticated, "{unknown:?}");
}
