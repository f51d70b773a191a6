//! TLS for PostgreSQL connections: rustls (ring provider) configured per libpq `sslmode`.
//!
//! * `disable`: no TLS (the connector is built but never used);
//! * `prefer`, and `require` without a CA file: encrypted, the certificate is not verified
//!   (libpq semantics: these modes protect against passive eavesdropping only);
//! * `verify-ca`, and `require` with a CA file: the chain must lead to a trusted root, the
//!   host name is not checked;
//! * `verify-full`: chain and host name (or IP address) are verified.
//!
//! Trusted roots are the PEM certificates of the CA file (`PgOptions::ca_file`, else the
//! URL's `sslrootcert`), or the bundled Mozilla roots (`webpki-roots`) when none is named or
//! `sslrootcert=system`.

use super::config::{RootCert, SslMode};
use crate::error::{Result, StoreError};
use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::client::WebPkiServerVerifier;
use rustls::crypto::{verify_tls12_signature, verify_tls13_signature, CryptoProvider};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, ServerName, UnixTime};
use rustls::{CertificateError, ClientConfig, DigitallySignedStruct, RootCertStore};
use std::path::Path;
use std::sync::Arc;
use tokio_postgres_rustls::MakeRustlsConnect;

/// The connector for `mode`, trusting the CA file `ca_file` (when given) or `root_cert`.
pub(crate) fn connector(
    mode: SslMode,
    ca_file: Option<&Path>,
    root_cert: &RootCert,
) -> Result<MakeRustlsConnect> {
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let builder = ClientConfig::builder_with_provider(Arc::clone(&provider))
        .with_safe_default_protocol_versions()
        .map_err(|e| StoreError::Storage(format!("tls setup: {e}")))?;
    let ca_file = ca_file.or(match root_cert {
        RootCert::File(path) => Some(path.as_path()),
        RootCert::Default | RootCert::System => None,
    });
    let verify = match mode {
        SslMode::Disable | SslMode::Prefer => Verify::Nothing,
        SslMode::Require if ca_file.is_none() => Verify::Nothing,
        SslMode::Require | SslMode::VerifyCa => Verify::Chain,
        SslMode::VerifyFull => Verify::ChainAndName,
    };
    let config = match verify {
        Verify::Nothing => builder
            .dangerous()
            .with_custom_certificate_verifier(Arc::new(NoVerification(provider)))
            .with_no_client_auth(),
        Verify::Chain | Verify::ChainAndName => {
            let roots = Arc::new(match ca_file {
                Some(path) => roots_from_file(path)?,
                None => RootCertStore { roots: webpki_roots::TLS_SERVER_ROOTS.to_vec() },
            });
            let webpki = WebPkiServerVerifier::builder_with_provider(roots, provider)
                .build()
                .map_err(|e| StoreError::InvalidArgument(format!("tls roots: {e}")))?;
            if verify == Verify::Chain {
                builder
                    .dangerous()
                    .with_custom_certificate_verifier(Arc::new(ChainOnly(webpki)))
                    .with_no_client_auth()
            } else {
                builder.with_webpki_verifier(webpki).with_no_client_auth()
            }
        }
    };
    Ok(MakeRustlsConnect::new(config))
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Verify {
    Nothing,
    Chain,
    ChainAndName,
}

/// Every certificate of a PEM file, as trusted roots; a file that cannot be read or holds no
/// certificate is refused with what is wrong.
fn roots_from_file(path: &Path) -> Result<RootCertStore> {
    let bad =
        |what: String| StoreError::InvalidArgument(format!("CA file {}: {what}", path.display()));
    let bytes = std::fs::read(path).map_err(|e| bad(format!("cannot read it: {e}")))?;
    let mut roots = RootCertStore::empty();
    for cert in CertificateDer::pem_slice_iter(&bytes) {
        let cert = cert.map_err(|e| bad(format!("not valid PEM: {e}")))?;
        roots.add(cert).map_err(|e| bad(format!("unusable certificate: {e}")))?;
    }
    if roots.is_empty() {
        return Err(bad("no PEM certificate (-----BEGIN CERTIFICATE-----) in it".into()));
    }
    Ok(roots)
}

/// Accepts any certificate, but still checks the handshake signatures (so the session is
/// really with the holder of the presented key).
#[derive(Debug)]
struct NoVerification(Arc<CryptoProvider>);

impl ServerCertVerifier for NoVerification {
    fn verify_server_cert(
        &self,
        _end_entity: &CertificateDer<'_>,
        _intermediates: &[CertificateDer<'_>],
        _server_name: &ServerName<'_>,
        _ocsp_response: &[u8],
        _now: UnixTime,
    ) -> std::result::Result<ServerCertVerified, rustls::Error> {
        Ok(ServerCertVerified::assertion())
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> std::result::Result<HandshakeSignatureValid, rustls::Error> {
        verify_tls12_signature(message, cert, dss, &self.0.signature_verification_algorithms)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> std::result::Result<HandshakeSignatureValid, rustls::Error> {
        verify_tls13_signature(message, cert, dss, &self.0.signature_verification_algorithms)
    }

    fn supported_verify_schemes(&self) -> Vec<rustls::SignatureScheme> {
        self.0.signature_verification_algorithms.supported_schemes()
    }
}

/// Verifies the chain like webpki but accepts a certificate issued for another name
/// (libpq's `verify-ca`).
#[derive(Debug)]
struct ChainOnly(Arc<WebPkiServerVerifier>);

impl ServerCertVerifier for ChainOnly {
    fn verify_server_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        server_name: &ServerName<'_>,
        ocsp_response: &[u8],
        now: UnixTime,
    ) -> std::result::Result<ServerCertVerified, rustls::Error> {
        // webpki checks the chain before the name: a name error means the chain is trusted.
        match self.0.verify_server_cert(end_entity, intermediates, server_name, ocsp_response, now)
        {
            Err(rustls::Error::InvalidCertificate(
                CertificateError::NotValidForName | CertificateError::NotValidForNameContext { .. },
            )) => Ok(ServerCertVerified::assertion()),
            other => other,
        }
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> std::result::Result<HandshakeSignatureValid, rustls::Error> {
        self.0.verify_tls12_signature(message, cert, dss)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> std::result::Result<HandshakeSignatureValid, rustls::Error> {
        self.0.verify_tls13_signature(message, cert, dss)
    }

    fn supported_verify_schemes(&self) -> Vec<rustls::SignatureScheme> {
        self.0.supported_verify_schemes()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unusable_ca_files_are_refused_clearly() {
        let dir = std::env::temp_dir().join(format!("orbit-tls-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let empty = dir.join("empty.pem");
        std::fs::write(&empty, "not a certificate\n").unwrap();
        let missing = dir.join("missing.pem");
        for (path, expect) in [(&empty, "no PEM certificate"), (&missing, "cannot read")] {
            let err = connector(SslMode::VerifyFull, Some(path), &RootCert::Default).err();
            match err {
                Some(StoreError::InvalidArgument(m)) => assert!(m.contains(expect), "{m}"),
                other => panic!("{other:?}"),
            }
        }
        // Modes that verify nothing never read the file.
        assert!(connector(SslMode::Prefer, Some(&missing), &RootCert::Default).is_ok());
        assert!(connector(SslMode::VerifyFull, None, &RootCert::System).is_ok());
        let _ = std::fs::remove_dir_all(dir);
    }
}
