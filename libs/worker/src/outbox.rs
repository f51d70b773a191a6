//! Results waiting for the server's `Ack`.
//!
//! A finished task's `Complete` or `Fail` goes into the outbox before it is sent, and
//! leaves only when an `Ack` for its token arrives (the result is durable on the server).
//! After a reconnect every result still in the outbox is sent again on the new stream:
//! results are addressed by token, and the server ignores a second result for a token.

use std::collections::VecDeque;

/// Unacknowledged results in the order they were produced, keyed by task token.
#[derive(Debug)]
pub(crate) struct Outbox<T> {
    entries: VecDeque<(String, T)>,
    capacity: usize,
}

impl<T> Outbox<T> {
    /// An outbox that reports itself full at `capacity` entries (a soft limit: the worker
    /// grants no more credits while it is full, so it stops taking new work).
    pub(crate) fn new(capacity: usize) -> Self {
        Self { entries: VecDeque::new(), capacity: capacity.max(1) }
    }

    /// Records the result for `token`, replacing an earlier one for the same token.
    pub(crate) fn push(&mut self, token: String, result: T) {
        if let Some(entry) = self.entries.iter_mut().find(|(t, _)| *t == token) {
            entry.1 = result;
        } else {
            self.entries.push_back((token, result));
        }
    }

    /// Removes the result for `token`; false when there was none (a duplicate or late ack).
    pub(crate) fn ack(&mut self, token: &str) -> bool {
        match self.entries.iter().position(|(t, _)| t == token) {
            Some(i) => {
                self.entries.remove(i);
                true
            }
            None => false,
        }
    }

    /// The result recorded for `token`, if not acknowledged yet.
    pub(crate) fn get(&self, token: &str) -> Option<&T> {
        self.entries.iter().find(|(t, _)| t == token).map(|(_, r)| r)
    }

    /// Every unacknowledged result, oldest first (to send again after a reconnect).
    pub(crate) fn pending(&self) -> impl Iterator<Item = &T> {
        self.entries.iter().map(|(_, r)| r)
    }

    /// The tokens of every unacknowledged result.
    pub(crate) fn tokens(&self) -> impl Iterator<Item = &String> {
        self.entries.iter().map(|(t, _)| t)
    }

    /// How many results wait for an ack.
    pub(crate) fn len(&self) -> usize {
        self.entries.len()
    }

    /// True when every result was acknowledged.
    pub(crate) fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// True at or above capacity.
    pub(crate) fn is_full(&self) -> bool {
        self.entries.len() >= self.capacity
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ack_removes_only_its_token() {
        let mut o = Outbox::new(8);
        o.push("a".into(), 1);
        o.push("b".into(), 2);
        assert!(o.ack("a"));
        assert_eq!(o.pending().copied().collect::<Vec<_>>(), vec![2]);
        assert!(!o.ack("a"), "a second ack is a no-op");
        assert!(!o.ack("zzz"), "an unknown token is a no-op");
        assert!(o.ack("b"));
        assert!(o.is_empty());
    }

    #[test]
    fn pending_keeps_production_order_for_resend() {
        let mut o = Outbox::new(8);
        for (i, t) in ["t3", "t1", "t2"].into_iter().enumerate() {
            o.push(t.into(), i);
        }
        assert_eq!(o.pending().copied().collect::<Vec<_>>(), vec![0, 1, 2]);
        assert_eq!(o.get("t1"), Some(&1));
        assert_eq!(o.get("t9"), None);
    }

    #[test]
    fn push_for_same_token_replaces() {
        let mut o = Outbox::new(8);
        o.push("a".into(), 1);
        o.push("a".into(), 2);
        assert_eq!(o.len(), 1);
        assert_eq!(o.get("a"), Some(&2));
    }

    #[test]
    fn full_at_capacity() {
        let mut o = Outbox::new(2);
        o.push("a".into(), ());
        assert!(!o.is_full());
        o.push("b".into(), ());
        assert!(o.is_full());
        o.ack("a");
        assert!(!o.is_full());
        assert!(!Outbox::<()>::new(0).is_full(), "capacity is at least one");
    }
}
