//! Change notifications: who wants to know when an execution's history grows.
//!
//! The owner publishes what it committed; readers (a frontend's `WatchExecution`, reply
//! waits, task supervisors) wait on a subscription instead of polling. In one process this
//! hub is shared directly; across processes it is fed by the database's notifications
//! (LISTEN/NOTIFY on PostgreSQL, the payload decoded with [`Change::decode`]).
//! Each subscription holds its own permit, so a change published between a reader's check
//! of the store and its wait is not lost.
//!
//! A published [`Change`] carries what the commit did when the publisher knows it
//! ([`ChangeDetail`]); [`Subscription::changed`] hands a reader what was published since its
//! last call, so it reads the store only when its own thing changed (issue 14). A change
//! without detail, or more changes than a subscription keeps while its reader is busy,
//! makes the reader read, as every change did before.

use crate::change::{Change, ChangeDetail};
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
    by_id: HashMap<String, Vec<Weak<Slot>>>,
    /// A publish drops an execution's entry once its subscribers are gone, but a subscriber
    /// that goes after the last publish (a finished execution) leaves its entry behind: when
    /// the map reaches this size, `subscribe` drops every such entry. Doubling from the
    /// live size keeps that amortised O(1) and the map bounded by the live subscriptions.
    next_sweep: usize,
}

/// The smallest map size that triggers a sweep of dead entries.
const SWEEP_FLOOR: usize = 1024;

/// Changes a subscription keeps for a busy reader; beyond, it only remembers that it
/// missed some (the reader then reads).
const KEPT: usize = 64;

/// One subscription's permit and what was published since its reader last looked.
#[derive(Debug, Default)]
struct Slot {
    notify: Notify,
    seen: Mutex<Seen>,
}

/// What was published for an execution since a reader last looked.
#[derive(Debug, Default, Clone)]
pub struct Seen {
    /// Some change came without detail (or too many came): the reader must read.
    pub unknown: bool,
    /// The detail of every other change, oldest first.
    pub changes: Vec<Arc<ChangeDetail>>,
}

impl Seen {
    /// Whether the reader of run `run`, which has seen its events up to seq `after`, has
    /// new events to read: the run grew past `after`, or a later run was written (the
    /// watched run closed), or it cannot tell.
    #[must_use]
    pub fn events_after(&self, run: u32, after: u64) -> bool {
        self.unknown
            || self
                .changes
                .iter()
                .any(|c| c.run > run || (c.run == run && c.last_seq.is_some_and(|s| s > after)))
    }

    /// Whether run `run` may have closed (a later run counts as closing it).
    #[must_use]
    pub fn closed(&self, run: u32) -> bool {
        self.unknown || self.changes.iter().any(|c| c.run > run || (c.run == run && c.closed))
    }

    /// How run `run` completed, when a change says so with its output (see
    /// [`crate::Completed`]).
    #[must_use]
    pub fn completed(&self, run: u32) -> Option<&crate::Completed> {
        self.changes.iter().filter(|c| c.run == run).find_map(|c| c.completed.as_ref())
    }

    /// The reply recorded for inbox entry `seq`: `Some(reply)` when a change says it was
    /// applied, `None` when none does.
    #[must_use]
    pub fn reply(&self, seq: u64) -> Option<Option<crate::InboxReply>> {
        self.changes
            .iter()
            .flat_map(|c| &c.applied)
            .find(|(s, _)| *s == seq)
            .map(|(_, r)| r.clone())
    }

    /// Whether a change says the result of `token` was recorded (its row is done).
    #[must_use]
    pub fn recorded(&self, token: &str) -> bool {
        self.changes.iter().any(|c| c.done_tokens.iter().any(|t| t == token))
    }

    /// Whether unit `unit`'s task rows may have been cancelled (or the run it belongs to
    /// moved on, `run`).
    #[must_use]
    pub fn cancels(&self, run: u32, unit: &str) -> bool {
        self.unknown
            || self
                .changes
                .iter()
                .any(|c| c.run > run || c.closed || c.cancelled_units.iter().any(|u| u == unit))
    }
}

/// One reader's interest in one execution; dropping it unsubscribes.
#[derive(Debug)]
pub struct Subscription {
    slot: Arc<Slot>,
}

impl Subscription {
    /// Waits for the next change published after the subscription was made (or after the
    /// previous `changed` returned), and returns what was published since.
    pub async fn changed(&self) -> Seen {
        loop {
            self.slot.notify.notified().await;
            let seen = std::mem::take(&mut *lock(&self.slot.seen));
            // A permit left by a publish whose change an earlier call already took.
            if seen.unknown || !seen.changes.is_empty() {
                return seen;
            }
        }
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    // A poisoned lock only means a panic elsewhere while it was held; the data stays usable
    // (at worst a reader reads once more).
    m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
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
        let slot = Arc::new(Slot::default());
        let mut w = lock(&self.waiters);
        if w.by_id.len() >= w.next_sweep.max(SWEEP_FLOOR) {
            w.by_id.retain(|_, list| {
                list.retain(|n| n.strong_count() > 0);
                !list.is_empty()
            });
            w.next_sweep = w.by_id.len() * 2;
        }
        let list = w.by_id.entry(execution_id.to_string()).or_default();
        list.retain(|n| n.strong_count() > 0);
        list.push(Arc::downgrade(&slot));
        Subscription { slot }
    }

    /// Tells every subscriber of these executions that they changed, without saying how:
    /// they read.
    pub fn publish<'a>(&self, execution_ids: impl IntoIterator<Item = &'a str>) {
        let mut w = lock(&self.waiters);
        for id in execution_ids {
            deliver(&mut w, id, None);
        }
    }

    /// Tells every subscriber of these changes' executions what changed.
    pub fn publish_changes(&self, changes: &[Change]) {
        let mut w = lock(&self.waiters);
        for change in changes {
            deliver(&mut w, &change.execution_id, change.detail.as_ref());
        }
    }

    /// What committing `batches` changes in the executions `ids` that someone watches, to
    /// publish once committed: unwatched executions cost nothing, and a watched one without
    /// a batch gets a change without detail (its readers read, as before).
    #[must_use]
    pub fn changes_of<'a>(
        &self,
        ids: impl IntoIterator<Item = &'a str>,
        batches: &[crate::CommitBatch],
    ) -> Vec<Change> {
        let w = lock(&self.waiters);
        let mut out = Vec::new();
        for id in ids.into_iter().filter(|id| w.by_id.contains_key(*id)) {
            let before = out.len();
            out.extend(batches.iter().filter(|b| b.execution_id == id).map(Change::of_batch));
            if out.len() == before {
                out.push(Change::unknown(id));
            }
        }
        out
    }

    /// Publishes, once committed, the changes [`ChangeHub::changes_of`] built for `ids` (the
    /// same ids, in the same order). An execution without a built change (nobody watched it
    /// then: a reader subscribed while the commit ran) gets one without detail, so a late
    /// subscriber is still woken and reads.
    pub fn publish_committed<'a>(
        &self,
        ids: impl IntoIterator<Item = &'a str>,
        changes: &[Change],
    ) {
        let mut w = lock(&self.waiters);
        let mut rest = changes;
        for id in ids {
            let n = rest.iter().take_while(|c| c.execution_id == id).count();
            if n == 0 {
                deliver(&mut w, id, None);
            }
            for c in &rest[..n] {
                deliver(&mut w, id, c.detail.as_ref());
            }
            rest = &rest[n..];
        }
    }

    /// Executions with at least one live subscriber (for tests and metrics).
    #[must_use]
    pub fn watched(&self) -> usize {
        lock(&self.waiters)
            .by_id
            .values()
            .filter(|l| l.iter().any(|n| n.strong_count() > 0))
            .count()
    }
}

/// Hands `detail` (`None`: unknown) to every live subscriber of `id` and wakes it.
fn deliver(w: &mut Waiters, id: &str, detail: Option<&Arc<ChangeDetail>>) {
    let Some(list) = w.by_id.get_mut(id) else { return };
    list.retain(|n| match n.upgrade() {
        Some(slot) => {
            {
                let mut seen = lock(&slot.seen);
                match detail {
                    Some(d) if !seen.unknown && seen.changes.len() < KEPT => {
                        seen.changes.push(d.clone());
                    }
                    _ => {
                        seen.unknown = true;
                        seen.changes.clear();
                    }
                }
            }
            slot.notify.notify_one();
            true
        }
        None => false,
    });
    if list.is_empty() {
        w.by_id.remove(id);
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

    fn detail(run: u32, last_seq: Option<u64>) -> Change {
        let d = ChangeDetail { run, last_seq, ..ChangeDetail::default() };
        Change { execution_id: "e".into(), detail: Some(Arc::new(d)) }
    }

    #[tokio::test]
    async fn a_reader_gets_what_was_published_since_it_last_looked() {
        let hub = ChangeHub::new();
        let sub = hub.subscribe("e");
        let mut applied = detail(1, Some(4));
        if let Some(d) = applied.detail.as_mut() {
            Arc::make_mut(d).applied =
                vec![(7, Some(crate::InboxReply::Applied { seq: 4, run: 1, applied: true }))];
        }
        hub.publish_changes(&[detail(1, Some(3)), applied]);
        let seen =
            tokio::time::timeout(Duration::from_secs(1), sub.changed()).await.expect("woken");
        assert!(!seen.unknown);
        assert_eq!(seen.changes.len(), 2);
        assert!(seen.events_after(1, 3) && !seen.events_after(1, 4) && !seen.events_after(2, 0));
        assert_eq!(
            seen.reply(7),
            Some(Some(crate::InboxReply::Applied { seq: 4, run: 1, applied: true }))
        );
        assert_eq!(seen.reply(8), None);
        assert!(!seen.closed(1) && !seen.cancels(1, "u"));
        // Taken: the permit left by the second publish does not hand them out again.
        assert!(tokio::time::timeout(Duration::from_millis(50), sub.changed()).await.is_err());

        // Without detail, or more than a busy reader keeps: it must read.
        hub.publish(["e"]);
        let seen = sub.changed().await;
        assert!(seen.unknown && seen.events_after(9, 99) && seen.closed(9) && seen.cancels(9, "u"));
        for seq in 0..=KEPT as u64 {
            hub.publish_changes(&[detail(1, Some(seq))]);
        }
        assert!(sub.changed().await.unknown);
    }

    #[test]
    fn only_watched_batches_become_changes() {
        use futures_util::FutureExt;
        let hub = ChangeHub::new();
        let sub = hub.subscribe("e");
        let batch = |id: &str| crate::CommitBatch { execution_id: id.into(), ..Default::default() };
        let g = hub.subscribe("g");
        let changes = hub.changes_of(["e", "f", "g"], &[batch("e"), batch("f")]);
        assert_eq!(changes.len(), 2);
        assert_eq!(changes[0].execution_id, "e");
        assert!(changes[0].detail.is_some());
        assert_eq!(changes[1], Change::unknown("g"));

        // "f" was not watched when the changes were built; a reader that subscribed since is
        // woken without detail, the others get theirs.
        let late = hub.subscribe("f");
        hub.publish_committed(["e", "f", "g"], &changes);
        let seen = late.changed().now_or_never().expect("woken");
        assert!(seen.unknown);
        let seen = sub.changed().now_or_never().expect("woken");
        assert!(!seen.unknown && seen.changes.len() == 1);
        assert!(g.changed().now_or_never().expect("woken").unknown);
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
