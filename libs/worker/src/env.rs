//! Configuration from the environment: the variables the `orbit` CLI reads for TLS and the
//! token, and those the SDK conformance suite sets for addresses, worker id and slots.

// The SDK's documented configuration is its environment (as the CLI's and the other SDKs').
#![allow(clippy::disallowed_methods)]

/// TLS options from `ORBIT_TLS_CA`, `ORBIT_TLS_CLIENT_CERT` and `ORBIT_TLS_CLIENT_KEY`
/// (unset or empty: none), the same variables the `orbit` CLI reads.
#[must_use]
pub fn tls_from_env() -> orbit_api::tls::ClientTls {
    let var = |name: &str| std::env::var_os(name).filter(|v| !v.is_empty()).map(Into::into);
    orbit_api::tls::ClientTls {
        ca: var("ORBIT_TLS_CA"),
        cert: var("ORBIT_TLS_CLIENT_CERT"),
        key: var("ORBIT_TLS_CLIENT_KEY"),
    }
}

/// The bearer token from `ORBIT_TOKEN` (unset or empty: none), the variable the `orbit`
/// CLI and `orbit bench` read for `--token`.
#[must_use]
pub fn token_from_env() -> Option<String> {
    std::env::var("ORBIT_TOKEN").ok().filter(|t| !t.is_empty())
}

/// `<hostname>-<pid>`, or `rust-worker-<pid>` without a host name.
pub(crate) fn default_worker_id() -> String {
    let host = std::env::var("HOSTNAME")
        .ok()
        .or_else(|| std::fs::read_to_string("/etc/hostname").ok())
        .map(|h| h.trim().to_owned())
        .filter(|h| !h.is_empty())
        .unwrap_or_else(|| "rust-worker".into());
    format!("{host}-{}", std::process::id())
}
