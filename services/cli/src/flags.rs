//! Flag pieces the client commands share with the servers' flags in the `orbit` package:
//! [`ClientTlsArgs`], the TLS of the connections a process makes (the CLI, `orbit bench`,
//! and service-to-service calls), each flag also read from its `ORBIT_*` variable, and
//! [`duration`], the parser of a flag's duration.

use std::path::PathBuf;
use std::time::Duration;

/// Parses a flag's duration with the definition language's syntax (`90s`, `7d`, `1h30m`).
///
/// # Errors
///
/// The definition language's message for text that is not a duration.
pub fn duration(text: &str) -> Result<Duration, String> {
    orbit_definition::parse_duration(text).map(Duration::from_millis)
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
