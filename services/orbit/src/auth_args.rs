//! Authentication flags of every server (`orbit dev`, `orbit frontend|owner|scheduler`):
//! `--identities FILE` and `--insecure`, the one function that turns them into the gate
//! every request passes ([`Gate::load`]), and the safe-default rule ([`exposure`]) that
//! decides whether a server may start with what it was given.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use orbit_auth::{IdentityStore, LoadError, RELOAD_INTERVAL};
use orbit_server_kit::RequestGate;
use std::process::ExitCode;

use crate::split::ConnectionArgs;

/// Who may call this server, and the explicit opt-out of the safe defaults.
#[derive(clap::Args, Debug, Clone, Default)]
pub struct AuthArgs {
    /// Identities file (YAML, see docs/security.md): every RPC then needs a token or a
    /// client certificate of an identity allowed to call it; reloaded when it changes.
    /// Internal RPCs (orbit.internal.v1.*) accept only `service` identities.
    /// Example: --identities /etc/orbit/identities.yaml
    #[arg(long, env = "ORBIT_IDENTITIES", value_name = "FILE")]
    pub identities: Option<PathBuf>,
    /// Start without the safe defaults: `orbit dev` on a non-loopback address without TLS
    /// and identities, a split service without TLS or identities. A warning naming what is
    /// off is logged at start. For trying things out only. Example: --insecure
    #[arg(
        long,
        env = "ORBIT_INSECURE",
        value_parser = clap::builder::BoolishValueParser::new(),
        action = clap::ArgAction::SetTrue
    )]
    pub insecure: bool,
}

/// A bearer token a process sends as `authorization: Bearer <token>`, checked once when the
/// flag is parsed; its `Debug` hides it so it cannot reach a log through the parsed flags.
#[derive(Clone)]
pub struct Secret {
    bearer: tonic::metadata::MetadataValue<tonic::metadata::Ascii>,
}

impl Secret {
    /// The `authorization` metadata value (`Bearer <token>`), marked sensitive.
    pub fn bearer(&self) -> tonic::metadata::MetadataValue<tonic::metadata::Ascii> {
        self.bearer.clone()
    }
}

impl std::fmt::Debug for Secret {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Secret(…)")
    }
}

impl std::str::FromStr for Secret {
    type Err = String;

    fn from_str(s: &str) -> Result<Secret, String> {
        let token = s.trim();
        let invalid = || "a token is printable ASCII without spaces".to_string();
        if token.is_empty() || !token.bytes().all(|b| b.is_ascii_graphic()) {
            return Err(invalid());
        }
        let mut bearer: tonic::metadata::MetadataValue<_> =
            format!("Bearer {token}").parse().map_err(|_| invalid())?;
        bearer.set_sensitive(true);
        Ok(Secret { bearer })
    }
}

/// The authentication of a server: the gate for its [`ConnectionOptions`] and the task that
/// reloads the identities file (stopped when this is dropped).
///
/// [`ConnectionOptions`]: orbit_server_kit::ConnectionOptions
#[derive(Default)]
pub struct Gate {
    /// `None` without an identities file: every request passes.
    pub gate: Option<Arc<dyn RequestGate>>,
    reload: Option<tokio::task::JoinHandle<()>>,
}

impl Gate {
    /// Loads `identities` (if given) and starts watching it. Call inside the runtime.
    ///
    /// # Errors
    /// The file cannot be read or does not validate (its path and code are in the error).
    /// `mesh`: the service mesh's peer-identity header trusted as a caller's certificate
    /// names (`--mesh-identity`), if any.
    pub fn load(
        identities: Option<&Path>,
        mesh: Option<orbit_auth::MeshIdentity>,
    ) -> Result<Gate, LoadError> {
        let Some(file) = identities else { return Ok(Gate::default()) };
        let store = IdentityStore::load(file)?;
        tracing::info!(file = %file.display(), count = store.current().all().len(), ?mesh, "identities enforced");
        let reload = store.watch(file.to_owned(), RELOAD_INTERVAL);
        let gate: Arc<dyn RequestGate> = Arc::new(orbit_auth::AuthGate::new(store, mesh));
        Ok(Gate { gate: Some(gate), reload: Some(reload) })
    }
}

impl Drop for Gate {
    fn drop(&mut self) {
        if let Some(reload) = self.reload.take() {
            reload.abort();
        }
    }
}

impl AuthArgs {
    /// [`Gate::load`] of `--identities`, with the mesh identity of `connections`.
    ///
    /// # Errors
    /// As [`Gate::load`].
    pub fn gate(&self, connections: &ConnectionArgs) -> Result<Gate, LoadError> {
        Gate::load(self.identities.as_deref(), connections.mesh.identity())
    }

    /// Flag combinations of these flags with the connection flags: `--mesh-identity` names
    /// callers for the identities file, so it needs `--identities`.
    ///
    /// # Errors
    /// What is wrong, for the user.
    pub fn check(&self, connections: &ConnectionArgs) -> Result<(), String> {
        connections.check()?;
        if connections.mesh.mesh_identity.is_some() && self.identities.is_none() {
            return Err(
                "--mesh-identity names callers for the identities file: it needs --identities"
                    .into(),
            );
        }
        Ok(())
    }

    /// [`enforce`] for a server with these flags and `connections`: the sidecar's TLS
    /// (`--tls-from-mesh`) counts as TLS.
    ///
    /// # Errors
    /// The exit code, after saying why on stderr.
    pub fn enforce(
        &self,
        what: &str,
        listen: SocketAddr,
        connections: &ConnectionArgs,
        split: bool,
    ) -> Result<(), ExitCode> {
        let tls = connections.tls.files().is_some() || connections.mesh.tls_from_mesh;
        enforce(what, listen, tls, self.identities.is_some(), self.insecure, split)
    }
}

/// The safe-default rule: may a server listening on `listen` start with TLS (`tls`) and an
/// identities file (`identities`) as given? `split` is a split service (frontend, owner,
/// scheduler), else `orbit dev`.
///
/// - `orbit dev` on a loopback address: always (the quick start needs nothing).
/// - `orbit dev` on any other address, and every split service: only with TLS AND
///   identities, or with `insecure` — then `Ok(Some(warning))` naming what is off.
/// - Otherwise `Err(refusal)`, the message to print before exiting.
///
/// Mesh deployments pass `tls || tls_from_mesh`: the sidecar terminates TLS.
pub fn exposure(
    listen: SocketAddr,
    tls: bool,
    identities: bool,
    insecure: bool,
    split: bool,
) -> Result<Option<String>, String> {
    let missing: Vec<&str> = [
        (!tls).then_some("TLS (--tls-cert/--tls-key, or --tls-from-mesh)"),
        (!identities).then_some("identities (--identities FILE)"),
    ]
    .into_iter()
    .flatten()
    .collect();
    if missing.is_empty() || (!split && listen.ip().is_loopback()) {
        return Ok(None);
    }
    let missing = missing.join(" and ");
    if insecure {
        return Ok(Some(format!(
            "--insecure: listening on {listen} without {missing}; anyone who can reach this \
             port can read and change everything it serves"
        )));
    }
    Err(if split {
        format!(
            "a split service needs TLS and identities; this one has no {missing}. Give them, or \
             pass --insecure (ORBIT_INSECURE=1) to run without"
        )
    } else {
        format!(
            "refusing to serve on the non-loopback address {listen} without {missing}. Give \
             them, listen on a loopback address (127.0.0.1), or pass --insecure \
             (ORBIT_INSECURE=1) to serve anyway"
        )
    })
}

/// The exit code of a start refused by [`exposure`]: the binary's "bad configuration"
/// code, as for flags that do not fit together.
pub const REFUSED: u8 = 2;

/// Applies [`exposure`] for `what` (`orbit dev`, `orbit owner`, ...): logs the warning, or
/// prints the refusal and returns the exit code.
pub fn enforce(
    what: &str,
    listen: SocketAddr,
    tls: bool,
    identities: bool,
    insecure: bool,
    split: bool,
) -> Result<(), ExitCode> {
    match exposure(listen, tls, identities, insecure, split) {
        Ok(None) => Ok(()),
        Ok(Some(warning)) => {
            tracing::warn!("{what}: {warning}");
            Ok(())
        }
        Err(refusal) => {
            tracing::error!("{what}: {refusal}");
            eprintln!("error: {what}: {refusal}");
            Err(std::process::ExitCode::from(REFUSED))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::{exposure, Secret};

    #[test]
    fn a_secret_is_checked_once_and_never_printed() {
        let secret: Secret = "abc123".parse().unwrap();
        assert_eq!(secret.bearer().to_str().unwrap(), "Bearer abc123");
        assert!(!format!("{secret:?}").contains("abc123"));
        for bad in ["", "two words", "tab\there", "é"] {
            assert!(bad.parse::<Secret>().is_err(), "{bad:?}");
        }
    }
    use std::net::SocketAddr;

    fn at(addr: &str) -> SocketAddr {
        addr.parse().unwrap()
    }

    #[test]
    fn dev_on_loopback_needs_nothing() {
        for listen in ["127.0.0.1:7233", "[::1]:7233", "127.0.0.2:0"] {
            for (tls, ids, insecure) in
                [(false, false, false), (true, false, true), (false, true, false)]
            {
                assert_eq!(exposure(at(listen), tls, ids, insecure, false), Ok(None), "{listen}");
            }
        }
    }

    #[test]
    fn dev_elsewhere_needs_tls_and_identities_or_insecure() {
        let any = at("0.0.0.0:7233");
        assert_eq!(exposure(any, true, true, false, false), Ok(None));
        let refusal = exposure(any, false, false, false, false).unwrap_err();
        assert!(refusal.contains("0.0.0.0:7233") && refusal.contains("TLS"), "{refusal}");
        assert!(refusal.contains("identities") && refusal.contains("--insecure"), "{refusal}");
        let only_tls = exposure(at("10.1.2.3:7233"), true, false, false, false).unwrap_err();
        assert!(only_tls.contains("identities") && !only_tls.contains("TLS"), "{only_tls}");
        let only_ids = exposure(at("[2001:db8::1]:7233"), false, true, false, false).unwrap_err();
        assert!(only_ids.contains("TLS") && !only_ids.contains("identities"), "{only_ids}");
        let warning = exposure(any, false, true, true, false).unwrap().expect("a warning");
        assert!(warning.contains("--insecure") && warning.contains("TLS"), "{warning}");
        assert!(!warning.contains("identities"), "only what is off: {warning}");
    }

    #[test]
    fn split_services_need_tls_and_identities_even_on_loopback() {
        for listen in ["127.0.0.1:7234", "0.0.0.0:7234"] {
            assert_eq!(exposure(at(listen), true, true, false, true), Ok(None));
            for (tls, ids) in [(false, false), (true, false), (false, true)] {
                let refusal = exposure(at(listen), tls, ids, false, true).unwrap_err();
                assert!(refusal.contains("split service") && refusal.contains("--insecure"));
                let warning = exposure(at(listen), tls, ids, true, true).unwrap();
                assert!(warning.is_some_and(|w| w.contains("--insecure")), "{listen}");
            }
        }
        // --insecure with everything on: nothing to warn about.
        assert_eq!(exposure(at("0.0.0.0:7234"), true, true, true, true), Ok(None));
    }
}
