//! `orbit.v1.WorkerService`: worker sessions and one-shot results. This file is the
//! facade (the gRPC trait and what the rest of the crate uses); the rooms below import
//! only downwards, none of them this file:
//!
//! - ground floor: `common` (clock, stream sender, waking owners), `ledger` (one session's
//!   credits and attempts, pure), `admit`, `welcome`, `context`;
//! - `session` (one session: its ledger under a lock, its stream, its signals), then
//!   `registry` (all of them), `check` (message checks, the hello's included);
//! - `supervise` (a task while the worker holds it), `loss` (attempts of ended streams),
//!   `results` (results to the owner or the inbox), `rejoin` (attempts a reconnected worker
//!   holds through another frontend);
//! - `deliver` (tasks onto the stream), `dispatch` (claims), `handoff` and `lend` (tasks
//!   handed over by owners), `inbound` (one message), `stream` (one stream, hello to end).

mod admit;
mod check;
mod common;
mod context;
mod deliver;
mod dispatch;
mod handoff;
mod inbound;
mod ledger;
pub(crate) mod lend;
mod loss;
mod registry;
mod rejoin;
mod results;
mod session;
mod stream;
mod supervise;
mod welcome;

pub use check::{check_message, Checked};
pub(crate) use context::Context;
pub(crate) use handoff::Handoffs;
pub(crate) use lend::Lending;
pub(crate) use registry::Registry;
pub(crate) use session::Session;

use crate::scope::Scope;
use crate::Shared;
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
        tokio::spawn(stream::run(self.shared.clone(), request.into_inner(), tx, caller, scope));
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
