//! The TLS flags of the port a server listens on (`orbit dev` and every split service),
//! each also read from its `ORBIT_*` variable: [`TlsArgs`]. The flags of the connections a
//! process makes (the CLI, `orbit bench`, and service-to-service calls) are
//! `orbit_cli::flags::ClientTlsArgs`, shared with the client commands.

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
