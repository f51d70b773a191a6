//! Flow-control bookkeeping: how many credits to grant so that the tasks running here plus
//! the credits the server has not used yet never exceed `max_concurrency`.

/// Credit accounting for one worker process across its streams.
///
/// Invariant: `running + outstanding <= max` after every [`Credits::grant`]. Credits are
/// per stream: a new stream starts with none outstanding ([`Credits::stream_reset`]), while
/// tasks started on an earlier stream keep running and keep their slots.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Credits {
    /// The most tasks in flight at once (`Hello.max_concurrency`).
    max: u32,
    /// Tasks executing here (on any stream).
    running: u32,
    /// Credits granted on the current stream that no delivered task has used yet.
    outstanding: u32,
}

impl Credits {
    /// Accounting for a worker that runs at most `max` tasks at once.
    pub(crate) fn new(max: u32) -> Self {
        Self { max, running: 0, outstanding: 0 }
    }

    /// How many more credits may be granted now, and records them as granted. Zero when
    /// every slot is running or already granted.
    pub(crate) fn grant(&mut self) -> u32 {
        let n = self.max.saturating_sub(self.running.saturating_add(self.outstanding));
        self.outstanding += n;
        n
    }

    /// A task was delivered: uses one credit. Returns false (and uses nothing) when the
    /// server sent more tasks than it was granted.
    pub(crate) fn take(&mut self) -> bool {
        if self.outstanding == 0 {
            return false;
        }
        self.outstanding -= 1;
        true
    }

    /// A delivered task started running here.
    pub(crate) fn start(&mut self) {
        self.running += 1;
    }

    /// A running task finished (its result went to the outbox); its slot is free again.
    pub(crate) fn finish(&mut self) {
        self.running = self.running.saturating_sub(1);
    }

    /// The stream ended: credits granted on it are gone with it.
    pub(crate) fn stream_reset(&mut self) {
        self.outstanding = 0;
    }

    /// Tasks executing here.
    #[cfg(test)]
    pub(crate) fn running(&self) -> u32 {
        self.running
    }

    /// Credits granted on the current stream and not used yet.
    #[cfg(test)]
    pub(crate) fn outstanding(&self) -> u32 {
        self.outstanding
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn first_grant_is_every_slot() {
        let mut c = Credits::new(4);
        assert_eq!(c.grant(), 4);
        assert_eq!(c.grant(), 0);
        assert_eq!(c.outstanding(), 4);
    }

    #[test]
    fn finishing_a_task_frees_one_credit() {
        let mut c = Credits::new(2);
        assert_eq!(c.grant(), 2);
        assert!(c.take());
        c.start();
        assert_eq!(c.grant(), 0, "a delivered task does not return its credit");
        c.finish();
        assert_eq!(c.grant(), 1);
    }

    #[test]
    fn over_delivery_is_refused() {
        let mut c = Credits::new(1);
        assert_eq!(c.grant(), 1);
        assert!(c.take());
        assert!(!c.take(), "a second task without a credit must be refused");
    }

    #[test]
    fn a_task_refused_or_ignored_after_take_lets_the_credit_be_granted_again() {
        let mut c = Credits::new(1);
        assert_eq!(c.grant(), 1);
        assert!(c.take()); // e.g. a duplicate delivery we did not start
        assert_eq!(c.grant(), 1);
    }

    #[test]
    fn reconnect_keeps_running_tasks_slots() {
        let mut c = Credits::new(3);
        assert_eq!(c.grant(), 3);
        assert!(c.take());
        c.start();
        assert!(c.take());
        c.start();
        c.stream_reset();
        assert_eq!(c.running(), 2);
        assert_eq!(c.grant(), 1, "only the free slot is granted on the new stream");
        c.finish();
        c.finish();
        assert_eq!(c.grant(), 2);
    }

    #[derive(Debug, Clone)]
    enum Op {
        Grant,
        Deliver,
        Finish,
        Reset,
    }

    proptest! {
        /// Whatever happens, tasks in flight never exceed what was granted nor the maximum.
        #[test]
        fn never_more_in_flight_than_max(
            max in 1u32..8,
            ops in prop::collection::vec(
                prop_oneof![Just(Op::Grant), Just(Op::Deliver), Just(Op::Finish), Just(Op::Reset)],
                0..200,
            ),
        ) {
            let mut c = Credits::new(max);
            for op in ops {
                match op {
                    Op::Grant => { c.grant(); }
                    Op::Deliver => if c.take() { c.start() },
                    Op::Finish => if c.running() > 0 { c.finish() },
                    Op::Reset => c.stream_reset(),
                }
                prop_assert!(c.running() + c.outstanding() <= max);
            }
        }
    }
}
