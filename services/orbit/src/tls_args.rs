//! The TLS flags, each also read from its `ORBIT_*` variable: [`TlsArgs`] for the port a
//! server listens on (`orbit dev` and every split service), [`ClientTlsArgs`] for the
//! connections a process makes (the CLI, `orbit bench`, and service-to-service calls).

use std::path::PathBuf;

/// TLS of the gRPC port this process serves. Without `--tls-cert` it speaks plain text.
#[derive(clap::Args, Debug, Clone, Default)]
pub struct TlsArgs {
    /// PEM certificate chain (leaf first) to serve TLS with; needs --tls-key. Reloaded on
    /// SIGHUP and when the file changes, without dropping open connections.
    /// Example: --tls-cert /etc/orbit/server.pem
    #[arg(long, env = "ORBIT_TLS_CERT", value_name = "PEM", requires = "tls_key")]
    pub tls_cert: Option<PathBuf>,
    /// PEM private key of --tls-cert. Example: --tls-key /etc/orbit/server-key.pem
    #[arg(long, env = "ORBIT_TLS_KEY", value_name = "PEM", requires = "tls_cert")]
    pub tls_key: Option<PathBuf>,
    /// Mutual TLS: every client must present a certificate signed by this PEM CA, or the
    /// handshake fails. Needs --tls-cert. Example: --tls-client-ca /etc/orbit/clients-ca.pem
    #[arg(long, env = "ORBIT_TLS_CLIENT_CA", value_name = "PEM", requires = "tls_cert")]
    pub tls_client_ca: Option<PathBuf>,
}

impl TlsArgs {
    /// The server's TLS files, if TLS is on.
    pub fn files(&self) -> Option<orbit_server_kit::tls::TlsFiles> {
        let (cert, key) = (self.tls_cert.clone()?, self.tls_key.clone()?);
        Some(orbit_server_kit::tls::TlsFiles { cert, key, client_ca: self.tls_client_ca.clone() })
    }
}

/// TLS of the connections this process makes. Without them it dials plain text.
#[derive(clap::Args, Debug, Clone, Default)]
pub struct ClientTlsArgs {
    /// PEM CA that signed the server's certificate: connect with TLS (`https://`) and
    /// verify the server against it. Example: --tls-ca /etc/orbit/ca.pem
    #[arg(long, global = true, env = "ORBIT_TLS_CA", value_name = "PEM")]
    pub tls_ca: Option<PathBuf>,
    /// PEM client certificate to present for mutual TLS; needs --tls-client-key.
    /// Example: --tls-client-cert /etc/orbit/client.pem
    #[arg(long, global = true, env = "ORBIT_TLS_CLIENT_CERT", value_name = "PEM")]
    pub tls_client_cert: Option<PathBuf>,
    /// PEM private key of --tls-client-cert.
    /// Example: --tls-client-key /etc/orbit/client-key.pem
    #[arg(long, global = true, env = "ORBIT_TLS_CLIENT_KEY", value_name = "PEM")]
    pub tls_client_key: Option<PathBuf>,
}

impl ClientTlsArgs {
    /// The options for [`orbit_api::tls::ClientTls::endpoint`].
    pub fn options(&self) -> orbit_api::tls::ClientTls {
        orbit_api::tls::ClientTls {
            ca: self.tls_ca.clone(),
            cert: self.tls_client_cert.clone(),
            key: self.tls_client_key.clone(),
        }
    }
}
