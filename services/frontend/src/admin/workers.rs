//! `ListWorkers`: the workers with a session on this frontend, grouped by worker id.

use super::page;
use crate::error::ApiResult;
use crate::worker::Session;
use crate::Shared;
use orbit_api::v1::{ListWorkersRequest, ListWorkersResponse, TaskRef, WorkerInfo, WorkerSession};
use orbit_server_kit::payload::ms_to_timestamp;
use std::collections::BTreeMap;
use std::sync::Arc;

pub(super) fn list(shared: &Shared, req: ListWorkersRequest) -> ApiResult<ListWorkersResponse> {
    // BTreeMap: ordered by worker id, as documented.
    let mut by_worker: BTreeMap<String, Vec<Arc<Session>>> = BTreeMap::new();
    for session in shared.sessions.snapshot() {
        by_worker.entry(session.worker_id.clone()).or_default().push(session);
    }
    let mut workers = Vec::new();
    for (worker_id, mut sessions) in by_worker {
        sessions.sort_by(|a, b| (a.connected_at_ms, &a.id).cmp(&(b.connected_at_ms, &b.id)));
        let info = worker_info(&shared.config.node_id, worker_id, &sessions);
        let offers_task = req.task.is_empty() || info.tasks.iter().any(|t| t.name == req.task);
        if offers_task && (info.online || !req.online_only) {
            workers.push(info);
        }
    }
    let (workers, next_page_token) = page(workers, req.page_size, &req.page_token)?;
    Ok(ListWorkersResponse { workers, next_page_token })
}

/// One worker from its sessions (oldest first); its description is the newest session's.
fn worker_info(node_id: &str, worker_id: String, sessions: &[Arc<Session>]) -> WorkerInfo {
    let mut tasks: Vec<TaskRef> = Vec::new();
    for s in sessions {
        for (name, version) in &s.meta.tasks {
            if !tasks.iter().any(|t| &t.name == name && &t.version == version) {
                tasks.push(TaskRef { name: name.clone(), version: version.clone() });
            }
        }
    }
    let live: Vec<WorkerSession> = sessions
        .iter()
        .filter(|s| !s.is_stopped())
        .map(|s| {
            let counters = s.counters();
            WorkerSession {
                session_id: s.id.clone(),
                frontend_node_id: node_id.to_string(),
                connected_at: Some(ms_to_timestamp(s.connected_at_ms)),
                last_seen_at: Some(ms_to_timestamp(s.last_seen_ms())),
                credits: counters.credits,
                in_flight: counters.in_flight,
                draining: counters.draining,
            }
        })
        .collect();
    let newest = sessions.last();
    let last_seen = sessions.iter().map(|s| s.last_seen_ms()).max();
    WorkerInfo {
        worker_id,
        runtime: newest.map(|s| s.meta.runtime.clone()).unwrap_or_default(),
        sdk: newest.map(|s| s.meta.sdk.clone()).unwrap_or_default(),
        tasks,
        max_concurrency: newest.map_or(0, |s| s.max_concurrency()),
        labels: newest.map(|s| s.meta.labels.clone()).unwrap_or_default(),
        online: !live.is_empty(),
        in_flight: live.iter().fold(0u32, |n, s| n.saturating_add(s.in_flight)),
        sessions: live,
        last_seen_at: last_seen.map(ms_to_timestamp),
    }
}
