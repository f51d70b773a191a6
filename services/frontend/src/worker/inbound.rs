//! One message of a worker's stream after its hello: credits (lent on at once when the
//! session is drained), drain, heartbeats (a complete one hands back the adopted attempts
//! the worker lost and adopts the ones it holds through another frontend), and results, each recorded on a task of its own and acknowledged only
//! once durable or refused.

use super::common::{msg, Tx};
use super::session::Session;
use super::{loss, rejoin, results};
use crate::error::{err, ApiResult, FrontendError};
use crate::scope::Scope;
use crate::Shared;
use orbit_api::v1::server_message::{self, Ack};
use orbit_api::v1::worker_message::Kind;
use orbit_api::v1::WorkerMessage;
use orbit_server_kit::{ErrorCode, OrbitError};
use std::sync::atomic::Ordering;
use std::sync::Arc;
use tonic::Status;

/// One message after hello.
pub(super) async fn handle(
    shared: &Arc<Shared>,
    session: &Arc<Session>,
    scope: &Scope,
    message: WorkerMessage,
    tx: &Tx,
) -> ApiResult<()> {
    let ack = match message.kind {
        Some(Kind::Hello(_)) => {
            return Err(err(ErrorCode::ProtocolError, "`hello` may only be sent once"));
        }
        None => return Err(err(ErrorCode::ProtocolError, "empty worker message")),
        Some(Kind::Credits(credits)) => {
            session.add_credits(credits.n);
            // A drained session lends them to owners at once, not after its dispatcher
            // wakes: a worker sends them with a result, whose commit may hand it the next
            // task (see `lend`; queued tasks waiting meanwhile get them back by a recall).
            if session.drained.load(Ordering::SeqCst) && shared.lending.active() {
                shared.lending.offer(session);
            }
            return Ok(());
        }
        Some(Kind::Drain(_)) => {
            session.drain();
            // No new task for it: owners give back what it lent them.
            shared.lending.recall(&session.id);
            return Ok(());
        }
        Some(Kind::Heartbeat(hb)) => {
            session.beat(&hb.tokens);
            if hb.complete {
                let lost = session.unconfirmed(&hb.tokens);
                if !lost.is_empty() {
                    tracing::info!(session = %session.id, attempts = lost.len(), "the worker restarted: adopted attempts it no longer holds are handed back");
                    loss::hand_back(shared, lost).await;
                }
                // Attempts it holds through another frontend's claim move here.
                rejoin::rejoin(shared, session, scope, &hb.tokens).await;
            }
            // Any message keeps the session alive; details are recorded per token.
            if let Err(e) = results::heartbeat(shared, session, scope, &hb.tokens, hb.details).await
            {
                stream_error(e)?;
            }
            return Ok(());
        }
        Some(Kind::Complete(c)) => Report::Complete(c),
        Some(Kind::Fail(f)) => Report::Fail(f),
    };
    // Results are recorded concurrently: each waits for its own commit (and the owner's
    // reply), and a slow one never holds up the others on the stream.
    let (shared, session, tx) = (shared.clone(), session.clone(), tx.clone());
    let token = match &ack {
        Report::Complete(c) => c.token.clone(),
        Report::Fail(f) => f.token.clone(),
    };
    // Before the next message is read: a complete heartbeat after this result must not
    // hand the attempt back while its result is being recorded.
    session.reported(&token);
    // A token this session claimed passed the hello's task-pattern check when it was
    // offered (the dispatcher offers announced tasks only): no look-up. Any other token (a
    // reconnect under the same worker id, or a foreign one) of a pattern-restricted worker
    // is checked by task name. Unrestricted workers skip even the in-flight look-up.
    let scope = if scope.is_restricted() && session.execution_of(&token).is_none() {
        scope.clone()
    } else {
        Scope::default()
    };
    tokio::spawn(async move {
        // The database may be briefly unreachable (a restart, a failover): try again, with
        // backoff, for as long as the session may stay silent. The worker resends only on
        // a new stream, so giving up early would strand the result.
        let deadline = tokio::time::Instant::now() + shared.config.session_timeout();
        let mut pause = std::time::Duration::from_millis(50);
        let outcome = loop {
            let outcome = match &ack {
                Report::Complete(c) => {
                    results::complete(
                        &shared,
                        &scope,
                        &session.worker_id,
                        &c.token,
                        c.output.clone(),
                    )
                    .await
                }
                Report::Fail(f) => {
                    results::fail(&shared, &scope, &session.worker_id, &f.token, f.error.clone())
                        .await
                }
            };
            match outcome {
                Err(e)
                    if e.grpc_code() == tonic::Code::Unavailable
                        && tokio::time::Instant::now() + pause < deadline =>
                {
                    tracing::debug!(token = %token, error = %e, "recording a worker result: retrying");
                    tokio::time::sleep(pause).await;
                    pause = (pause * 2).min(std::time::Duration::from_secs(1));
                }
                other => break other,
            }
        };
        let (accepted, reason) = match outcome {
            Ok(o) => (o.accepted, o.reason),
            Err(e) => match stream_error(e) {
                Ok(reason) => (false, reason),
                Err(e) => {
                    // Not acknowledged: the worker keeps the result and sends it again.
                    tracing::warn!(token = %token, error = %e, "cannot record a worker result");
                    return;
                }
            },
        };
        // The result is durable (or refused) at this point; only now is it acknowledged.
        session.changed.notify_waiters();
        let ack = Ack { token, accepted, reason };
        let _ = tx.send(msg(server_message::Kind::Ack(ack))).await;
    });
    Ok(())
}

/// A worker result waiting to be recorded.
enum Report {
    Complete(orbit_api::v1::worker_message::Complete),
    Fail(orbit_api::v1::worker_message::Fail),
}

/// A bad request on the stream (a malformed result, one for another worker's token) is
/// answered as an ack reason and the session goes on; a storage or owner failure ends the
/// stream so the worker retries elsewhere.
fn stream_error(e: FrontendError) -> ApiResult<String> {
    let code = match &e {
        FrontendError::Api(o) => Some(o.code),
        FrontendError::Owner(status) => OrbitError::from_status(status).map(|o| o.code),
    };
    match code {
        Some(
            code @ (ErrorCode::InvalidArgument
            | ErrorCode::PayloadTooLarge
            | ErrorCode::WorkerMismatch
            | ErrorCode::PermissionDenied),
        ) => {
            // The message as a status carries it (bounded there): the reason a worker reads
            // is what the error would have said.
            Ok(format!("{code}: {}", Status::from(e).message()))
        }
        _ => Err(e),
    }
}
