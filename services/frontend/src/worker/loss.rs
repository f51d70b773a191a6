//! What happens to a session's attempts when its stream ends: kept for the worker's return
//! until the session timeout (a new session of the same worker adopts them, as
//! worker.proto promises), or handed back to the owner as `uncertain` (`SESSION_LOST`) so
//! the engine redelivers them with the same idempotency key.

use super::common::{hand_back_claims, wake_owner};
use super::ledger::Adopted;
use super::session::Session;
use super::supervise::{supervise, Supervised};
use crate::Shared;
use std::sync::Arc;
use std::time::Duration;

/// A stream that ended (the worker crashed, restarted or lost its connection) leaves its
/// session alive until the session timeout, counted from when the worker was last heard:
/// the same worker reconnecting by then adopts its attempts; otherwise they are reported
/// uncertain then and redelivered. A reconnect already open adopts them at once.
pub(super) fn park(shared: &Arc<Shared>, session: Arc<Session>) {
    if let Some((live, adopted)) = shared.sessions.park(session.clone()) {
        tracing::info!(session = %live.id, attempts = adopted.len(), "worker reconnected: in-flight attempts kept");
        supervise_adopted(shared, &live, adopted);
        return;
    }
    let timeout_ms = shared.config.session_timeout_ms.max(1);
    let until_ms = session.last_seen_ms().saturating_add(timeout_ms);
    let wait = Duration::from_millis(until_ms.saturating_sub(session.now_ms()));
    let shared = shared.clone();
    tokio::spawn(async move {
        tokio::time::sleep(wait).await;
        if let Some(lost) = shared.sessions.unpark(&session.id) {
            tracing::info!(session = %lost.id, "worker did not come back within the session timeout");
            lose_in_flight(&shared, &lost).await;
        }
    });
}

/// Watches attempts a session adopted, as `deliver::deliver` does for the ones it claimed.
pub(super) fn supervise_adopted(
    shared: &Arc<Shared>,
    session: &Arc<Session>,
    adopted: Vec<Adopted>,
) {
    let Some(tx) = session.tx() else { return };
    for a in adopted {
        let task = Supervised {
            token: a.token,
            execution_id: a.execution_id,
            unit: None,
            heartbeat_ms: a.heartbeat_ms,
        };
        tokio::spawn(supervise(shared.clone(), session.clone(), tx.clone(), task));
    }
}

/// Reports every attempt still in flight as `uncertain` (the engine redelivers it with the
/// same idempotency key) and wakes the owners.
pub(super) async fn lose_in_flight(shared: &Arc<Shared>, session: &Session) {
    hand_back(shared, session.take_in_flight()).await;
}

/// Reports these attempts (already out of their session) as `uncertain` (`SESSION_LOST`)
/// and wakes their owners: after the session timeout, at once for adopted attempts a
/// restarted worker's complete heartbeat did not list, and for handed-off tasks that
/// reached no session (`handoff`). Only rows this frontend still holds are handed back
/// (`TaskQueue::hand_back_claims`): one the worker's new session adopted through another
/// frontend (`rejoin`), or whose result was recorded, stays as it is.
pub(super) async fn hand_back(shared: &Arc<Shared>, lost: Vec<(String, String)>) {
    let tokens: Vec<String> = lost.into_iter().map(|(token, _)| token).collect();
    if let Some(released) = hand_back_claims(shared, &tokens, "SESSION_LOST").await {
        let mut executions: Vec<String> = released.into_iter().map(|r| r.execution_id).collect();
        executions.sort();
        executions.dedup();
        wake_owner(shared, executions);
    }
}
