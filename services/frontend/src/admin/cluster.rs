//! `ClusterStatus`. Without a membership table the cluster is this process: one node id
//! serving the frontend, the owner and the scheduler (`orbit dev`).

use crate::error::{store, ApiResult};
use crate::worker::now_ms;
use crate::Shared;
use orbit_api::v1::{
    ClusterStatusRequest, ClusterStatusResponse, ExecutionStatus, Node, ServiceKind,
};
use orbit_server_kit::payload::ms_to_timestamp;
use orbit_store::ExecutionFilter;

pub(super) async fn status(
    shared: &Shared,
    _req: ClusterStatusRequest,
) -> ApiResult<ClusterStatusResponse> {
    let owned = running_executions(shared).await?;
    let now = now_ms();
    let node = |service: ServiceKind, owned_executions: u64| Node {
        node_id: shared.config.node_id.clone(),
        service: service.into(),
        incarnation: 1,
        addr: String::new(),
        live: true,
        heartbeat_at: Some(ms_to_timestamp(now)),
        started_at: Some(ms_to_timestamp(shared.started_at_ms)),
        owned_executions,
    };
    Ok(ClusterStatusResponse {
        // Ordered by service, then node id.
        nodes: vec![
            node(ServiceKind::Frontend, 0),
            node(ServiceKind::Owner, owned),
            node(ServiceKind::Scheduler, 0),
        ],
        orphaned_executions: 0,
    })
}

/// Executions still running (RUNNING or COMPENSATING): all owned by the one owner here.
async fn running_executions(shared: &Shared) -> ApiResult<u64> {
    let mut count = 0u64;
    for status in [ExecutionStatus::Running, ExecutionStatus::Compensating] {
        let mut page_token = None;
        loop {
            let filter = ExecutionFilter {
                status: orbit_wire::status_name(status).map(str::to_string),
                page_size: 1000,
                page_token,
                ..ExecutionFilter::default()
            };
            let page = shared.store.list_executions(filter).await.map_err(store)?;
            count += page.executions.len() as u64;
            match page.next_page_token {
                Some(token) => page_token = Some(token),
                None => break,
            }
        }
    }
    Ok(count)
}
