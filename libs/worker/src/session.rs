//! One `Session` stream: connect, `Hello`, wait for `Welcome`, then the message loop that
//! feeds server messages, task events and heartbeat ticks into [`State`] until the stream
//! ends, fails or the drain completes. Reconnecting is the caller's job ([`Worker::run`]).

use std::time::Duration;

use orbit_api::v1::worker_message::{self, Kind as Out};
use orbit_api::v1::worker_service_client::WorkerServiceClient;
use orbit_api::v1::{server_message, ServerMessage};
use tokio::sync::mpsc;
use tokio::time::{Instant, MissedTickBehavior};
use tokio_stream::wrappers::UnboundedReceiverStream;
use tokio_stream::StreamExt as _;
use tokio_util::sync::CancellationToken;
use tonic::transport::Channel;
use tonic::Streaming;
use tracing::{info, warn};

use crate::backoff::Backoff;
use crate::state::State;
use crate::stream::{send, sleep_until_opt, OutTx, SessionEnd, SessionError};
use crate::task::Event;
use crate::worker::Worker;

/// The shortest heartbeat interval the worker uses, whatever the server asks for.
const MIN_HEARTBEAT_INTERVAL: Duration = Duration::from_millis(50);

/// How long a drained worker waits for the server to end the stream after half-closing.
const CLOSE_GRACE: Duration = Duration::from_secs(5);

impl Worker {
    /// Connects, says hello and waits for the welcome.
    async fn open(
        &self,
    ) -> Result<
        (WorkerServiceClient<Channel>, OutTx, Streaming<ServerMessage>, server_message::Welcome),
        SessionError,
    > {
        let channel = self.endpoint().connect().await.map_err(SessionError::Connect)?;
        let mut client = WorkerServiceClient::new(channel);
        let (out, rx) = mpsc::unbounded_channel();
        send(Some(&out), Out::Hello(self.hello.clone()))?;
        let mut request = tonic::Request::new(UnboundedReceiverStream::new(rx));
        if let Some(bearer) = &self.bearer {
            request.metadata_mut().insert("authorization", bearer.clone());
        }
        let mut inbound =
            client.session(request).await.map_err(SessionError::from_status)?.into_inner();
        match inbound.next().await {
            Some(Ok(ServerMessage { kind: Some(server_message::Kind::Welcome(welcome)) })) => {
                Ok((client, out, inbound, welcome))
            }
            Some(Ok(other)) => {
                Err(SessionError::Protocol(format!("expected welcome first, got {other:?}")))
            }
            Some(Err(status)) => Err(SessionError::from_status(status)),
            None => Err(SessionError::Protocol("the stream ended before welcome".into())),
        }
    }

    /// One session: handshake, then the message loop until the stream ends or the drain
    /// completes.
    pub(crate) async fn session(
        &self,
        st: &mut State,
        events: &mut mpsc::UnboundedReceiver<Event>,
        shutdown: &CancellationToken,
        backoff: &mut Backoff,
    ) -> Result<SessionEnd, SessionError> {
        let handshake = self.options.handshake_timeout;
        let (_client, out, mut inbound, welcome) = tokio::time::timeout(handshake, self.open())
            .await
            .map_err(|_| SessionError::HandshakeTimeout(handshake))??;
        backoff.reset();
        for warning in &welcome.warnings {
            warn!(session_id = %welcome.session_id, "server warning: {warning}");
        }
        let heartbeat_interval = welcome
            .heartbeat_interval
            .and_then(|d| Duration::try_from(d).ok())
            .filter(|d| !d.is_zero())
            .unwrap_or(self.options.default_heartbeat_interval)
            .max(MIN_HEARTBEAT_INTERVAL);
        info!(
            session_id = %welcome.session_id,
            worker_id = %self.hello.worker_id,
            ?heartbeat_interval,
            "worker session established"
        );
        if let Some(hook) = &self.on_session {
            hook(&welcome.session_id);
        }

        if st.draining {
            send(Some(&out), Out::Drain(worker_message::Drain {}))?;
        }
        st.resend_outbox(&out)?;
        // At once, not one interval later: a restarted process (same worker id) gets the
        // attempts its previous life left behind redelivered now.
        st.heartbeat_all(&out)?;
        st.grant(&out)?;

        let mut ticker =
            tokio::time::interval_at(Instant::now() + heartbeat_interval, heartbeat_interval);
        ticker.set_missed_tick_behavior(MissedTickBehavior::Delay);
        loop {
            if st.is_done() {
                // Half-close, then give the server a moment to end the stream.
                drop(out);
                let _ = tokio::time::timeout(CLOSE_GRACE, async {
                    while let Some(Ok(_)) = inbound.next().await {}
                })
                .await;
                return Ok(SessionEnd::Drained);
            }
            let drain_deadline = st.drain_deadline;
            tokio::select! {
                message = inbound.next() => match message {
                    Some(Ok(message)) => st.on_server_message(message, &out)?,
                    Some(Err(status)) => return Err(SessionError::from_status(status)),
                    None => return Ok(SessionEnd::Closed),
                },
                Some(event) = events.recv() => st.on_event(event, Some(&out))?,
                _ = ticker.tick() => st.heartbeat_all(&out)?,
                () = shutdown.cancelled(), if !st.draining => {
                    st.begin_drain(self.options.drain_timeout);
                    send(Some(&out), Out::Drain(worker_message::Drain {}))?;
                }
                () = sleep_until_opt(drain_deadline) => return Ok(SessionEnd::DrainTimedOut),
            }
        }
    }
}
