//! The service-mesh flags of every server (`orbit dev` and each split service), each also
//! read from its `ORBIT_*` variable: `--tls-from-mesh` says the port's plain text is on
//! purpose (the local sidecar proxy does TLS), `--mesh-identity` trusts the sidecar's
//! header naming the verified caller. See docs/security.md, "Service mesh".

use orbit_auth::MeshIdentity;

/// The mesh header naming the verified caller.
#[derive(clap::ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub enum MeshIdentityArg {
    /// Linkerd's `l5d-client-id`.
    Linkerd,
    /// Envoy's / Istio's `x-forwarded-client-cert` (its last element).
    Xfcc,
}

/// Service-mesh deployment of the port this process serves.
#[derive(clap::Args, Debug, Clone, Default)]
pub struct MeshArgs {
    /// TLS is done by the service mesh's sidecar proxy (Linkerd, Istio): this port serves
    /// plain text to it on purpose, and identities are still enforced. Cannot be combined
    /// with --tls-cert. Example: --tls-from-mesh
    #[arg(
        long,
        env = "ORBIT_TLS_FROM_MESH",
        value_parser = clap::builder::BoolishValueParser::new(),
        action = clap::ArgAction::SetTrue
    )]
    pub tls_from_mesh: bool,
    /// With --tls-from-mesh: identify a caller without a bearer token by the identity the
    /// mesh verified, matched against identities' `cert_names`: `linkerd` reads
    /// `l5d-client-id`, `xfcc` reads `x-forwarded-client-cert` (URI/DNS SANs and subject CN
    /// of its last element). Without this flag those headers are ignored.
    /// Example: --mesh-identity linkerd
    #[arg(long, env = "ORBIT_MESH_IDENTITY", value_enum, value_name = "MESH")]
    pub mesh_identity: Option<MeshIdentityArg>,
}

impl MeshArgs {
    /// Flag combinations clap cannot check by itself (checked here rather than with clap's
    /// `conflicts_with`, which would also fire on `ORBIT_TLS_FROM_MESH=false`).
    pub fn check(&self, tls: &crate::tls_args::TlsArgs) -> Result<(), String> {
        if self.tls_from_mesh && tls.tls_cert.is_some() {
            return Err("--tls-from-mesh (ORBIT_TLS_FROM_MESH) means the mesh's sidecar does TLS \
                        and this port serves plain text; it cannot be combined with --tls-cert \
                        (ORBIT_TLS_CERT): choose one"
                .into());
        }
        if self.mesh_identity.is_some() && !self.tls_from_mesh {
            return Err("--mesh-identity (ORBIT_MESH_IDENTITY) trusts a header only the mesh's \
                        sidecar may set; it needs --tls-from-mesh"
                .into());
        }
        Ok(())
    }

    /// The mesh header the auth gate trusts, if any.
    pub fn identity(&self) -> Option<MeshIdentity> {
        self.mesh_identity.map(|m| match m {
            MeshIdentityArg::Linkerd => MeshIdentity::Linkerd,
            MeshIdentityArg::Xfcc => MeshIdentity::Xfcc,
        })
    }
}
