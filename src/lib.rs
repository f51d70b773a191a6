//! Orbit's protobuf API, generated from `proto/` at build time.
//!
//! - [`v1`] is the public API (`orbit.v1`): `WorkflowService`, `WorkerService`,
//!   `ScheduleService` and `AdminService`, with their clients (`*_client`) and servers
//!   (`*_server`).
//! - [`internal::v1`] is the internal API between services (`orbit.internal.v1`):
//!   `OwnerService` and `SchedulerService`. Not for clients.
//! - [`FILE_DESCRIPTOR_SET`] is the encoded descriptor set of every file, imports
//!   included, for gRPC server reflection.
//!
//! [`tls::ClientTls`] builds every client's endpoint, with TLS when configured.
//!
//! Payloads are [`prost_types::Value`]; convert them to domain types at the edge.
//!
//! Every generated client and server uses [`codec::OrbitCodec`]: a message that does not
//! decode is `INVALID_ARGUMENT` with the Orbit code, never `INTERNAL`.

pub mod codec;
pub mod tls;

/// The public API, package `orbit.v1`.
#[allow(missing_docs, clippy::all, clippy::pedantic, clippy::nursery)]
pub mod v1 {
    tonic::include_proto!("orbit.v1");
}

/// The internal APIs between Orbit services.
pub mod internal {
    /// Package `orbit.internal.v1`: the owner and scheduler services.
    #[allow(missing_docs, clippy::all, clippy::pedantic, clippy::nursery)]
    pub mod v1 {
        tonic::include_proto!("orbit.internal.v1");
    }
}

/// The encoded `google.protobuf.FileDescriptorSet` of every Orbit proto file and its
/// imports (well-known types), with source comments. Register it with the reflection
/// service builder.
pub const FILE_DESCRIPTOR_SET: &[u8] = tonic::include_file_descriptor_set!("orbit_descriptor");

#[cfg(test)]
mod tests;
