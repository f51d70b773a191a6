//! Capped exponential backoff with jitter for reconnects.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// Delays between reconnect attempts: `initial`, doubling up to `max`; each delay is
/// jittered into `[base / 2, base]` so that many workers do not reconnect in lockstep.
#[derive(Debug, Clone)]
pub(crate) struct Backoff {
    initial: Duration,
    max: Duration,
    base: Duration,
    rng: u64,
}

impl Backoff {
    /// A backoff starting at `initial` and capped at `max` (`max` is at least `initial`).
    #[allow(clippy::disallowed_methods)] // The clock's nanoseconds seed the jitter; not a time.
    pub(crate) fn new(initial: Duration, max: Duration) -> Self {
        let seed = SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| d.as_nanos() as u64)
            ^ u64::from(std::process::id()).rotate_left(32);
        Self { initial, max: max.max(initial), base: initial, rng: seed | 1 }
    }

    /// The next delay.
    pub(crate) fn next_delay(&mut self) -> Duration {
        let base = self.base;
        self.base = (self.base * 2).min(self.max);
        let half = base / 2;
        let spread = (base - half).as_nanos() as u64;
        let jitter = if spread == 0 { 0 } else { self.next_random() % (spread + 1) };
        half + Duration::from_nanos(jitter)
    }

    /// Back to `initial`, after a session was established.
    pub(crate) fn reset(&mut self) {
        self.base = self.initial;
    }

    /// xorshift64: jitter only, not cryptographic.
    fn next_random(&mut self) -> u64 {
        let mut x = self.rng;
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        self.rng = x;
        x
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn grows_to_the_cap_and_resets() {
        let initial = Duration::from_millis(100);
        let max = Duration::from_secs(2);
        let mut b = Backoff::new(initial, max);
        let mut bases = Vec::new();
        for _ in 0..10 {
            let d = b.next_delay();
            assert!(d <= max, "{d:?} exceeds the cap");
            bases.push(d);
        }
        // Base delays are 100ms, 200ms, 400ms, ... capped at 2s; jitter keeps each in [base/2, base].
        assert!(bases[0] >= Duration::from_millis(50) && bases[0] <= initial);
        assert!(bases[9] >= Duration::from_secs(1));
        b.reset();
        assert!(b.next_delay() <= initial);
    }

    #[test]
    fn max_below_initial_is_raised() {
        let mut b = Backoff::new(Duration::from_secs(1), Duration::from_millis(1));
        assert!(b.next_delay() <= Duration::from_secs(1));
        assert!(b.next_delay() <= Duration::from_secs(1));
    }
}
