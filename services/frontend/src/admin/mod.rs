//! `orbit.v1.AdminService`: the operator's read-only view of workers, task queues, the
//! cluster and replay checks, and the server-wide named rate limits (`rate_limits`).
//!
//! Worker views come from this frontend's session registry; queue backlogs, owned
//! executions and histories come from the store; `ClusterStatus` reads the `nodes` table
//! (split services), or reports this process when it is empty (`orbit dev`). Sessions live
//! in the frontend holding the stream; `ListWorkers` adds the other frontends' sessions from
//! the summaries their heartbeats write (one interval late at most), while the in-flight
//! counts of the queue view are this frontend's. Auth is not implemented yet: no token is checked.

mod cluster;
mod queues;
mod rate_limits;
mod replay;
mod summary;
mod workers;

pub(crate) use summary::report as sessions_report;

use crate::Shared;
use orbit_api::v1::admin_service_server::AdminService;
use orbit_api::v1::{
    ClusterStatusRequest, ClusterStatusResponse, DeleteRateLimitRequest, DeleteRateLimitResponse,
    DescribeTaskQueueRequest, DescribeTaskQueueResponse, ListRateLimitsRequest,
    ListRateLimitsResponse, ListWorkersRequest, ListWorkersResponse, ReplayRequest, ReplayResponse,
    SetRateLimitRequest, SetRateLimitResponse,
};
use std::sync::Arc;
use tonic::{Request, Response, Status};

/// The `AdminService` implementation; cheap to clone.
#[derive(Clone)]
pub struct AdminApi {
    shared: Arc<Shared>,
}

impl AdminApi {
    pub(crate) fn new(shared: Arc<Shared>) -> AdminApi {
        AdminApi { shared }
    }
}

#[tonic::async_trait]
impl AdminService for AdminApi {
    async fn cluster_status(
        &self,
        request: Request<ClusterStatusRequest>,
    ) -> Result<Response<ClusterStatusResponse>, Status> {
        Ok(Response::new(cluster::status(&self.shared, request.into_inner()).await?))
    }

    async fn list_workers(
        &self,
        request: Request<ListWorkersRequest>,
    ) -> Result<Response<ListWorkersResponse>, Status> {
        Ok(Response::new(workers::list(&self.shared, request.into_inner()).await?))
    }

    async fn describe_task_queue(
        &self,
        request: Request<DescribeTaskQueueRequest>,
    ) -> Result<Response<DescribeTaskQueueResponse>, Status> {
        Ok(Response::new(queues::describe(&self.shared, request.into_inner()).await?))
    }

    async fn replay(
        &self,
        request: Request<ReplayRequest>,
    ) -> Result<Response<ReplayResponse>, Status> {
        Ok(Response::new(replay::replay(&self.shared, request.into_inner()).await?))
    }

    async fn set_rate_limit(
        &self,
        request: Request<SetRateLimitRequest>,
    ) -> Result<Response<SetRateLimitResponse>, Status> {
        Ok(Response::new(rate_limits::set(&self.shared, request.into_inner()).await?))
    }

    async fn list_rate_limits(
        &self,
        request: Request<ListRateLimitsRequest>,
    ) -> Result<Response<ListRateLimitsResponse>, Status> {
        Ok(Response::new(rate_limits::list(&self.shared, request.into_inner()).await?))
    }

    async fn delete_rate_limit(
        &self,
        request: Request<DeleteRateLimitRequest>,
    ) -> Result<Response<DeleteRateLimitResponse>, Status> {
        Ok(Response::new(rate_limits::delete(&self.shared, request.into_inner()).await?))
    }
}

/// One page of an in-memory list, with an offset token: `(items, next_page_token)`.
fn page<T>(
    all: Vec<T>,
    page_size: u32,
    page_token: &str,
) -> Result<(Vec<T>, String), orbit_server_kit::OrbitError> {
    let size = crate::validate::page_size(page_size, 100, 1000);
    let from = crate::validate::numeric_token(page_token)?.unwrap_or(0);
    let from = usize::try_from(from).unwrap_or(usize::MAX);
    let total = all.len();
    let items: Vec<T> = all.into_iter().skip(from).take(size).collect();
    let end = from.saturating_add(items.len());
    let next = if end < total { end.to_string() } else { String::new() };
    Ok((items, next))
}

#[cfg(test)]
mod tests {
    #[test]
    fn pages_hand_out_offsets_until_the_end() {
        let (first, next) = super::page((0..5).collect(), 2, "").unwrap();
        assert_eq!((first, next.as_str()), (vec![0, 1], "2"));
        let (last, next) = super::page((0..5).collect(), 4, "2").unwrap();
        assert_eq!((last, next.as_str()), (vec![2, 3, 4], ""));
        assert!(super::page::<u8>(Vec::new(), 0, "x").is_err());
    }
}
