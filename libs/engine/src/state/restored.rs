//! Folding `RunRestored`: a run that begins with another run's copied history prefix (a
//! reset or a fork, `crate::restore`) goes on from that state.
//!
//! The `forgotten` units leave the state entirely — their unit, frozen fan-out list, place
//! in the success order and tokens — so the decider finds their steps pending and runs them
//! again from their first attempt (with this run's idempotency keys). The signals at the
//! `redeliver` seqs (delivered to a forgotten unit) become undelivered again. The
//! workflow's timeout counts from the restoration (`started_at`). The copied slot grants
//! are dropped: the run asks for its workflow concurrency slots again (`slots_again`) and
//! goes on once they are granted. Total like the rest of
//! the fold: a key that names no unit, or a seq that names no signal, changes nothing.

use super::State;
use std::collections::BTreeSet;

impl State {
    pub(super) fn restore(&mut self, forgotten: &[String], redeliver: &[u64], ts: u64) {
        let gone: BTreeSet<&str> = forgotten.iter().map(String::as_str).collect();
        self.units.retain(|k, _| !gone.contains(k.as_str()));
        self.fanouts.retain(|k, _| !gone.contains(k.as_str()));
        self.success_order.retain(|k| !gone.contains(k.as_str()));
        self.tokens.retain(|_, k| !gone.contains(k.as_str()));
        for s in &mut self.signals {
            if redeliver.contains(&s.seq) {
                s.delivered = false;
            }
        }
        self.started_at = Some(ts);
        self.slots.clear();
        self.slots_again = true;
        self.open.clear();
        self.elements.clear();
        let statuses: Vec<_> = self.units.iter().map(|(k, u)| (k.clone(), u.status)).collect();
        for (key, status) in statuses {
            self.index(&key, None, Some(status));
        }
    }
}
