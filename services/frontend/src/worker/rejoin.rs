//! A worker that reconnected through this frontend while its attempts are claimed through
//! another one (its old stream reached another frontend, alive or dead).
//!
//! The worker's complete heartbeats name every attempt it holds; the SDKs send one right
//! after `welcome`. A named token that no session of this frontend holds (open or parked)
//! is looked for in the store: the rows still claimed for this worker id move here
//! (`TaskQueue::adopt_claims`: `claimed_by` this frontend, `session` this one) and this
//! session supervises them as adopted attempts. The frontend the old stream reached hands
//! back only rows it still holds (`TaskQueue::hand_back_claims`) when that session's
//! timeout passes or a heartbeat timeout fires, and the sweep of a dead frontend's claims
//! finds them no longer its own: the attempts are kept, never redelivered behind the
//! worker's back. Nothing is read when every named token is known here (the usual case).
//!
//! A worker identity restricted to task patterns adopts only tasks those patterns match;
//! a row it may not serve is handed back at once (it could not report its result anyway).

use super::context::context;
use super::ledger::Adopted;
use super::loss;
use super::session::Session;
use crate::scope::Scope;
use crate::Shared;
use std::sync::Arc;

/// Adopts the attempts among `listed` (a complete heartbeat's tokens) that this frontend
/// does not know and the store still holds claimed for the session's worker.
pub(super) async fn rejoin(
    shared: &Arc<Shared>,
    session: &Arc<Session>,
    scope: &Scope,
    listed: &[String],
) {
    let unknown: Vec<String> =
        listed.iter().filter(|t| shared.sessions.execution_of(t).is_none()).cloned().collect();
    if unknown.is_empty() || session.is_stopped() {
        return;
    }
    let node_id = &shared.config.node_id;
    let rows = match shared
        .store
        .adopt_claims(&session.worker_id, &unknown, node_id, &session.id)
        .await
    {
        Ok(rows) => rows,
        Err(e) => {
            // The frontend holding them still hands them back (or its sweep, if it died):
            // redelivered, as before this worker came back.
            tracing::warn!(session = %session.id, error = %e, "cannot adopt a reconnected worker's attempts");
            return;
        }
    };
    let mut adopted = Vec::with_capacity(rows.len());
    let mut refused = Vec::new();
    for row in rows {
        let Some(token) = row.token else { continue };
        if !scope.claims(&row.task) {
            refused.push((token, row.execution_id));
            continue;
        }
        let heartbeat_ms = context(shared, &row.execution_id, row.run)
            .await
            .and_then(|c| orbit_wire::task_timeouts(&c.def, &row.unit_key).heartbeat_ms);
        adopted.push(Adopted { token, execution_id: row.execution_id, heartbeat_ms });
    }
    if !adopted.is_empty() {
        tracing::info!(session = %session.id, worker_id = %session.worker_id, attempts = adopted.len(), "worker reconnected through another frontend: in-flight attempts kept");
        session.adopt_attempts(&adopted);
        loss::supervise_adopted(shared, session, adopted);
    }
    loss::hand_back(shared, refused).await;
}
