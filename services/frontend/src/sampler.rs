//! The frontend's periodic metrics: the task backlog and the age of the oldest queued row
//! per task name (one grouped read of the queued rows, `TaskQueue::queue_backlog`, the
//! query `DescribeTaskQueue` already uses), and this frontend's live worker sessions and
//! their unused credits (read from its own registry). Sampled every interval instead of
//! on the hot path: claims and results add no work for these gauges.
//!
//! The backlog read is skipped while it cannot have changed (issue 14: an idle frontend
//! makes no query of its own): once a read found no queued row, the next one waits for a
//! "tasks ready" signal (every commit that queues a task sends one) or the safety net
//! (`dispatch_fallback_ms`, for a lost notification). While rows are queued it reads every
//! interval, so the age of the oldest one stays current.
//!
//! It is also the sessions' safety net while it runs (`Shared::queue_watched`): a read
//! that finds queued rows wakes each session with credits whose claim filter admits one,
//! so a lost notification costs at most one safety net, and an idle frontend makes one
//! read per safety net however many sessions it holds.

use crate::Shared;
use std::collections::BTreeSet;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;
use tokio_util::sync::CancellationToken;

/// Samples every `interval` until `shutdown`.
pub(crate) async fn run(shared: Arc<Shared>, interval: Duration, shutdown: CancellationToken) {
    let mut seen: BTreeSet<String> = BTreeSet::new();
    let mut last_read: Option<tokio::time::Instant> = None;
    let mut queued = true;
    let safety_net = Duration::from_millis(shared.config.dispatch_fallback_ms.max(1));
    shared.queue_watched.store(true, Ordering::SeqCst);
    let _unwatch = Unwatch(shared.clone());
    loop {
        // Registered before the read: a task queued while it runs is not missed.
        let ready = shared.tasks_ready.notified();
        tokio::pin!(ready);
        ready.as_mut().enable();
        sessions(&shared);
        let stale = last_read.is_none_or(|at| at.elapsed() >= safety_net);
        if queued || stale {
            last_read = Some(tokio::time::Instant::now());
            queued = backlog(&shared, &mut seen).await;
        }
        if queued {
            tokio::select! {
                () = shutdown.cancelled() => return,
                () = tokio::time::sleep(interval) => {}
            }
            continue;
        }
        // Nothing queued: sessions are sampled every interval, the backlog only once a
        // task may have been queued (or at the safety net).
        let net = tokio::time::sleep(safety_net.saturating_sub(interval));
        tokio::pin!(net);
        loop {
            tokio::select! {
                () = shutdown.cancelled() => return,
                () = &mut ready => {
                    queued = true;
                    break;
                }
                () = &mut net => break,
                () = tokio::time::sleep(interval) => sessions(&shared),
            }
        }
        // Let the signal's tasks settle into the queue (or be claimed) for one interval.
        tokio::select! {
            () = shutdown.cancelled() => return,
            () = tokio::time::sleep(interval) => {}
        }
    }
}

/// Hands the safety net back to the sessions when the sampler stops.
struct Unwatch(Arc<Shared>);

impl Drop for Unwatch {
    fn drop(&mut self) {
        self.0.queue_watched.store(false, Ordering::SeqCst);
        for session in self.0.sessions.snapshot() {
            session.changed.notify_waiters();
        }
    }
}

/// This frontend's sessions and their credits, from memory.
fn sessions(shared: &Shared) {
    let m = orbit_metrics::get();
    let sessions = shared.sessions.snapshot();
    let credits: u64 = sessions.iter().map(|s| u64::from(s.counters().credits)).sum();
    m.worker_sessions.set(i64::try_from(sessions.len()).unwrap_or(i64::MAX));
    m.worker_credits.set(i64::try_from(credits).unwrap_or(i64::MAX));
}

/// Reads the backlog into its gauges; returns whether any row is queued (`true` after a
/// failed read, so the next interval reads again).
async fn backlog(shared: &Shared, seen: &mut BTreeSet<String>) -> bool {
    let m = orbit_metrics::get();
    let backlog = match shared.store.queue_backlog().await {
        Ok(b) => b,
        Err(e) => {
            tracing::debug!(error = %e, "backlog sample failed");
            return true;
        }
    };
    let any = !backlog.is_empty();
    // Wake the sessions these rows are for: they may have missed the signal.
    for session in shared.sessions.snapshot() {
        if session.wanted() > 0
            && backlog.iter().any(|r| session.claim.admits(&r.task, &r.task_version, None))
        {
            // A claim, drained or not: the row may be one no notification announces (an
            // attempt whose sticky timeout passed, issue 27).
            session.ask_to_claim();
        }
    }
    let now = shared.config.clock.now();
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
    flow(shared, any).await;
    any
}

/// The flow-control gauges (issue 27): one more read, only while rows are queued and the
/// store may hold limited ones; zero otherwise.
async fn flow(shared: &Shared, queued: bool) {
    let m = orbit_metrics::get();
    let limited = queued && shared.store.limited_possible().await.unwrap_or(false);
    let waiting = if limited { shared.store.flow_waiting().await.ok() } else { None };
    let count = |reason| {
        waiting.as_ref().map_or(0, |w| {
            w.by_reason.iter().filter(|(r, _)| *r == reason).map(|(_, n)| *n).sum::<u64>()
        })
    };
    for (label, reason) in [
        ("concurrency", orbit_store::WaitReason::Concurrency),
        ("rate_limit", orbit_store::WaitReason::RateLimit),
    ] {
        m.flow_waiting
            .with_label_values(&[label])
            .set(i64::try_from(count(reason)).unwrap_or(i64::MAX));
    }
    let full =
        waiting.as_ref().map_or(0, |w| w.keys.iter().filter(|k| k.running >= k.limit).count());
    m.flow_keys_full.set(i64::try_from(full).unwrap_or(i64::MAX));
}
