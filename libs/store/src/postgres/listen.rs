//! Wake-ups across processes: `LISTEN` on a dedicated connection (not a pooled one: its
//! socket must be read continuously) and a [`Wakeup`] per notification.
//!
//! Notifications are sent by the writes themselves, in their transaction (see `sql.rs` and
//! `plan.rs`): `orbit_inbox` when inbox rows were inserted, `orbit_tasks` when task rows were
//! queued or a tree changed owner, `orbit_timers` when timers were written, `orbit_changes`
//! with what a commit did to an execution (events appended, inbox entries applied with their
//! replies, task units cancelled: a [`Change`](crate::Change), decoded here).
//!
//! `orbit_tasks` with the payload [`LIMITED`] (flow control, `crate::flow`) says limited
//! rows were queued, or a row holding a concurrency key left `claimed` (a slot freed), or a
//! named rate limit was set: a [`Wakeup::Tasks`] as any other, and the store's note that
//! limited rows exist (`TaskQueue::limited_possible`).
//!
//! A notification sent while the listener was disconnected is lost, so after every
//! (re)connect the handler gets [`Wakeup::Reconnected`] and re-checks everything. The
//! connection is re-established with capped exponential backoff (50 ms to 2 s); a silent
//! connection is noticed by a periodic empty query.

use super::conn::Connector;
use crate::flow::FlowFlag;
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::mpsc;
use tokio_postgres::AsyncMessage;
use tokio_util::sync::CancellationToken;

/// What a notification (or a reconnect) asks the listener's owner to look at.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Wakeup {
    /// New inbox entries (`orbit_inbox`).
    Inbox,
    /// New queued tasks, or a tree moved to another owner (`orbit_tasks`).
    Tasks,
    /// Timers were written or deleted (`orbit_timers`).
    Timers,
    /// The history of an execution grew, it applied inbox entries or cancelled task units
    /// (`orbit_changes`): what changed, as far as the payload says.
    Changed(crate::Change),
    /// The listener (re)connected: notifications may have been missed, re-check everything.
    Reconnected,
}

/// A notification channel a listener can ask for. A service listens only to what it acts on
/// (an owner to `orbit_inbox`, a scheduler to `orbit_timers`), so its process is woken only
/// by those. PostgreSQL (up to 17 at least) still signals every listening backend of the
/// database for every notifying commit, whatever the channel; so an owner whose frontends
/// all hold a hand-off stream sends them its commits' changes down the streams instead of
/// `orbit_changes` (`orbit_owner::Lenders`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Channel {
    /// `orbit_inbox`: [`Wakeup::Inbox`].
    Inbox,
    /// `orbit_tasks`: [`Wakeup::Tasks`].
    Tasks,
    /// `orbit_timers`: [`Wakeup::Timers`].
    Timers,
    /// `orbit_changes`: [`Wakeup::Changed`].
    Changes,
}

impl Channel {
    /// Every channel.
    pub const ALL: [Channel; 4] =
        [Channel::Inbox, Channel::Tasks, Channel::Timers, Channel::Changes];

    /// The channel's name.
    #[must_use]
    pub fn name(self) -> &'static str {
        match self {
            Channel::Inbox => "orbit_inbox",
            Channel::Tasks => "orbit_tasks",
            Channel::Timers => "orbit_timers",
            Channel::Changes => "orbit_changes",
        }
    }
}

const BACKOFF_MIN: Duration = Duration::from_millis(50);
const BACKOFF_MAX: Duration = Duration::from_secs(2);
/// How often an idle listener checks that its connection still answers (a connection the
/// server or the network closed ends at once; this only catches a silently dead one). Each
/// check is a transaction on the server, so it is a slow safety net (issue 14: idle cost).
const PING_EVERY: Duration = Duration::from_secs(30);
/// How long that check may take.
const PING_TIMEOUT: Duration = Duration::from_secs(5);

/// The handler listeners call.
pub(crate) type Handler = Arc<dyn Fn(Wakeup) + Send + Sync>;

/// The `orbit_tasks` payload of flow control (the SQL of `sql.rs` writes the same literal).
pub(crate) const LIMITED: &str = "limited";

fn wakeup(channel: &str, payload: &str) -> Option<Wakeup> {
    match channel {
        "orbit_inbox" => Some(Wakeup::Inbox),
        "orbit_tasks" => Some(Wakeup::Tasks),
        "orbit_timers" => Some(Wakeup::Timers),
        "orbit_changes" => Some(Wakeup::Changed(crate::Change::decode(payload))),
        _ => None,
    }
}

/// Listens to `channels` until `shutdown`, reconnecting as needed.
pub(crate) async fn run(
    connector: Connector,
    channels: Vec<Channel>,
    handler: Handler,
    shutdown: CancellationToken,
    flow: Arc<FlowFlag>,
) {
    let mut delay = BACKOFF_MIN;
    loop {
        let session = tokio::select! {
            () = shutdown.cancelled() => return,
            s = session(&connector, &channels, &handler, &shutdown, &flow) => s,
        };
        if session == Ended::Shutdown {
            return;
        }
        if session == Ended::AfterListening {
            delay = BACKOFF_MIN;
        }
        tokio::select! {
            () = shutdown.cancelled() => return,
            () = tokio::time::sleep(delay) => {}
        }
        delay = (delay * 2).min(BACKOFF_MAX);
    }
}

#[derive(Debug, PartialEq, Eq)]
enum Ended {
    /// Connecting or `LISTEN` failed.
    BeforeListening,
    /// The connection was lost after it listened.
    AfterListening,
    /// Shutdown was requested.
    Shutdown,
}

/// One connection's life: connect, listen, deliver until the connection ends.
async fn session(
    connector: &Connector,
    channels: &[Channel],
    handler: &Handler,
    shutdown: &CancellationToken,
    flow: &FlowFlag,
) -> Ended {
    let Ok((client, mut connection)) = connector.config().connect(connector.tls()).await else {
        return Ended::BeforeListening;
    };
    // The connection's messages (the notifications) are read on their own task, which also
    // drives the client's queries; it ends when the socket does.
    let (tx, mut rx) = mpsc::unbounded_channel::<(String, String)>();
    let driver = tokio::spawn(async move {
        while let Some(message) = std::future::poll_fn(|cx| connection.poll_message(cx)).await {
            match message {
                Ok(AsyncMessage::Notification(n)) => {
                    if tx.send((n.channel().to_string(), n.payload().to_string())).is_err() {
                        return;
                    }
                }
                Ok(_) => {}
                Err(_) => return,
            }
        }
    });
    let listen: String = channels.iter().map(|c| format!("LISTEN {};", c.name())).collect();
    if client.batch_execute(&listen).await.is_err() {
        driver.abort();
        return Ended::BeforeListening;
    }
    // Notifications may have been missed, a `limited` one among them.
    flow.forget_none();
    handler(Wakeup::Reconnected);
    let mut ping = tokio::time::interval(PING_EVERY);
    ping.tick().await;
    let ended = loop {
        tokio::select! {
            () = shutdown.cancelled() => break Ended::Shutdown,
            note = rx.recv() => match note {
                Some((channel, payload)) => {
                    if channel == Channel::Tasks.name() && payload == LIMITED {
                        flow.mark();
                    }
                    if let Some(w) = wakeup(&channel, &payload) {
                        handler(w);
                    }
                }
                None => break Ended::AfterListening,
            },
            _ = ping.tick() => {
                let alive = tokio::time::timeout(PING_TIMEOUT, client.batch_execute("")).await;
                if !matches!(alive, Ok(Ok(()))) {
                    break Ended::AfterListening;
                }
            }
        }
    };
    driver.abort();
    ended
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn channels_map_to_wakeups() {
        assert_eq!(wakeup("orbit_inbox", ""), Some(Wakeup::Inbox));
        assert_eq!(wakeup("orbit_tasks", ""), Some(Wakeup::Tasks));
        assert_eq!(wakeup("orbit_tasks", LIMITED), Some(Wakeup::Tasks));
        assert_eq!(wakeup("orbit_timers", ""), Some(Wakeup::Timers));
        assert_eq!(
            wakeup("orbit_changes", "e1"),
            Some(Wakeup::Changed(crate::Change::unknown("e1")))
        );
        assert_eq!(wakeup("other", ""), None);
    }

    #[test]
    fn the_sql_sends_the_payload_listeners_know() {
        let literal = format!("pg_notify('orbit_tasks', '{LIMITED}')");
        for sql in [
            super::super::sql::COMMIT_TASKS_DONE,
            super::super::sql::COMMIT_CANCEL_UNITS,
            super::super::sql::TASK_DONE,
            super::super::sql::RELEASE_CLAIMS,
            super::super::sql::HAND_BACK_CLAIMS,
            super::super::sql::flow::RATE_LIMIT_SET,
        ] {
            assert!(sql.contains(&literal), "{sql}");
        }
    }
}
