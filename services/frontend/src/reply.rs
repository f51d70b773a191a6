//! Sending a command to an execution's owner and waiting for its reply: the one path every
//! inbox writer that waits takes (signals, cancels and operator actions through [`send`],
//! worker results through [`deliver`] after `Store::complete_task_row` wrote their entry).
//!
//! The path: subscribe to the execution's changes, write the entry, wake the owner
//! (`OwnerService.Wake`: in one process it runs a pass; split, the insert's NOTIFY already
//! woke the owners and the call returns at once), then wait for the reply.
//!
//! The owner marks an entry done in the same commit as the events it caused, then publishes
//! the execution as changed (in process through the [`ChangeHub`](orbit_store::ChangeHub);
//! across processes the database's notifications feed the same hub). A waiter therefore
//! subscribes to the execution BEFORE its first read of the entry: a reply committed before
//! the subscription is seen by that read, one committed after it wakes the subscription.
//! A change says which entries it applied, with the reply recorded on each (issue 14): the
//! waiter takes its reply from there, ignores changes that applied other entries, and reads
//! the entry only for a change that does not say (no detail, too large for a NOTIFY). The
//! wait itself is `orbit_store::wait_reply`, shared with the scheduler's batch jobs.
//! A fallback re-read covers notifications lost across a database reconnect: first after
//! 50 ms, then less and less often (up to once a second), since notifications are the rule
//! and every re-read of every waiting reply is a database query.

use crate::error::ApiResult;
use crate::Shared;
use orbit_api::internal::v1::OwnerServiceWakeRequest;
use orbit_store::{wait_reply, Fallback, InboxMessage, Subscription};
use std::time::Duration;

/// The first wait for a notification before re-reading a pending entry anyway; it doubles
/// after each such re-read up to [`FALLBACK_MAX`].
pub(crate) const FALLBACK: Duration = Duration::from_millis(50);
pub(crate) const FALLBACK_MAX: Duration = Duration::from_secs(1);

pub(crate) use orbit_store::Waited;

/// Writes `message` for execution `id`, wakes its owner and waits for the reply; returns
/// the entry's seq with what became of it.
///
/// A message with a request id may be a retry: the store then answers with the first
/// entry's seq and writes nothing, so that entry's reply (the seq it recorded, even long
/// after the execution finished) answers the retry as well. Such an entry may already be
/// applied, so its reply is read at once instead of waiting for a change first.
pub(crate) async fn send(
    shared: &Shared,
    id: &str,
    message: &InboxMessage,
) -> ApiResult<(u64, Waited)> {
    send_within(shared, id, message, Duration::from_millis(shared.config.reply_timeout_ms)).await
}

/// [`send`], waiting up to `timeout` instead of `reply_timeout_ms` (an update bounded by
/// its caller's deadline).
pub(crate) async fn send_within(
    shared: &Shared,
    id: &str,
    message: &InboxMessage,
    timeout: Duration,
) -> ApiResult<(u64, Waited)> {
    let sub = shared.changes.subscribe(id);
    let seq = shared.store.enqueue_inbox(id, message).await?;
    let fresh = message.request_id().is_none();
    wake(shared, id).await;
    Ok((seq, wait(shared, &sub, seq, timeout, fresh).await?))
}

/// Wakes the owner of `id` for entry `seq`, already written, and waits up to
/// `reply_timeout_ms` for its reply (see [`wait`] for `sub` and `subscribed_before_write`).
/// A failed wake is only logged: the owner also polls its inbox, and the wait is bounded.
pub(crate) async fn deliver(
    shared: &Shared,
    id: &str,
    sub: &Subscription,
    seq: u64,
    subscribed_before_write: bool,
) -> ApiResult<Waited> {
    wake(shared, id).await;
    let timeout = Duration::from_millis(shared.config.reply_timeout_ms);
    wait(shared, sub, seq, timeout, subscribed_before_write).await
}

async fn wake(shared: &Shared, id: &str) {
    let wake = OwnerServiceWakeRequest { execution_ids: vec![id.to_string()] };
    if let Err(status) = shared.owner.wake(tonic::Request::new(wake)).await {
        tracing::warn!(%status, "waking the owner failed");
    }
}

/// Waits up to `timeout` for entry `seq` to be applied (`orbit_store::wait_reply`, with
/// this module's fallback re-reads).
async fn wait(
    shared: &Shared,
    sub: &Subscription,
    seq: u64,
    timeout: Duration,
    subscribed_before_write: bool,
) -> ApiResult<Waited> {
    let fallback = Fallback { first: FALLBACK, max: FALLBACK_MAX };
    let store = shared.store.as_ref();
    Ok(wait_reply(store, Some(sub), seq, timeout, subscribed_before_write, fallback).await?)
}
