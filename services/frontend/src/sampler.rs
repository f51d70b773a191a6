//! The frontend's periodic metrics: the task backlog and the age of the oldest queued row
//! per task name (one grouped read of the queued rows, `TaskQueue::queue_backlog`, the
//! query `DescribeTaskQueue` already uses), and this frontend's live worker sessions and
//! their unused credits (read from its own registry). Sampled every interval instead of
//! on the hot path: claims and results add no work for these gauges.

use crate::Shared;
use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::Duration;
use tokio_util::sync::CancellationToken;

/// Samples every `interval` until `shutdown`.
pub(crate) async fn run(shared: Arc<Shared>, interval: Duration, shutdown: CancellationToken) {
    let mut seen: BTreeSet<String> = BTreeSet::new();
    loop {
        sample(&shared, &mut seen).await;
        tokio::select! {
            () = shutdown.cancelled() => return,
            () = tokio::time::sleep(interval) => {}
        }
    }
}

async fn sample(shared: &Shared, seen: &mut BTreeSet<String>) {
    let m = orbit_metrics::get();
    let sessions = shared.sessions.snapshot();
    let credits: u64 = sessions.iter().map(|s| u64::from(s.counters().credits)).sum();
    m.worker_sessions.set(i64::try_from(sessions.len()).unwrap_or(i64::MAX));
    m.worker_credits.set(i64::try_from(credits).unwrap_or(i64::MAX));
    let backlog = match shared.store.queue_backlog().await {
        Ok(b) => b,
        Err(e) => {
            tracing::debug!(error = %e, "backlog sample failed");
            return;
        }
    };
    let now = crate::worker::now_ms();
    let mut current = BTreeSet::new();
    // Versions of one task name add up; the oldest row of any version counts.
    let mut by_task: std::collections::BTreeMap<&str, (u64, u64)> = Default::default();
    for row in &backlog {
        let entry = by_task.entry(row.task.as_str()).or_insert((0, u64::MAX));
        entry.0 += row.queued;
        entry.1 = entry.1.min(row.oldest_created_at_ms);
    }
    for (task, (queued, oldest)) in by_task {
        m.task_backlog.with_label_values(&[task]).set(i64::try_from(queued).unwrap_or(i64::MAX));
        m.task_oldest_age
            .with_label_values(&[task])
            .set(orbit_metrics::seconds_between_ms(oldest, now));
        current.insert(task.to_string());
    }
    // A task whose queue emptied reads 0, not its last value.
    for gone in seen.difference(&current) {
        m.task_backlog.with_label_values(&[gone.as_str()]).set(0);
        m.task_oldest_age.with_label_values(&[gone.as_str()]).set(0.0);
    }
    *seen = current;
}
