//! The names of a mutual-TLS client's verified certificate, read once per connection.
//!
//! After the handshake verified the client's chain (see [`crate::tls`]), the leaf
//! certificate's subject common name and its subject alternative names — DNS names and URIs
//! such as `spiffe://cluster.local/ns/orbit/sa/frontend` — become [`PeerCertNames`], which
//! authentication (`orbit-auth`) matches against the identities' `cert_names`.
//!
//! The certificate is parsed in the connection's handshake task, not per request: the
//! worker result path sends one request per step over a long-lived connection. Tonic gives
//! every request of a connection a clone of the connection's [`Connected::ConnectInfo`];
//! ours is [`TlsPeer`] (the certificates and the names), and [`PeerLayer`] unpacks it into
//! the two extensions handlers and layers read: [`PeerCertificates`] (tonic's own type, so
//! `tonic::Request::peer_certs()` keeps working) and [`PeerCertNames`].

use std::pin::Pin;
use std::task::{Context, Poll};

use rustls_pki_types::CertificateDer;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tonic::codegen::http;
use tonic::transport::server::{Connected, TcpConnectInfo, TlsConnectInfo};
use x509_cert::der::asn1::{Ia5StringRef, PrintableStringRef, Utf8StringRef};
use x509_cert::der::oid::{AssociatedOid, ObjectIdentifier};
use x509_cert::der::Decode;
use x509_cert::ext::pkix::name::GeneralName;
use x509_cert::ext::pkix::SubjectAltName;

use crate::idle::IdleIo;

/// What a request's extensions hold on a TLS connection: the TCP addresses and, with
/// mutual TLS, the client's verified certificate chain (`peer_certs()`, leaf first).
pub type PeerCertificates = TlsConnectInfo<TcpConnectInfo>;

/// Verified client-certificate names of the connection's peer: the leaf's subject CN first,
/// then its DNS and URI subject alternative names, without duplicates. Empty without a
/// client certificate. A client cannot set request extensions itself, so this is trusted
/// as-is.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct PeerCertNames(pub Vec<String>);

/// `id-at-commonName` (2.5.4.3).
const COMMON_NAME: ObjectIdentifier = ObjectIdentifier::new_unwrap("2.5.4.3");

/// The names of a DER certificate (see [`PeerCertNames`]); an unparsable certificate has
/// none (it cannot have been verified by rustls anyway). IP address SANs are left out: an
/// address names a machine, not a caller.
#[must_use]
pub fn cert_names(der: &[u8]) -> Vec<String> {
    let Ok(cert) = x509_cert::Certificate::from_der(der) else {
        tracing::debug!("client certificate does not parse as X.509; no names");
        return Vec::new();
    };
    let tbs = &cert.tbs_certificate;
    let mut names: Vec<String> = Vec::new();
    let mut add = |name: &str| {
        if !name.is_empty() && !names.iter().any(|n| n == name) {
            names.push(name.to_owned());
        }
    };
    for rdn in &tbs.subject.0 {
        for atv in rdn.0.iter().filter(|atv| atv.oid == COMMON_NAME) {
            if let Some(cn) = directory_string(&atv.value) {
                add(&cn);
            }
        }
    }
    let sans = tbs.extensions.iter().flatten().filter(|e| e.extn_id == SubjectAltName::OID);
    for ext in sans {
        let Ok(san) = SubjectAltName::from_der(ext.extn_value.as_bytes()) else { continue };
        for name in &san.0 {
            match name {
                GeneralName::DnsName(n) | GeneralName::UniformResourceIdentifier(n) => {
                    add(n.as_str());
                }
                _ => {}
            }
        }
    }
    names
}

/// A common name's text: UTF8String, PrintableString or IA5String (the others are not
/// used for names in practice).
fn directory_string(value: &x509_cert::der::Any) -> Option<String> {
    if let Ok(s) = value.decode_as::<Utf8StringRef<'_>>() {
        return Some(s.as_str().to_owned());
    }
    if let Ok(s) = value.decode_as::<PrintableStringRef<'_>>() {
        return Some(s.as_str().to_owned());
    }
    value.decode_as::<Ia5StringRef<'_>>().ok().map(|s| s.as_str().to_owned())
}

/// The names of the leaf of a verified chain (none without a chain).
fn leaf_names(chain: Option<&[CertificateDer<'_>]>) -> PeerCertNames {
    PeerCertNames(chain.and_then(<[_]>::first).map(|leaf| cert_names(leaf)).unwrap_or_default())
}

/// A handshaken TLS connection with its peer's names, parsed once.
pub(crate) struct PeerStream {
    tls: tokio_rustls::server::TlsStream<IdleIo>,
    names: PeerCertNames,
}

impl PeerStream {
    pub(crate) fn new(tls: tokio_rustls::server::TlsStream<IdleIo>) -> PeerStream {
        let names = leaf_names(tls.get_ref().1.peer_certificates());
        PeerStream { tls, names }
    }
}

/// The per-connection info of a TLS connection; unpacked by [`PeerLayer`].
#[derive(Clone, Debug)]
pub(crate) struct TlsPeer {
    certificates: PeerCertificates,
    names: PeerCertNames,
}

impl Connected for PeerStream {
    type ConnectInfo = TlsPeer;

    fn connect_info(&self) -> TlsPeer {
        TlsPeer { certificates: self.tls.connect_info(), names: self.names.clone() }
    }
}

impl AsyncRead for PeerStream {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.tls).poll_read(cx, buf)
    }
}

impl AsyncWrite for PeerStream {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        Pin::new(&mut self.tls).poll_write(cx, buf)
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.tls).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.tls).poll_shutdown(cx)
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[std::io::IoSlice<'_>],
    ) -> Poll<std::io::Result<usize>> {
        Pin::new(&mut self.tls).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.tls.is_write_vectored()
    }
}

/// Unpacks a TLS connection's [`TlsPeer`] into [`PeerCertificates`] and [`PeerCertNames`]
/// (two cheap clones per request; plain-text requests pass untouched).
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct PeerLayer;

impl<S> tower_layer::Layer<S> for PeerLayer {
    type Service = PeerService<S>;

    fn layer(&self, inner: S) -> PeerService<S> {
        PeerService { inner }
    }
}

/// See [`PeerLayer`].
#[derive(Clone, Debug)]
pub(crate) struct PeerService<S> {
    inner: S,
}

impl<S, B> tonic::codegen::Service<http::Request<B>> for PeerService<S>
where
    S: tonic::codegen::Service<http::Request<B>>,
{
    type Response = S::Response;
    type Error = S::Error;
    type Future = S::Future;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), S::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, mut request: http::Request<B>) -> S::Future {
        let extensions = request.extensions_mut();
        if let Some(peer) = extensions.remove::<TlsPeer>() {
            extensions.insert(peer.certificates);
            if !peer.names.0.is_empty() {
                extensions.insert(peer.names);
            }
        }
        self.inner.call(request)
    }
}

#[cfg(test)]
mod tests {
    use super::cert_names;

    #[test]
    fn garbage_has_no_names() {
        assert!(cert_names(b"not a certificate").is_empty());
        assert!(cert_names(&[]).is_empty());
    }
}
