//! `orbit.v1.WorkflowService`: definitions, starting executions, reads and commands.
//!
//! The trait impl only unwraps requests and delegates: definitions in [`definitions`],
//! reads from the store in [`reads`] (counts in [`count`]), the event stream in [`watch`], and commands routed to
//! the owner in [`commands`] (updates in [`update`]), and the poison quarantine's operator actions in
//! [`quarantine`], migrations to another version in [`migrate`], resets and forks in
//! [`reset`]. Each takes the request's [`Scope`] first: the caller's workflow patterns,
//! [`quarantine`], migrations to another version in [`migrate`], batch jobs (their rows; a
//! scheduler runs them) in [`batch`]. Each takes the request's [`Scope`] first: the caller's workflow patterns,
//! checked on the workflow each request names or addresses. Each answers a
//! [`FrontendError`](crate::error::FrontendError); the trait impl turns it into the status
//! (the edge).

mod batch;
mod batch_wire;
mod commands;
mod count;
mod dedupe;
mod definitions;
mod delete;
mod list_query;
mod migrate;
mod quarantine;
pub(crate) mod reads;
mod reset;
mod search;
mod update;
mod update_start;
mod watch;

use crate::scope::Scope;
use crate::Shared;
use orbit_api::v1::workflow_service_server::WorkflowService;
use orbit_api::v1::{
    CancelExecutionRequest, CancelExecutionResponse, CountExecutionsRequest,
    CountExecutionsResponse, DescribeExecutionRequest, DescribeExecutionResponse,
    GetHistoryRequest, GetHistoryResponse, GetWorkflowRequest, GetWorkflowResponse,
    ListExecutionsRequest, ListExecutionsResponse, ListWorkflowsRequest, ListWorkflowsResponse,
    QueryExecutionRequest, QueryExecutionResponse, RegisterWorkflowRequest,
    RegisterWorkflowResponse, ResumeExecutionRequest, ResumeExecutionResponse,
    SignalExecutionRequest, SignalExecutionResponse, StartExecutionRequest, StartExecutionResponse,
    TerminateExecutionRequest, TerminateExecutionResponse, UpdateExecutionRequest,
    UpdateExecutionResponse, WatchExecutionRequest,
};
use std::sync::Arc;
use tonic::{Request, Response, Status};

/// The `WorkflowService` implementation; cheap to clone.
#[derive(Clone)]
pub struct WorkflowApi {
    shared: Arc<Shared>,
}

impl WorkflowApi {
    pub(crate) fn new(shared: Arc<Shared>) -> WorkflowApi {
        WorkflowApi { shared }
    }
}

#[tonic::async_trait]
impl WorkflowService for WorkflowApi {
    async fn register_workflow(
        &self,
        request: Request<RegisterWorkflowRequest>,
    ) -> Result<Response<RegisterWorkflowResponse>, Status> {
        definitions::register(&self.shared, &Scope::of(&request), request.into_inner())
            .await
            .map(Response::new)
            .map_err(Status::from)
    }

    async fn get_workflow(
        &self,
        request: Request<GetWorkflowRequest>,
    ) -> Result<Response<GetWorkflowResponse>, Status> {
        definitions::get(&self.shared, &Scope::of(&request), request.into_inner())
            .await
            .map(Response::new)
            .map_err(Status::from)
    }

    async fn list_workflows(
        &self,
        request: Request<ListWorkflowsRequest>,
    ) -> Result<Response<ListWorkflowsResponse>, Status> {
        definitions::list(&self.shared, &Scope::of(&request), request.into_inner())
            .await
            .map(Response::new)
            .map_err(Status::from)
    }

    async fn start_execution(
        &self,
        request: Request<StartExecutionRequest>,
    ) -> Result<Response<StartExecutionResponse>, Status> {
        commands::start(&self.shared, &Scope::of(&request), request.into_inner())
            .await
            .map(Response::new)
            .map_err(Status::from)
    }

    async fn describe_execution(
        &self,
        request: Request<DescribeExecutionRequest>,
    ) -> Result<Response<DescribeExecutionResponse>, Status> {
        reads::describe(&self.shared, &Scope::of(&request), request.into_inner())
            .await
            .map(Response::new)
            .map_err(Status::from)
    }

    async fn get_history(
        &self,
        request: Request<GetHistoryRequest>,
    ) -> Result<Response<GetHistoryResponse>, Status> {
        reads::history(&self.shared, &Scope::of(&request), request.into_inner())
            .await
            .map(Response::new)
            .map_err(Status::from)
    }

    type WatchExecutionStream = watch::WatchStream;

    async fn watch_execution(
        &self,
        request: Request<WatchExecutionRequest>,
    ) -> Result<Response<Self::WatchExecutionStream>, Status> {
        watch::watch(self.shared.clone(), &Scope::of(&request), request.into_inner())
            .await
            .map(Response::new)
            .map_err(Status::from)
    }

    async fn list_executions(
        &self,
        request: Request<ListExecutionsRequest>,
    ) -> Result<Response<ListExecutionsResponse>, Status> {
        reads::list_executions(&self.shared, &Scope::of(&request), request.into_inner())
            .await
            .map(Response::new)
            .map_err(Status::from)
    }

    async fn count_executions(
        &self,
        request: Request<CountExecutionsRequest>,
    ) -> Result<Response<CountExecutionsResponse>, Status> {
        count::count_executions(&self.shared, &Scope::of(&request), request.into_inner())
            .await
            .map(Response::new)
            .map_err(Status::from)
    }

    async fn list_search_attributes(
        &self,
        request: Request<orbit_api::v1::ListSearchAttributesRequest>,
    ) -> Result<Response<orbit_api::v1::ListSearchAttributesResponse>, Status> {
        search::list_attributes(&self.shared, &Scope::of(&request), request.into_inner())
            .await
            .map(Response::new)
            .map_err(Status::from)
    }

    async fn signal_execution(
        &self,
        request: Request<SignalExecutionRequest>,
    ) -> Result<Response<SignalExecutionResponse>, Status> {
        commands::signal(&self.shared, &Scope::of(&request), request.into_inner())
            .await
            .map(Response::new)
            .map_err(Status::from)
    }

    async fn query_execution(
        &self,
        request: Request<QueryExecutionRequest>,
    ) -> Result<Response<QueryExecutionResponse>, Status> {
        reads::query(&self.shared, &Scope::of(&request), request.into_inner())
            .await
            .map(Response::new)
            .map_err(Status::from)
    }

    async fn cancel_execution(
        &self,
        request: Request<CancelExecutionRequest>,
    ) -> Result<Response<CancelExecutionResponse>, Status> {
        commands::cancel(&self.shared, &Scope::of(&request), request.into_inner())
            .await
            .map(Response::new)
            .map_err(Status::from)
    }

    async fn update_execution(
        &self,
        request: Request<UpdateExecutionRequest>,
    ) -> Result<Response<UpdateExecutionResponse>, Status> {
        let deadline = update::deadline(request.metadata());
        update::update(&self.shared, &Scope::of(&request), deadline, request.into_inner())
            .await
            .map(Response::new)
            .map_err(Status::from)
    }

    async fn resume_execution(
        &self,
        request: Request<ResumeExecutionRequest>,
    ) -> Result<Response<ResumeExecutionResponse>, Status> {
        quarantine::resume(&self.shared, &Scope::of(&request), request.into_inner())
            .await
            .map(Response::new)
            .map_err(Status::from)
    }

    async fn terminate_execution(
        &self,
        request: Request<TerminateExecutionRequest>,
    ) -> Result<Response<TerminateExecutionResponse>, Status> {
        quarantine::terminate(&self.shared, &Scope::of(&request), request.into_inner())
            .await
            .map(Response::new)
            .map_err(Status::from)
    }

    async fn migrate_execution(
        &self,
        request: Request<orbit_api::v1::MigrateExecutionRequest>,
    ) -> Result<Response<orbit_api::v1::MigrateExecutionResponse>, Status> {
        migrate::migrate(&self.shared, &Scope::of(&request), request.into_inner())
            .await
            .map(Response::new)
            .map_err(Status::from)
    }

    async fn reset_execution(
        &self,
        request: Request<orbit_api::v1::ResetExecutionRequest>,
    ) -> Result<Response<orbit_api::v1::ResetExecutionResponse>, Status> {
        reset::reset(&self.shared, &Scope::of(&request), request.into_inner())
            .await
            .map(Response::new)
            .map_err(Status::from)
    }

    async fn fork_execution(
        &self,
        request: Request<orbit_api::v1::ForkExecutionRequest>,
    ) -> Result<Response<orbit_api::v1::ForkExecutionResponse>, Status> {
        reset::fork(&self.shared, &Scope::of(&request), request.into_inner())
            .await
            .map(Response::new)
            .map_err(Status::from)
    }

    async fn delete_execution(
        &self,
        request: Request<orbit_api::v1::DeleteExecutionRequest>,
    ) -> Result<Response<orbit_api::v1::DeleteExecutionResponse>, Status> {
        delete::delete(&self.shared, &Scope::of(&request), request.into_inner())
            .await
            .map(Response::new)
            .map_err(Status::from)
    }

    async fn start_batch(
        &self,
        request: Request<orbit_api::v1::StartBatchRequest>,
    ) -> Result<Response<orbit_api::v1::StartBatchResponse>, Status> {
        batch::start(&self.shared, &Scope::of(&request), request.into_inner())
            .await
            .map(Response::new)
            .map_err(Status::from)
    }

    async fn describe_batch(
        &self,
        request: Request<orbit_api::v1::DescribeBatchRequest>,
    ) -> Result<Response<orbit_api::v1::DescribeBatchResponse>, Status> {
        batch::describe(&self.shared, &Scope::of(&request), request.into_inner())
            .await
            .map(Response::new)
            .map_err(Status::from)
    }

    async fn list_batches(
        &self,
        request: Request<orbit_api::v1::ListBatchesRequest>,
    ) -> Result<Response<orbit_api::v1::ListBatchesResponse>, Status> {
        batch::list(&self.shared, &Scope::of(&request), request.into_inner())
            .await
            .map(Response::new)
            .map_err(Status::from)
    }

    async fn list_batch_items(
        &self,
        request: Request<orbit_api::v1::ListBatchItemsRequest>,
    ) -> Result<Response<orbit_api::v1::ListBatchItemsResponse>, Status> {
        batch::items(&self.shared, &Scope::of(&request), request.into_inner())
            .await
            .map(Response::new)
            .map_err(Status::from)
    }

    async fn cancel_batch(
        &self,
        request: Request<orbit_api::v1::CancelBatchRequest>,
    ) -> Result<Response<orbit_api::v1::CancelBatchResponse>, Status> {
        batch::cancel(&self.shared, &Scope::of(&request), request.into_inner())
            .await
            .map(Response::new)
            .map_err(Status::from)
    }
}
