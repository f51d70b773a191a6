//! `ListWorkers`: the workers with a session on any frontend, grouped by worker id.
//!
//! This frontend's sessions come from its registry (fresh); other frontends' from the
//! summaries they write into their `nodes` rows with each membership heartbeat (see
//! [`super::summary`]), read from the live frontend rows, so they may lag one heartbeat
//! interval. Offline workers (a session waiting for its worker to reconnect) are known only
//! to the frontend that held them.

use super::page;
use super::summary::{self, SessionView};
use crate::error::ApiResult;
use crate::Shared;
use orbit_api::v1::{ListWorkersRequest, ListWorkersResponse, TaskRef, WorkerInfo, WorkerSession};
use orbit_server_kit::payload::ms_to_timestamp;
use std::collections::BTreeMap;

/// The `service` frontends register under in the `nodes` table.
const FRONTEND_SERVICE: &str = "frontend";

pub(super) async fn list(
    shared: &Shared,
    req: ListWorkersRequest,
) -> ApiResult<ListWorkersResponse> {
    let own = &shared.config.node_id;
    let mut views: Vec<SessionView> =
        shared.sessions.snapshot().iter().map(|s| SessionView::local(own, s)).collect();
    // Other live frontends' last reports (none in `orbit dev`: it has no nodes rows).
    let peers =
        shared.store.live_nodes(Some(FRONTEND_SERVICE), shared.config.node_timeout_ms).await?;
    for peer in peers.iter().filter(|p| &p.node_id != own) {
        if let Some(report) = &peer.sessions {
            views.extend(summary::parse(&peer.node_id, report));
        }
    }
    // BTreeMap: ordered by worker id, as documented.
    let mut by_worker: BTreeMap<String, Vec<SessionView>> = BTreeMap::new();
    for view in views {
        by_worker.entry(view.worker_id.clone()).or_default().push(view);
    }
    let mut workers = Vec::new();
    for (worker_id, mut sessions) in by_worker {
        sessions.sort_by(|a, b| {
            (a.connected_at_ms, &a.session_id).cmp(&(b.connected_at_ms, &b.session_id))
        });
        let info = worker_info(worker_id, &sessions);
        let offers_task = req.task.is_empty() || info.tasks.iter().any(|t| t.name == req.task);
        if offers_task && (info.online || !req.online_only) {
            workers.push(info);
        }
    }
    let (workers, next_page_token) = page(workers, req.page_size, &req.page_token)?;
    Ok(ListWorkersResponse { workers, next_page_token })
}

/// One worker from its sessions (oldest first); its description is the newest session's.
fn worker_info(worker_id: String, sessions: &[SessionView]) -> WorkerInfo {
    let mut tasks: Vec<TaskRef> = Vec::new();
    for s in sessions {
        for (name, version) in &s.tasks {
            if !tasks.iter().any(|t| &t.name == name && &t.version == version) {
                tasks.push(TaskRef { name: name.clone(), version: version.clone() });
            }
        }
    }
    let live: Vec<WorkerSession> = sessions
        .iter()
        .filter(|s| s.live)
        .map(|s| WorkerSession {
            session_id: s.session_id.clone(),
            frontend_node_id: s.node_id.clone(),
            connected_at: Some(ms_to_timestamp(s.connected_at_ms)),
            last_seen_at: Some(ms_to_timestamp(s.last_seen_ms)),
            credits: s.credits,
            in_flight: s.in_flight,
            draining: s.draining,
            identity: s.identity.clone().unwrap_or_default(),
        })
        .collect();
    let newest = sessions.last();
    let last_seen = sessions.iter().map(|s| s.last_seen_ms).max();
    WorkerInfo {
        worker_id,
        runtime: newest.map(|s| s.runtime.clone()).unwrap_or_default(),
        sdk: newest.map(|s| s.sdk.clone()).unwrap_or_default(),
        tasks,
        max_concurrency: newest.map_or(0, |s| s.max_concurrency),
        labels: newest.map(|s| s.labels.clone()).unwrap_or_default(),
        online: !live.is_empty(),
        in_flight: live.iter().fold(0u32, |n, s| n.saturating_add(s.in_flight)),
        sessions: live,
        last_seen_at: last_seen.map(ms_to_timestamp),
    }
}
