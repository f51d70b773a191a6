//! Waiting for the owner's reply to an inbox entry: the one wait every inbox writer that
//! waits uses (the frontend's commands and results, the scheduler's batch jobs).
//!
//! The owner marks an entry done in the same commit as the events it caused, then publishes
//! the execution as changed (in process through the [`ChangeHub`](crate::ChangeHub); across
//! processes the database's notifications feed a hub). A waiter with a [`Subscription`]
//! takes its reply from the change that applied the entry, ignores changes that applied
//! other entries, and reads the entry only for a change that does not say. A fallback
//! re-read covers lost notifications (and is the only way for a waiter without a hub): first
//! after [`Fallback::first`], then twice as long each time up to [`Fallback::max`].

use crate::model::InboxStatus;
use crate::roles::Inbox;
use crate::{InboxReply, Subscription};
use std::time::Duration;
use tokio::time::Instant;

/// What became of an entry within the wait.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Waited {
    /// Applied, with the owner's reply (`None`: recorded without one).
    Done(Option<InboxReply>),
    /// Still pending at the deadline: it stays queued and will be applied.
    Pending,
}

/// How often a waiter re-reads an entry no change has answered.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Fallback {
    /// The first wait before a re-read.
    pub first: Duration,
    /// The longest wait between two re-reads.
    pub max: Duration,
}

/// Waits up to `timeout` for entry `seq` to be applied. `sub`, when given, must have been
/// taken on the entry's execution before this call; if it was taken before the entry was
/// even written (`subscribed_before_write`), nothing can have been applied unseen, so the
/// first read waits for a change (saving a query per reply).
pub async fn wait_reply<I: Inbox + ?Sized>(
    inbox: &I,
    sub: Option<&Subscription>,
    seq: u64,
    timeout: Duration,
    subscribed_before_write: bool,
    fallback: Fallback,
) -> crate::Result<Waited> {
    let deadline = Instant::now() + timeout;
    let mut pause_for = fallback.first;
    let mut read = !(subscribed_before_write && sub.is_some());
    loop {
        if read {
            if let InboxStatus::Done(reply) = inbox.inbox_result(seq).await? {
                return Ok(Waited::Done(reply));
            }
        }
        read = true;
        let now = Instant::now();
        if now >= deadline {
            return Ok(Waited::Pending);
        }
        let pause = pause_for.min(deadline - now);
        let Some(sub) = sub else {
            tokio::time::sleep(pause).await;
            pause_for = (pause_for * 2).min(fallback.max);
            continue;
        };
        tokio::select! {
            seen = sub.changed() => {
                if let Some(reply) = seen.reply(seq) {
                    return Ok(Waited::Done(reply));
                }
                read = seen.unknown;
            }
            () = tokio::time::sleep(pause) => pause_for = (pause_for * 2).min(fallback.max),
        }
    }
}
