//! Waiting for an owner's reply to an inbox entry, driven by change notifications.
//!
//! The owner marks an entry done in the same commit as the events it caused, then publishes
//! the execution as changed (in process through the [`ChangeHub`](orbit_store::ChangeHub);
//! across processes the database's notifications feed the same hub). A waiter therefore
//! subscribes to the execution BEFORE its first read of the entry: a reply committed before
//! the subscription is seen by that read, one committed after it wakes the subscription.
//! A short fallback re-read covers notifications lost across a database reconnect.

use crate::error::{store, ApiResult};
use crate::Shared;
use orbit_store::{InboxStatus, Subscription};
use serde_json::Value;
use std::time::Duration;
use tokio::time::Instant;

/// The longest wait between two reads of a pending entry without a notification.
const FALLBACK: Duration = Duration::from_millis(50);

/// Waits up to `timeout` for entry `seq` to be applied. `Some(reply)` once done (the reply
/// itself may be absent); `None` if it is still pending at the deadline. `sub` must have
/// been taken on the entry's execution before this call.
pub(crate) async fn wait(
    shared: &Shared,
    sub: &Subscription,
    seq: u64,
    timeout: Duration,
) -> ApiResult<Option<Option<Value>>> {
    let deadline = Instant::now() + timeout;
    loop {
        if let InboxStatus::Done(reply) = shared.store.inbox_result(seq).await.map_err(store)? {
            return Ok(Some(reply));
        }
        let now = Instant::now();
        if now >= deadline {
            return Ok(None);
        }
        let pause = FALLBACK.min(deadline - now);
        tokio::select! {
            () = sub.changed() => {}
            () = tokio::time::sleep(pause) => {}
        }
    }
}
