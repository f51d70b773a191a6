//! The split services over TLS, as real processes on one SQLite file: owners serve mutual
//! TLS; the frontend and the scheduler call them with the CA and a client certificate; a
//! client and a Rust worker reach the frontend over TLS and the example runs end to end. A
//! frontend without a client certificate cannot reach the owners.

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
    let serve = ["--tls-cert", &cert, "--tls-key", &key];
    let mutual = [&serve[..], &["--tls-client-ca", &ca]].concat();
    let call_owners =
        ["--tls-ca", &ca, "--tls-client-cert", &client_cert, "--tls-client-key", &client_key];

    s.spawn("owner", "owner-1", &[FAST, &mutual].concat());
    s.spawn("scheduler", "scheduler-1", &[FAST, &mutual, &call_owners].concat());
    s.spawn("frontend", "frontend-1", &[FAST, &serve[..], &call_owners].concat());
    // CA only: the owners' handshake refuses it, so its starts cannot reach them.
    s.spawn("frontend", "frontend-2", &[FAST, &serve[..], &["--tls-ca", &ca]].concat());

    let tls = pki.client("ca", None);
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
    stop.cancel();
}
