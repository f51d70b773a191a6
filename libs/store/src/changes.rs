//! Change notifications: who wants to know when an execution's history grows.
//!
//! The owner publishes the ids it committed; readers (a frontend's `WatchExecution`) wait
//! on a subscription instead of polling. In one process this hub is shared directly; across
//! processes it is fed by the database's notifications (LISTEN/NOTIFY on PostgreSQL).
//! Each subscription holds its own permit, so a change published between a reader's check
//! of the store and its wait is not lost.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, Weak};
use tokio::sync::Notify;

/// Subscriptions by execution id.
#[derive(Debug, Default)]
pub struct ChangeHub {
    waiters: Mutex<Waiters>,
}

/// The subscriptions, and when to next drop the entries of executions nobody watches.
#[derive(Debug, Default)]
struct Waiters {
    by_id: HashMap<String, Vec<Weak<Notify>>>,
    /// A publish drops an execution's entry once its subscribers are gone, but a subscriber
    /// that goes after the last publish (a finished execution) leaves its entry behind: when
    /// the map reaches this size, `subscribe` drops every such entry. Doubling from the
    /// live size keeps that amortised O(1) and the map bounded by the live subscriptions.
    next_sweep: usize,
}

/// The smallest map size that triggers a sweep of dead entries.
const SWEEP_FLOOR: usize = 1024;

/// One reader's interest in one execution; dropping it unsubscribes.
#[derive(Debug)]
pub struct Subscription {
    notify: Arc<Notify>,
}

impl Subscription {
    /// Waits for the next change published after the subscription was made (or after the
    /// previous `changed` returned).
    pub async fn changed(&self) {
        self.notify.notified().await;
    }
}

impl ChangeHub {
    /// A hub with no subscribers.
    #[must_use]
    pub fn new() -> ChangeHub {
        ChangeHub::default()
    }

    /// Subscribes to changes of `execution_id`.
    #[must_use]
    pub fn subscribe(&self, execution_id: &str) -> Subscription {
        let notify = Arc::new(Notify::new());
        if let Ok(mut w) = self.waiters.lock() {
            if w.by_id.len() >= w.next_sweep.max(SWEEP_FLOOR) {
                w.by_id.retain(|_, list| {
                    list.retain(|n| n.strong_count() > 0);
                    !list.is_empty()
                });
                w.next_sweep = w.by_id.len() * 2;
            }
            let list = w.by_id.entry(execution_id.to_string()).or_default();
            list.retain(|n| n.strong_count() > 0);
            list.push(Arc::downgrade(&notify));
        }
        Subscription { notify }
    }

    /// Tells every subscriber of these executions that their history changed.
    pub fn publish<'a>(&self, execution_ids: impl IntoIterator<Item = &'a str>) {
        let Ok(mut w) = self.waiters.lock() else { return };
        for id in execution_ids {
            let Some(list) = w.by_id.get_mut(id) else { continue };
            list.retain(|n| match n.upgrade() {
                Some(n) => {
                    n.notify_one();
                    true
                }
                None => false,
            });
            if list.is_empty() {
                w.by_id.remove(id);
            }
        }
    }

    /// Executions with at least one live subscriber (for tests and metrics).
    #[must_use]
    pub fn watched(&self) -> usize {
        self.waiters.lock().map_or(0, |w| {
            w.by_id.values().filter(|l| l.iter().any(|n| n.strong_count() > 0)).count()
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[tokio::test]
    async fn a_change_published_before_the_wait_is_not_lost() {
        let hub = ChangeHub::new();
        let sub = hub.subscribe("e");
        hub.publish(["e"]);
        tokio::time::timeout(Duration::from_secs(1), sub.changed()).await.expect("permit kept");
        let other = hub.subscribe("f");
        hub.publish(["e"]);
        assert!(tokio::time::timeout(Duration::from_millis(50), other.changed()).await.is_err());
        drop(sub);
        drop(other);
        hub.publish(["e", "f"]);
        assert_eq!(hub.watched(), 0);
    }

    #[test]
    fn entries_of_executions_nobody_watches_do_not_pile_up() {
        let hub = ChangeHub::new();
        for i in 0..10 * SWEEP_FLOOR {
            let id = format!("e{i}");
            let sub = hub.subscribe(&id);
            // The last change comes while the reader still waits; then it goes away.
            hub.publish([id.as_str()]);
            drop(sub);
        }
        let kept = hub.waiters.lock().map(|w| w.by_id.len()).unwrap_or(usize::MAX);
        assert!(kept <= SWEEP_FLOOR, "{kept} entries of executions nobody watches");
        assert_eq!(hub.watched(), 0);
    }
}
