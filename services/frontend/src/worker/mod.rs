//! `orbit.v1.WorkerService`: worker sessions and one-shot results.

mod admit;
mod check;
mod handoff;
pub(crate) mod lend;
mod loss;
mod registry;
mod results;
mod session;
mod supervise;
mod welcome;

pub use check::{check_message, Checked};
pub(crate) use handoff::Handoffs;
pub(crate) use lend::Lending;
pub(crate) use registry::{now_ms, Registry, Session};
pub(crate) use session::Context;

use crate::scope::Scope;
use crate::Shared;
use orbit_api::internal::v1::OwnerServiceWakeRequest;
use orbit_api::v1::worker_service_server::WorkerService;
use orbit_api::v1::{
    CompleteTaskRequest, CompleteTaskResponse, FailTaskRequest, FailTaskResponse, ServerMessage,
    WorkerMessage,
};
use std::sync::Arc;
use tokio::sync::mpsc;
use tokio_stream::wrappers::ReceiverStream;
use tonic::{Request, Response, Status, Streaming};

/// The `WorkerService` implementation; cheap to clone.
#[derive(Clone)]
pub struct WorkerApi {
    shared: Arc<Shared>,
}

impl WorkerApi {
    pub(crate) fn new(shared: Arc<Shared>) -> WorkerApi {
        WorkerApi { shared }
    }
}

/// Tells the owner of each execution that its inbox has entries, without waiting.
pub(crate) fn wake_owner(shared: &Arc<Shared>, execution_ids: Vec<String>) {
    if execution_ids.is_empty() {
        return;
    }
    let owner = shared.owner.clone();
    tokio::spawn(async move {
        let request = Request::new(OwnerServiceWakeRequest { execution_ids });
        if let Err(status) = owner.wake(request).await {
            // The owner also polls its inbox; the entries are durable either way.
            tracing::warn!(%status, "waking the owner failed");
        }
    });
}

#[tonic::async_trait]
impl WorkerService for WorkerApi {
    type SessionStream = ReceiverStream<Result<ServerMessage, Status>>;

    async fn session(
        &self,
        request: Request<Streaming<WorkerMessage>>,
    ) -> Result<Response<Self::SessionStream>, Status> {
        let (tx, rx) = mpsc::channel(128);
        // Set by the auth layer when identities are configured; checked against the hello.
        let caller = request.extensions().get::<orbit_auth::Caller>().map(|c| c.0.clone());
        let scope = Scope::of(&request);
        tokio::spawn(session::run(self.shared.clone(), request.into_inner(), tx, caller, scope));
        Ok(Response::new(ReceiverStream::new(rx)))
    }

    async fn complete_task(
        &self,
        request: Request<CompleteTaskRequest>,
    ) -> Result<Response<CompleteTaskResponse>, Status> {
        // A worker restricted to some task patterns may only report those tasks' results.
        let scope = Scope::of(&request);
        let req = request.into_inner();
        let outcome =
            results::complete(&self.shared, &scope, &req.worker_id, &req.token, req.output).await?;
        Ok(Response::new(CompleteTaskResponse {
            accepted: outcome.accepted,
            reason: outcome.reason,
        }))
    }

    async fn fail_task(
        &self,
        request: Request<FailTaskRequest>,
    ) -> Result<Response<FailTaskResponse>, Status> {
        let scope = Scope::of(&request);
        let req = request.into_inner();
        let outcome =
            results::fail(&self.shared, &scope, &req.worker_id, &req.token, req.error).await?;
        Ok(Response::new(FailTaskResponse { accepted: outcome.accepted, reason: outcome.reason }))
    }
}
