//! What a session's stream shares with the rest of the worker: how a session ended
//! ([`SessionEnd`], [`SessionError`]), the sender of the current stream ([`OutTx`],
//! [`send`]) and a deadline that may be absent ([`sleep_until_opt`]).

use std::time::Duration;

use orbit_api::v1::worker_message::Kind as Out;
use orbit_api::v1::WorkerMessage;
use tokio::sync::mpsc;
use tokio::time::Instant;
use tonic::{Code, Status};

/// How one session ended without an error.
pub(crate) enum SessionEnd {
    /// Shutdown completed: everything finished and acknowledged, stream closed.
    Drained,
    /// The drain deadline passed.
    DrainTimedOut,
    /// The server ended the stream; reconnect.
    Closed,
}

/// Why one session ended badly.
#[derive(Debug, thiserror::Error)]
pub(crate) enum SessionError {
    #[error("connect failed: {0}")]
    Connect(#[source] tonic::transport::Error),
    #[error("the server refused the session: {0}")]
    Fatal(Box<Status>),
    #[error("stream failed: {0}")]
    Status(Box<Status>),
    #[error("protocol error: {0}")]
    Protocol(String),
    #[error("no welcome within {0:?}")]
    HandshakeTimeout(Duration),
    #[error("the outgoing stream closed")]
    Broken,
}

impl SessionError {
    pub(crate) fn from_status(status: Status) -> Self {
        match status.code() {
            Code::InvalidArgument
            | Code::PermissionDenied
            | Code::Unauthenticated
            | Code::Unimplemented => Self::Fatal(Box::new(status)),
            _ => Self::Status(Box::new(status)),
        }
    }
}

/// The outgoing half of the current stream went away.
#[derive(Debug)]
pub(crate) struct Broken;

impl From<Broken> for SessionError {
    fn from(_: Broken) -> Self {
        Self::Broken
    }
}

/// The sender of the current stream's worker messages.
pub(crate) type OutTx = mpsc::UnboundedSender<WorkerMessage>;

/// Sends one message on the current stream, if connected.
pub(crate) fn send(out: Option<&OutTx>, kind: Out) -> Result<(), Broken> {
    match out {
        Some(out) => out.send(WorkerMessage { kind: Some(kind) }).map_err(|_| Broken),
        None => Ok(()),
    }
}

/// Sleeps until `deadline`, or forever without one.
pub(crate) async fn sleep_until_opt(deadline: Option<Instant>) {
    match deadline {
        Some(deadline) => tokio::time::sleep_until(deadline).await,
        None => std::future::pending().await,
    }
}
