//! The split services over TLS with identities, as real processes on one SQLite file:
//! every service serves mutual TLS and enforces one identities file; the frontend and the
//! scheduler call the owners with the CA and a client certificate that is a `service`
//! identity; a client and a Rust worker (client certificate of the admin identity) reach
//! the frontend and the example runs end to end. A frontend without a client certificate
//! cannot reach the owners (refused at the handshake); one whose certificate is not a
//! `service` identity is refused by the owners' identities, and says so.

mod common;

use common::scenario::worker_tls;
use common::split::{Split, FAST};
use common::tls::{connect, Pki};
use common::*;
use serde_json::json;
use std::time::Duration;
use tokio_util::sync::CancellationToken;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn frontend_reaches_owners_over_mutual_tls() {
    let mut s = Split::new("tls-split");
    let pki = Pki::new(&s.dir.0.join("pki"));
    let path = |f: &str| pki.path(f).display().to_string();
    let (cert, key, ca) = (path("server.pem"), path("server-key.pem"), path("ca.pem"));
    let (client_cert, client_key) = (path("client.pem"), path("client-key.pem"));
    // `app` is the admin (clients, workers); `client` (SAN client-1) the services.
    pki.leaf("app", "ca", "clientAuth", "DNS:app", "3650");
    let identities = s.dir.0.join("identities.yaml");
    std::fs::write(
        &identities,
        "identities:\n- {name: admin, kind: admin, cert_names: [app]}\n\
         - {name: services, kind: service, cert_names: [client-1]}\n",
    )
    .unwrap();
    let ids = identities.display().to_string();
    let mutual =
        ["--tls-cert", &cert, "--tls-key", &key, "--tls-client-ca", &ca, "--identities", &ids];
    let call_owners =
        ["--tls-ca", &ca, "--tls-client-cert", &client_cert, "--tls-client-key", &client_key];
    let (app_cert, app_key) = (path("app.pem"), path("app-key.pem"));
    let as_admin = ["--tls-ca", &ca, "--tls-client-cert", &app_cert, "--tls-client-key", &app_key];

    s.spawn("owner", "owner-1", &[FAST, &mutual].concat());
    s.spawn("scheduler", "scheduler-1", &[FAST, &mutual[..], &call_owners].concat());
    s.spawn("frontend", "frontend-1", &[FAST, &mutual[..], &call_owners].concat());
    // CA only: the owners' handshake refuses it, so its starts cannot reach them.
    s.spawn("frontend", "frontend-2", &[FAST, &mutual[..], &["--tls-ca", &ca]].concat());
    // A certificate of the right CA, but the admin's, not a service's.
    s.spawn("frontend", "frontend-3", &[FAST, &mutual[..], &as_admin].concat());

    let tls = pki.client("ca", Some("app"));
    let good = s.node("frontend-1").addr.clone();
    let mut c = connect(&good, &tls).await.expect("tls client");
    register_example(&mut c, "hello.yaml").await;
    let stop = CancellationToken::new();
    worker_tls(&good, "tls-split", &stop, tls.clone());
    start(&mut c, "hello", "hello-tls", json!({"name": "Ada"})).await.expect("start over mTLS");
    assert_eq!(
        result(&mut c, "hello-tls", Duration::from_secs(30)).await,
        (orbit_api::v1::ExecutionStatus::Completed, json!({"greeting": "Hello, Ada!"}))
    );

    let bad = s.node("frontend-2").addr.clone();
    let mut b = connect(&bad, &tls).await.expect("tls client to frontend-2");
    // Bounded by the frontend's retry budget (15 s) plus a margin.
    let refused = tokio::time::timeout(
        Duration::from_secs(60),
        start(&mut b, "hello", "hello-no-cert", json!({"name": "Bob"})),
    )
    .await
    .expect("the start hung");
    let status = refused.expect_err("a frontend without a client certificate reached an owner");
    assert_eq!(status.code(), tonic::Code::Unavailable, "{status:?}");
    assert!(
        s.node("owner-1").log().contains("tls handshake refused"),
        "the owner did not log the refused handshake:\n{}",
        s.node("owner-1").log()
    );

    let wrong = s.node("frontend-3").addr.clone();
    let mut w = match connect(&wrong, &tls).await {
        Ok(w) => w,
        Err(e) => panic!("tls client to frontend-3: {e}\n{}", s.node("frontend-3").log()),
    };
    let status = tokio::time::timeout(
        Duration::from_secs(60),
        start(&mut w, "hello", "hello-not-a-service", json!({"name": "Cy"})),
    )
    .await
    .expect("the start hung")
    .expect_err("an admin certificate called an owner");
    assert_eq!(status.code(), tonic::Code::PermissionDenied, "{status:?}");
    assert!(
        status.message().contains("refused this service's credentials")
            && status.message().contains("\"admin\""),
        "the refusal says whose credentials: {status:?}"
    );
    assert!(
        s.node("owner-1").log().contains("refused: permission denied"),
        "the owner logs the refusal:\n{}",
        s.node("owner-1").log()
    );
    stop.cancel();
}
