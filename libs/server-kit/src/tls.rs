//! TLS and mutual TLS for every Orbit gRPC server, with certificate reload.
//!
//! The server terminates TLS itself (rustls through `tokio-rustls`) instead of tonic's
//! `ServerTlsConfig`, because tonic's config is fixed at start while Orbit reloads its
//! certificate without a restart:
//!
//! - [`TlsFiles`] names the PEM files: the server chain, its key and, for mutual TLS, the
//!   CA every client certificate must chain to (a client without a valid certificate is
//!   refused during the handshake, before any request is read).
//! - [`ReloadingConfig`] holds the current `rustls::ServerConfig`. Every accepted
//!   connection takes the config current at its handshake; a reload (SIGHUP, or a changed
//!   modification time of any of the files, checked every [`RELOAD_POLL`]) builds a new
//!   one and swaps it in. Existing connections keep the session they negotiated, so
//!   nothing is dropped; a reload that fails (unreadable or mismatched files) is logged
//!   and the previous config stays.
//! - Handshakes run in their own tasks with [`HANDSHAKE_TIMEOUT`], so a slow or plain-text
//!   client cannot stall the accept loop or hang: a plain-text HTTP/2 preface is not a
//!   ClientHello and the connection is closed at once.
//!
//! Handlers and layers read the verified client chain of a mutual-TLS connection from the
//! request extensions: [`PeerCertificates`] (tonic's own connect info for TLS streams,
//! so `tonic::Request::peer_certs()` works in handlers and
//! `http::Request::extensions().get::<PeerCertificates>()` in tower layers). The first
//! certificate is the client's leaf; the chain was verified against `--tls-client-ca`.
//! The leaf's names (subject CN, DNS and URI SANs) are parsed once per connection and are in
//! the extensions too, as [`PeerCertNames`] (see [`crate::peer`]).

use std::io;
use std::path::{Path, PathBuf};
use std::pin::Pin;
use std::sync::{Arc, PoisonError, RwLock};
use std::task::{Context, Poll};
use std::time::{Duration, SystemTime};

use rustls::server::WebPkiClientVerifier;
use rustls::{RootCertStore, ServerConfig};
use rustls_pki_types::pem::PemObject;
use rustls_pki_types::{CertificateDer, PrivateKeyDer};
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;
use tonic::codegen::tokio_stream::{Stream, StreamExt};
use tonic::transport::server::TcpIncoming;

use crate::idle::Tracker;
use crate::peer::PeerStream;
pub use crate::peer::{PeerCertNames, PeerCertificates};

/// How long a client may take to complete the TLS handshake.
pub const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);
/// How often the certificate files' modification times are checked for a reload.
pub const RELOAD_POLL: Duration = Duration::from_secs(2);

/// The PEM files of a TLS server.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TlsFiles {
    /// The server's certificate chain, leaf first.
    pub cert: PathBuf,
    /// The server's private key (PKCS#8, PKCS#1 or SEC1).
    pub key: PathBuf,
    /// With a CA here, every client must present a certificate chaining to it (mutual TLS).
    pub client_ca: Option<PathBuf>,
}

/// Why the TLS files could not be used.
#[derive(Debug, thiserror::Error)]
pub enum TlsError {
    /// A file could not be read or holds no usable PEM item.
    #[error("{path}: {message}")]
    File {
        /// The file.
        path: PathBuf,
        /// What was wrong.
        message: String,
    },
    /// rustls refused the combination (for example a key that does not match).
    #[error("tls config: {0}")]
    Config(#[from] rustls::Error),
    /// The client CA cannot verify certificates.
    #[error("client ca: {0}")]
    ClientCa(#[from] rustls::server::VerifierBuilderError),
}

fn file_error(path: &Path, message: impl ToString) -> TlsError {
    TlsError::File { path: path.to_owned(), message: message.to_string() }
}

fn certs(path: &Path) -> Result<Vec<CertificateDer<'static>>, TlsError> {
    let certs = CertificateDer::pem_file_iter(path)
        .map_err(|e| file_error(path, e))?
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| file_error(path, e))?;
    if certs.is_empty() {
        return Err(file_error(path, "no PEM certificate in the file"));
    }
    Ok(certs)
}

/// Builds a server config from the files as they are now.
///
/// # Errors
///
/// A file is unreadable or invalid, or the key does not match the certificate.
pub fn load(files: &TlsFiles) -> Result<ServerConfig, TlsError> {
    build(files, Protocol::Grpc)
}

/// What a [`ReloadingConfig`] serves, which decides its ALPN.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Protocol {
    /// gRPC: HTTP/2 only.
    Grpc,
    /// The admin HTTP port: HTTP/1.1 (browsers and Prometheus offer it).
    Https,
}

fn build(files: &TlsFiles, protocol: Protocol) -> Result<ServerConfig, TlsError> {
    let chain = certs(&files.cert)?;
    let key = PrivateKeyDer::from_pem_file(&files.key).map_err(|e| file_error(&files.key, e))?;
    let builder = ServerConfig::builder();
    let builder = match &files.client_ca {
        None => builder.with_no_client_auth(),
        Some(ca) => {
            let mut roots = RootCertStore::empty();
            let (added, _) = roots.add_parsable_certificates(certs(ca)?);
            if added == 0 {
                return Err(file_error(ca, "no usable CA certificate"));
            }
            // Required, not optional: a client without a certificate fails the handshake.
            builder.with_client_cert_verifier(WebPkiClientVerifier::builder(roots.into()).build()?)
        }
    };
    let mut config = builder.with_single_cert(chain, key)?;
    config.alpn_protocols = match protocol {
        // gRPC is HTTP/2 only.
        Protocol::Grpc => vec![b"h2".to_vec()],
        // The admin port serves HTTP/1.1 only; a client offering h2 too still agrees.
        Protocol::Https => vec![b"http/1.1".to_vec()],
    };
    Ok(config)
}

/// The current server config, swapped by reloads.
#[derive(Debug)]
pub struct ReloadingConfig {
    files: TlsFiles,
    protocol: Protocol,
    current: RwLock<Arc<ServerConfig>>,
    stamp: RwLock<Vec<Option<SystemTime>>>,
}

impl ReloadingConfig {
    /// Loads the files once.
    ///
    /// # Errors
    ///
    /// As [`load`].
    pub fn new(files: TlsFiles) -> Result<Arc<Self>, TlsError> {
        Self::with_protocol(files, Protocol::Grpc)
    }

    /// The config of the admin HTTP port (`--admin-tls`): the same certificate and key,
    /// reloaded the same way, offering HTTP/1.1. It asks for no client certificate even
    /// when `files` names a client CA: browsers and scrapers reach the console and the
    /// probes with the console's token, or none, not with a client certificate.
    ///
    /// # Errors
    ///
    /// As [`load`].
    pub fn new_https(files: TlsFiles) -> Result<Arc<Self>, TlsError> {
        Self::with_protocol(TlsFiles { client_ca: None, ..files }, Protocol::Https)
    }

    fn with_protocol(files: TlsFiles, protocol: Protocol) -> Result<Arc<Self>, TlsError> {
        let config = build(&files, protocol)?;
        let stamp = stamps(&files);
        Ok(Arc::new(Self {
            files,
            protocol,
            current: RwLock::new(Arc::new(config)),
            stamp: RwLock::new(stamp),
        }))
    }

    /// The config new handshakes use.
    #[must_use]
    pub fn current(&self) -> Arc<ServerConfig> {
        self.current.read().unwrap_or_else(PoisonError::into_inner).clone()
    }

    /// Reads the files again and swaps the config in; on error the old one stays.
    ///
    /// # Errors
    ///
    /// As [`load`].
    pub fn reload(&self) -> Result<(), TlsError> {
        *self.stamp.write().unwrap_or_else(PoisonError::into_inner) = stamps(&self.files);
        let config = build(&self.files, self.protocol)?;
        *self.current.write().unwrap_or_else(PoisonError::into_inner) = Arc::new(config);
        Ok(())
    }

    fn changed(&self) -> bool {
        *self.stamp.read().unwrap_or_else(PoisonError::into_inner) != stamps(&self.files)
    }

    /// Reloads on SIGHUP and when a file's modification time changes, until `stop`.
    pub fn spawn_reloader(self: &Arc<Self>, stop: CancellationToken) {
        let this = self.clone();
        tokio::spawn(async move {
            let mut hangup = hangup();
            loop {
                let why = tokio::select! {
                    () = stop.cancelled() => return,
                    () = recv_hangup(&mut hangup) => "SIGHUP",
                    () = tokio::time::sleep(RELOAD_POLL) => {
                        if !this.changed() { continue; }
                        "file change"
                    }
                };
                match this.reload() {
                    Ok(()) => {
                        tracing::info!(why, cert = %this.files.cert.display(), "tls certificates reloaded")
                    }
                    Err(e) => {
                        tracing::error!(why, error = %e, "tls reload failed, keeping the previous certificates")
                    }
                }
            }
        });
    }
}

fn stamps(files: &TlsFiles) -> Vec<Option<SystemTime>> {
    [Some(&files.cert), Some(&files.key), files.client_ca.as_ref()]
        .into_iter()
        .flatten()
        .map(|p| std::fs::metadata(p).and_then(|m| m.modified()).ok())
        .collect()
}

#[cfg(unix)]
type Hangup = Option<tokio::signal::unix::Signal>;
#[cfg(not(unix))]
type Hangup = ();

#[cfg(unix)]
fn hangup() -> Hangup {
    use tokio::signal::unix::{signal, SignalKind};
    signal(SignalKind::hangup())
        .inspect_err(
            |e| tracing::warn!(error = %e, "no SIGHUP handler: tls reloads on file change only"),
        )
        .ok()
}

#[cfg(not(unix))]
fn hangup() -> Hangup {}

#[cfg(unix)]
async fn recv_hangup(hangup: &mut Hangup) {
    if let Some(signal) = hangup {
        if signal.recv().await.is_some() {
            return;
        }
    }
    std::future::pending().await
}

#[cfg(not(unix))]
async fn recv_hangup(_: &mut Hangup) {
    std::future::pending().await
}

/// The TLS streams of a listener: TCP accepts wrapped for idle tracking, then handshaken
/// in their own tasks. Ends when the server stops reading it.
pub(crate) struct TlsIncoming {
    rx: mpsc::Receiver<PeerStream>,
}

impl TlsIncoming {
    pub(crate) fn new(
        mut tcp: TcpIncoming,
        tracker: Arc<Tracker>,
        config: Arc<ReloadingConfig>,
    ) -> Self {
        let (tx, rx) = mpsc::channel(64);
        tokio::spawn(async move {
            loop {
                let accepted = tokio::select! {
                    () = tx.closed() => return,
                    accepted = tcp.next() => accepted,
                };
                let stream = match accepted {
                    Some(Ok(stream)) => stream,
                    Some(Err(e)) => {
                        tracing::debug!(error = %e, "tcp accept error");
                        continue;
                    }
                    None => return,
                };
                let peer = stream.peer_addr().ok();
                let io = tracker.accept(stream);
                let acceptor = tokio_rustls::TlsAcceptor::from(config.current());
                let tx = tx.clone();
                tokio::spawn(async move {
                    match tokio::time::timeout(HANDSHAKE_TIMEOUT, acceptor.accept(io)).await {
                        Ok(Ok(tls)) => {
                            // The client certificate's names, parsed once per connection.
                            let _ = tx.send(PeerStream::new(tls)).await;
                        }
                        Ok(Err(e)) => tracing::info!(?peer, error = %e, "tls handshake refused"),
                        Err(_) => tracing::info!(?peer, "tls handshake timed out"),
                    }
                });
            }
        });
        Self { rx }
    }
}

impl Stream for TlsIncoming {
    type Item = Result<PeerStream, io::Error>;

    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        self.rx.poll_recv(cx).map(|s| s.map(Ok))
    }
}
