//! One worker's `Session` stream from hello to end: the hello checked and answered with
//! `Welcome`, the session opened (adopting its worker's parked attempts), its dispatcher
//! and pings started, every later message read (with the session timeout) and handed to
//! [`super::inbound`], and the cleanup that hands the in-flight attempts to `loss` when the
//! stream ends or goes silent. An error that ends the stream becomes its status here, where
//! it is sent (the edge of a streaming call).

use super::common::{msg, Tx};
use super::dispatch::dispatch;
use super::{admit, check, inbound, loss, welcome};
use crate::scope::Scope;
use crate::Shared;
use orbit_api::v1::server_message::{self, Ping, Welcome};
use orbit_api::v1::worker_message::Kind;
use orbit_api::v1::WorkerMessage;
use orbit_server_kit::payload::ms_to_duration;
use orbit_server_kit::validate::invalid;
use orbit_server_kit::{ErrorCode, OrbitError};
use std::sync::Arc;
use std::time::Duration;
use tonic::{Status, Streaming};

/// Runs a session to its end. Errors that end the stream are sent on it.
/// `caller` is the authenticated identity, if auth is on; its task patterns bound the hello.
/// `scope` is the same caller when its task patterns restrict it: results for tokens this
/// session did not claim are checked against them.
pub(crate) async fn run(
    shared: Arc<Shared>,
    mut inbound: Streaming<WorkerMessage>,
    tx: Tx,
    caller: Option<Arc<orbit_auth::Identity>>,
    scope: Scope,
) {
    let timeout = shared.config.session_timeout();
    let hello = match tokio::time::timeout(timeout, inbound.message()).await {
        Ok(Ok(Some(WorkerMessage { kind: Some(Kind::Hello(hello)) }))) => hello,
        // What worker.proto documents for a first message that is not a valid hello:
        // `INVALID_ARGUMENT` naming the field (`open` does the same for a hello that is
        // there but invalid). Later protocol mistakes stay `PROTOCOL_ERROR`.
        Ok(Ok(Some(_))) => {
            let e = invalid("hello", "the first message of a session must be `hello`");
            let _ = tx.send(Err(e.into())).await;
            return;
        }
        Ok(Ok(None)) => return,
        Ok(Err(status)) => return end_with(&tx, status).await,
        Err(_) => {
            let e =
                OrbitError::new(ErrorCode::ProtocolError, "no `hello` within the session timeout");
            let _ = tx.send(Err(e.into())).await;
            return;
        }
    };
    if let Err(e) = admit::admit(caller.as_deref(), &hello) {
        let _ = tx.send(Err(e.into())).await;
        return;
    }
    let principal = caller.as_ref().map(|c| c.name.clone());
    let session = match check::open(&hello) {
        Ok(session) => {
            Arc::new(session.with_principal(principal).with_clock(shared.config.clock.clone()))
        }
        Err(e) => {
            let _ = tx.send(Err(e.into())).await;
            return;
        }
    };
    // The SDK and runtime tell an operator which client library (and version) a worker
    // runs, for version compatibility questions; `ListWorkers` shows them too.
    tracing::info!(
        session = %session.id,
        worker_id = %session.worker_id,
        sdk = %hello.sdk,
        runtime = %hello.runtime,
        "worker session opened"
    );
    let welcome = Welcome {
        session_id: session.id.clone(),
        heartbeat_interval: Some(ms_to_duration(
            u64::try_from(shared.config.heartbeat_interval().as_millis()).unwrap_or(u64::MAX),
        )),
        session_timeout: Some(ms_to_duration(shared.config.session_timeout_ms)),
        warnings: welcome::warnings(&shared, &session.meta.tasks).await,
    };
    if tx.send(msg(server_message::Kind::Welcome(welcome))).await.is_err() {
        return;
    }
    session.attach(tx.clone());
    // The same worker back within its session timeout keeps its attempts (worker.proto).
    let adopted = shared.sessions.open(session.clone());
    if !adopted.is_empty() {
        tracing::info!(session = %session.id, worker_id = %session.worker_id, attempts = adopted.len(), "worker reconnected: in-flight attempts kept");
    }
    loss::supervise_adopted(&shared, &session, adopted);
    let dispatcher = tokio::spawn(dispatch(shared.clone(), session.clone(), tx.clone()));
    let pinger = tokio::spawn(ping(shared.config.heartbeat_interval(), tx.clone()));

    // Whether the session is over for good: silent for the whole session timeout, or ended
    // by the server for a message it refused (a protocol mistake, a message that does not
    // decode). Only a stream that merely went away (the worker crashed, restarted or lost
    // its connection) keeps its attempts for the worker's return.
    let mut over = false;
    loop {
        match tokio::time::timeout(timeout, inbound.message()).await {
            Ok(Ok(Some(message))) => {
                session.touch();
                if let Err(e) = inbound::handle(&shared, &session, &scope, message, &tx).await {
                    let _ = tx.send(Err(e.into())).await;
                    over = true;
                    break;
                }
            }
            Ok(Ok(None)) => break,
            Ok(Err(status)) => {
                tracing::debug!(session = %session.id, %status, "worker stream failed");
                over = status.code() == tonic::Code::InvalidArgument;
                end_with(&tx, status).await;
                break;
            }
            Err(_) => {
                tracing::warn!(session = %session.id, "worker session timed out");
                over = true;
                break;
            }
        }
    }

    // Stop claiming first and wait, so the in-flight set is final before it is handled.
    session.stop();
    session.detach();
    let _ = dispatcher.await;
    pinger.abort();
    shared.sessions.remove(&session.id);
    // Credits it lent to owners come back; a task handed under one meanwhile is lost.
    shared.lending.recall(&session.id);
    if over || !session.has_in_flight() {
        loss::lose_in_flight(&shared, &session).await;
    } else {
        loss::park(&shared, session.clone());
    }
    tracing::info!(session = %session.id, "worker session closed");
}

/// Ends the stream with the status the inbound side failed with: a worker message that
/// does not decode (invalid UTF-8, nested past protobuf's recursion limit) is answered
/// `INVALID_ARGUMENT` saying what was wrong, never a silent OK. A transport failure (the
/// worker went away) is sent too, to nobody.
async fn end_with(tx: &Tx, status: Status) {
    if status.code() == tonic::Code::InvalidArgument {
        tracing::warn!(error = %status.message(), "a worker message did not decode; closing its stream");
    }
    let _ = tx.send(Err(status)).await;
}

async fn ping(every: Duration, tx: Tx) {
    loop {
        tokio::time::sleep(every).await;
        if tx.send(msg(server_message::Kind::Ping(Ping {}))).await.is_err() {
            return;
        }
    }
}
