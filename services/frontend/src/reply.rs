//! Waiting for an owner's reply to an inbox entry, driven by change notifications.
//!
//! The owner marks an entry done in the same commit as the events it caused, then publishes
//! the execution as changed (in process through the [`ChangeHub`](orbit_store::ChangeHub);
//! across processes the database's notifications feed the same hub). A waiter therefore
//! subscribes to the execution BEFORE its first read of the entry: a reply committed before
//! the subscription is seen by that read, one committed after it wakes the subscription.
//! A fallback re-read covers notifications lost across a database reconnect: first after
//! 50 ms, then less and less often (up to once a second), since notifications are the rule
//! and every re-read of every waiting reply is a database query.

use crate::error::{store, ApiResult};
use crate::Shared;
use orbit_store::{InboxStatus, Subscription};
use serde_json::Value;
use std::time::Duration;
use tokio::time::Instant;

/// The first wait for a notification before re-reading a pending entry anyway; it doubles
/// after each such re-read up to [`FALLBACK_MAX`].
const FALLBACK: Duration = Duration::from_millis(50);
const FALLBACK_MAX: Duration = Duration::from_secs(1);

/// Waits up to `timeout` for entry `seq` to be applied. `Some(reply)` once done (the reply
/// itself may be absent); `None` if it is still pending at the deadline. `sub` must have
/// been taken on the entry's execution before this call; if it was taken before the entry
/// was even written (`subscribed_before_write`), nothing can have been applied unseen, so
/// the first read waits for a change (saving a query per reply).
pub(crate) async fn wait(
    shared: &Shared,
    sub: &Subscription,
    seq: u64,
    timeout: Duration,
    subscribed_before_write: bool,
) -> ApiResult<Option<Option<Value>>> {
    let deadline = Instant::now() + timeout;
    let mut fallback = FALLBACK;
    let mut read = !subscribed_before_write;
    loop {
        if read {
            if let InboxStatus::Done(reply) = shared.store.inbox_result(seq).await.map_err(store)? {
                return Ok(Some(reply));
            }
        }
        read = true;
        let now = Instant::now();
        if now >= deadline {
            return Ok(None);
        }
        let pause = fallback.min(deadline - now);
        tokio::select! {
            () = sub.changed() => {}
            () = tokio::time::sleep(pause) => fallback = (fallback * 2).min(FALLBACK_MAX),
        }
    }
}
