//! `UpdateExecution`: send an update through the inbox and wait for its reply, or start the
//! execution with it when it does not exist (update-with-start, see [`update_start`]).
//!
//! The update is written to the inbox like a signal (so `request_id` deduplicates it there:
//! a retry waits on the first entry). The owner answers a refusal, the reply of a handler
//! without steps (`InboxReply::Updated`), or, for a handler with steps, only the seq of its
//! `UpdateAccepted` (`InboxReply::Applied`): the reply is then the `UpdateCompleted` the
//! decider records once the steps are resolved, which this module waits for in the history
//! (woken by the execution's change notifications, like [`reply`]). Reading the reply from
//! the history rather than from the owner keeps it exactly-once across owner pauses and
//! takeovers: whichever owner applies the entry, the history holds the one pair of events.
//!
//! The wait is bounded by the caller's gRPC deadline (answered just before it with
//! `DEADLINE_EXCEEDED`, so the caller reads an Orbit code instead of its own transport
//! timeout), or without one by `reply_timeout_ms`. Either way the update goes on, and a
//! retry with the same `request_id` answers its one reply.

use super::reads::scoped;
use super::update_start::{self, Started};
use crate::error::{err, ApiResult};
use crate::reply::{self, Waited, FALLBACK, FALLBACK_MAX};
use crate::scope::Scope;
use crate::{validate, Shared};
use orbit_api::v1::{UpdateExecutionRequest, UpdateExecutionResponse};
use orbit_auth::Action;
use orbit_server_kit::payload::json_to_proto;
use orbit_server_kit::validate as rules;
use orbit_server_kit::ErrorCode;
use orbit_store::inbox::Update;
use orbit_store::{InboxMessage, InboxReply};
use serde_json::Value;
use std::time::Duration;
use tokio::time::Instant;

/// How much of the caller's deadline is kept back to answer before it passes: a tenth,
/// at most half a second.
fn margin(deadline: Duration) -> Duration {
    (deadline / 10).min(Duration::from_millis(500))
}

/// Until when the call waits, and whether that is the caller's deadline.
struct Budget {
    until: Instant,
    caller: bool,
}

impl Budget {
    fn new(shared: &Shared, deadline: Option<Duration>) -> Budget {
        match deadline {
            Some(d) => Budget { until: Instant::now() + d.saturating_sub(margin(d)), caller: true },
            None => Budget {
                until: Instant::now() + Duration::from_millis(shared.config.reply_timeout_ms),
                caller: false,
            },
        }
    }

    fn left(&self) -> Duration {
        self.until.saturating_duration_since(Instant::now())
    }
}

/// The caller's deadline from the `grpc-timeout` header (`<digits><unit>`, unit one of
/// `H M S m u n`), if it sent one.
pub(crate) fn deadline(metadata: &tonic::metadata::MetadataMap) -> Option<Duration> {
    let text = metadata.get("grpc-timeout")?.to_str().ok()?;
    let (digits, unit) = text.split_at(text.len().checked_sub(1)?);
    let n: u64 = digits.parse().ok()?;
    Some(match unit {
        "H" => Duration::from_secs(n.saturating_mul(3600)),
        "M" => Duration::from_secs(n.saturating_mul(60)),
        "S" => Duration::from_secs(n),
        "m" => Duration::from_millis(n),
        "u" => Duration::from_micros(n),
        "n" => Duration::from_nanos(n),
        _ => return None,
    })
}

pub(crate) async fn update(
    shared: &Shared,
    scope: &Scope,
    deadline: Option<Duration>,
    req: UpdateExecutionRequest,
) -> ApiResult<UpdateExecutionResponse> {
    let budget = Budget::new(shared, deadline);
    let id = rules::id("execution_id", &req.execution_id)?;
    let name = rules::id("name", &req.name)?;
    let request_id = rules::optional("request_id", &req.request_id)?;
    let args = validate::payload("args", req.args, shared.config.max_payload_bytes)?;
    let update =
        Update { name: name.to_string(), args, request_id: request_id.map(str::to_string) };
    let created = match req.start {
        Some(start) => match update_start::start(shared, scope, id, start, &update).await? {
            // Accepted in the commit that created the execution (run 1): only its reply is
            // left to read.
            Started::WithUpdate(seq) => {
                let mut response = completion(shared, id, 1, seq, &budget).await?;
                response.created = true;
                return Ok(response);
            }
            Started::Without { created } => created,
        },
        None => false,
    };
    scoped(shared, scope, Action::Update, id).await?;
    let mut response = apply(shared, id, &InboxMessage::Update(update), &budget).await?;
    response.created = created;
    Ok(response)
}

/// Sends the update and waits for its reply within `budget`.
async fn apply(
    shared: &Shared,
    id: &str,
    message: &InboxMessage,
    budget: &Budget,
) -> ApiResult<UpdateExecutionResponse> {
    let (entry, waited) = reply::send_within(shared, id, message, budget.left()).await?;
    match waited {
        Waited::Done(Some(InboxReply::Refused { code, message })) => Err(err(code, message)),
        Waited::Done(Some(InboxReply::Updated { seq, run, result })) => {
            Ok(answer(result, seq, run))
        }
        Waited::Done(Some(InboxReply::Applied { seq, run, .. })) => {
            completion(shared, id, run, seq, budget).await
        }
        Waited::Done(other) => Err(err(
            ErrorCode::StorageError,
            format!("the owner answered the update with {other:?}, not its reply"),
        )),
        Waited::Pending if budget.caller => Err(err(
            ErrorCode::DeadlineExceeded,
            format!(
                "the execution's owner has not applied the update (inbox entry {entry}) before \
                 the call's deadline; it stays queued and will be applied: retry with the same \
                 request_id for its reply"
            ),
        )),
        Waited::Pending => Err(err(
            ErrorCode::Unavailable,
            format!(
                "the execution's owner has not applied the update (inbox entry {entry}) within \
                 {} ms; it stays queued and will be applied: retry with the same request_id \
                 for its reply",
                shared.config.reply_timeout_ms
            ),
        )),
    }
}

fn answer(result: Value, seq: u64, run: u32) -> UpdateExecutionResponse {
    UpdateExecutionResponse { result: Some(json_to_proto(result)), seq, run, created: false }
}

/// Waits for the `UpdateCompleted` of the update accepted at `seq` in run `run`.
async fn completion(
    shared: &Shared,
    id: &str,
    run: u32,
    seq: u64,
    budget: &Budget,
) -> ApiResult<UpdateExecutionResponse> {
    // Subscribed before the first read: a completion committed after that read wakes it.
    let sub = shared.changes.subscribe(id);
    // The completion is a step's progress: owners send it only where it was asked for.
    let _interest = shared.lending.interest(id);
    let mut after = seq;
    let mut fallback = FALLBACK;
    let mut read = true;
    loop {
        // Only when the run grew past what was read (or a change does not say): a change
        // that only applied other inbox entries adds no event to look at.
        let events =
            if read { shared.store.history_after(id, run, after).await? } else { Vec::new() };
        match orbit_engine::update::completion(&events, seq) {
            Some(Ok(result)) => return Ok(answer(result.clone(), seq, run)),
            Some(Err(error)) => return Err(err(ErrorCode::UpdateFailed, error.message.clone())),
            None => {}
        }
        if events.iter().any(|e| e.event.is_terminal()) {
            return Err(err(
                ErrorCode::ExecutionFinished,
                format!("run {run} ended without a reply to the update accepted at seq {seq}"),
            ));
        }
        after = events.last().map_or(after, |e| e.seq);
        let left = budget.left();
        if left.is_zero() {
            return Err(err(
                ErrorCode::DeadlineExceeded,
                format!(
                    "the update was accepted (seq {seq}) and its handler is still running; it \
                     will complete: retry with the same request_id for its reply"
                ),
            ));
        }
        tokio::select! {
            seen = sub.changed() => read = seen.events_after(run, after),
            () = tokio::time::sleep(fallback.min(left)) => {
                fallback = (fallback * 2).min(FALLBACK_MAX);
                read = true;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn grpc_timeout_header_units() {
        let mut m = tonic::metadata::MetadataMap::new();
        assert_eq!(deadline(&m), None);
        for (text, want) in [
            ("3S", Duration::from_secs(3)),
            ("250m", Duration::from_millis(250)),
            ("2M", Duration::from_secs(120)),
            ("1H", Duration::from_secs(3600)),
            ("7u", Duration::from_micros(7)),
            ("9n", Duration::from_nanos(9)),
        ] {
            m.insert("grpc-timeout", text.parse().unwrap());
            assert_eq!(deadline(&m), Some(want), "{text}");
        }
        m.insert("grpc-timeout", "12x".parse().unwrap());
        assert_eq!(deadline(&m), None);
    }

    #[test]
    fn the_margin_is_a_tenth_up_to_half_a_second() {
        assert_eq!(margin(Duration::from_secs(2)), Duration::from_millis(200));
        assert_eq!(margin(Duration::from_secs(60)), Duration::from_millis(500));
    }
}
