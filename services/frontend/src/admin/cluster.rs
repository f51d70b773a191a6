//! `ClusterStatus`. When nodes heartbeat in the `nodes` table (the split services), the
//! answer is that table: every node, live when its last heartbeat (by the store's clock) is
//! within the node timeout, dead ones only on request, each owner with the open executions
//! it owns, and the open executions of dead owners as orphaned (waiting for takeover).
//! Without rows the cluster is this process: one node id serving the frontend, the owner
//! and the scheduler (`orbit dev`).

use crate::error::ApiResult;
use crate::Shared;
use orbit_api::v1::{
    ClusterStatusRequest, ClusterStatusResponse, ExecutionStatus, Node, ServiceKind,
};
use orbit_server_kit::payload::ms_to_timestamp;
use orbit_store::{ExecutionFilter, NodeRow};
use std::collections::{BTreeSet, HashSet};

/// Orphaned roots read to count orphaned executions.
const ORPHAN_SCAN: u32 = 10_000;

pub(super) async fn status(
    shared: &Shared,
    req: ClusterStatusRequest,
) -> ApiResult<ClusterStatusResponse> {
    let rows = shared.store.list_nodes().await?;
    if rows.is_empty() {
        return single_process(shared).await;
    }
    let timeout = shared.config.node_timeout_ms;
    let live: HashSet<String> =
        shared.store.live_nodes(None, timeout).await?.into_iter().map(|n| n.node_id).collect();
    let mut nodes = Vec::new();
    for row in rows {
        let is_live = live.contains(&row.node_id);
        if is_live || req.include_dead {
            nodes.push(node(shared, row, is_live).await?);
        }
    }
    nodes.sort_by(|a, b| (a.service, &a.node_id).cmp(&(b.service, &b.node_id)));
    // Owners with work and no live heartbeat, whether or not their row still exists.
    let dead_owners: BTreeSet<String> = shared
        .store
        .orphaned_roots(timeout, ORPHAN_SCAN)
        .await?
        .into_iter()
        .map(|o| o.node_id)
        .collect();
    let mut orphaned_executions = 0u64;
    for owner in dead_owners {
        orphaned_executions += shared.store.owned_executions(&owner).await?.len() as u64;
    }
    Ok(ClusterStatusResponse { nodes, orphaned_executions })
}

/// One `nodes` row on the wire.
async fn node(shared: &Shared, row: NodeRow, live: bool) -> ApiResult<Node> {
    let service = match row.service.as_str() {
        "frontend" => ServiceKind::Frontend,
        "owner" => ServiceKind::Owner,
        "scheduler" => ServiceKind::Scheduler,
        _ => ServiceKind::Unspecified,
    };
    let owned_executions = if service == ServiceKind::Owner {
        shared.store.owned_executions(&row.node_id).await?.len() as u64
    } else {
        0
    };
    Ok(Node {
        node_id: row.node_id,
        service: service.into(),
        // Incarnations are start times in microseconds (see orbit-cluster's membership).
        incarnation: row.incarnation.parse().unwrap_or(0),
        addr: row.addr.unwrap_or_default(),
        live,
        heartbeat_at: Some(ms_to_timestamp(row.heartbeat_at_ms)),
        started_at: Some(ms_to_timestamp(row.started_at_ms)),
        owned_executions,
    })
}

/// The answer of `orbit dev`: this process serves every service.
async fn single_process(shared: &Shared) -> ApiResult<ClusterStatusResponse> {
    let owned = running_executions(shared).await?;
    let now = shared.config.clock.now();
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
                status: orbit_wire::status_of(status),
                page_size: 1000,
                page_token,
                ..ExecutionFilter::default()
            };
            let page = shared.store.list_executions(filter).await?;
            count += page.executions.len() as u64;
            match page.next_page_token {
                Some(token) => page_token = Some(token),
                None => break,
            }
        }
    }
    Ok(count)
}
