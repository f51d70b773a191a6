//! The poison quarantine's counters (see `quarantine`), kept in the owner's context.

use std::sync::atomic::{AtomicU64, Ordering};

/// Counters of the quarantine, for the owner's status (and later the metrics endpoint).
#[derive(Debug, Default)]
pub(crate) struct Counters {
    pub panics: AtomicU64,
    pub parked: AtomicU64,
    pub resumed: AtomicU64,
    pub terminated: AtomicU64,
}

/// A snapshot of the quarantine's counters since this process started.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct QuarantineStats {
    /// Executions whose engine work panicked in a pass (each time).
    pub panics: u64,
    /// Executions this process parked (SUSPENDED).
    pub parked: u64,
    /// Executions resumed by an operator through this process.
    pub resumed: u64,
    /// Executions terminated by an operator through this process.
    pub terminated: u64,
}

impl Counters {
    pub(crate) fn snapshot(&self) -> QuarantineStats {
        QuarantineStats {
            panics: self.panics.load(Ordering::Relaxed),
            parked: self.parked.load(Ordering::Relaxed),
            resumed: self.resumed.load(Ordering::Relaxed),
            terminated: self.terminated.load(Ordering::Relaxed),
        }
    }
}
