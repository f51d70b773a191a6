//! One worker session as the frontend's tasks share it: who the worker is, its
//! [`Ledger`] (credits and attempts in flight) under a short lock, the stream to it, and
//! the signals its dispatcher waits on. The ledger's rules are pure and live in
//! [`super::ledger`]; this type adds only the locking, the clock and the wake-ups.

use super::common::{lock, Tx};
use super::ledger::{Adopted, Ledger, SessionCounters};
use orbit_clock::Clock;
use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Mutex;
use tokio::sync::Notify;

/// One worker session.
pub(crate) struct Session {
    pub(crate) id: String,
    pub(crate) worker_id: String,
    pub(crate) task_names: Vec<String>,
    /// Which queued rows this session claims: its tasks at the announced versions, routed to
    /// its runtime's language or to none.
    pub(crate) claim: orbit_store::ClaimFilter,
    /// The authenticated identity that opened the session, if auth is on: a session
    /// adopts another's attempts only from the same worker id AND identity.
    pub(crate) principal: Option<String>,
    /// What the worker said about itself in `hello`, shown by the admin API.
    pub(crate) meta: WorkerMeta,
    /// When the session was opened, epoch milliseconds.
    pub(crate) connected_at_ms: u64,
    /// When the worker was last heard from on this session, epoch milliseconds. Apart from
    /// the ledger: every message touches it, and no rule reads it under the lock.
    last_seen_ms: AtomicU64,
    ledger: Mutex<Ledger>,
    /// The stream to the worker while it is open: how a session that adopts attempts after
    /// it opened tells the worker to cancel one. Dropped when the stream ends, so a parked
    /// session never keeps the response stream of a finished call open.
    tx: Mutex<Option<Tx>>,
    /// Whether the dispatcher's last claim found nothing more queued for this session: only
    /// then does the owner hand it new tasks directly (a backlog is served first, in order).
    pub(crate) drained: AtomicBool,
    /// Notified when credits arrive, a task finishes or the session stops.
    pub(crate) changed: Notify,
    /// Set (with `changed` notified) by the frontend's queue watch when rows this session
    /// may serve are queued: the dispatcher then claims even when drained (a missed "tasks
    /// ready", an attempt whose sticky timeout has passed, see [`Session::ask_to_claim`]).
    claim_asked: AtomicBool,
    /// The owner that last handed this session a task (see `lend`): its next free credits
    /// go there first, since a step's next task comes from its execution's owner.
    pub(crate) last_owner: Mutex<Option<String>>,
    /// Where the session reads `now` (the frontend's clock).
    clock: Clock,
}

/// The descriptive parts of a worker's `hello`: shown by the admin API, and its tasks'
/// versions and runtime route what the session claims.
#[derive(Debug, Clone, Default)]
pub(crate) struct WorkerMeta {
    pub(crate) runtime: String,
    pub(crate) sdk: String,
    /// (name, version) of every task offered, as sent.
    pub(crate) tasks: Vec<(String, String)>,
    pub(crate) labels: HashMap<String, String>,
}

impl Session {
    pub(crate) fn new(
        id: String,
        worker_id: String,
        task_names: Vec<String>,
        max_concurrency: u32,
    ) -> Session {
        let clock = Clock::system();
        let now = clock.now();
        Session {
            id,
            worker_id,
            claim: orbit_store::ClaimFilter::names(&task_names),
            task_names,
            principal: None,
            meta: WorkerMeta::default(),
            connected_at_ms: now,
            last_seen_ms: AtomicU64::new(now),
            ledger: Mutex::new(Ledger::new(max_concurrency)),
            tx: Mutex::new(None),
            drained: AtomicBool::new(false),
            changed: Notify::new(),
            claim_asked: AtomicBool::new(false),
            last_owner: Mutex::new(None),
            clock,
        }
    }

    /// Asks the dispatcher to claim at its next wake-up, drained or not, and wakes it:
    /// rows it may serve are queued that no "tasks ready" announced to it (one lost, or a
    /// sticky attempt whose timeout passed: issue 27).
    pub(crate) fn ask_to_claim(&self) {
        self.claim_asked.store(true, Ordering::SeqCst);
        self.changed.notify_waiters();
    }

    /// Whether a claim was asked for since the last call (see [`Session::ask_to_claim`]).
    pub(crate) fn take_claim_ask(&self) -> bool {
        self.claim_asked.swap(false, Ordering::SeqCst)
    }

    /// Reads `now` from `clock` (the frontend's) from here on: the session's opening and
    /// last-seen times are taken again from it.
    pub(crate) fn with_clock(mut self, clock: Clock) -> Session {
        let now = clock.now();
        self.connected_at_ms = now;
        self.last_seen_ms = AtomicU64::new(now);
        self.clock = clock;
        self
    }

    /// The session's `now`, epoch milliseconds.
    pub(crate) fn now_ms(&self) -> u64 {
        self.clock.now()
    }

    /// Attaches what the worker said about itself; its tasks' versions, its runtime's
    /// language and its labels then decide what it claims.
    pub(crate) fn with_meta(mut self, meta: WorkerMeta) -> Session {
        self.claim = orbit_store::ClaimFilter::worker(&meta.tasks, &meta.runtime)
            .with_labels(meta.labels.iter().map(|(k, v)| (k.clone(), v.clone())));
        self.meta = meta;
        self
    }

    /// Records the identity that opened the session.
    pub(crate) fn with_principal(mut self, principal: Option<String>) -> Session {
        self.principal = principal;
        self
    }

    /// Attaches the stream to the worker.
    pub(crate) fn attach(&self, tx: Tx) {
        *lock(&self.tx) = Some(tx);
    }

    /// Lets go of the stream to the worker (it ended).
    pub(crate) fn detach(&self) {
        lock(&self.tx).take();
    }

    /// The stream to the worker, while attached.
    pub(crate) fn tx(&self) -> Option<Tx> {
        lock(&self.tx).clone()
    }

    /// The same worker: same `worker_id` and identity, another session.
    pub(super) fn same_worker(&self, other: &Session) -> bool {
        self.id != other.id
            && self.worker_id == other.worker_id
            && self.principal == other.principal
    }

    /// Takes over `from`'s attempts (the worker still runs them): in flight here, their
    /// heartbeat clocks restarted (the worker was just heard from). Uses no credits. The
    /// two locks are taken one after the other, never together.
    pub(super) fn adopt(&self, from: &Session) -> Vec<Adopted> {
        let taken = lock(&from.ledger).surrender();
        let now = self.clock.now();
        lock(&self.ledger).adopt(&taken, now);
        taken
    }

    /// Takes over attempts the store moved here from another frontend's session of the
    /// same worker (see `rejoin`), like [`Session::adopt`].
    pub(super) fn adopt_attempts(&self, adopted: &[Adopted]) {
        let now = self.clock.now();
        lock(&self.ledger).adopt(adopted, now);
    }

    /// The step of `token` has a heartbeat timeout (kept for a session that adopts it).
    pub(crate) fn set_heartbeat_ms(&self, token: &str, ms: u64) {
        lock(&self.ledger).set_heartbeat_ms(token, ms);
    }

    /// Whether attempts are in flight.
    pub(crate) fn has_in_flight(&self) -> bool {
        lock(&self.ledger).has_in_flight()
    }

    pub(crate) fn max_concurrency(&self) -> u32 {
        lock(&self.ledger).max_concurrency()
    }

    /// The worker was heard from now.
    pub(crate) fn touch(&self) {
        self.last_seen_ms.store(self.clock.now(), Ordering::Relaxed);
    }

    pub(crate) fn last_seen_ms(&self) -> u64 {
        self.last_seen_ms.load(Ordering::Relaxed)
    }

    pub(crate) fn counters(&self) -> SessionCounters {
        lock(&self.ledger).counters()
    }

    pub(crate) fn add_credits(&self, n: u32) {
        lock(&self.ledger).add_credits(n);
        self.changed.notify_waiters();
    }

    /// How many tasks the dispatcher may claim now (see [`Ledger::free`]).
    pub(crate) fn wanted(&self) -> u32 {
        lock(&self.ledger).free()
    }

    /// Lends up to `max` free credits to owners (see `lend`); returns how many.
    pub(crate) fn lend(&self, max: u32) -> u32 {
        lock(&self.ledger).lend(max)
    }

    /// Credits lent and not yet used or given back.
    pub(crate) fn lent(&self) -> u32 {
        lock(&self.ledger).lent()
    }

    /// An owner handed a task under a lent credit: it goes to the worker. False when the
    /// session holds no lent credit (it cannot take the task).
    pub(crate) fn lent_used(&self, token: &str, execution_id: &str) -> bool {
        let now = self.clock.now();
        lock(&self.ledger).lent_used(token, execution_id, now)
    }

    /// Lent credits came back unused.
    pub(crate) fn lent_back(&self, n: u32) {
        lock(&self.ledger).lent_back(n);
        self.changed.notify_waiters();
    }

    /// Sets aside up to `max` free credits for a claim; give them back with
    /// [`Session::unhold`] once the claimed tasks were taken.
    pub(crate) fn hold(&self, max: u32) -> u32 {
        lock(&self.ledger).hold(max)
    }

    pub(crate) fn unhold(&self, n: u32) {
        lock(&self.ledger).unhold(n);
    }

    /// A hand-off takes one free credit for `token`, if there is one.
    pub(crate) fn try_take(&self, token: &str, execution_id: &str) -> bool {
        let now = self.clock.now();
        lock(&self.ledger).try_take(token, execution_id, now)
    }

    /// A claimed task was handed to this session: one credit used.
    pub(crate) fn took(&self, token: &str, execution_id: &str) {
        let now = self.clock.now();
        lock(&self.ledger).take(token, execution_id, now);
    }

    /// What this session claimed for `token` (see `Registry::claimed_here`).
    pub(crate) fn note_task(&self, token: &str, task: &str, claimed_at_ms: Option<u64>) {
        lock(&self.ledger).note_task(token, task, claimed_at_ms);
    }

    /// The execution of `token` if it is in flight on this session.
    pub(crate) fn execution_of(&self, token: &str) -> Option<String> {
        lock(&self.ledger).execution_of(token).map(str::to_string)
    }

    /// The execution, task name and claim time of `token` if this session claimed it
    /// itself and still holds it.
    pub(crate) fn claimed(&self, token: &str) -> Option<(String, String, Option<u64>)> {
        lock(&self.ledger).claimed(token)
    }

    /// The worker heartbeated these tokens.
    pub(crate) fn beat(&self, tokens: &[String]) {
        let now = self.clock.now();
        lock(&self.ledger).beat(tokens, now);
    }

    /// A result for `token` arrived on this stream: the worker held it, whatever its next
    /// complete heartbeat lists.
    pub(crate) fn reported(&self, token: &str) {
        lock(&self.ledger).reported(token);
    }

    /// A complete heartbeat listed everything the worker holds: the adopted attempts it
    /// does not list (it restarted and lost them) leave the session and are returned, to be
    /// handed back (see [`Ledger::unconfirmed`]).
    pub(crate) fn unconfirmed(&self, listed: &[String]) -> Vec<(String, String)> {
        lock(&self.ledger).unconfirmed(listed)
    }

    /// When the worker last heartbeated `token`, if the session still holds it.
    pub(crate) fn last_beat(&self, token: &str) -> Option<u64> {
        lock(&self.ledger).last_beat(token)
    }

    /// Drops a token this session no longer runs (cancelled or timed out).
    pub(crate) fn release(&self, token: &str) -> bool {
        lock(&self.ledger).release(token)
    }

    pub(crate) fn drain(&self) {
        lock(&self.ledger).drain();
    }

    pub(crate) fn stop(&self) {
        lock(&self.ledger).stop();
        self.changed.notify_waiters();
    }

    pub(crate) fn is_stopped(&self) -> bool {
        lock(&self.ledger).is_stopped()
    }

    /// Every token still in flight, with its execution; empties the set.
    pub(crate) fn take_in_flight(&self) -> Vec<(String, String)> {
        lock(&self.ledger).take_in_flight()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_session_delegates_to_its_ledger_and_wakes_its_dispatcher() {
        let s = Session::new("s".into(), "w".into(), vec!["t".into()], 3);
        let woken = s.changed.notified();
        tokio::pin!(woken);
        woken.as_mut().enable();
        s.add_credits(5);
        assert!(futures_util::FutureExt::now_or_never(woken).is_some(), "credits wake it");
        assert_eq!(s.hold(1), 1);
        assert_eq!(s.lend(10), 2);
        assert_eq!(s.wanted(), 0, "lent credits are not claimed");
        s.unhold(1);
        assert!(s.lent_used("a", "e1"));
        assert_eq!(s.execution_of("a").as_deref(), Some("e1"));
        assert!(s.last_beat("a").is_some(), "its heartbeat clock started");
        assert_eq!(s.counters(), SessionCounters { credits: 4, in_flight: 1, draining: false });
        s.lent_back(1);
        assert_eq!(s.wanted(), 2);
        assert_eq!(s.max_concurrency(), 3);
        let stopped = s.changed.notified();
        tokio::pin!(stopped);
        stopped.as_mut().enable();
        s.stop();
        assert!(futures_util::FutureExt::now_or_never(stopped).is_some(), "stopping wakes it");
        assert!(s.is_stopped());
        assert_eq!(s.wanted(), 0);
        assert_eq!(s.take_in_flight(), vec![("a".to_string(), "e1".to_string())]);
    }

    #[test]
    fn adoption_moves_the_attempts_between_sessions_of_the_same_worker() {
        let old = Session::new("s1".into(), "w".into(), vec!["t".into()], 4);
        old.add_credits(1);
        old.took("a", "e1");
        old.set_heartbeat_ms("a", 500);
        let new = Session::new("s2".into(), "w".into(), vec!["t".into()], 4);
        assert!(new.same_worker(&old) && !new.same_worker(&new));
        let other = Session::new("s3".into(), "w".into(), vec!["t".into()], 4)
            .with_principal(Some("x".into()));
        assert!(!other.same_worker(&old), "another identity is another worker");
        let adopted = new.adopt(&old);
        assert_eq!(
            adopted,
            vec![Adopted { token: "a".into(), execution_id: "e1".into(), heartbeat_ms: Some(500) }]
        );
        assert!(!old.has_in_flight());
        assert_eq!(new.execution_of("a").as_deref(), Some("e1"));
    }
}
