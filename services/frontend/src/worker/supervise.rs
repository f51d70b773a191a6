//! Watching a task while a worker holds it: cooperative cancellation and heartbeat timeouts.
//!
//! After a task is pushed, a small supervisor waits on the execution's change notifications
//! (and a tick). When the owner has cancelled the task's row — the unit was cancelled,
//! timed out, or resolved by another attempt — the worker is told `Cancel{token}`. The row
//! is read only when a change may have cancelled it: it names the task's unit among the
//! units it cancelled, closes the run or moves to a later one, or does not say (issue 14);
//! and at each tick, the safety net. When the
//! step has a `heartbeat_timeout` and the worker has not named the token in a heartbeat for
//! that long, the attempt is handed back with the reason `HEARTBEAT_TIMEOUT`, which the
//! engine records as the attempt's retryable failure (`StepAttemptFailed`), and the worker
//! is told to stop. The supervisor ends when the session no
//! longer holds the token (its result arrived, or the session ended).

use super::common::{hand_back_claims, msg, wake_owner, Tx};
use super::session::Session;
use crate::Shared;
use orbit_api::v1::server_message::{self, Cancel};
use orbit_store::TaskState;
use std::sync::Arc;
use std::time::Duration;

/// Longest wait between two looks at a task without a change notification.
const TICK: Duration = Duration::from_secs(5);

/// What a supervisor watches.
pub(crate) struct Supervised {
    pub(crate) token: String,
    pub(crate) execution_id: String,
    /// The run and unit of the task: a change cancelling that unit is what to look for.
    /// `None` (attempts adopted from an earlier session, which kept no more than the
    /// token): every change is read for.
    pub(crate) unit: Option<(u32, String)>,
    pub(crate) heartbeat_ms: Option<u64>,
}

pub(crate) async fn supervise(
    shared: Arc<Shared>,
    session: Arc<Session>,
    tx: Tx,
    task: Supervised,
) {
    let changes = shared.changes.subscribe(&task.execution_id);
    let tick = task.heartbeat_ms.map_or(TICK, |h| Duration::from_millis((h / 4).max(20)).min(TICK));
    loop {
        let read = tokio::select! {
            seen = changes.changed() => {
                // Its result was recorded (the row is done): nothing left to supervise. The
                // same commit cancels the unit's other rows, which is not this one's.
                if seen.recorded(&task.token) {
                    return;
                }
                match &task.unit {
                    Some((run, unit)) => seen.cancels(*run, unit),
                    None => true,
                }
            }
            () = tokio::time::sleep(tick) => true,
            () = tx.closed() => return,
        };
        if session.is_stopped() {
            return;
        }
        let Some(last_beat) = session.last_beat(&task.token) else { return };
        if let Some(limit) = task.heartbeat_ms {
            if session.now_ms().saturating_sub(last_beat) > limit {
                heartbeat_timeout(&shared, &session, &tx, &task).await;
                return;
            }
        }
        if !read {
            continue;
        }
        match shared.store.task_by_token(&task.token).await {
            Ok(Some(row)) if row.state == TaskState::Cancelled => {
                session.release(&task.token);
                let cancel = Cancel {
                    token: task.token.clone(),
                    reason: "the attempt was cancelled".into(),
                };
                let _ = tx.send(msg(server_message::Kind::Cancel(cancel))).await;
                return;
            }
            Ok(Some(row)) if row.state == TaskState::Done => return,
            Ok(_) => {}
            Err(e) => tracing::warn!(token = %task.token, error = %e, "cannot read a task row"),
        }
    }
}

async fn heartbeat_timeout(shared: &Arc<Shared>, session: &Session, tx: &Tx, task: &Supervised) {
    let reason = orbit_engine::command::HEARTBEAT_TIMEOUT;
    let tokens = [task.token.clone()];
    // The session keeps the token if the store cannot be written: when it ends, the
    // attempt is handed back then.
    let Some(released) = hand_back_claims(shared, &tokens, reason).await else { return };
    session.release(&task.token);
    if released.is_empty() {
        // Not this frontend's any more: its result was recorded, or the worker reconnected
        // through another frontend, which adopted it (and supervises it there).
        return;
    }
    tracing::info!(token = %task.token, execution_id = %task.execution_id, trace_id = %orbit_telemetry::trace_id(&task.execution_id), "no heartbeat in time: attempt handed back");
    wake_owner(shared, vec![task.execution_id.clone()]);
    let cancel = Cancel { token: task.token.clone(), reason: reason.into() };
    let _ = tx.send(msg(server_message::Kind::Cancel(cancel))).await;
}
