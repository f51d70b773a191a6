//! A bearer token on every call of a tonic client (the identities file's tokens).

use tonic::service::Interceptor;
use tonic::{Request, Status};

/// Adds `authorization: Bearer <token>` to every call.
#[derive(Clone)]
pub struct Bearer(pub String);

impl Interceptor for Bearer {
    fn call(&mut self, mut request: Request<()>) -> Result<Request<()>, Status> {
        let value = format!("Bearer {}", self.0).parse().expect("header value");
        request.metadata_mut().insert("authorization", value);
        Ok(request)
    }
}
