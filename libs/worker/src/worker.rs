//! The worker: one `Session` stream at a time ([`crate::session`]), and around it the
//! reconnect loop with backoff and endpoint rotation, and the drain on shutdown. Everything
//! that must survive a reconnect lives in [`crate::state::State`], owned by [`Worker::run`].

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use orbit_api::v1::worker_message;
use tokio::sync::mpsc;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;
use tonic::metadata::{Ascii, MetadataValue};
use tonic::transport::Endpoint;
use tracing::{info, warn};

use crate::backoff::Backoff;
pub use crate::error::WorkerError;
use crate::options::{Options, SessionHook};
use crate::state::State;
use crate::stream::{sleep_until_opt, SessionEnd, SessionError};
use crate::task::Handlers;

/// An Orbit worker: one `WorkerService.Session` stream at a time, reconnecting as needed.
pub struct Worker {
    /// Every frontend this worker may use; it stays on one until its stream breaks, then
    /// tries the next.
    pub(crate) endpoints: Vec<Endpoint>,
    pub(crate) current: AtomicUsize,
    pub(crate) hello: worker_message::Hello,
    pub(crate) handlers: Arc<Handlers>,
    pub(crate) max_concurrency: u32,
    pub(crate) bearer: Option<MetadataValue<Ascii>>,
    pub(crate) options: Options,
    pub(crate) on_session: Option<SessionHook>,
}

impl std::fmt::Debug for Worker {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Worker")
            .field("endpoints", &self.endpoints.iter().map(Endpoint::uri).collect::<Vec<_>>())
            .field("hello", &self.hello)
            .finish_non_exhaustive()
    }
}

impl Worker {
    /// The id sent in `Hello.worker_id`.
    pub fn worker_id(&self) -> &str {
        &self.hello.worker_id
    }

    /// Runs the worker until `shutdown` is cancelled and the drain completes.
    ///
    /// Connects, says `Hello`, waits for `Welcome`, grants credits and runs tasks;
    /// reconnects with capped exponential backoff whenever the connection or stream breaks,
    /// re-sending unacknowledged results. On shutdown it sends `Drain`, lets in-flight tasks
    /// finish, waits for their acks, half-closes the stream and returns `Ok(())`. Returns an
    /// error when the server refuses the session for good or the drain times out; in both
    /// cases tasks still running are aborted.
    pub async fn run(self, shutdown: CancellationToken) -> Result<(), WorkerError> {
        let (events_tx, mut events) = mpsc::unbounded_channel();
        let capacity = self
            .options
            .outbox_capacity
            .unwrap_or_else(|| (self.max_concurrency as usize).saturating_mul(4).max(256));
        let mut st = State::new(
            Arc::clone(&self.handlers),
            self.max_concurrency,
            capacity,
            self.options.cancel_grace,
            events_tx,
        );
        let mut backoff = Backoff::new(self.options.backoff_initial, self.options.backoff_max);
        loop {
            if shutdown.is_cancelled() && !st.draining {
                st.begin_drain(self.options.drain_timeout);
            }
            if st.is_done() {
                return Ok(());
            }
            match self.session(&mut st, &mut events, &shutdown, &mut backoff).await {
                Ok(SessionEnd::Drained) => return Ok(()),
                Ok(SessionEnd::DrainTimedOut) => return Err(st.drain_timeout_error()),
                Ok(SessionEnd::Closed) => info!("the server closed the session; reconnecting"),
                Err(SessionError::Fatal(status)) => return Err(WorkerError::Rejected(status)),
                Err(error) => {
                    warn!(%error, "worker session lost; reconnecting");
                    self.rotate();
                }
            }
            st.credits.stream_reset();
            // Wait out the backoff, still collecting results of tasks that finish meanwhile.
            let until = Instant::now() + backoff.next_delay();
            loop {
                let drain_deadline = st.drain_deadline;
                tokio::select! {
                    () = tokio::time::sleep_until(until) => break,
                    Some(event) = events.recv() => {
                        // Offline: nothing to send, so this cannot fail.
                        let _ = st.on_event(event, None);
                    }
                    () = shutdown.cancelled(), if !st.draining => {
                        st.begin_drain(self.options.drain_timeout);
                        if st.is_done() {
                            return Ok(());
                        }
                    }
                    () = sleep_until_opt(drain_deadline) => return Err(st.drain_timeout_error()),
                }
            }
        }
    }

    /// The endpoint the next connection goes to.
    pub(crate) fn endpoint(&self) -> &Endpoint {
        let i = self.current.load(Ordering::Relaxed);
        &self.endpoints[i % self.endpoints.len()]
    }

    /// After a failure, the next connection tries the next endpoint.
    pub(crate) fn rotate(&self) {
        if self.endpoints.len() > 1 {
            self.current.fetch_add(1, Ordering::Relaxed);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::Value;
    use std::time::Duration;

    #[test]
    fn endpoints_rotate_after_a_failure() {
        let w = Worker::builder("127.0.0.1:7233, http://127.0.0.1:7243")
            .task("t", "1", |_c| async { Ok(Value::Null) })
            .build()
            .unwrap();
        assert_eq!(w.endpoint().uri().to_string(), "http://127.0.0.1:7233/");
        w.rotate();
        assert_eq!(w.endpoint().uri().to_string(), "http://127.0.0.1:7243/");
        w.rotate();
        assert_eq!(w.endpoint().uri().to_string(), "http://127.0.0.1:7233/");
    }

    #[tokio::test]
    async fn run_returns_at_once_when_shut_down_before_connecting() {
        let worker = Worker::builder("127.0.0.1:1")
            .task("t", "1", |_c| async { Ok(Value::Null) })
            .build()
            .unwrap();
        let shutdown = CancellationToken::new();
        shutdown.cancel();
        worker.run(shutdown).await.expect("nothing to drain");
    }

    #[tokio::test]
    async fn run_keeps_retrying_an_unreachable_server_until_shutdown() {
        let worker = Worker::builder("127.0.0.1:1")
            .task("t", "1", |_c| async { Ok(Value::Null) })
            .reconnect_backoff(Duration::from_millis(5), Duration::from_millis(20))
            .build()
            .unwrap();
        let shutdown = CancellationToken::new();
        let run = tokio::spawn(worker.run(shutdown.clone()));
        tokio::time::sleep(Duration::from_millis(100)).await;
        assert!(!run.is_finished());
        shutdown.cancel();
        tokio::time::timeout(Duration::from_secs(5), run)
            .await
            .expect("stops promptly")
            .expect("no panic")
            .expect("clean shutdown");
    }
}
