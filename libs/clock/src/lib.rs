//! The wall clock, in one place: milliseconds since the epoch.
//!
//! Every service reads `now` through a [`Clock`] it is given (the owner per pass, the
//! scheduler per tick, the frontend for heartbeats and deadlines on the wire, the SQLite
//! store for its bookkeeping), so a test moves time by hand with a [`ManualClock`] instead
//! of sleeping. [`system_clock`] is the only place the workspace reads `SystemTime::now`
//! (clippy.toml bans it elsewhere).
//!
//! Durations and timeouts inside a process are not wall-clock readings: they use
//! `tokio::time` (`Instant`, `sleep`), which a `#[tokio::test(start_paused = true)]` test
//! pauses and advances.

use std::fmt;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

/// Where a service reads `now`; cheap to clone. [`Clock::default`] is the system clock.
#[derive(Clone)]
pub struct Clock(Arc<dyn Fn() -> u64 + Send + Sync>);

impl Clock {
    /// The system clock ([`system_clock`]).
    #[must_use]
    pub fn system() -> Clock {
        Clock(Arc::new(system_clock))
    }

    /// A clock that reads `now` from `f` (milliseconds since the epoch).
    #[must_use]
    pub fn from_fn(f: impl Fn() -> u64 + Send + Sync + 'static) -> Clock {
        Clock(Arc::new(f))
    }

    /// Milliseconds since the epoch.
    #[must_use]
    pub fn now(&self) -> u64 {
        (self.0)()
    }
}

impl Default for Clock {
    fn default() -> Clock {
        Clock::system()
    }
}

impl fmt::Debug for Clock {
    // The function has nothing printable; the reading says which time it is on.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_tuple("Clock").field(&self.now()).finish()
    }
}

/// A clock a test sets and advances by hand; its [`ManualClock::clock`]s all read it.
#[derive(Debug, Clone)]
pub struct ManualClock(Arc<AtomicU64>);

impl ManualClock {
    /// A manual clock reading `now_ms`.
    #[must_use]
    pub fn new(now_ms: u64) -> ManualClock {
        ManualClock(Arc::new(AtomicU64::new(now_ms)))
    }

    /// The [`Clock`] to hand to the code under test.
    #[must_use]
    pub fn clock(&self) -> Clock {
        let at = self.0.clone();
        Clock::from_fn(move || at.load(Ordering::SeqCst))
    }

    /// The current reading.
    #[must_use]
    pub fn now(&self) -> u64 {
        self.0.load(Ordering::SeqCst)
    }

    /// Sets the reading.
    pub fn set(&self, now_ms: u64) {
        self.0.store(now_ms, Ordering::SeqCst);
    }

    /// Moves the reading forward by `ms`; returns the new reading.
    pub fn advance(&self, ms: u64) -> u64 {
        self.0.fetch_add(ms, Ordering::SeqCst).saturating_add(ms)
    }
}

/// Milliseconds since the epoch from the system clock (0 before 1970, saturating far
/// ahead).
#[must_use]
pub fn system_clock() -> u64 {
    #[allow(clippy::disallowed_methods)] // The one sanctioned reading of the wall clock.
    let now = std::time::SystemTime::now();
    now.duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
}

#[cfg(test)]
mod tests {
    use super::{Clock, ManualClock};
    use std::sync::atomic::{AtomicU64, Ordering};
    use std::sync::Arc;

    #[test]
    fn a_clock_from_a_function_reads_it_each_time() {
        let t = Arc::new(AtomicU64::new(5));
        let clock = Clock::from_fn({
            let t = t.clone();
            move || t.load(Ordering::SeqCst)
        });
        assert_eq!(clock.now(), 5);
        t.store(9, Ordering::SeqCst);
        assert_eq!(clock.clone().now(), 9, "clones share the source");
        assert!(Clock::default().now() > 1_600_000_000_000, "the default is the system clock");
    }

    #[test]
    fn a_manual_clock_moves_only_when_told_and_all_its_clocks_follow() {
        let manual = ManualClock::new(1_000);
        let (a, b) = (manual.clock(), manual.clock());
        assert_eq!((a.now(), b.now()), (1_000, 1_000));
        assert_eq!(manual.advance(250), 1_250);
        assert_eq!((a.now(), b.now()), (1_250, 1_250));
        manual.set(7);
        assert_eq!((a.now(), manual.now()), (7, 7));
    }
}
