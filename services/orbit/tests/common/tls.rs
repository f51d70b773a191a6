//! Test certificates made with the `openssl` command line, and an `orbit dev` started with
//! TLS flags.
//!
//! [`Pki::new`] writes, in a directory: a CA (`ca`), a server certificate for `localhost`
//! and `127.0.0.1` (`server`), a client certificate (`client`), a client certificate from
//! ANOTHER CA (`other-client`, CA `other-ca`) and an EXPIRED client certificate from the
//! right CA (`expired`, valid on 2020-01-01 only). EC P-256 keys, PKCS#8.

// Tests read their environment (ORBIT_PYTHON, the database URL) and the wall clock
// (unique names, deadlines of real processes) directly.
#![allow(clippy::disallowed_methods)]

use super::{free_port, Server};
use orbit_api::tls::ClientTls;
use orbit_api::v1 as pb;
use orbit_api::v1::workflow_service_client::WorkflowServiceClient;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};
use tonic::transport::Channel;

/// A directory of test certificates; see the module docs.
pub struct Pki {
    pub dir: PathBuf,
}

fn openssl(dir: &Path, args: &[&str]) {
    let out = Command::new("openssl")
        .args(args)
        .current_dir(dir)
        .stdin(Stdio::null())
        .output()
        .expect("run openssl");
    assert!(out.status.success(), "openssl {args:?}: {}", String::from_utf8_lossy(&out.stderr));
}

impl Pki {
    pub fn new(dir: &Path) -> Pki {
        std::fs::create_dir_all(dir).expect("pki dir");
        let pki = Pki { dir: dir.to_path_buf() };
        pki.ca("ca", "Orbit Test CA");
        pki.ca("other-ca", "Some Other CA");
        pki.leaf("server", "ca", "serverAuth", "DNS:localhost,IP:127.0.0.1", "3650");
        pki.leaf("client", "ca", "clientAuth", "DNS:client-1", "3650");
        pki.leaf("other-client", "other-ca", "clientAuth", "DNS:client-1", "3650");
        pki.expired("expired", "ca");
        pki
    }

    /// A self-signed CA: `<name>.pem`, `<name>-key.pem`.
    pub fn ca(&self, name: &str, cn: &str) {
        let (cert, key) = (format!("{name}.pem"), format!("{name}-key.pem"));
        openssl(
            &self.dir,
            &[
                "req",
                "-x509",
                "-newkey",
                "ec",
                "-pkeyopt",
                "ec_paramgen_curve:prime256v1",
                "-nodes",
                "-keyout",
                &key,
                "-out",
                &cert,
                "-days",
                "3650",
                "-subj",
                &format!("/CN={cn}"),
            ],
        );
    }

    /// A certificate signed by CA `ca`, valid for `days`.
    pub fn leaf(&self, name: &str, ca: &str, usage: &str, san: &str, days: &str) {
        let (cert, csr, ext) = self.request(name, usage, san);
        openssl(
            &self.dir,
            &[
                "x509",
                "-req",
                "-in",
                &csr,
                "-CA",
                &format!("{ca}.pem"),
                "-CAkey",
                &format!("{ca}-key.pem"),
                "-CAcreateserial",
                "-days",
                days,
                "-extfile",
                &ext,
                "-out",
                &cert,
            ],
        );
    }

    /// A client certificate signed by CA `ca` that expired long ago: `openssl ca`, because
    /// `openssl x509` cannot set a start date in the past.
    pub fn expired(&self, name: &str, ca: &str) {
        let (cert, csr, ext) = self.request(name, "clientAuth", "DNS:client-1");
        std::fs::write(self.dir.join("index.txt"), "").expect("ca database");
        std::fs::write(self.dir.join("serial"), "01\n").expect("ca serial");
        std::fs::write(
            self.dir.join("ca.cnf"),
            "[ca]\ndefault_ca = test\n[test]\ndatabase = index.txt\nnew_certs_dir = .\n\
             serial = serial\ndefault_md = sha256\npolicy = any\n[any]\ncommonName = supplied\n",
        )
        .expect("ca config");
        openssl(
            &self.dir,
            &[
                "ca",
                "-batch",
                "-config",
                "ca.cnf",
                "-cert",
                &format!("{ca}.pem"),
                "-keyfile",
                &format!("{ca}-key.pem"),
                "-in",
                &csr,
                "-out",
                &cert,
                "-startdate",
                "20200101000000Z",
                "-enddate",
                "20200102000000Z",
                "-extfile",
                &ext,
                "-notext",
            ],
        );
    }

    /// A key and certificate request for `name`, and its extensions file:
    /// (cert file to write, csr file, ext file).
    fn request(&self, name: &str, usage: &str, san: &str) -> (String, String, String) {
        let (cert, key, csr, ext) = (
            format!("{name}.pem"),
            format!("{name}-key.pem"),
            format!("{name}.csr"),
            format!("{name}.ext"),
        );
        std::fs::write(
            self.dir.join(&ext),
            format!("basicConstraints=CA:FALSE\nextendedKeyUsage={usage}\nsubjectAltName={san}\n"),
        )
        .expect("ext file");
        openssl(
            &self.dir,
            &[
                "req",
                "-newkey",
                "ec",
                "-pkeyopt",
                "ec_paramgen_curve:prime256v1",
                "-nodes",
                "-keyout",
                &key,
                "-out",
                &csr,
                "-subj",
                &format!("/CN={name}"),
            ],
        );
        (cert, csr, ext)
    }

    pub fn path(&self, file: &str) -> PathBuf {
        self.dir.join(file)
    }

    /// Client options trusting CA `ca`, presenting certificate `client` if given.
    pub fn client(&self, ca: &str, client: Option<&str>) -> ClientTls {
        ClientTls {
            ca: Some(self.path(&format!("{ca}.pem"))),
            cert: client.map(|c| self.path(&format!("{c}.pem"))),
            key: client.map(|c| self.path(&format!("{c}-key.pem"))),
        }
    }

    /// The server flags: TLS with `server`, mutual TLS with `ca` when `mutual`.
    pub fn server_flags(&self, mutual: bool) -> Vec<String> {
        let mut flags = vec![
            "--tls-cert".to_owned(),
            self.path("server.pem").display().to_string(),
            "--tls-key".to_owned(),
            self.path("server-key.pem").display().to_string(),
        ];
        if mutual {
            flags.push("--tls-client-ca".to_owned());
            flags.push(self.path("ca.pem").display().to_string());
        }
        flags
    }
}

/// `orbit dev` with `flags`, ready once a client with `ready_with` can list workflows.
pub async fn start_dev(db: &Path, flags: &[String], ready_with: &ClientTls) -> Server {
    let port = free_port();
    let child = Command::new(env!("CARGO_BIN_EXE_orbit"))
        .args(["dev", "--db"])
        .arg(db)
        .args(["--listen", &format!("127.0.0.1:{port}"), "--log", "warn"])
        .args(flags)
        .stdout(Stdio::null())
        .stderr(Stdio::inherit())
        .spawn()
        .expect("spawn orbit dev");
    let server = Server { child, port, db: db.to_path_buf() };
    let deadline = Instant::now() + Duration::from_secs(30);
    while list(&tls_address(&server), ready_with).await.is_err() {
        assert!(Instant::now() < deadline, "orbit dev with TLS did not become ready");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    server
}

/// The server's address without a scheme (the client options pick `https://`).
pub fn tls_address(server: &Server) -> String {
    format!("127.0.0.1:{}", server.port)
}

/// A client over `tls`, connected.
pub async fn connect(
    address: &str,
    tls: &ClientTls,
) -> Result<WorkflowServiceClient<Channel>, String> {
    let endpoint = tls.endpoint(address)?.connect_timeout(Duration::from_secs(5));
    let channel = endpoint.connect().await.map_err(|e| error_chain(&e))?;
    Ok(WorkflowServiceClient::new(channel))
}

/// Connects over `tls` and lists workflows: the error chain when anything fails.
pub async fn list(address: &str, tls: &ClientTls) -> Result<(), String> {
    let mut client = connect(address, tls).await?;
    client
        .list_workflows(pb::ListWorkflowsRequest::default())
        .await
        .map(|_| ())
        .map_err(|s| format!("status {:?}: {} / {}", s.code(), s.message(), source_chain(&s)))
}

/// A bare rustls client (trusting `ca`, presenting `client` if given) connects to `port`,
/// completes its side of the handshake and reads: what the server's TLS layer answered, as
/// the client's error text (`received fatal alert: ...`). With TLS 1.3 the server checks the
/// client certificate after the client's side of the handshake is done, so the refusal
/// arrives on the first read.
pub async fn handshake_refusal(pki: &Pki, port: u16, ca: &str, client: Option<&str>) -> String {
    use rustls_pki_types::pem::PemObject;
    use rustls_pki_types::{CertificateDer, PrivateKeyDer, ServerName};
    use tokio::io::AsyncReadExt;
    let certs = |file: &str| {
        CertificateDer::pem_file_iter(pki.path(file))
            .expect("pem")
            .collect::<Result<Vec<_>, _>>()
            .expect("certs")
    };
    let mut roots = rustls::RootCertStore::empty();
    roots.add_parsable_certificates(certs(&format!("{ca}.pem")));
    let builder = rustls::ClientConfig::builder_with_provider(std::sync::Arc::new(
        rustls::crypto::ring::default_provider(),
    ))
    .with_safe_default_protocol_versions()
    .expect("protocols")
    .with_root_certificates(roots);
    let mut config = match client {
        None => builder.with_no_client_auth(),
        Some(c) => {
            let key = PrivateKeyDer::from_pem_file(pki.path(&format!("{c}-key.pem"))).expect("key");
            builder.with_client_auth_cert(certs(&format!("{c}.pem")), key).expect("client auth")
        }
    };
    config.alpn_protocols = vec![b"h2".to_vec()];
    let tcp = tokio::net::TcpStream::connect(("127.0.0.1", port)).await.expect("tcp connect");
    let connector = tokio_rustls::TlsConnector::from(std::sync::Arc::new(config));
    let server = ServerName::try_from("localhost").expect("name");
    match connector.connect(server, tcp).await {
        Err(e) => e.to_string(),
        Ok(mut tls) => match tls.read(&mut [0u8; 64]).await {
            Err(e) => e.to_string(),
            Ok(n) => format!("the server accepted the connection (read {n} bytes)"),
        },
    }
}

/// An error and its sources, joined.
pub fn error_chain(e: &dyn std::error::Error) -> String {
    let mut out = e.to_string();
    let mut source = e.source();
    while let Some(s) = source {
        out.push_str(": ");
        out.push_str(&s.to_string());
        source = s.source();
    }
    out
}

fn source_chain(s: &tonic::Status) -> String {
    std::error::Error::source(s).map(error_chain).unwrap_or_default()
}

/// `GET path` over HTTPS on `127.0.0.1:port`, verifying the server against CA `ca` as
/// `localhost` and offering `h2` and `http/1.1` as a browser does: the status, the
/// negotiated ALPN protocol and the body, or the error text.
pub async fn https_get(
    pki: &Pki,
    port: u16,
    ca: &str,
    path: &str,
) -> Result<(u16, Option<String>, String), String> {
    use rustls_pki_types::pem::PemObject;
    use rustls_pki_types::{CertificateDer, ServerName};
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut roots = rustls::RootCertStore::empty();
    let certs = CertificateDer::pem_file_iter(pki.path(&format!("{ca}.pem")))
        .map_err(|e| e.to_string())?
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| e.to_string())?;
    roots.add_parsable_certificates(certs);
    let mut config = rustls::ClientConfig::builder_with_provider(std::sync::Arc::new(
        rustls::crypto::ring::default_provider(),
    ))
    .with_safe_default_protocol_versions()
    .map_err(|e| e.to_string())?
    .with_root_certificates(roots)
    .with_no_client_auth();
    config.alpn_protocols = vec![b"h2".to_vec(), b"http/1.1".to_vec()];
    let fetch = async {
        let tcp =
            tokio::net::TcpStream::connect(("127.0.0.1", port)).await.map_err(|e| e.to_string())?;
        let connector = tokio_rustls::TlsConnector::from(std::sync::Arc::new(config));
        let name = ServerName::try_from("localhost").map_err(|e| e.to_string())?;
        let mut tls = connector.connect(name, tcp).await.map_err(|e| e.to_string())?;
        let alpn = tls.get_ref().1.alpn_protocol().map(|p| String::from_utf8_lossy(p).to_string());
        let request =
            format!("GET {path} HTTP/1.1\r\nHost: localhost:{port}\r\nConnection: close\r\n\r\n");
        tls.write_all(request.as_bytes()).await.map_err(|e| e.to_string())?;
        let mut raw = Vec::new();
        // A server closing without close_notify still gave the whole answer.
        let _ = tls.read_to_end(&mut raw).await;
        let text = String::from_utf8_lossy(&raw).to_string();
        let (head, body) = text.split_once("\r\n\r\n").ok_or(format!("no HTTP answer: {text}"))?;
        let status = head
            .split_whitespace()
            .nth(1)
            .and_then(|s| s.parse().ok())
            .ok_or(format!("no status: {head}"))?;
        Ok((status, alpn, body.to_string()))
    };
    tokio::time::timeout(Duration::from_secs(10), fetch)
        .await
        .map_err(|_| "no answer within 10 s".to_string())?
}
