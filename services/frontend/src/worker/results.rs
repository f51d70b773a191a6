//! Worker results (complete, fail, heartbeat details) → the task row and the owner's inbox.
//!
//! A result is recorded with `Store::complete_task_row`, which marks the row done and
//! writes the inbox entry in one transaction; then [`reply::deliver`] wakes the owner and
//! awaits its reply (on change notifications, up to `reply_timeout_ms`; without a reply in
//! time the durable result is acknowledged as accepted), so the acknowledgement says whether the result
//! counted (`accepted: false`, `STALE_RESULT`, when it arrived for a unit already
//! resolved). Results are handled concurrently, so this wait never holds up a worker's
//! stream. Heartbeat details must not finish the row, so they go to the inbox directly.
//!
//! A token is bound to the worker its row was claimed for (`task_queue.worker_id`): a
//! result from any other worker id — another worker's stream, or a unary call naming
//! another worker or none — is refused with `WORKER_MISMATCH` (PERMISSION_DENIED) and
//! nothing is written; heartbeat details for such tokens are dropped. The same worker id
//! on a new stream, through any frontend, is the same worker (a reconnect).
//!
//! A worker identity restricted to task patterns (see [`Scope`]) may only report results
//! for tasks those patterns match: its result for any other task is refused with
//! `PERMISSION_DENIED` naming the task, before anything is written. The task name is read
//! from the token's row only for such workers, and on a session only for tokens that
//! session did not claim itself (what it claimed already passed the hello's pattern check).

use super::check::{error_json, task_error};
use super::common::wake_owner;
use super::session::Session;
use crate::error::{err, ApiResult, FrontendError};
use crate::reply::{self, Waited};
use crate::scope::Scope;
use crate::Shared;
use orbit_api::internal::v1::ReportResultRequest;
use orbit_api::v1 as wire;
use orbit_engine::TaskError;
use orbit_server_kit::payload::{check_limits, proto_to_json};
use orbit_server_kit::validate as rules;
use orbit_server_kit::{ErrorCode, OrbitError};
use orbit_store::inbox::{Complete, Fail, Heartbeat};
use orbit_store::{InboxMessage, InboxReply};
use serde_json::Value;
use std::sync::Arc;

/// What the worker is told about its result.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Outcome {
    pub(crate) accepted: bool,
    pub(crate) reason: String,
}

impl Outcome {
    fn rejected(reason: &str) -> Outcome {
        Outcome { accepted: false, reason: reason.to_string() }
    }
}

/// Records a successful attempt. An output over the payload limits is recorded as a
/// non-retryable `PAYLOAD_TOO_LARGE` / `PAYLOAD_TOO_DEEP` failure instead, and not accepted.
pub(crate) async fn complete(
    shared: &Arc<Shared>,
    scope: &Scope,
    worker_id: &str,
    token: &str,
    output: Option<prost_types::Value>,
) -> ApiResult<Outcome> {
    let token = rules::id("token", token)?;
    let output = output
        .map(proto_to_json)
        .transpose()
        .map_err(|e| rules::invalid("output", e.to_string()))?;
    let worker_id = reporter(worker_id)?;
    task_in_scope(shared, scope, token).await?;
    let output = output.unwrap_or(Value::Null);
    if let Err(refused) = check_limits("output", &output, shared.config.max_payload_bytes) {
        return record_refused(shared, worker_id, token, &refused).await;
    }
    let report = InboxMessage::Complete(Complete { token: token.to_string(), output });
    record(shared, worker_id, token, report).await
}

/// The attempt fails with the payload code instead of recording the refused value; the
/// worker's ack says why (not accepted).
async fn record_refused(
    shared: &Arc<Shared>,
    worker_id: &str,
    token: &str,
    refused: &OrbitError,
) -> ApiResult<Outcome> {
    let recorded = record(shared, worker_id, token, refused_report(token, refused)).await?;
    let reason = if recorded.reason.is_empty() { refused.code.as_str() } else { &recorded.reason };
    Ok(Outcome::rejected(reason))
}

fn refused_report(token: &str, refused: &OrbitError) -> InboxMessage {
    let error = TaskError::fatal(refused.code.as_str(), refused.message.clone());
    InboxMessage::Fail(Fail { token: token.to_string(), error })
}

/// Records a failed attempt; `error.code` is required.
pub(crate) async fn fail(
    shared: &Arc<Shared>,
    scope: &Scope,
    worker_id: &str,
    token: &str,
    error: Option<wire::TaskError>,
) -> ApiResult<Outcome> {
    let token = rules::id("token", token)?;
    let error = task_error(error)?;
    let worker_id = reporter(worker_id)?;
    task_in_scope(shared, scope, token).await?;
    let limits = check_limits("error", &error_json(&error), shared.config.max_payload_bytes);
    if let Err(refused) = limits {
        // The attempt still failed: record that, without the details that are over the
        // limits, under the payload code (the worker's code stays in the message).
        let message = format!("{} (the worker reported {})", refused.message, error.code);
        let refused = OrbitError::new(refused.code, message);
        return record_refused(shared, worker_id, token, &refused).await;
    }
    let report = InboxMessage::Fail(Fail { token: token.to_string(), error });
    record(shared, worker_id, token, report).await
}

/// `PERMISSION_DENIED` when a restricted worker reports a task outside its patterns. Only
/// restricted workers read the token's row; an unknown token passes, and `record` answers
/// it `UNKNOWN_TOKEN` as before.
async fn task_in_scope(shared: &Shared, scope: &Scope, token: &str) -> ApiResult<()> {
    if !scope.is_restricted() {
        return Ok(());
    }
    match shared.store.task_by_token(token).await? {
        Some(row) => scope.task(&row.task),
        None => Ok(()),
    }
}

/// The worker a result claims to come from: required (an anonymous result is refused
/// before anything is looked up).
fn reporter(worker_id: &str) -> ApiResult<&str> {
    if worker_id.is_empty() {
        return Err(err(
            ErrorCode::WorkerMismatch,
            "worker_id is required: a result is accepted only from the worker its task was \
             dispatched to",
        ));
    }
    Ok(rules::id("worker_id", worker_id)?)
}

fn mismatch(token: &str) -> FrontendError {
    err(
        ErrorCode::WorkerMismatch,
        format!("task token {token} was dispatched to another worker; nothing was recorded"),
    )
}

async fn record(
    shared: &Arc<Shared>,
    worker_id: &str,
    token: &str,
    report: InboxMessage,
) -> ApiResult<Outcome> {
    let succeeded = matches!(report, InboxMessage::Complete(_));
    if let Some(outcome) = hand_over(shared, worker_id, token, &report, succeeded).await {
        return Ok(outcome);
    }
    // A token this frontend handed out names its execution: subscribe before the write, so
    // the owner's reply cannot be missed and needs no read before the first change.
    let early = shared.sessions.execution_of(token).map(|id| {
        let sub = shared.changes.subscribe(&id);
        (id, sub)
    });
    let done = shared.store.complete_task_row(token, worker_id, Some(report)).await?;
    let Some(done) = done else {
        return Ok(Outcome::rejected("UNKNOWN_TOKEN"));
    };
    if done.task.worker_id.as_deref() != Some(worker_id) {
        tracing::warn!(%token, worker_id, "a result from a worker the task was not dispatched to");
        return Err(mismatch(token));
    }
    shared.sessions.forget_token(token);
    if done.newly_done {
        count_result(shared, &done.task.task, succeeded, done.task.claimed_at_ms);
    }
    if !done.newly_done {
        // The row was already done: an earlier result for this token won. The entry is
        // still recorded; the owner ignores it as stale.
        wake_owner(shared, vec![done.task.execution_id.clone()]);
        return Ok(Outcome::rejected("ALREADY_REPORTED"));
    }
    // Durable now. Whether it counts is the owner's call (rule 4: a result for a unit that
    // is already resolved is recorded as stale): wait for its reply, driven by the
    // execution's change notifications. Without a reply in time the result is still
    // durable and will be applied, so it is acknowledged as accepted.
    let execution_id = done.task.execution_id.clone();
    let (sub, before_write) = match early {
        Some((id, sub)) if id == execution_id => (sub, true),
        _ => (shared.changes.subscribe(&execution_id), false),
    };
    let Some(seq) = done.inbox_seq else {
        wake_owner(shared, vec![execution_id]);
        return Ok(Outcome { accepted: true, reason: String::new() });
    };
    Ok(match reply::deliver(shared, &execution_id, &sub, seq, before_write).await? {
        Waited::Done(Some(InboxReply::Applied { applied: false, .. })) => {
            Outcome::rejected("STALE_RESULT")
        }
        // Answered for a finished execution whose owner let it go: as stale as it gets.
        Waited::Done(Some(InboxReply::Refused { code: ErrorCode::ExecutionFinished, .. })) => {
            Outcome::rejected("STALE_RESULT")
        }
        Waited::Done(Some(InboxReply::Refused { code, message })) => {
            tracing::warn!(seq, %code, %message, "the owner refused a result");
            Outcome::rejected(code.as_str())
        }
        Waited::Done(_) => Outcome { accepted: true, reason: String::new() },
        Waited::Pending => {
            tracing::debug!(seq, "no owner reply in time; the durable result is acked");
            Outcome { accepted: true, reason: String::new() }
        }
    })
}

/// The direct route (issue 14): a result for a token a session here claimed goes straight
/// to the execution's owner (in process in `orbit dev`, `OwnerService.ReportResult`
/// across processes), which commits it with the events it causes in one transaction and
/// answers after that commit. `None` when the owner did not take it or could not be
/// reached: nothing was written, and the caller writes the result to the inbox, the
/// durable route. The worker is acked only after one of the two is durable.
async fn hand_over(
    shared: &Arc<Shared>,
    worker_id: &str,
    token: &str,
    report: &InboxMessage,
    succeeded: bool,
) -> Option<Outcome> {
    let (execution_id, task, claimed_at_ms) = shared.sessions.claimed_here(token)?;
    // The typed result only: `kind` and `payload` are for owners to read from frontends of
    // an earlier release.
    let request = ReportResultRequest {
        execution_id,
        token: token.to_string(),
        worker_id: worker_id.to_string(),
        owner_node_id: shared.lending.handed_by(token).unwrap_or_default(),
        result: orbit_wire::task_result(report),
        ..ReportResultRequest::default()
    };
    match shared.owner.report_result(tonic::Request::new(request)).await {
        Ok(answer) if answer.get_ref().recorded => {}
        Ok(_) => return None,
        Err(status) => {
            tracing::debug!(%token, %status, "handing a result to its owner failed; using the inbox");
            return None;
        }
    }
    shared.sessions.forget_token(token);
    count_result(shared, &task, succeeded, claimed_at_ms);
    Some(Outcome { accepted: true, reason: String::new() })
}

/// The metrics of a result recorded by either route: completed or failed, and the run
/// time from the claim (store clock) to now (this frontend's clock; skew reads as 0).
fn count_result(shared: &Shared, task: &str, succeeded: bool, claimed_at_ms: Option<u64>) {
    let m = orbit_metrics::get();
    let labels = [task];
    let counter = if succeeded { &m.tasks_completed } else { &m.tasks_failed };
    counter.with_label_values(&labels).inc();
    if let Some(claimed) = claimed_at_ms {
        let ran = orbit_metrics::seconds_between_ms(claimed, shared.config.clock.now());
        m.task_run.with_label_values(&labels).observe(ran);
    }
}

/// Heartbeat details: one `heartbeat` inbox entry per token still claimed for this
/// session's worker, whichever frontend handed it out.
pub(crate) async fn heartbeat(
    shared: &Arc<Shared>,
    session: &Session,
    scope: &Scope,
    tokens: &[String],
    details: Option<prost_types::Value>,
) -> ApiResult<()> {
    let Some(details) = details else { return Ok(()) };
    let details = proto_to_json(details).map_err(|e| rules::invalid("details", e.to_string()))?;
    if let Err(refused) = check_limits("details", &details, shared.config.max_payload_bytes) {
        // Nothing of the details is written: each attempt fails with the payload code (its
        // later result is then answered as already reported).
        for token in tokens {
            if let Some(done) = shared
                .store
                .complete_task_row(token, &session.worker_id, Some(refused_report(token, &refused)))
                .await?
            {
                shared.sessions.forget_token(token);
                wake_owner(shared, vec![done.task.execution_id]);
            }
        }
        return Ok(());
    }
    let mut woken = Vec::new();
    for token in tokens {
        // A token handed out through another frontend (the worker moved here after that one
        // died) is found through its task row; details for unknown tokens are dropped.
        // Details for another worker's tokens, or for tasks outside a restricted worker's
        // patterns (the row is read here anyway), are dropped like unknown ones.
        let execution_id = match session.execution_of(token) {
            Some(id) => id,
            None => match shared.store.task_by_token(token).await? {
                Some(row)
                    if row.state == orbit_store::TaskState::Claimed
                        && row.worker_id.as_deref() == Some(session.worker_id.as_str())
                        && scope.claims(&row.task) =>
                {
                    row.execution_id
                }
                _ => continue,
            },
        };
        let message = InboxMessage::Heartbeat(Heartbeat {
            token: token.clone(),
            details: Some(details.clone()),
        });
        shared.store.enqueue_inbox(&execution_id, &message).await?;
        if !woken.contains(&execution_id) {
            woken.push(execution_id);
        }
    }
    if !woken.is_empty() {
        wake_owner(shared, woken);
    }
    Ok(())
}
