//! The owner's clock: milliseconds since the epoch, read once per pass to stamp the events
//! it records and to compute timer due times (the engine takes time only as `now`).
//!
//! It is a seam so tests can move time by hand instead of sleeping: a timer test sets the
//! owner's `now`, fires the store's due timers at a chosen instant and wakes the owner. The
//! default reads the system clock. Bookkeeping times the store writes itself (heartbeats,
//! claims) come from the database clock, not from here.

use std::fmt;
use std::sync::Arc;

/// Where the owner reads `now`; cheap to clone. [`Clock::default`] is the system clock.
#[derive(Clone)]
pub struct Clock(Arc<dyn Fn() -> u64 + Send + Sync>);

impl Clock {
    /// The system clock ([`system_clock`]).
    #[must_use]
    pub fn system() -> Clock {
        Clock(Arc::new(system_clock))
    }

    /// A clock that reads `now` from `f` (milliseconds since the epoch), e.g. a value a test
    /// advances by hand.
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

/// Milliseconds since the epoch from the system clock.
#[must_use]
pub fn system_clock() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
}

#[cfg(test)]
mod tests {
    use super::Clock;
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
}
