//! The frontend's error: what handler internals return, turned into a `tonic::Status` once,
//! at the edge — the gRPC trait impls, and the worker and watch streams at the point where
//! they send an error — through the server kit's one mapping ([`OrbitError::to_status`]:
//! the gRPC code, the `orbit-error-code` metadata and the `google.rpc` details).
//!
//! Every failure this frontend makes is an [`OrbitError`]: its own refusals, the server
//! kit's request rules, and store failures through the store's one code mapping
//! (`StoreError::code` / `message`, the `From` below). The one other kind is a status an
//! owner answered an `OwnerService` call with: it already carries its Orbit code (or is a
//! transport failure), so it reaches the client unchanged, as it always did.

use orbit_server_kit::{ErrorCode, GrpcCode, OrbitError};
use orbit_store::StoreError;
use std::fmt;
use tonic::Status;

/// A failure of a frontend handler.
#[derive(Debug)]
pub(crate) enum FrontendError {
    /// A refusal or failure here (or of the store), with its Orbit code.
    Api(OrbitError),
    /// What an owner answered an `OwnerService` call with, passed on as it is.
    Owner(Status),
}

/// The result type of handler internals.
pub(crate) type ApiResult<T> = Result<T, FrontendError>;

impl FrontendError {
    /// The gRPC code the caller receives (the server kit's mapping for an Orbit code).
    pub(crate) fn grpc_code(&self) -> tonic::Code {
        match self {
            FrontendError::Api(e) => e.code.grpc_code(),
            FrontendError::Owner(status) => status.code(),
        }
    }
}

impl fmt::Display for FrontendError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            FrontendError::Api(e) => e.fmt(f),
            FrontendError::Owner(status) => {
                write!(f, "the owner answered {:?}: {}", status.code(), status.message())
            }
        }
    }
}

impl From<OrbitError> for FrontendError {
    fn from(e: OrbitError) -> Self {
        FrontendError::Api(e)
    }
}

/// A store failure, with the store's one code mapping. A `Storage` failure (the database
/// broke, or holds what cannot be decoded) is logged here: the client only gets its code.
impl From<StoreError> for FrontendError {
    fn from(e: StoreError) -> Self {
        if let StoreError::Storage(m) = &e {
            tracing::error!(error = %m, "store failed");
        }
        FrontendError::Api(OrbitError::new(e.code(), e.message()))
    }
}

/// The edge: the server kit's one mapping, or the owner's own status.
impl From<FrontendError> for Status {
    fn from(e: FrontendError) -> Status {
        match e {
            FrontendError::Api(e) => e.into(),
            FrontendError::Owner(status) => status,
        }
    }
}

/// A failure with an Orbit code.
pub(crate) fn err(code: ErrorCode, message: impl Into<String>) -> FrontendError {
    FrontendError::Api(OrbitError::new(code, message))
}

/// `EXECUTION_NOT_FOUND` for an id.
pub(crate) fn no_execution(id: &str) -> FrontendError {
    err(ErrorCode::ExecutionNotFound, format!("execution `{id}` does not exist"))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The status a store failure reaches the client as: what the store's mapping says,
    /// through the server kit's status mapping (the same as before the error type existed).
    #[test]
    fn store_failures_reach_the_client_with_the_store_code() {
        let cases = [
            (StoreError::Unavailable("pool timed out".into()), tonic::Code::Unavailable),
            (StoreError::Fenced("epoch 3".into()), tonic::Code::Unavailable),
            (StoreError::Storage("disk".into()), tonic::Code::Internal),
            (StoreError::Conflict("seq".into()), tonic::Code::Internal),
            (StoreError::NotFound("e1".into()), tonic::Code::NotFound),
            (StoreError::RequestIdReused("r".into()), tonic::Code::AlreadyExists),
            (StoreError::InvalidArgument("page".into()), tonic::Code::InvalidArgument),
        ];
        for (store, grpc) in cases {
            let (code, message) = (store.code(), store.message());
            let error = FrontendError::from(store);
            assert_eq!(error.grpc_code(), grpc, "{message}");
            let status = Status::from(error);
            assert_eq!((status.code(), status.message()), (grpc, message.as_str()));
            let metadata = status.metadata().get(orbit_server_kit::error::ERROR_CODE_METADATA_KEY);
            assert_eq!(metadata.and_then(|v| v.to_str().ok()), Some(code.as_str()));
            assert_eq!(OrbitError::from_status(&status).map(|o| o.code), Some(code));
        }
        let unavailable = Status::from(FrontendError::from(StoreError::Unavailable("x".into())));
        assert_eq!(unavailable.message(), "database unavailable: x");
    }

    /// An owner's answer is passed on unchanged, metadata and details included.
    #[test]
    fn owner_statuses_pass_through() {
        let refused = OrbitError::new(ErrorCode::ExecutionExists, "taken").to_status();
        let passed = Status::from(FrontendError::Owner(refused.clone()));
        assert_eq!(passed.code(), refused.code());
        assert_eq!(passed.message(), refused.message());
        assert_eq!(passed.details(), refused.details());
        assert_eq!(
            passed.metadata().clone().into_headers(),
            refused.metadata().clone().into_headers()
        );
        let transport = FrontendError::Owner(Status::unavailable("connection refused"));
        assert_eq!(transport.grpc_code(), tonic::Code::Unavailable);
        assert_eq!(OrbitError::from_status(&Status::from(transport)), None);
    }
}
