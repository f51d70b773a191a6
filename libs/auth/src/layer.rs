//! The gate that authenticates and authorises every gRPC request ([`AuthGate`], the
//! server kit's `RequestGate`), and [`AuthLayer`], the same gate as a tower layer for a bare
//! tonic server.
//!
//! For each request: the method's [`Access`] comes from the action table (a path in no
//! table is refused); open methods (health, reflection) pass untouched; otherwise the caller
//! is identified by its `authorization: Bearer <token>` metadata, or else by a verified
//! client-certificate name ([`PeerCertNames`], put in the request extensions by the TLS
//! acceptor) — or, only when the server trusts a service mesh's identity header
//! ([`MeshIdentity`], `--mesh-identity`), by the names in that header — and must hold the
//! method's action. A refusal is an [`OrbitError`] with
//! `UNAUTHENTICATED` or `PERMISSION_DENIED`, sent through the one status mapping, and is
//! logged with the peer address and identity name — never the token.
//!
//! The layer decides at action level. Per-workflow checks need the request body, so the
//! authenticated [`Caller`] is put in the request extensions, where handlers read it
//! (`request.extensions().get::<Caller>()`) and call [`Identity::may_act_on`] or
//! [`Identity::may_claim`].

use std::net::SocketAddr;
use std::sync::Arc;

use orbit_server_kit::error::{ErrorCode, OrbitError};
use orbit_server_kit::gate::{GateLayer, GateService};
use tonic::transport::server::TcpConnectInfo;

use crate::action::{access_of, Access};
use crate::identities::Identity;
use crate::mesh::MeshIdentity;
use crate::store::IdentityStore;

/// Verified client-certificate names (subject CN, DNS and URI SANs) of the connection's
/// peer: server-kit's TLS acceptor parses them once per connection and puts them in each
/// request's extensions (`orbit_server_kit::peer`).
pub use orbit_server_kit::peer::PeerCertNames;

/// The authenticated identity of a request, inserted by the layer for handlers.
#[derive(Clone, Debug)]
pub struct Caller(pub Arc<Identity>);

/// [`AuthGate`] as a tower layer, for a bare tonic server (`Server::builder().layer(..)`):
/// the server kit's own gate service, so both decide and answer alike.
#[derive(Clone, Debug)]
pub struct AuthLayer(AuthGate);

impl AuthLayer {
    /// A layer enforcing the identities of `store` (reloads are seen at once).
    #[must_use]
    pub fn new(store: IdentityStore) -> Self {
        Self(AuthGate::new(store, None))
    }

    /// Also identifies callers by this mesh's verified peer identity header (`None`: mesh
    /// headers are ignored, the default).
    #[must_use]
    pub fn with_mesh(mut self, mesh: Option<MeshIdentity>) -> Self {
        self.0.mesh = mesh;
        self
    }
}

impl<S> tower_layer::Layer<S> for AuthLayer {
    type Service = GateService<S>;

    fn layer(&self, inner: S) -> GateService<S> {
        GateLayer::new(Arc::new(self.0.clone())).layer(inner)
    }
}

/// The bearer token of the `authorization` header: `Ok(None)` when absent, `Err` when
/// present but not a bearer token.
fn bearer<B>(request: &http::Request<B>) -> Result<Option<&str>, ()> {
    let Some(value) = request.headers().get(http::header::AUTHORIZATION) else { return Ok(None) };
    let value = value.to_str().map_err(|_| ())?;
    let (scheme, token) = value.split_once(' ').ok_or(())?;
    if !scheme.eq_ignore_ascii_case("bearer") || token.trim().is_empty() {
        return Err(());
    }
    Ok(Some(token.trim()))
}

fn peer<B>(request: &http::Request<B>) -> String {
    // Plain-text connections carry `TcpConnectInfo`; TLS ones wrap it (`PeerCertificates`).
    let extensions = request.extensions();
    let tcp = extensions.get::<TcpConnectInfo>().or_else(|| {
        extensions.get::<orbit_server_kit::tls::PeerCertificates>().map(|tls| tls.get_ref())
    });
    tcp.and_then(TcpConnectInfo::remote_addr)
        .map_or_else(|| "unknown".to_owned(), |a: SocketAddr| a.to_string())
}

/// The decision for one request: the caller to attach (none for open methods) or the error.
/// Mesh headers are ignored; see [`authorize_with`].
pub fn authorize<B>(
    store: &IdentityStore,
    request: &http::Request<B>,
) -> Result<Option<Arc<Identity>>, OrbitError> {
    authorize_with(store, None, request)
}

/// [`authorize`], also trusting `mesh`'s peer identity header when given.
///
/// The order: a bearer token first (it names the caller more precisely than the hop it
/// came through, for example an ingress gateway relaying an external client), then the
/// mesh header, then a verified client certificate. A mesh header that is present but
/// malformed or names no identity is refused, as an unknown token is.
pub fn authorize_with<B>(
    store: &IdentityStore,
    mesh: Option<MeshIdentity>,
    request: &http::Request<B>,
) -> Result<Option<Arc<Identity>>, OrbitError> {
    let method = request.uri().path();
    let access = access_of(method);
    if access == Some(Access::Open) {
        return Ok(None);
    }
    let identities = store.current();
    let identity = match bearer(request) {
        Err(()) => {
            let message = "the authorization metadata is not `Bearer <token>`";
            tracing::warn!(peer = %peer(request), method, "refused: malformed authorization");
            return Err(OrbitError::new(ErrorCode::Unauthenticated, message));
        }
        Ok(Some(token)) => identities.by_token(token).ok_or_else(|| {
            tracing::warn!(peer = %peer(request), method, "refused: unknown token");
            OrbitError::new(ErrorCode::Unauthenticated, "unknown token")
        })?,
        Ok(None) => match mesh_caller(&identities, mesh, request)? {
            Some(identity) => identity,
            None => {
                let names = request.extensions().get::<PeerCertNames>();
                names.and_then(|n| identities.by_cert_names(&n.0)).ok_or_else(|| {
                    tracing::warn!(peer = %peer(request), method, certificate = ?names, "refused: no known credentials");
                    let message = "no credentials: send `authorization: Bearer <token>` or a known client certificate";
                    OrbitError::new(ErrorCode::Unauthenticated, message)
                })?
            }
        },
    };
    let Some(access) = access else {
        tracing::warn!(peer = %peer(request), identity = %identity.name, method, "refused: method not in the action table");
        let message = format!("method {method} is not in the action table");
        return Err(OrbitError::new(ErrorCode::PermissionDenied, message));
    };
    if !identity.allows(access) {
        let action = access.describe();
        tracing::warn!(peer = %peer(request), identity = %identity.name, action, method, "refused: permission denied");
        let message = format!(
            "identity {:?} ({}) may not {action}: {method}",
            identity.name,
            identity.kind.as_str()
        );
        return Err(OrbitError::new(ErrorCode::PermissionDenied, message));
    }
    Ok(Some(identity.clone()))
}

/// The identity named by the mesh header of `request`: `None` when mesh identity is off
/// (the header is then never read) or the header is absent.
fn mesh_caller<'a, B>(
    identities: &'a crate::identities::Identities,
    mesh: Option<MeshIdentity>,
    request: &http::Request<B>,
) -> Result<Option<&'a Arc<Identity>>, OrbitError> {
    let Some(mesh) = mesh else { return Ok(None) };
    let method = request.uri().path();
    let header = mesh.header();
    let names = match mesh.names(request.headers()) {
        Ok(Some(names)) => names,
        Ok(None) => return Ok(None),
        Err(problem) => {
            tracing::warn!(peer = %peer(request), method, %problem, "refused: malformed mesh identity header");
            let message = format!("the service mesh identity header is not usable: {problem}");
            return Err(OrbitError::new(ErrorCode::Unauthenticated, message));
        }
    };
    let identity = identities.by_cert_names(&names).ok_or_else(|| {
        tracing::warn!(peer = %peer(request), method, header, mesh_names = ?names, "refused: unknown mesh identity");
        let message = format!("{header} names no known identity: {}", names.join(", "));
        OrbitError::new(ErrorCode::Unauthenticated, message)
    })?;
    Ok(Some(identity))
}

/// The same decision as [`AuthGate`] without mesh headers, as the
/// [`ServerKit`](orbit_server_kit::ServerKit) gate: `ServerKit::new().gate(Arc::new(store))`.
impl orbit_server_kit::RequestGate for IdentityStore {
    fn admit(&self, request: &mut http::Request<tonic::body::Body>) -> Result<(), tonic::Status> {
        admit(self, None, request)
    }
}

/// The [`ServerKit`](orbit_server_kit::ServerKit) gate with a mesh setting:
/// `ServerKit::new().gate(Arc::new(AuthGate::new(store, mesh)))`. With `mesh: None` it
/// decides exactly as the gate of a bare [`IdentityStore`].
#[derive(Clone, Debug)]
pub struct AuthGate {
    store: IdentityStore,
    mesh: Option<MeshIdentity>,
}

impl AuthGate {
    /// A gate enforcing `store`, trusting `mesh`'s identity header if given.
    #[must_use]
    pub fn new(store: IdentityStore, mesh: Option<MeshIdentity>) -> Self {
        Self { store, mesh }
    }
}

impl orbit_server_kit::RequestGate for AuthGate {
    fn admit(&self, request: &mut http::Request<tonic::body::Body>) -> Result<(), tonic::Status> {
        admit(&self.store, self.mesh, request)
    }
}

/// [`authorize_with`] as a gate decision: the caller put in the request's extensions.
fn admit(
    store: &IdentityStore,
    mesh: Option<MeshIdentity>,
    request: &mut http::Request<tonic::body::Body>,
) -> Result<(), tonic::Status> {
    let caller = authorize_with(store, mesh, request).map_err(|e| e.to_status())?;
    if let Some(identity) = caller {
        request.extensions_mut().insert(Caller(identity));
    }
    Ok(())
}
