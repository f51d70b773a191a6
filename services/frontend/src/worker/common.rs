//! The ground floor of the worker module: the few helpers every other file of it shares
//! (the sender of a session's stream, waking owners, handing attempts back, the short-lock
//! rule).
//! Imports no sibling, so any file may use it without closing an import circle.

use crate::Shared;
use orbit_api::internal::v1::OwnerServiceWakeRequest;
use orbit_api::v1::{server_message, ServerMessage};
use orbit_store::TaskRow;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use tokio::sync::mpsc;
use tonic::{Request, Status};

/// The sending half of a worker's `Session` stream.
pub(crate) type Tx = mpsc::Sender<Result<ServerMessage, Status>>;

/// A server message of `kind`, as the stream sends it.
pub(crate) fn msg(kind: server_message::Kind) -> Result<ServerMessage, Status> {
    Ok(ServerMessage { kind: Some(kind) })
}

/// Tells the owner of each execution that its inbox has entries, without waiting.
pub(crate) fn wake_owner(shared: &Arc<Shared>, execution_ids: Vec<String>) {
    if execution_ids.is_empty() {
        return;
    }
    let owner = shared.owner.clone();
    tokio::spawn(async move {
        let request = Request::new(OwnerServiceWakeRequest { execution_ids });
        if let Err(status) = owner.wake(request).await {
            // The owner also polls its inbox; the entries are durable either way.
            tracing::warn!(%status, "waking the owner failed");
        }
    });
}

/// Hands back the rows among `tokens` this frontend still holds, with `reason`; `None`
/// (logged) when the store could not be written: the owner's attempt deadline, or the
/// sweep of this frontend's claims, still resolves them.
pub(crate) async fn hand_back_claims(
    shared: &Shared,
    tokens: &[String],
    reason: &str,
) -> Option<Vec<TaskRow>> {
    if tokens.is_empty() {
        return Some(Vec::new());
    }
    match shared.store.hand_back_claims(&shared.config.node_id, tokens, reason).await {
        Ok(released) => Some(released),
        Err(e) => {
            tracing::error!(attempts = tokens.len(), error = %e, "recording lost attempts failed");
            None
        }
    }
}

/// Locks plain data held for a moment.
pub(crate) fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    // Plain data under a short lock; a panic elsewhere leaves it consistent.
    m.lock().unwrap_or_else(PoisonError::into_inner)
}
