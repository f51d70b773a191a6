//! Task hand-off (issue 14), the frontend's side in `orbit dev`: the owner of the same
//! process asks for a session before it commits a new task (`reserve`: a credit of a
//! matching session is taken under a fresh token), records the claim in that commit, and
//! hands the claimed rows over after it (`settle`). No claim transaction, no "tasks ready"
//! wake-up: one durable commit between a step's result and the next task on the worker.
//!
//! A claimed row whose session is gone by then (or ended while the commit ran) is a lost
//! claim: it is reported `uncertain` (`SESSION_LOST`) at once, so the engine redelivers the
//! attempt with the same idempotency key, as for any lost session. A reservation the commit
//! did not record gives its credit back.

use super::deliver::deliver;
use super::loss;
use crate::Shared;
use orbit_store::{Handoff, NewTask, TaskClaim, TaskRow};
use std::collections::HashMap;
use std::sync::{Arc, Weak};

/// The [`Handoff`] of a frontend; holds it weakly (the owner holding it must not keep the
/// frontend alive).
pub(crate) struct Handoffs {
    pub(crate) shared: Weak<Shared>,
}

impl Handoff for Handoffs {
    fn reserve(&self, execution_id: &str, task: &NewTask) -> Option<TaskClaim> {
        let shared = self.shared.upgrade()?;
        let token = orbit_store::new_task_token().ok()?;
        let session = shared.sessions.take_for(task, execution_id, &token)?;
        Some(TaskClaim {
            unit: task.unit.clone(),
            attempt: task.attempt,
            offer: task.offer,
            claimer: shared.config.node_id.clone(),
            session: session.id.clone(),
            worker_id: session.worker_id.clone(),
            token,
        })
    }

    fn settle(&self, claimed: Vec<TaskRow>, unused: Vec<TaskClaim>) {
        let Some(shared) = self.shared.upgrade() else { return };
        for u in unused {
            // Not recorded: the credit goes back (the session's dispatcher may claim again).
            match shared.sessions.get(&u.session) {
                Some(s) if s.release(&u.token) => s.add_credits(1),
                _ => shared.sessions.forget_token(&u.token),
            }
        }
        if claimed.is_empty() {
            return;
        }
        tokio::spawn(hand_over(shared, claimed));
    }
}

/// Delivers claimed rows to their sessions; a row whose session cannot take it any more is
/// released at once.
pub(super) async fn hand_over(shared: Arc<Shared>, rows: Vec<TaskRow>) {
    let mut by_session: HashMap<String, Vec<TaskRow>> = HashMap::new();
    for row in rows {
        by_session.entry(row.session.clone().unwrap_or_default()).or_default().push(row);
    }
    let mut lost = Vec::new();
    for (id, rows) in by_session {
        let live = shared.sessions.get(&id).filter(|s| !s.is_stopped()).and_then(|s| {
            let tx = s.tx()?;
            Some((s, tx))
        });
        match live {
            Some((session, tx)) => {
                // A token the session no longer holds ended with it (`loss` took it before
                // the commit recorded the row): lost, like the session.
                let (mine, gone): (Vec<_>, Vec<_>) = rows.into_iter().partition(|r| {
                    r.token.as_deref().is_some_and(|t| session.execution_of(t).is_some())
                });
                lost.extend(gone);
                if !mine.is_empty() {
                    deliver(&shared, &session, mine, &tx, true).await;
                }
            }
            None => lost.extend(rows),
        }
    }
    release(&shared, lost).await;
}

/// Reports handed-off attempts that reached no worker as lost (`loss::hand_back`), so they
/// are redelivered now rather than when their claim is swept.
async fn release(shared: &Arc<Shared>, rows: Vec<TaskRow>) {
    let mut lost = Vec::new();
    for row in rows {
        let Some(token) = row.token else { continue };
        // A session that adopted it (the worker reconnected) never got it either.
        shared.sessions.forget_token(&token);
        lost.push((token, row.execution_id));
    }
    loss::hand_back(shared, lost).await;
}
