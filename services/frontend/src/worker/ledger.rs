//! The pure bookkeeping of one worker session: its credits, the credits set aside (held
//! for a claim in progress, lent to owners), and the attempts in flight with what is known
//! about each. No IO, no clock, no lock: a [`super::session::Session`] keeps one under its
//! mutex and passes the time in.
//!
//! Rules (tested below):
//! - Free credits are `min(credits, max_concurrency − in flight) − held − lent`, and none
//!   while draining or stopped. Every path that gives the worker a task for a credit checks
//!   them first (`hold` then `take`, `try_take`, `lend` then `lent_used`), so a worker never
//!   gets more tasks than it granted credits nor more than `max_concurrency` at once.
//! - Credits never go below zero: a task taken uses one if any is left (a claim's were held
//!   first), an adopted attempt uses none.
//! - A token is in flight at most once: everything kept about it (its execution, heartbeat
//!   clock and timeout, claim, adoption) leaves with it, and releasing it again does
//!   nothing.
//! - An adopted attempt is unconfirmed until the worker reports its result or names it in
//!   a complete heartbeat; one a complete heartbeat does not name leaves, to be handed back.

use std::collections::HashMap;

/// An attempt a new session took over from a parked one of the same worker.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Adopted {
    pub(crate) token: String,
    pub(crate) execution_id: String,
    pub(crate) heartbeat_ms: Option<u64>,
}

/// A point-in-time view of a session's counters.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct SessionCounters {
    pub(crate) credits: u32,
    pub(crate) in_flight: u32,
    pub(crate) draining: bool,
}

/// One session's credits and attempts in flight.
#[derive(Debug)]
pub(crate) struct Ledger {
    /// The most attempts in flight at once (`Hello.max_concurrency`).
    max_concurrency: u32,
    /// Credits the worker granted that no task used yet.
    credits: u32,
    /// Credits the dispatcher set aside for a claim in progress: not offered to hand-offs,
    /// so the two never send a worker more tasks than it has credits.
    held: u32,
    /// Credits lent to owners (the split's hand-off, see `lend`): out of reach of this
    /// session's claims until an owner uses them (a handed task) or gives them back.
    lent: u32,
    draining: bool,
    /// The stream ended: no task for it any more.
    stopped: bool,
    /// Token → the attempt in flight under it.
    attempts: HashMap<String, Attempt>,
}

/// What a session keeps about one attempt in flight.
#[derive(Debug)]
struct Attempt {
    execution_id: String,
    /// When the worker last said it works on it (epoch ms).
    last_beat_ms: u64,
    /// Its step's heartbeat timeout, if it has one (kept for a session that adopts it).
    heartbeat_ms: Option<u64>,
    /// (task name, claim time) when this session claimed it itself: its result may be
    /// handed to the owner directly (see `results`). Adopted attempts have none and take
    /// the inbox route.
    claimed: Option<(String, Option<u64>)>,
    /// Adopted from the worker's previous session and not yet confirmed (see
    /// [`Ledger::unconfirmed`]).
    unconfirmed: bool,
}

impl Ledger {
    /// A session of a worker running at most `max_concurrency` attempts at once: no
    /// credits, nothing in flight.
    pub(crate) fn new(max_concurrency: u32) -> Ledger {
        Ledger {
            max_concurrency,
            credits: 0,
            held: 0,
            lent: 0,
            draining: false,
            stopped: false,
            attempts: HashMap::new(),
        }
    }

    pub(crate) fn max_concurrency(&self) -> u32 {
        self.max_concurrency
    }

    pub(crate) fn counters(&self) -> SessionCounters {
        SessionCounters {
            credits: self.credits,
            in_flight: self.in_flight(),
            draining: self.draining,
        }
    }

    fn in_flight(&self) -> u32 {
        u32::try_from(self.attempts.len()).unwrap_or(u32::MAX)
    }

    /// The worker granted `n` more credits.
    pub(crate) fn add_credits(&mut self, n: u32) {
        self.credits = self.credits.saturating_add(n);
    }

    /// How many tasks may go to the worker now: unused credits, never more in flight than
    /// `max_concurrency`, minus what is held or lent; none while draining or stopped.
    pub(crate) fn free(&self) -> u32 {
        if self.draining || self.stopped {
            return 0;
        }
        self.credits
            .min(self.max_concurrency.saturating_sub(self.in_flight()))
            .saturating_sub(self.held)
            .saturating_sub(self.lent)
    }

    /// Sets aside up to `max` free credits for a claim; returns how many.
    pub(crate) fn hold(&mut self, max: u32) -> u32 {
        let n = self.free().min(max);
        self.held += n;
        n
    }

    /// A claim is over: `n` held credits are no longer set aside.
    pub(crate) fn unhold(&mut self, n: u32) {
        self.held = self.held.saturating_sub(n);
    }

    /// Lends up to `max` free credits to owners; returns how many.
    pub(crate) fn lend(&mut self, max: u32) -> u32 {
        let n = self.free().min(max);
        self.lent += n;
        n
    }

    /// Credits lent and not yet used or given back.
    pub(crate) fn lent(&self) -> u32 {
        self.lent
    }

    /// An owner handed a task under a lent credit: it goes to the worker. False (and
    /// nothing taken) when no credit is lent.
    pub(crate) fn lent_used(&mut self, token: &str, execution_id: &str, now_ms: u64) -> bool {
        if self.lent == 0 {
            return false;
        }
        self.lent -= 1;
        self.take(token, execution_id, now_ms);
        true
    }

    /// `n` lent credits came back unused.
    pub(crate) fn lent_back(&mut self, n: u32) {
        self.lent = self.lent.saturating_sub(n);
    }

    /// A hand-off takes one free credit for `token`, if there is one.
    pub(crate) fn try_take(&mut self, token: &str, execution_id: &str, now_ms: u64) -> bool {
        if self.free() == 0 {
            return false;
        }
        self.take(token, execution_id, now_ms);
        true
    }

    /// `token` goes to the worker: one credit used (if any is left: a claim's credits were
    /// held before), in flight, its heartbeat clock started at `now_ms`.
    pub(crate) fn take(&mut self, token: &str, execution_id: &str, now_ms: u64) {
        self.credits = self.credits.saturating_sub(1);
        let attempt = Attempt {
            execution_id: execution_id.to_string(),
            last_beat_ms: now_ms,
            heartbeat_ms: None,
            claimed: None,
            unconfirmed: false,
        };
        self.attempts.insert(token.to_string(), attempt);
    }

    /// What this session claimed for `token`, if it is in flight here.
    pub(crate) fn note_task(&mut self, token: &str, task: &str, claimed_at_ms: Option<u64>) {
        if let Some(a) = self.attempts.get_mut(token) {
            a.claimed = Some((task.to_string(), claimed_at_ms));
        }
    }

    /// The step of `token` has a heartbeat timeout, if it is in flight here.
    pub(crate) fn set_heartbeat_ms(&mut self, token: &str, ms: u64) {
        if let Some(a) = self.attempts.get_mut(token) {
            a.heartbeat_ms = Some(ms);
        }
    }

    /// The execution of `token` if it is in flight here.
    pub(crate) fn execution_of(&self, token: &str) -> Option<&str> {
        self.attempts.get(token).map(|a| a.execution_id.as_str())
    }

    /// The execution, task name and claim time of `token` if this session claimed it
    /// itself and it is still in flight.
    pub(crate) fn claimed(&self, token: &str) -> Option<(String, String, Option<u64>)> {
        let a = self.attempts.get(token)?;
        let (task, claimed_at_ms) = a.claimed.as_ref()?;
        Some((a.execution_id.clone(), task.clone(), *claimed_at_ms))
    }

    pub(crate) fn has_in_flight(&self) -> bool {
        !self.attempts.is_empty()
    }

    /// The worker heartbeated these tokens at `now_ms`; unknown ones are ignored.
    pub(crate) fn beat(&mut self, tokens: &[String], now_ms: u64) {
        for t in tokens {
            if let Some(a) = self.attempts.get_mut(t) {
                a.last_beat_ms = now_ms;
            }
        }
    }

    /// When the worker last heartbeated `token`, if it is in flight here.
    pub(crate) fn last_beat(&self, token: &str) -> Option<u64> {
        self.attempts.get(token).map(|a| a.last_beat_ms)
    }

    /// A result for `token` arrived on this stream: the worker held it, whatever its next
    /// complete heartbeat lists.
    pub(crate) fn reported(&mut self, token: &str) {
        if let Some(a) = self.attempts.get_mut(token) {
            a.unconfirmed = false;
        }
    }

    /// A complete heartbeat listed everything the worker holds: the unconfirmed adopted
    /// attempts it does not list leave and are returned (token, execution); the listed ones
    /// are confirmed. Attempts this session claimed itself are never touched: one may still
    /// be on its way to the worker.
    pub(crate) fn unconfirmed(&mut self, listed: &[String]) -> Vec<(String, String)> {
        let mut unlisted = Vec::new();
        for (token, a) in &mut self.attempts {
            if std::mem::take(&mut a.unconfirmed) && !listed.contains(token) {
                unlisted.push(token.clone());
            }
        }
        unlisted
            .into_iter()
            .filter_map(|t| self.attempts.remove(&t).map(|a| (t, a.execution_id)))
            .collect()
    }

    /// Drops `token` and everything kept about it; false if it was not in flight here.
    pub(crate) fn release(&mut self, token: &str) -> bool {
        self.attempts.remove(token).is_some()
    }

    /// The worker asked for no more tasks.
    pub(crate) fn drain(&mut self) {
        self.draining = true;
    }

    /// The stream ended: no more tasks for it.
    pub(crate) fn stop(&mut self) {
        self.stopped = true;
    }

    pub(crate) fn is_stopped(&self) -> bool {
        self.stopped
    }

    /// Every token still in flight, with its execution; nothing is left in flight.
    pub(crate) fn take_in_flight(&mut self) -> Vec<(String, String)> {
        self.attempts.drain().map(|(t, a)| (t, a.execution_id)).collect()
    }

    /// Hands every attempt in flight to a session that adopts them: each keeps its
    /// heartbeat timeout; its claim stays behind (an adopted result takes the inbox route).
    pub(crate) fn surrender(&mut self) -> Vec<Adopted> {
        self.attempts
            .drain()
            .map(|(token, a)| Adopted {
                token,
                execution_id: a.execution_id,
                heartbeat_ms: a.heartbeat_ms,
            })
            .collect()
    }

    /// Takes over attempts another session of the same worker surrendered (the worker
    /// still runs them): in flight here, unconfirmed, their heartbeat clocks restarted at
    /// `now_ms` (the worker was just heard from). Uses no credits.
    pub(crate) fn adopt(&mut self, adopted: &[Adopted], now_ms: u64) {
        for a in adopted {
            let attempt = Attempt {
                execution_id: a.execution_id.clone(),
                last_beat_ms: now_ms,
                heartbeat_ms: a.heartbeat_ms,
                claimed: None,
                unconfirmed: true,
            };
            self.attempts.insert(a.token.clone(), attempt);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tokens(n: usize) -> Vec<String> {
        (0..n).map(|i| format!("t{i}")).collect()
    }

    #[test]
    fn free_credits_are_bounded_by_credits_and_max_concurrency() {
        let mut l = Ledger::new(2);
        assert_eq!(l.free(), 0, "no credits yet");
        l.add_credits(5);
        assert_eq!(l.free(), 2, "max_concurrency bounds");
        l.take("a", "e1", 1);
        assert_eq!(l.free(), 1);
        l.take("b", "e1", 1);
        assert_eq!(l.free(), 0, "max_concurrency reached");
        assert!(!l.try_take("c", "e1", 1));
        assert_eq!(l.execution_of("c"), None, "a refused take leaves nothing behind");
        assert!(l.release("a"));
        assert_eq!(l.free(), 1, "a released slot is free again; its credit was used");
        assert_eq!(l.counters(), SessionCounters { credits: 3, in_flight: 1, draining: false });
    }

    #[test]
    fn credits_never_go_below_zero() {
        let mut l = Ledger::new(4);
        l.add_credits(1);
        l.take("a", "e", 0);
        l.take("b", "e", 0);
        assert_eq!(l.counters().credits, 0);
        assert_eq!(l.counters().in_flight, 2);
        assert_eq!(l.free(), 0);
        assert_eq!(l.hold(10), 0);
        assert_eq!(l.lend(10), 0);
        l.unhold(3);
        l.lent_back(3);
        assert_eq!(l.free(), 0, "giving back what was never held or lent frees nothing");
        l.add_credits(u32::MAX);
        l.add_credits(1);
        assert_eq!(l.counters().credits, u32::MAX, "saturates, never wraps");
    }

    #[test]
    fn draining_or_stopping_frees_no_credit_but_keeps_the_attempts() {
        for stop in [false, true] {
            let mut l = Ledger::new(3);
            l.add_credits(3);
            l.take("a", "e", 0);
            if stop {
                l.stop();
                assert!(l.is_stopped());
            } else {
                l.drain();
                assert!(l.counters().draining);
            }
            assert_eq!(l.free(), 0);
            assert_eq!(l.hold(5), 0);
            assert_eq!(l.lend(5), 0);
            assert!(!l.try_take("b", "e", 0));
            assert_eq!(l.execution_of("a"), Some("e"));
        }
    }

    #[test]
    fn held_and_lent_credits_are_out_of_reach_until_given_back() {
        let mut l = Ledger::new(3);
        l.add_credits(5);
        assert_eq!(l.hold(1), 1, "a claim in progress holds one");
        assert_eq!(l.lend(10), 2, "only what is free is lent: min(credits, max) - held");
        assert_eq!(l.free(), 0);
        assert!(!l.try_take("x", "e", 0), "a hand-off cannot take a held or lent credit");
        l.unhold(1);
        assert_eq!(l.free(), 1);
        assert!(l.lent_used("a", "e1", 0), "a handed task takes a lent credit");
        assert_eq!(l.lent(), 1);
        assert_eq!(l.counters(), SessionCounters { credits: 4, in_flight: 1, draining: false });
        assert_eq!(l.free(), 1, "max_concurrency 3: one in flight, one lent");
        l.lent_back(1);
        assert_eq!(l.free(), 2);
        assert!(!l.lent_used("b", "e2", 0), "nothing lent: a handed task cannot be taken");
        assert_eq!(l.execution_of("b"), None);
    }

    #[test]
    fn a_token_leaves_once_with_everything_kept_about_it() {
        let mut l = Ledger::new(2);
        l.add_credits(2);
        l.take("a", "e", 10);
        l.note_task("a", "task", Some(5));
        l.set_heartbeat_ms("a", 100);
        assert_eq!(l.claimed("a"), Some(("e".into(), "task".into(), Some(5))));
        assert_eq!(l.last_beat("a"), Some(10));
        assert!(l.release("a"));
        assert!(!l.release("a"), "released once");
        assert_eq!(l.claimed("a"), None);
        assert_eq!(l.last_beat("a"), None);
        // Taken again (never happens with fresh tokens): nothing of the old attempt is back.
        l.take("a", "e2", 20);
        assert_eq!(l.claimed("a"), None);
        assert_eq!(l.surrender()[0].heartbeat_ms, None);
    }

    #[test]
    fn notes_about_a_token_not_in_flight_are_dropped() {
        let mut l = Ledger::new(2);
        l.note_task("gone", "task", None);
        l.set_heartbeat_ms("gone", 100);
        l.beat(&["gone".to_string()], 5);
        assert!(!l.has_in_flight());
        assert_eq!(l.claimed("gone"), None);
        assert_eq!(l.last_beat("gone"), None);
    }

    #[test]
    fn heartbeats_move_the_clock_of_known_tokens_only() {
        let mut l = Ledger::new(2);
        l.add_credits(2);
        l.take("a", "e", 10);
        l.take("b", "e", 10);
        l.beat(&["a".to_string(), "zzz".to_string()], 50);
        assert_eq!(l.last_beat("a"), Some(50));
        assert_eq!(l.last_beat("b"), Some(10));
        assert_eq!(l.counters().in_flight, 2, "an unknown token is not taken by a beat");
    }

    #[test]
    fn adopted_attempts_use_no_credit_keep_their_timeout_and_lose_their_claim() {
        let mut old = Ledger::new(4);
        old.add_credits(2);
        old.take("a", "e1", 1);
        old.take("b", "e2", 1);
        old.note_task("a", "task", Some(1));
        old.set_heartbeat_ms("b", 500);
        let mut taken = old.surrender();
        taken.sort_by(|x, y| x.token.cmp(&y.token));
        assert!(!old.has_in_flight(), "surrendered: the old session holds nothing");
        assert_eq!(
            taken,
            vec![
                Adopted { token: "a".into(), execution_id: "e1".into(), heartbeat_ms: None },
                Adopted { token: "b".into(), execution_id: "e2".into(), heartbeat_ms: Some(500) },
            ]
        );
        let mut new = Ledger::new(1);
        new.adopt(&taken, 99);
        assert_eq!(new.counters(), SessionCounters { credits: 0, in_flight: 2, draining: false });
        assert_eq!(new.last_beat("a"), Some(99), "the heartbeat clock restarts");
        assert_eq!(new.claimed("a"), None, "an adopted result takes the inbox route");
        new.add_credits(3);
        assert_eq!(new.free(), 0, "over max_concurrency by adoption: nothing more is free");
    }

    #[test]
    fn a_complete_heartbeat_hands_back_only_unlisted_unconfirmed_attempts() {
        let mut l = Ledger::new(8);
        let adopted: Vec<Adopted> = ["kept", "lost", "reported"]
            .iter()
            .map(|t| Adopted {
                token: (*t).into(),
                execution_id: format!("e-{t}"),
                heartbeat_ms: None,
            })
            .collect();
        l.adopt(&adopted, 0);
        l.add_credits(1);
        l.take("own", "e-own", 0);
        l.reported("reported");
        assert_eq!(l.unconfirmed(&["kept".to_string()]), vec![("lost".into(), "e-lost".into())]);
        assert_eq!(l.execution_of("lost"), None, "handed back: out of the session");
        for t in ["kept", "reported", "own"] {
            assert!(l.execution_of(t).is_some(), "{t} stays in flight");
        }
        assert!(l.unconfirmed(&[]).is_empty(), "confirmed once: later heartbeats keep them");
    }

    #[test]
    fn take_in_flight_empties_the_session() {
        let mut l = Ledger::new(3);
        l.add_credits(3);
        for t in tokens(3) {
            l.take(&t, "e", 0);
        }
        let mut all = l.take_in_flight();
        all.sort();
        assert_eq!(all.len(), 3);
        assert!(!l.has_in_flight());
        assert!(l.take_in_flight().is_empty());
        assert!(all.iter().all(|(t, _)| !l.release(t)), "nothing is released twice");
    }

    /// A small deterministic generator (xorshift), so the sequence test needs no crate.
    struct Rng(u64);

    impl Rng {
        fn below(&mut self, n: u64) -> u64 {
            self.0 ^= self.0 << 13;
            self.0 ^= self.0 >> 7;
            self.0 ^= self.0 << 17;
            self.0 % n
        }
    }

    /// Whatever the order of grants, claims, hand-offs, loans and results, the worker never
    /// gets more tasks than the credits it granted, nor more than `max_concurrency` at once;
    /// and the counters say exactly what was granted and used.
    #[test]
    fn no_sequence_of_operations_overcommits_a_worker() {
        for seed in 1..=200u64 {
            let mut rng = Rng(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15));
            let max = 1 + u32::try_from(rng.below(6)).unwrap_or(1);
            let mut l = Ledger::new(max);
            let (mut granted, mut given, mut next) = (0u64, 0u64, 0u64);
            let mut live: Vec<String> = Vec::new();
            for _ in 0..300 {
                let mut token = || {
                    next += 1;
                    format!("t{next}")
                };
                match rng.below(8) {
                    0 => {
                        let n = u32::try_from(rng.below(4)).unwrap_or(0);
                        l.add_credits(n);
                        granted += u64::from(n);
                    }
                    // A claim: hold, take what the store found, give the hold back.
                    1 => {
                        let held = l.hold(u32::try_from(rng.below(5)).unwrap_or(0));
                        let found = rng.below(u64::from(held) + 1);
                        for _ in 0..found {
                            let t = token();
                            l.take(&t, "e", 0);
                            live.push(t);
                        }
                        given += found;
                        l.unhold(held);
                    }
                    2 => {
                        let t = token();
                        if l.try_take(&t, "e", 0) {
                            live.push(t);
                            given += 1;
                        }
                    }
                    3 => {
                        l.lend(u32::try_from(rng.below(3)).unwrap_or(0));
                    }
                    4 => {
                        let t = token();
                        if l.lent_used(&t, "e", 0) {
                            live.push(t);
                            given += 1;
                        }
                    }
                    5 => l.lent_back(u32::try_from(rng.below(2)).unwrap_or(0)),
                    // A result: the attempt leaves, exactly once.
                    _ => {
                        if !live.is_empty() {
                            let i = usize::try_from(rng.below(live.len() as u64)).unwrap_or(0);
                            let t = live.swap_remove(i);
                            assert!(l.release(&t));
                            assert!(!l.release(&t));
                        }
                    }
                }
                let c = l.counters();
                assert!(given <= granted, "seed {seed}: {given} tasks for {granted} credits");
                assert_eq!(u64::from(c.credits), granted - given, "seed {seed}");
                assert_eq!(c.in_flight as usize, live.len(), "seed {seed}");
                assert!(c.in_flight + l.lent() <= max, "seed {seed}: over max_concurrency");
                assert!(l.free() + c.in_flight + l.lent() <= max, "seed {seed}");
            }
        }
    }
}
