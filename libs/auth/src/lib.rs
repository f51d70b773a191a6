//! Orbit's authentication and authorisation.
//!
//! - [`identities`]: the identities file (YAML) — admin, client, worker and service
//!   identities, each matched by a token's SHA-256 hash or a client-certificate name.
//! - [`token`]: token generation, hashing and constant-time comparison.
//! - [`action`]: the access rule of every RPC, by full method path.
//! - [`pattern`]: workflow-name and task-name patterns (`billing.*`).
//! - [`store`]: the identities in force, reloaded when the file changes.
//! - [`mesh`]: the caller's identity from a service mesh's header (Linkerd, Envoy/Istio).
//! - [`layer`]: the gate (and tower layer) that enforces all of it on every request.

pub mod action;
pub mod identities;
pub mod layer;
pub mod mesh;
pub mod pattern;
pub mod store;
pub mod token;

pub use action::{access_of, Access, Action};
pub use identities::{FileError, Identities, Identity, Kind};
pub use layer::{AuthGate, AuthLayer, Caller, PeerCertNames};
pub use mesh::MeshIdentity;
pub use pattern::Pattern;
pub use store::{IdentityStore, LoadError, RELOAD_INTERVAL};

#[cfg(test)]
mod tests;
