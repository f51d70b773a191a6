//! An in-process server with mutual TLS: a handler sees the client's verified certificate
//! through `Request::peer_certs()` (the `PeerCertificates` extension) and its names (subject
//! CN, DNS and URI SANs) as `PeerCertNames`; a call that stays open longer than the idle
//! timeout keeps its TLS connection; the start fails on unusable files. Certificates are made with the `openssl` command line.

use std::path::{Path, PathBuf};
use std::process::Command;

use orbit_api::internal::v1::scheduler_service_client::SchedulerServiceClient;
use orbit_api::internal::v1::scheduler_service_server::{SchedulerService, SchedulerServiceServer};
use orbit_api::internal::v1::{StatusRequest, StatusResponse};
use orbit_api::tls::ClientTls;
use orbit_server_kit::tls::{PeerCertNames, PeerCertificates, TlsFiles};
use orbit_server_kit::{ConnectionOptions, ServeError, ServerKit};
use rustls_pki_types::pem::PemObject;
use rustls_pki_types::CertificateDer;
use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;
use tonic::{Request, Response, Status};

fn openssl(dir: &Path, args: &[&str]) {
    let out = Command::new("openssl").args(args).current_dir(dir).output().expect("openssl");
    assert!(out.status.success(), "openssl {args:?}: {}", String::from_utf8_lossy(&out.stderr));
}

/// ca.pem, server.pem (localhost, 127.0.0.1) and client.pem, with their `-key.pem`.
fn pki(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("orbit-kit-tls-{name}-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let ec = ["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes"];
    openssl(
        &dir,
        &[
            &["req", "-x509"],
            &ec[..],
            &["-keyout", "ca-key.pem", "-out", "ca.pem", "-subj", "/CN=ca"],
        ]
        .concat(),
    );
    for (leaf, ext) in [
        ("server", "extendedKeyUsage=serverAuth\nsubjectAltName=DNS:localhost,IP:127.0.0.1\n"),
        (
            "client",
            "extendedKeyUsage=clientAuth\n\
             subjectAltName=DNS:client-1,URI:spiffe://orbit.test/sa/client,IP:10.0.0.1\n",
        ),
    ] {
        let (key, csr, cert, extfile) = (
            format!("{leaf}-key.pem"),
            format!("{leaf}.csr"),
            format!("{leaf}.pem"),
            format!("{leaf}.ext"),
        );
        std::fs::write(dir.join(&extfile), format!("basicConstraints=CA:FALSE\n{ext}")).unwrap();
        let subj = format!("/CN={leaf}");
        openssl(
            &dir,
            &[&["req"], &ec[..], &["-keyout", &key, "-out", &csr, "-subj", &subj]].concat(),
        );
        openssl(
            &dir,
            &[
                "x509",
                "-req",
                "-in",
                &csr,
                "-CA",
                "ca.pem",
                "-CAkey",
                "ca-key.pem",
                "-CAcreateserial",
                "-days",
                "30",
                "-extfile",
                &extfile,
                "-out",
                &cert,
            ],
        );
    }
    dir
}

/// Answers with what the handler sees of the peer: `certs=<n> leaf=<DER bytes>`.
struct Echo;

#[tonic::async_trait]
impl SchedulerService for Echo {
    async fn status(&self, r: Request<StatusRequest>) -> Result<Response<StatusResponse>, Status> {
        let from_extension = r.extensions().get::<PeerCertificates>().and_then(|i| i.peer_certs());
        let certs = r.peer_certs().ok_or_else(|| Status::unauthenticated("no peer certificate"))?;
        assert_eq!(from_extension.as_deref(), Some(&*certs), "the documented extension");
        assert!(r.remote_addr().is_some(), "the TCP info stays readable under TLS");
        let names =
            r.extensions().get::<PeerCertNames>().map(|n| n.0.join(",")).unwrap_or_default();
        if let Some(wait) = r.metadata().get("sleep-ms").and_then(|v| v.to_str().ok()) {
            // An open call: longer than the idle timeout of the idle test.
            tokio::time::sleep(std::time::Duration::from_millis(wait.parse().unwrap())).await;
        }
        let node_id = format!("certs={} leaf={} names={names}", certs.len(), certs[0].len());
        Ok(Response::new(StatusResponse { node_id, ..StatusResponse::default() }))
    }
}

#[tokio::test]
async fn a_handler_sees_the_verified_client_certificate() {
    let dir = pki("peer");
    let files = TlsFiles {
        cert: dir.join("server.pem"),
        key: dir.join("server-key.pem"),
        client_ca: Some(dir.join("ca.pem")),
    };
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let shutdown = CancellationToken::new();
    let kit = ServerKit::new()
        .connections(ConnectionOptions { tls: Some(files), ..ConnectionOptions::default() })
        .add_service(SchedulerServiceServer::new(Echo));
    let server = tokio::spawn(kit.serve(listener, shutdown.clone()));

    let tls = ClientTls {
        ca: Some(dir.join("ca.pem")),
        cert: Some(dir.join("client.pem")),
        key: Some(dir.join("client-key.pem")),
    };
    let channel = tls.endpoint(&addr.to_string()).unwrap().connect().await.unwrap();
    let seen = SchedulerServiceClient::new(channel)
        .status(StatusRequest::default())
        .await
        .expect("status over mutual TLS")
        .into_inner()
        .node_id;
    let leaf = CertificateDer::from_pem_file(dir.join("client.pem")).unwrap();
    // CN first, then the DNS and URI SANs; no IP address.
    let names = "client,client-1,spiffe://orbit.test/sa/client";
    assert_eq!(seen, format!("certs=1 leaf={} names={names}", leaf.len()));

    shutdown.cancel();
    server.await.unwrap().unwrap();
    let _ = std::fs::remove_dir_all(dir);
}

#[tokio::test]
async fn an_open_call_keeps_its_tls_connection_past_the_idle_timeout() {
    let dir = pki("idle");
    let files = TlsFiles {
        cert: dir.join("server.pem"),
        key: dir.join("server-key.pem"),
        client_ca: Some(dir.join("ca.pem")),
    };
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let shutdown = CancellationToken::new();
    let idle = std::time::Duration::from_millis(200);
    let options = ConnectionOptions {
        tls: Some(files),
        idle_timeout: Some(idle),
        ..ConnectionOptions::default()
    };
    let kit = ServerKit::new().connections(options).add_service(SchedulerServiceServer::new(Echo));
    let server = tokio::spawn(kit.serve(listener, shutdown.clone()));
    let tls = ClientTls {
        ca: Some(dir.join("ca.pem")),
        cert: Some(dir.join("client.pem")),
        key: Some(dir.join("client-key.pem")),
    };
    let channel = tls.endpoint(&addr.to_string()).unwrap().connect().await.unwrap();
    // The call stays open for 8 idle timeouts: counted as activity, the connection stays.
    let mut request = Request::new(StatusRequest::default());
    request.metadata_mut().insert("sleep-ms", "1600".parse().unwrap());
    let answer = SchedulerServiceClient::new(channel).status(request).await;
    assert!(answer.is_ok(), "the open call lost its connection: {answer:?}");

    shutdown.cancel();
    server.await.unwrap().unwrap();
    let _ = std::fs::remove_dir_all(dir);
}

#[tokio::test]
async fn unusable_files_fail_the_start() {
    let dir = pki("bad");
    // The client's key does not match the server's certificate.
    let files =
        TlsFiles { cert: dir.join("server.pem"), key: dir.join("client-key.pem"), client_ca: None };
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let kit = ServerKit::new()
        .connections(ConnectionOptions { tls: Some(files), ..ConnectionOptions::default() });
    let err = kit.serve(listener, CancellationToken::new()).await.expect_err("served");
    assert!(matches!(err, ServeError::Tls(_)), "{err}");
    let missing =
        TlsFiles { cert: dir.join("nope.pem"), key: dir.join("server-key.pem"), client_ca: None };
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let kit = ServerKit::new()
        .connections(ConnectionOptions { tls: Some(missing), ..ConnectionOptions::default() });
    let err = kit.serve(listener, CancellationToken::new()).await.expect_err("served");
    assert!(err.to_string().contains("nope.pem"), "{err}");
    let _ = std::fs::remove_dir_all(dir);
}
