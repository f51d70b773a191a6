//! The record an evicted execution leaves behind (see `evict` for when and why): a 128-bit
//! hash of its id and the epoch it was held at.

use std::collections::HashMap;
use std::hash::{Hash, Hasher};

/// Executions dropped from memory: id hash → epoch held when dropped.
#[derive(Default)]
pub(crate) struct Evicted {
    epochs: HashMap<u128, u64>,
}

/// A 128-bit hash of an execution id: two SipHash runs with fixed (zero) keys, so the same
/// id gives the same key for the life of the process. A collision would need about 2^64
/// ids.
fn key(id: &str) -> u128 {
    let half = |salt: u8| {
        let mut h = std::hash::DefaultHasher::new();
        salt.hash(&mut h);
        id.hash(&mut h);
        h.finish()
    };
    (u128::from(half(0)) << 64) | u128::from(half(1))
}

impl Evicted {
    /// The epoch `id` was held at when it was evicted, if it was.
    pub(crate) fn epoch(&self, id: &str) -> Option<u64> {
        self.epochs.get(&key(id)).copied()
    }

    pub(crate) fn contains(&self, id: &str) -> bool {
        self.epochs.contains_key(&key(id))
    }

    /// Records `id` as evicted at `epoch` without it ever having been in memory: a
    /// restarted node's quiet executions (see `resume::recover`).
    pub(crate) fn insert(&mut self, id: &str, epoch: u64) {
        self.epochs.insert(key(id), epoch);
    }

    pub(crate) fn remove(&mut self, id: &str) {
        self.epochs.remove(&key(id));
    }

    pub(crate) fn len(&self) -> usize {
        self.epochs.len()
    }

    /// Keeps only the records of executions `owned` still lists (by id): the others were
    /// closed or taken by another node, and a later takeover by this process reloads them.
    pub(crate) fn retain_owned<'a>(&mut self, owned: impl Iterator<Item = &'a String>) {
        let owned: std::collections::HashSet<u128> = owned.map(|id| key(id)).collect();
        self.epochs.retain(|k, _| owned.contains(k));
        self.epochs.shrink_to_fit();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_are_stable_and_distinct() {
        assert_eq!(key("a"), key("a"));
        assert_ne!(key("a"), key("b"));
        let mut e = Evicted::default();
        e.epochs.insert(key("x"), 3);
        assert_eq!(e.epoch("x"), Some(3));
        assert!(!e.contains("y"));
        e.retain_owned([String::from("y")].iter());
        assert_eq!(e.len(), 0);
    }
}
