//! `https://` for the HTTP step: a rustls client trusting the public web roots
//! (`webpki-roots`, compiled in, so the server's own trust store cannot be swapped under
//! it) and, with `--http-ca-file`, a private CA besides. The server's name is verified
//! against the URL's host; there is no switch to skip verification.

use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, ServerName};
use rustls::{ClientConfig, RootCertStore};
use std::path::Path;
use std::sync::Arc;
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::net::TcpStream;
use tokio_rustls::TlsConnector;

/// A connection the request is sent on: plain TCP or TLS over it.
pub(super) trait Io: AsyncRead + AsyncWrite + Unpin + Send {}

impl<T: AsyncRead + AsyncWrite + Unpin + Send> Io for T {}

/// The client configuration of https requests.
///
/// # Errors
/// The CA file cannot be read or holds no certificate.
pub(super) fn client_config(extra_ca: Option<&Path>) -> Result<Arc<ClientConfig>, String> {
    let mut roots = RootCertStore { roots: webpki_roots::TLS_SERVER_ROOTS.to_vec() };
    if let Some(path) = extra_ca {
        let certs = CertificateDer::pem_file_iter(path)
            .and_then(Iterator::collect::<Result<Vec<_>, _>>)
            .map_err(|e| format!("--http-ca-file {}: {e}", path.display()))?;
        if certs.is_empty() {
            return Err(format!("--http-ca-file {}: no certificate in it", path.display()));
        }
        for cert in certs {
            roots.add(cert).map_err(|e| format!("--http-ca-file {}: {e}", path.display()))?;
        }
    }
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let config = ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|e| e.to_string())?
        .with_root_certificates(roots)
        .with_no_client_auth();
    Ok(Arc::new(config))
}

/// `stream` as is, or wrapped in TLS to `host` (verified against `config`'s roots).
///
/// # Errors
/// The host is not a valid server name, or the handshake failed.
pub(super) async fn wrap(
    stream: TcpStream,
    host: &str,
    config: Option<&Arc<ClientConfig>>,
) -> Result<Box<dyn Io>, String> {
    let Some(config) = config else { return Ok(Box::new(stream)) };
    let name = ServerName::try_from(host.to_string())
        .map_err(|e| format!("`{host}` is not a TLS server name: {e}"))?;
    let tls = TlsConnector::from(config.clone())
        .connect(name, stream)
        .await
        .map_err(|e| format!("TLS handshake with {host}: {e}"))?;
    Ok(Box::new(tls))
}
