//! Client-side TLS: the one place an Orbit client (the CLI, `orbit bench`, the Rust worker,
//! and service-to-service calls) turns a server address and TLS options into a tonic
//! [`Endpoint`].
//!
//! It lives in `orbit-api` because every client already depends on it and it pulls in no
//! server code (the worker library must stay free of server crates).
//!
//! TLS is on when a CA is given or the address says `https://`; an address without a
//! scheme then gets `https://` instead of `http://`. The server certificate is verified
//! against the CA (and the host name or IP of the address); a client certificate and key
//! are presented for mutual TLS when both are given.

use std::path::PathBuf;

use tonic::transport::{Certificate, ClientTlsConfig, Endpoint, Identity};

/// TLS options of a client. All `None`: plain text.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ClientTls {
    /// PEM file of the CA that signed the server's certificate.
    pub ca: Option<PathBuf>,
    /// PEM file of this client's certificate chain, for mutual TLS.
    pub cert: Option<PathBuf>,
    /// PEM file of this client's private key, for mutual TLS.
    pub key: Option<PathBuf>,
}

impl ClientTls {
    /// Whether connections use TLS for `address`.
    #[must_use]
    pub fn enabled_for(&self, address: &str) -> bool {
        self.ca.is_some() || address.starts_with("https://")
    }

    /// `address` with a scheme: kept if it has one, else `https://` with TLS and `http://`
    /// without.
    #[must_use]
    pub fn url(&self, address: &str) -> String {
        if address.contains("://") {
            address.to_owned()
        } else if self.enabled_for(address) {
            format!("https://{address}")
        } else {
            format!("http://{address}")
        }
    }

    /// The endpoint for `address` (`host:port` or a URI), with TLS configured when on.
    ///
    /// # Errors
    ///
    /// A malformed address, an unreadable file, a client certificate without its key (or
    /// the reverse), an `https://` address without a CA, or a CA on an `http://` address.
    pub fn endpoint(&self, address: &str) -> Result<Endpoint, String> {
        let url = self.url(address);
        let endpoint = Endpoint::from_shared(url.clone())
            .map_err(|e| format!("address `{url}` is not a valid URL: {e}"))?;
        if url.starts_with("http://") {
            if self.ca.is_some() || self.cert.is_some() {
                return Err(format!("TLS options given but the address `{url}` is http://"));
            }
            return Ok(endpoint);
        }
        let config = self.config()?;
        endpoint.tls_config(config).map_err(|e| format!("tls for `{url}`: {e}"))
    }

    /// The rustls settings: the CA as the only root, and the client identity if any.
    fn config(&self) -> Result<ClientTlsConfig, String> {
        let read = |path: &PathBuf| {
            std::fs::read(path).map_err(|e| format!("cannot read {}: {e}", path.display()))
        };
        let ca = self.ca.as_ref().ok_or_else(|| "an https address needs a TLS CA".to_owned())?;
        let mut config = ClientTlsConfig::new().ca_certificate(Certificate::from_pem(read(ca)?));
        match (&self.cert, &self.key) {
            (Some(cert), Some(key)) => {
                config = config.identity(Identity::from_pem(read(cert)?, read(key)?));
            }
            (None, None) => {}
            _ => return Err("a TLS client certificate needs its key, and the reverse".to_owned()),
        }
        Ok(config)
    }
}

#[cfg(test)]
mod tests {
    use super::ClientTls;

    fn with_ca() -> ClientTls {
        ClientTls { ca: Some("ca.pem".into()), ..ClientTls::default() }
    }

    #[test]
    fn the_scheme_follows_the_options() {
        assert_eq!(ClientTls::default().url("h:1"), "http://h:1");
        assert_eq!(with_ca().url("h:1"), "https://h:1");
        assert_eq!(with_ca().url("http://h:1"), "http://h:1", "an explicit scheme is kept");
        assert!(ClientTls::default().endpoint("h:1").is_ok());
    }

    #[test]
    fn inconsistent_options_are_refused() {
        let err = ClientTls::default().endpoint("https://h:1").unwrap_err();
        assert!(err.contains("needs a TLS CA"), "{err}");
        let err = with_ca().endpoint("http://h:1").unwrap_err();
        assert!(err.contains("http://"), "{err}");
        let half = ClientTls { cert: Some("c.pem".into()), ..with_ca() };
        let dir = std::env::temp_dir().join(format!("orbit-api-tls-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(dir.join("ca.pem"), "not read as a certificate yet").unwrap();
        let half = ClientTls { ca: Some(dir.join("ca.pem")), ..half };
        let err = half.endpoint("h:1").unwrap_err();
        assert!(err.contains("needs its key"), "{err}");
        let missing = ClientTls { ca: Some(dir.join("missing.pem")), ..ClientTls::default() };
        let err = missing.endpoint("h:1").unwrap_err();
        assert!(err.contains("missing.pem"), "{err}");
        let _ = std::fs::remove_dir_all(dir);
    }
}
