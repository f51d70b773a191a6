//! `DescribeTaskQueue`: the store's backlog per task, work in flight from this frontend's
//! claims, and the online workers of its sessions.

use super::page;
use crate::error::ApiResult;
use crate::Shared;
use orbit_api::v1::{DescribeTaskQueueRequest, DescribeTaskQueueResponse, TaskQueueInfo, TaskRef};
use orbit_server_kit::payload::ms_to_duration;
use std::collections::{BTreeMap, BTreeSet};

#[derive(Default)]
struct Queue {
    backlog: u64,
    oldest_created_at_ms: Option<u64>,
    in_flight: u64,
    workers: BTreeSet<String>,
}

pub(super) async fn describe(
    shared: &Shared,
    req: DescribeTaskQueueRequest,
) -> ApiResult<DescribeTaskQueueResponse> {
    // Keyed by (name, version): ordered by task name and version, as documented.
    let mut queues: BTreeMap<(String, String), Queue> = BTreeMap::new();
    for b in shared.store.queue_backlog().await? {
        let q = queues.entry((b.task, b.task_version)).or_default();
        q.backlog = b.queued;
        q.oldest_created_at_ms = Some(b.oldest_created_at_ms);
    }
    for row in shared.store.claimed_tasks(&shared.config.node_id).await? {
        queues.entry((row.task, row.task_version)).or_default().in_flight += 1;
    }
    for session in shared.sessions.snapshot() {
        if session.is_stopped() {
            continue;
        }
        for key in &session.meta.tasks {
            queues.entry(key.clone()).or_default().workers.insert(session.worker_id.clone());
        }
    }
    let now = shared.config.clock.now();
    let all: Vec<TaskQueueInfo> = queues
        .into_iter()
        .filter(|((name, _), _)| req.task.is_empty() || *name == req.task)
        .map(|((name, version), q)| TaskQueueInfo {
            task: Some(TaskRef { name, version }),
            backlog: q.backlog,
            oldest_age: Some(ms_to_duration(
                q.oldest_created_at_ms.map_or(0, |t| now.saturating_sub(t)),
            )),
            in_flight: q.in_flight,
            online_workers: u32::try_from(q.workers.len()).unwrap_or(u32::MAX),
        })
        .collect();
    let (queues, next_page_token) = page(all, req.page_size, &req.page_token)?;
    Ok(DescribeTaskQueueResponse { queues, next_page_token })
}
