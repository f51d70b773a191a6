//! One execution of a batch: send its command to the owner through the inbox, wait for the
//! reply, and say what became of it (a `delete` is the store's alone: one
//! `delete_execution`, which refuses an open tree and finds a deleted one gone).
//!
//! The command carries the request id `batch:<batch id>`, so the inbox keeps one entry per
//! execution and batch: sending it again (after a reply that did not come in time, after a
//! crash of this scheduler or of the owner) writes nothing and answers with the first
//! entry, whose reply — once the owner applies it — is the one outcome. An execution can
//! therefore never be acted on twice by one batch. The wait is the frontend's
//! (`orbit_store::wait_reply`): on the process's change hub when it has one (`orbit dev`),
//! by re-reading the entry otherwise.

use orbit_api::internal::v1 as pb;
use orbit_api::internal::v1::owner_service_server::OwnerService;
use orbit_server_kit::ErrorCode;
use orbit_store::inbox::{Cancel, Migrate, Reset, Signal, Terminate};
use orbit_store::{
    wait_reply, BatchAction, BatchItem, BatchSpec, ChangeHub, DeleteOutcome, Fallback,
    InboxMessage, InboxReply, ItemOutcome, SchedulerStore, StoreError, Waited,
};
use std::sync::Arc;
use std::time::Duration;
use tonic::Request;

/// Re-reads of an entry no change has answered: soon, then at most every 200 ms (a split
/// scheduler has no change hub, and a batch waits for one reply per execution).
const FALLBACK: Fallback =
    Fallback { first: Duration::from_millis(20), max: Duration::from_millis(200) };

/// The pause before sending again after the store failed.
const STORE_RETRY: Duration = Duration::from_millis(500);

/// What sending one execution's command needs.
#[derive(Clone)]
pub(crate) struct Sender {
    pub(crate) store: Arc<dyn SchedulerStore>,
    pub(crate) owner: Arc<dyn OwnerService>,
    pub(crate) changes: Option<Arc<ChangeHub>>,
    pub(crate) reply_timeout: Duration,
}

/// The request id of every command of batch `batch_id`.
pub(crate) fn request_id(batch_id: &str) -> String {
    format!("batch:{batch_id}")
}

/// The inbox command `spec` sends to each execution; `None` for `delete`, which is the
/// store's alone.
fn message(batch_id: &str, spec: &BatchSpec) -> Option<InboxMessage> {
    let request_id = Some(request_id(batch_id));
    // An action's own reason, else the batch's.
    let reason = |own: &str| if own.is_empty() { spec.reason.clone() } else { own.to_string() };
    Some(match &spec.action {
        BatchAction::Migrate { to_version } => InboxMessage::Migrate(Migrate {
            to_version: to_version.clone(),
            reason: spec.reason.clone(),
            request_id,
        }),
        BatchAction::Reset { step, drop_signals, to_version } => InboxMessage::Reset(Reset {
            to_step: Some(step.clone()),
            to_seq: None,
            drop_signals: *drop_signals,
            to_version: to_version.clone(),
            reason: spec.reason.clone(),
            request_id,
        }),
        BatchAction::Cancel { reason: own } => {
            InboxMessage::Cancel(Cancel { reason: reason(own), request_id })
        }
        BatchAction::Terminate { reason: own } => {
            InboxMessage::Terminate(Terminate { reason: reason(own), request_id })
        }
        BatchAction::Signal { name, payload } => InboxMessage::Signal(Signal {
            name: name.clone(),
            payload: payload.clone(),
            request_id,
        }),
        BatchAction::Delete {} => return None,
    })
}

impl Sender {
    /// Sends the command to `execution_id` and waits for its reply, sending again (the same
    /// entry) until one comes or `stopped` says the run is over; `None` then.
    pub(crate) async fn run(
        &self,
        batch_id: &str,
        spec: &BatchSpec,
        execution_id: &str,
        stopped: impl Fn() -> bool,
    ) -> Option<BatchItem> {
        let message = message(batch_id, spec);
        let item = |outcome, code: &str, message: String, seq| BatchItem {
            batch_id: batch_id.to_string(),
            execution_id: execution_id.to_string(),
            outcome,
            code: code.to_string(),
            message,
            seq,
        };
        while !stopped() {
            let Some(message) = &message else {
                match self.store.delete_execution(execution_id).await {
                    Ok(deleted) => {
                        let (outcome, code, text) = deleted_outcome(execution_id, deleted);
                        return Some(item(outcome, &code, text, 0));
                    }
                    Err(e) if transient(&e) => {
                        tracing::warn!(batch_id, execution_id, error = %e, "cannot delete a batch's execution; retrying");
                        tokio::time::sleep(STORE_RETRY).await;
                        continue;
                    }
                    Err(e) => {
                        return Some(item(ItemOutcome::Failed, e.code().as_str(), e.message(), 0))
                    }
                }
            };
            match self.send(execution_id, message).await {
                Ok(Some(reply)) => {
                    let (outcome, code, text, seq) = outcome(reply);
                    return Some(item(outcome, &code, text, seq));
                }
                Ok(None) => tracing::warn!(batch_id, execution_id, timeout_ms = self.reply_timeout.as_millis() as u64, "no reply from the execution's owner in time; sending the batch's command again"),
                Err(e) if transient(&e) => {
                    tracing::warn!(batch_id, execution_id, error = %e, "cannot send the batch's command; retrying");
                    tokio::time::sleep(STORE_RETRY).await;
                }
                Err(e) => {
                    let code = match &e {
                        StoreError::NotFound(_) => ErrorCode::ExecutionNotFound,
                        other => other.code(),
                    };
                    return Some(item(ItemOutcome::Failed, code.as_str(), e.message(), 0));
                }
            }
        }
        None
    }

    /// One send and wait: `Ok(None)` when no reply came within the reply timeout.
    async fn send(
        &self,
        execution_id: &str,
        message: &InboxMessage,
    ) -> Result<Option<Option<InboxReply>>, StoreError> {
        if self.store.get_execution(execution_id).await?.is_none() {
            return Err(StoreError::NotFound(format!("execution `{execution_id}` is gone")));
        }
        let sub = self.changes.as_ref().map(|hub| hub.subscribe(execution_id));
        let seq = self.store.enqueue_inbox(execution_id, message).await?;
        let wake = pb::OwnerServiceWakeRequest { execution_ids: vec![execution_id.to_string()] };
        if let Err(status) = self.owner.wake(Request::new(wake)).await {
            tracing::warn!(%status, execution_id, "waking the owner failed");
        }
        // A resend answers with the first entry, which may be applied already: read first.
        let waited =
            wait_reply(self.store.as_ref(), sub.as_ref(), seq, self.reply_timeout, false, FALLBACK)
                .await?;
        Ok(match waited {
            Waited::Done(reply) => Some(reply),
            Waited::Pending => None,
        })
    }
}

/// Whether a failed send may succeed later.
fn transient(e: &StoreError) -> bool {
    matches!(e.code(), ErrorCode::Unavailable | ErrorCode::StorageError)
}

/// What a delete means for the item: outcome, code, message. A tree already gone (deleted
/// with its parent, or by this batch before a crash) is skipped; an open one is refused as
/// `DeleteExecution` refuses it.
fn deleted_outcome(id: &str, deleted: DeleteOutcome) -> (ItemOutcome, String, String) {
    match deleted {
        DeleteOutcome::Deleted(rows) => (
            ItemOutcome::Succeeded,
            String::new(),
            format!("deleted {} executions, {} events", rows.executions, rows.events),
        ),
        DeleteOutcome::NotFound => (
            ItemOutcome::Skipped,
            ErrorCode::ExecutionNotFound.as_str().to_string(),
            format!("execution `{id}` is gone already"),
        ),
        DeleteOutcome::NotFinished(open) => (
            ItemOutcome::Failed,
            ErrorCode::ExecutionNotFinished.as_str().to_string(),
            format!(
                "execution `{id}` cannot be deleted while it or a descendant runs ({} open)",
                open.len()
            ),
        ),
    }
}

/// What a reply means for the item: outcome, code, message, seq.
fn outcome(reply: Option<InboxReply>) -> (ItemOutcome, String, String, u64) {
    match reply {
        Some(InboxReply::Applied { seq, .. }) => {
            (ItemOutcome::Succeeded, String::new(), "applied".to_string(), seq)
        }
        Some(InboxReply::Terminated { seq, terminated: true }) => {
            (ItemOutcome::Succeeded, String::new(), "terminated".to_string(), seq)
        }
        Some(InboxReply::Terminated { seq, terminated: false }) => (
            ItemOutcome::Skipped,
            ErrorCode::ExecutionFinished.as_str().to_string(),
            "terminated already".to_string(),
            seq,
        ),
        Some(InboxReply::Migrated { seq: 0, to_version, .. }) => (
            ItemOutcome::Skipped,
            String::new(),
            format!("already runs version {to_version}: nothing recorded"),
            0,
        ),
        Some(InboxReply::Migrated { seq, from_version, to_version, .. }) => (
            ItemOutcome::Succeeded,
            String::new(),
            format!("migrated from version {from_version} to {to_version}"),
            seq,
        ),
        Some(InboxReply::Reset { seq, run, .. }) => {
            (ItemOutcome::Succeeded, String::new(), format!("reset: goes on in run {run}"), seq)
        }
        Some(InboxReply::Refused { code: ErrorCode::ExecutionFinished, message }) => {
            (ItemOutcome::Skipped, ErrorCode::ExecutionFinished.as_str().to_string(), message, 0)
        }
        Some(InboxReply::Refused { code, message }) => {
            (ItemOutcome::Failed, code.as_str().to_string(), message, 0)
        }
        other => (
            ItemOutcome::Failed,
            ErrorCode::StorageError.as_str().to_string(),
            format!("unexpected owner reply to a batch's command: {other:?}"),
            0,
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn replies_become_outcomes() {
        let migrated = |seq| InboxReply::Migrated {
            seq,
            run: 1,
            from_version: "1".into(),
            to_version: "2".into(),
            plan: json!({}),
        };
        assert_eq!(outcome(Some(migrated(9))).0, ItemOutcome::Succeeded);
        assert_eq!(outcome(Some(migrated(9))).3, 9);
        assert_eq!(outcome(Some(migrated(0))).0, ItemOutcome::Skipped);
        let refused = |code| InboxReply::Refused { code, message: "no".into() };
        let unsafe_ = outcome(Some(refused(ErrorCode::MigrationUnsafe)));
        assert_eq!((unsafe_.0, unsafe_.1.as_str()), (ItemOutcome::Failed, "MIGRATION_UNSAFE"));
        let done = outcome(Some(refused(ErrorCode::ExecutionFinished)));
        assert_eq!((done.0, done.1.as_str()), (ItemOutcome::Skipped, "EXECUTION_FINISHED"));
        assert_eq!(outcome(None).0, ItemOutcome::Failed);
        let applied = outcome(Some(InboxReply::Applied { seq: 4, run: 1, applied: true }));
        assert_eq!((applied.0, applied.3), (ItemOutcome::Succeeded, 4));
        let term = |terminated| outcome(Some(InboxReply::Terminated { seq: 7, terminated }));
        assert_eq!(term(true).0, ItemOutcome::Succeeded);
        assert_eq!(term(false).0, ItemOutcome::Skipped);
        assert_eq!(deleted_outcome("e", DeleteOutcome::NotFound).0, ItemOutcome::Skipped);
        let open = deleted_outcome("e", DeleteOutcome::NotFinished(vec!["e".into()]));
        assert_eq!((open.0, open.1.as_str()), (ItemOutcome::Failed, "EXECUTION_NOT_FINISHED"));
        let spec = |action| BatchSpec {
            selector: orbit_store::BatchSelector::default(),
            action,
            rate_per_second: 1,
            reason: "ops".into(),
        };
        let cancel = message("b", &spec(BatchAction::Cancel { reason: String::new() }));
        assert_eq!(
            cancel,
            Some(InboxMessage::Cancel(Cancel {
                reason: "ops".into(),
                request_id: Some("batch:b".into())
            }))
        );
        let term = message("b", &spec(BatchAction::Terminate { reason: "own".into() })).unwrap();
        assert_eq!(term.request_id(), Some("batch:b"));
        assert_eq!(message("b", &spec(BatchAction::Delete {})), None);
        assert_eq!(request_id("b-1"), "batch:b-1");
    }
}
