//! The built-in HTTP step on the split services over PostgreSQL, secure as deployed (mutual
//! TLS and identities): owners queue http attempts (`ORBIT_ENABLE_HTTP_STEP`), the
//! frontends run the built-in worker, which opens its session over TLS as the worker
//! identity of `ORBIT_HTTP_STEP_TOKEN`, and only hosts of `ORBIT_HTTP_ALLOW_HOSTS` are
//! called, over plain http and over https (a test CA given with `ORBIT_HTTP_CA_FILE`). A frontend with identities but no token refuses to start.

mod common;

use common::cluster::{self, Topology, FAST};
use common::tls;
use common::*;
use http_body_util::{BodyExt as _, Full};
use hyper::body::{Bytes, Incoming};
use hyper::{Request, Response};
use hyper_util::rt::TokioIo;
use orbit_api::v1 as pb;
use serde_json::{json, Value};
use std::convert::Infallible;
use std::time::Duration;

const WAIT: Duration = Duration::from_secs(90);

const CALL: &str = r#"
name: call
version: "1"
steps:
  - id: call
    http: { method: POST, url: "${{ input.url }}", body: { n: "${{ input.n }}" } }
    timeout: 20s
    retry: { max_attempts: 2, initial_interval: 100ms }
output: ${{ steps.call.output }}
"#;

/// `/ok` echoes the request body as JSON; anything else is 404.
async fn handle(req: Request<Incoming>) -> Result<Response<Full<Bytes>>, Infallible> {
    let (parts, body) = req.into_parts();
    let body = body.collect().await.map(|b| b.to_bytes()).unwrap_or_default();
    let (status, text) = match parts.uri.path() {
        "/ok" => {
            let received = serde_json::from_slice::<Value>(&body).unwrap_or(Value::Null);
            (200, json!({ "method": parts.method.as_str(), "received": received }).to_string())
        }
        _ => (404, "\"no such thing\"".to_string()),
    };
    Ok(Response::builder()
        .status(status)
        .header("content-type", "application/json")
        .body(Full::new(Bytes::from(text)))
        .expect("response"))
}

/// [`handle`] over TLS with the test PKI's server certificate (`localhost`, `127.0.0.1`).
async fn https_server(pki: &tls::Pki) -> u16 {
    use rustls::pki_types::pem::PemObject;
    use rustls::pki_types::{CertificateDer, PrivateKeyDer};
    let certs = CertificateDer::pem_file_iter(pki.path("server.pem"))
        .expect("server.pem")
        .collect::<Result<Vec<_>, _>>()
        .expect("server certificate");
    let key = PrivateKeyDer::from_pem_file(pki.path("server-key.pem")).expect("server key");
    let provider = std::sync::Arc::new(rustls::crypto::ring::default_provider());
    let config = rustls::ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .expect("versions")
        .with_no_client_auth()
        .with_single_cert(certs, key)
        .expect("server config");
    let acceptor = tokio_rustls::TlsAcceptor::from(std::sync::Arc::new(config));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let port = listener.local_addr().expect("addr").port();
    tokio::spawn(async move {
        loop {
            let Ok((stream, _)) = listener.accept().await else { return };
            let acceptor = acceptor.clone();
            tokio::spawn(async move {
                let Ok(stream) = acceptor.accept(stream).await else { return };
                let service = hyper::service::service_fn(handle);
                let _ = hyper::server::conn::http1::Builder::new()
                    .serve_connection(TokioIo::new(stream), service)
                    .await;
            });
        }
    });
    port
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn http_steps_run_on_a_secure_split_cluster() {
    let port = http_peer::serve(handle).await;
    let certs = TempDir::new("http-step-pki");
    let pki = tls::Pki::new(&certs.0);
    let tls_port = https_server(&pki).await;
    let allow = format!("127.0.0.1:{port},localhost:{tls_port}");
    let ca = pki.path("ca.pem").display().to_string();
    let env = [
        ("ORBIT_ENABLE_HTTP_STEP", "true"),
        ("ORBIT_HTTP_ALLOW_HOSTS", allow.as_str()),
        // The test server's private CA, trusted for https steps besides the web roots.
        ("ORBIT_HTTP_CA_FILE", ca.as_str()),
        // The topology's admin identity may open worker sessions; the token decides who
        // the built-in worker is (its client certificate is the frontend's service one).
        ("ORBIT_HTTP_STEP_TOKEN", cluster::token()),
    ];
    let topo = Topology::start_env("httpstep", [1, 1, 1], "disable", FAST, &env);
    let mut c = topo.client(0).await;
    register(&mut c, CALL).await;
    let url = |path: &str| format!("http://127.0.0.1:{port}{path}");

    start(&mut c, "call", "ok", json!({ "url": url("/ok"), "n": 7 })).await.expect("start");
    let (status, output) = result(&mut c, "ok", WAIT).await;
    assert_eq!(status, pb::ExecutionStatus::Completed, "{output}");
    assert_eq!(output["status"], json!(200), "{output}");
    assert_eq!(output["body"], json!({ "method": "POST", "received": { "n": 7 } }), "{output}");
    let h = history(&mut c, "ok").await;
    let dispatched = h.iter().find(|e| e.event_type == "StepDispatched").expect("dispatched");
    assert_eq!(event_payload(dispatched)["worker_id"], json!("orbit-builtin-http"));

    // https, verified against the private CA and the host name.
    let secure = format!("https://localhost:{tls_port}/ok");
    start(&mut c, "call", "tls", json!({ "url": secure, "n": 9 })).await.expect("start");
    let (status, output) = result(&mut c, "tls", WAIT).await;
    assert_eq!(status, pb::ExecutionStatus::Completed, "{output}");
    assert_eq!(output["body"], json!({ "method": "POST", "received": { "n": 9 } }), "{output}");

    // A non-2xx status fails HTTP_ERROR with the status (not retried: a 4xx).
    start(&mut c, "call", "missing", json!({ "url": url("/missing"), "n": 1 })).await.expect("s");
    let (status, error) = result(&mut c, "missing", WAIT).await;
    assert_eq!(status, pb::ExecutionStatus::Failed, "{error}");
    assert!(error.as_str().unwrap_or_default().starts_with("HTTP_ERROR"), "{error}");
    let h = history(&mut c, "missing").await;
    let failed = h.iter().find(|e| e.event_type == "StepFailed").expect("StepFailed");
    assert_eq!(event_payload(failed)["error"]["details"]["status"], json!(404));

    // A host off the allow-list is refused before any connection.
    let off = format!("http://127.0.0.1:{}/ok", free_port());
    start(&mut c, "call", "off", json!({ "url": off, "n": 1 })).await.expect("s");
    let (status, error) = result(&mut c, "off", WAIT).await;
    assert_eq!(status, pb::ExecutionStatus::Failed, "{error}");
    assert!(error.as_str().unwrap_or_default().starts_with("HTTP_HOST_NOT_ALLOWED"), "{error}");
}

/// With identities on, the built-in worker needs a worker identity: a frontend enabling
/// the step without `--http-step-token` refuses to start (exit 2), before any database.
#[test]
fn a_frontend_with_identities_needs_the_http_step_token() {
    let dir = TempDir::new("http-step-token");
    let ids = dir.0.join("identities.yaml");
    std::fs::write(&ids, "identities: []\n").expect("identities file");
    let mut cmd = std::process::Command::new(env!("CARGO_BIN_EXE_orbit"));
    cmd.args(["frontend", "--enable-http-step", "--identities"]).arg(&ids);
    cmd.env("ORBIT_DATABASE_URL", "postgres://nobody@127.0.0.1:1/none");
    cmd.env_remove("ORBIT_HTTP_STEP_TOKEN");
    let (ok, _, stderr) = run_bounded(&mut cmd, Duration::from_secs(30));
    assert!(!ok, "the frontend must refuse to start: {stderr}");
    assert!(stderr.contains("--http-step-token"), "{stderr}");
}
