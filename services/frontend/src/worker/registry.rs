//! The worker sessions this frontend holds: credits, in-flight tokens and drain state.
//!
//! Invariant: a token is in flight on at most one session, from the moment its row was
//! claimed for the session until a result for it is recorded (through any session or the
//! unary RPCs) or the session ends. A session whose stream ended with attempts in flight is
//! parked until the session timeout (counted from when the worker was last heard): a new
//! session of the same worker (same `worker_id` and caller identity) adopts its attempts,
//! as worker.proto promises; otherwise they are reported `uncertain` to the owner then.

use super::session::Tx;
use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::{SystemTime, UNIX_EPOCH};
use tokio::sync::Notify;

/// Every open session, by id, and the parked ones (stream ended, attempts in flight).
#[derive(Default)]
pub(crate) struct Registry {
    sessions: Mutex<HashMap<String, Arc<Session>>>,
    parked: Mutex<HashMap<String, Arc<Session>>>,
}

/// An attempt a new session took over from a parked one of the same worker.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Adopted {
    pub(crate) token: String,
    pub(crate) execution_id: String,
    pub(crate) heartbeat_ms: Option<u64>,
}

impl Registry {
    /// Opens a session: registered, and the attempts of every parked session of the same
    /// worker moved into it (returned, for supervision). Under the `parked` lock, like
    /// [`Registry::park`], so a session ending while its worker reconnects is never missed.
    pub(crate) fn open(&self, session: Arc<Session>) -> Vec<Adopted> {
        let mut parked = lock(&self.parked);
        lock(&self.sessions).insert(session.id.clone(), session.clone());
        let ids: Vec<String> =
            parked.values().filter(|p| p.same_worker(&session)).map(|p| p.id.clone()).collect();
        let mine: Vec<Arc<Session>> = ids.iter().filter_map(|id| parked.remove(id)).collect();
        drop(parked);
        mine.iter().flat_map(|p| session.adopt(p)).collect()
    }

    /// Keeps an ended session's attempts for its worker's return. When another session of
    /// the same worker is already open (it reconnected before this stream's end was seen),
    /// that one adopts them at once: returned with it, for supervision.
    pub(crate) fn park(&self, ended: Arc<Session>) -> Option<(Arc<Session>, Vec<Adopted>)> {
        let mut parked = lock(&self.parked);
        {
            // Adopted under the `sessions` lock: a live session leaves the map (under the
            // same lock) before it looks at its own in-flight set, so what it adopts here is
            // either seen by that look or it was not found at all.
            let sessions = lock(&self.sessions);
            let live = sessions.values().find(|s| s.same_worker(&ended) && !s.is_stopped());
            if let Some(live) = live {
                let adopted = live.adopt(&ended);
                return Some((live.clone(), adopted));
            }
        }
        parked.insert(ended.id.clone(), ended);
        None
    }

    /// Takes a parked session back (its timeout passed); `None` if it was adopted.
    pub(crate) fn unpark(&self, id: &str) -> Option<Arc<Session>> {
        lock(&self.parked).remove(id)
    }

    /// Registers a session without adopting anything (tests).
    #[cfg(test)]
    pub(crate) fn insert(&self, session: Arc<Session>) {
        lock(&self.sessions).insert(session.id.clone(), session);
    }

    /// An open session by id.
    pub(crate) fn get(&self, id: &str) -> Option<Arc<Session>> {
        lock(&self.sessions).get(id).cloned()
    }

    /// Task hand-off: an open session that serves `task` (the claim statements' rule), has
    /// nothing queued left to claim and a free credit, with the credit taken for `token`;
    /// the one with the most free credits, so hand-offs spread over the workers.
    pub(crate) fn take_for(
        &self,
        task: &orbit_store::NewTask,
        execution_id: &str,
        token: &str,
    ) -> Option<Arc<Session>> {
        let mut fits: Vec<(u32, Arc<Session>)> = lock(&self.sessions)
            .values()
            .filter(|s| s.drained.load(Ordering::SeqCst))
            .filter(|s| s.claim.admits(&task.task, &task.task_version, task.language.as_deref()))
            .map(|s| (s.wanted(), s.clone()))
            .filter(|(n, _)| *n > 0)
            .collect();
        fits.sort_by_key(|f| std::cmp::Reverse(f.0));
        fits.into_iter().map(|(_, s)| s).find(|s| s.try_take(token, execution_id))
    }

    pub(crate) fn remove(&self, id: &str) {
        lock(&self.sessions).remove(id);
    }

    pub(crate) fn len(&self) -> usize {
        lock(&self.sessions).len()
    }

    /// Every open session (for the admin views), in no particular order.
    pub(crate) fn snapshot(&self) -> Vec<Arc<Session>> {
        lock(&self.sessions).values().cloned().collect()
    }

    /// Open and parked sessions.
    fn all(&self) -> Vec<Arc<Session>> {
        let mut all: Vec<_> = lock(&self.sessions).values().cloned().collect();
        all.extend(lock(&self.parked).values().cloned());
        all
    }

    /// The execution of a token in flight on any session here (parked ones included).
    pub(crate) fn execution_of(&self, token: &str) -> Option<String> {
        self.all().iter().find_map(|s| lock(&s.state).in_flight.get(token).cloned())
    }

    /// The execution, task name and claim time of a token a session here claimed itself.
    pub(crate) fn claimed_here(&self, token: &str) -> Option<(String, String, Option<u64>)> {
        self.all().iter().find_map(|s| {
            let state = lock(&s.state);
            let (task, claimed) = state.tasks.get(token)?;
            Some((state.in_flight.get(token)?.clone(), task.clone(), *claimed))
        })
    }

    /// Removes a token from whichever session holds it (a result was recorded), a parked
    /// one included: its attempt is then not reported lost when the session times out.
    pub(crate) fn forget_token(&self, token: &str) {
        for s in self.all() {
            if s.release(token) {
                return;
            }
        }
    }
}

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
    max_concurrency: u32,
    /// What the worker said about itself in `hello`, shown by the admin API.
    pub(crate) meta: WorkerMeta,
    /// When the session was opened, epoch milliseconds.
    pub(crate) connected_at_ms: u64,
    /// When the worker was last heard from on this session, epoch milliseconds.
    last_seen_ms: AtomicU64,
    state: Mutex<SessionState>,
    /// The stream to the worker while it is open: how a session that adopts attempts after
    /// it opened tells the worker to cancel one. Dropped when the stream ends, so a parked
    /// session never keeps the response stream of a finished call open.
    tx: Mutex<Option<Tx>>,
    stopped: AtomicBool,
    /// Whether the dispatcher's last claim found nothing more queued for this session: only
    /// then does the owner hand it new tasks directly (a backlog is served first, in order).
    pub(crate) drained: AtomicBool,
    /// Notified when credits arrive, a task finishes or the session stops.
    pub(crate) changed: Notify,
    /// The owner that last handed this session a task (see `lend`): its next free credits
    /// go there first, since a step's next task comes from its execution's owner.
    pub(crate) last_owner: Mutex<Option<String>>,
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

/// A point-in-time view of a session's counters.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct SessionCounters {
    pub(crate) credits: u32,
    pub(crate) in_flight: u32,
    pub(crate) draining: bool,
}

#[derive(Default)]
struct SessionState {
    credits: u32,
    /// token → execution id.
    in_flight: HashMap<String, String>,
    /// token → when the worker last said it is working on it (epoch ms).
    beats: HashMap<String, u64>,
    /// token → its step's heartbeat timeout, for the tokens whose step has one.
    heartbeat_ms: HashMap<String, u64>,
    /// token → (task name, claim time) for the tokens this session claimed itself: their
    /// results may be handed to the owner directly (see `results`). Adopted tokens have
    /// none and take the inbox route.
    tasks: HashMap<String, (String, Option<u64>)>,
    /// Tokens adopted from the worker's previous session and not yet confirmed by a
    /// complete heartbeat (see [`Session::unconfirmed`]).
    adopted: HashSet<String>,
    draining: bool,
    /// Credits the dispatcher set aside for a claim in progress: not offered to hand-offs,
    /// so the two never send a worker more tasks than it has credits.
    held: u32,
    /// Credits lent to owners (the split's hand-off, see `lend`): out of reach of this
    /// session's claims until an owner uses them (a handed task) or gives them back.
    lent: u32,
}

impl SessionState {
    /// `token` goes to the worker: one credit used, in flight, its heartbeat clock started.
    fn take(&mut self, token: &str, execution_id: &str) {
        self.credits = self.credits.saturating_sub(1);
        self.in_flight.insert(token.to_string(), execution_id.to_string());
        self.beats.insert(token.to_string(), now_ms());
    }

    /// `token` leaves the session with everything kept about it; its execution if it was
    /// in flight.
    fn drop_token(&mut self, token: &str) -> Option<String> {
        self.beats.remove(token);
        self.heartbeat_ms.remove(token);
        self.tasks.remove(token);
        self.adopted.remove(token);
        self.in_flight.remove(token)
    }
}

impl Session {
    pub(crate) fn new(
        id: String,
        worker_id: String,
        task_names: Vec<String>,
        max_concurrency: u32,
    ) -> Session {
        let now = now_ms();
        Session {
            id,
            worker_id,
            claim: orbit_store::ClaimFilter::names(&task_names),
            task_names,
            principal: None,
            max_concurrency,
            meta: WorkerMeta::default(),
            connected_at_ms: now,
            last_seen_ms: AtomicU64::new(now),
            state: Mutex::new(SessionState::default()),
            tx: Mutex::new(None),
            stopped: AtomicBool::new(false),
            drained: AtomicBool::new(false),
            changed: Notify::new(),
            last_owner: Mutex::new(None),
        }
    }

    /// Attaches what the worker said about itself; its tasks' versions and its runtime's
    /// language then decide what it claims.
    pub(crate) fn with_meta(mut self, meta: WorkerMeta) -> Session {
        self.claim = orbit_store::ClaimFilter::worker(&meta.tasks, &meta.runtime);
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
    fn same_worker(&self, other: &Session) -> bool {
        self.id != other.id
            && self.worker_id == other.worker_id
            && self.principal == other.principal
    }

    /// Takes over `from`'s attempts (the worker still runs them): in flight here, their
    /// heartbeat clocks restarted (the worker was just heard from). Uses no credits.
    fn adopt(&self, from: &Session) -> Vec<Adopted> {
        let taken: Vec<(String, String, Option<u64>)> = {
            let mut old = lock(&from.state);
            let in_flight: Vec<(String, String)> = old.in_flight.drain().collect();
            old.beats.clear();
            old.tasks.clear();
            old.adopted.clear();
            in_flight
                .into_iter()
                .map(|(t, e)| {
                    let h = old.heartbeat_ms.remove(&t);
                    (t, e, h)
                })
                .collect()
        };
        let now = now_ms();
        let mut state = lock(&self.state);
        taken
            .into_iter()
            .map(|(token, execution_id, heartbeat_ms)| {
                state.in_flight.insert(token.clone(), execution_id.clone());
                state.adopted.insert(token.clone());
                state.beats.insert(token.clone(), now);
                if let Some(h) = heartbeat_ms {
                    state.heartbeat_ms.insert(token.clone(), h);
                }
                Adopted { token, execution_id, heartbeat_ms }
            })
            .collect()
    }

    /// The step of `token` has a heartbeat timeout (kept for a session that adopts it).
    pub(crate) fn set_heartbeat_ms(&self, token: &str, ms: u64) {
        lock(&self.state).heartbeat_ms.insert(token.to_string(), ms);
    }

    /// Whether attempts are in flight.
    pub(crate) fn has_in_flight(&self) -> bool {
        !lock(&self.state).in_flight.is_empty()
    }

    pub(crate) fn max_concurrency(&self) -> u32 {
        self.max_concurrency
    }

    /// The worker was heard from now.
    pub(crate) fn touch(&self) {
        self.last_seen_ms.store(now_ms(), Ordering::Relaxed);
    }

    pub(crate) fn last_seen_ms(&self) -> u64 {
        self.last_seen_ms.load(Ordering::Relaxed)
    }

    pub(crate) fn counters(&self) -> SessionCounters {
        let state = lock(&self.state);
        SessionCounters {
            credits: state.credits,
            in_flight: u32::try_from(state.in_flight.len()).unwrap_or(u32::MAX),
            draining: state.draining,
        }
    }

    pub(crate) fn add_credits(&self, n: u32) {
        let mut state = lock(&self.state);
        state.credits = state.credits.saturating_add(n);
        drop(state);
        self.changed.notify_waiters();
    }

    /// How many tasks the dispatcher may claim now: unused credits, never more in flight
    /// than `max_concurrency`, none while draining.
    pub(crate) fn wanted(&self) -> u32 {
        self.free(&lock(&self.state))
    }

    fn free(&self, state: &SessionState) -> u32 {
        if state.draining || self.is_stopped() {
            return 0;
        }
        let in_flight = u32::try_from(state.in_flight.len()).unwrap_or(u32::MAX);
        state
            .credits
            .min(self.max_concurrency.saturating_sub(in_flight))
            .saturating_sub(state.held)
            .saturating_sub(state.lent)
    }

    /// Lends up to `max` free credits to owners (see `lend`); returns how many.
    pub(crate) fn lend(&self, max: u32) -> u32 {
        let mut state = lock(&self.state);
        let n = self.free(&state).min(max);
        state.lent += n;
        n
    }

    /// Credits lent and not yet used or given back.
    pub(crate) fn lent(&self) -> u32 {
        lock(&self.state).lent
    }

    /// An owner handed a task under a lent credit: it goes to the worker. False when the
    /// session holds no lent credit (it cannot take the task).
    pub(crate) fn lent_used(&self, token: &str, execution_id: &str) -> bool {
        let mut state = lock(&self.state);
        if state.lent == 0 {
            return false;
        }
        state.lent -= 1;
        state.take(token, execution_id);
        true
    }

    /// Lent credits came back unused.
    pub(crate) fn lent_back(&self, n: u32) {
        let mut state = lock(&self.state);
        state.lent = state.lent.saturating_sub(n);
        drop(state);
        self.changed.notify_waiters();
    }

    /// Sets aside up to `max` free credits for a claim; give them back with
    /// [`Session::unhold`] once the claimed tasks were taken.
    pub(crate) fn hold(&self, max: u32) -> u32 {
        let mut state = lock(&self.state);
        let n = self.free(&state).min(max);
        state.held += n;
        n
    }

    pub(crate) fn unhold(&self, n: u32) {
        let mut state = lock(&self.state);
        state.held = state.held.saturating_sub(n);
    }

    /// A hand-off takes one free credit for `token`, if there is one.
    pub(crate) fn try_take(&self, token: &str, execution_id: &str) -> bool {
        let mut state = lock(&self.state);
        if self.free(&state) == 0 {
            return false;
        }
        state.take(token, execution_id);
        true
    }

    /// A claimed task was handed to this session: one credit used.
    pub(crate) fn took(&self, token: &str, execution_id: &str) {
        lock(&self.state).take(token, execution_id);
    }

    /// What this session claimed for `token` (see [`Registry::claimed_here`]).
    pub(crate) fn note_task(&self, token: &str, task: &str, claimed_at_ms: Option<u64>) {
        lock(&self.state).tasks.insert(token.to_string(), (task.to_string(), claimed_at_ms));
    }

    /// The execution of `token` if it is in flight on this session.
    pub(crate) fn execution_of(&self, token: &str) -> Option<String> {
        lock(&self.state).in_flight.get(token).cloned()
    }

    /// The worker heartbeated these tokens.
    pub(crate) fn beat(&self, tokens: &[String]) {
        let now = now_ms();
        let mut state = lock(&self.state);
        for t in tokens {
            if let Some(b) = state.beats.get_mut(t) {
                *b = now;
            }
        }
    }

    /// A result for `token` arrived on this stream: the worker held it, whatever its next
    /// complete heartbeat lists.
    pub(crate) fn reported(&self, token: &str) {
        lock(&self.state).adopted.remove(token);
    }

    /// A complete heartbeat listed everything the worker holds: the adopted attempts it
    /// does not list (it restarted and lost them) leave the session and are returned, to be
    /// handed back; the listed ones are confirmed. Attempts this session claimed itself are
    /// never touched: one may still be on its way to the worker.
    pub(crate) fn unconfirmed(&self, listed: &[String]) -> Vec<(String, String)> {
        let mut state = lock(&self.state);
        let adopted: Vec<String> = state.adopted.drain().collect();
        let unlisted = adopted.into_iter().filter(|t| !listed.contains(t));
        unlisted.filter_map(|t| state.drop_token(&t).map(|e| (t, e))).collect()
    }

    /// When the worker last heartbeated `token`, if the session still holds it.
    pub(crate) fn last_beat(&self, token: &str) -> Option<u64> {
        let state = lock(&self.state);
        state.in_flight.contains_key(token).then(|| state.beats.get(token).copied()).flatten()
    }

    /// Drops a token this session no longer runs (cancelled or timed out).
    pub(crate) fn release(&self, token: &str) -> bool {
        lock(&self.state).drop_token(token).is_some()
    }

    pub(crate) fn drain(&self) {
        lock(&self.state).draining = true;
    }

    pub(crate) fn stop(&self) {
        self.stopped.store(true, Ordering::SeqCst);
        self.changed.notify_waiters();
    }

    pub(crate) fn is_stopped(&self) -> bool {
        self.stopped.load(Ordering::SeqCst)
    }

    /// Every token still in flight, with its execution; empties the set.
    pub(crate) fn take_in_flight(&self) -> Vec<(String, String)> {
        let mut state = lock(&self.state);
        state.beats.clear();
        state.heartbeat_ms.clear();
        state.tasks.clear();
        state.adopted.clear();
        state.in_flight.drain().collect()
    }
}

/// The system clock in epoch milliseconds.
pub(crate) fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    // Plain data under a short lock; a panic elsewhere leaves it consistent.
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn credits_and_concurrency_bound_what_is_claimed() {
        let s = Session::new("s".into(), "w".into(), vec!["t".into()], 2);
        assert_eq!(s.wanted(), 0);
        s.add_credits(5);
        assert_eq!(s.wanted(), 2);
        s.took("a", "e1");
        assert_eq!(s.wanted(), 1);
        s.took("b", "e1");
        assert_eq!(s.wanted(), 0, "max_concurrency reached");
        let registry = Registry::default();
        let s = Arc::new(s);
        registry.insert(s.clone());
        assert_eq!(registry.execution_of("a").as_deref(), Some("e1"));
        registry.forget_token("a");
        assert_eq!(registry.execution_of("a"), None);
        assert_eq!(s.wanted(), 1);
        assert_eq!(s.counters(), SessionCounters { credits: 3, in_flight: 1, draining: false });
        assert_eq!(registry.snapshot().len(), 1);
        s.drain();
        assert_eq!(s.wanted(), 0);
        assert!(s.counters().draining);
        assert_eq!(s.take_in_flight(), vec![("b".to_string(), "e1".to_string())]);
    }

    #[test]
    fn a_hand_off_takes_a_free_credit_of_a_drained_matching_session_only() {
        let offer = |task: &str| orbit_store::NewTask {
            unit: "u".into(),
            attempt: 1,
            offer: 1,
            task: task.into(),
            task_version: "1".into(),
            language: None,
            input: serde_json::Value::Null,
            idempotency_key: "k".into(),
        };
        let registry = Registry::default();
        let s = Arc::new(Session::new("s".into(), "w".into(), vec!["t".into()], 2));
        registry.insert(s.clone());
        s.add_credits(3);
        assert!(registry.take_for(&offer("t"), "e1", "x").is_none(), "not drained yet");
        s.drained.store(true, Ordering::SeqCst);
        assert!(registry.take_for(&offer("other"), "e1", "x").is_none(), "not its task");
        // Credits the dispatcher holds for a claim are not offered.
        assert_eq!(s.hold(10), 2);
        assert!(registry.take_for(&offer("t"), "e1", "x").is_none(), "all held");
        s.unhold(2);
        let got = registry.take_for(&offer("t"), "e1", "a").expect("a free credit");
        assert_eq!(got.id, "s");
        assert_eq!(s.execution_of("a").as_deref(), Some("e1"));
        assert_eq!(s.counters(), SessionCounters { credits: 2, in_flight: 1, draining: false });
        assert!(registry.take_for(&offer("t"), "e2", "b").is_some());
        assert!(registry.take_for(&offer("t"), "e3", "c").is_none(), "max_concurrency");
        assert_eq!(s.hold(10), 0);
    }

    #[test]
    fn lent_credits_are_out_of_reach_until_used_or_given_back() {
        let s = Session::new("s".into(), "w".into(), vec!["t".into()], 3);
        s.add_credits(5);
        assert_eq!(s.hold(1), 1, "a claim in progress holds one");
        assert_eq!(s.lend(10), 2, "only what is free is lent: min(credits, max) - held");
        assert_eq!(s.wanted(), 0, "lent credits are not claimed");
        s.unhold(1);
        assert_eq!(s.wanted(), 1);
        assert!(s.lent_used("a", "e1"), "a handed task takes a lent credit");
        assert_eq!(s.execution_of("a").as_deref(), Some("e1"));
        assert_eq!(s.counters(), SessionCounters { credits: 4, in_flight: 1, draining: false });
        assert_eq!(s.lent(), 1);
        assert_eq!(s.wanted(), 1, "max_concurrency 3: one in flight, one lent");
        s.lent_back(1);
        assert_eq!(s.wanted(), 2);
        assert!(!s.lent_used("b", "e2"), "nothing lent: a handed task cannot be taken");
        assert_eq!(s.execution_of("b"), None);
    }

    #[test]
    fn a_returning_worker_adopts_its_parked_attempts_and_no_one_else_does() {
        let registry = Registry::default();
        let old = Arc::new(Session::new("s1".into(), "w".into(), vec!["t".into()], 4));
        old.add_credits(2);
        old.took("a", "e1");
        old.took("b", "e2");
        old.set_heartbeat_ms("b", 500);
        old.stop();
        assert!(registry.park(old.clone()).is_none(), "no live session of `w`: parked");
        assert_eq!(registry.execution_of("a").as_deref(), Some("e1"), "parked tokens are known");
        registry.forget_token("a");
        assert_eq!(old.execution_of("a"), None, "a result through any path forgets it");
        assert!(old.has_in_flight(), "b still held");

        // Another worker id, or the same id under another identity: nothing adopted.
        let stranger = Session::new("s2".into(), "v".into(), vec!["t".into()], 4);
        assert!(registry.open(Arc::new(stranger)).is_empty());
        let impostor = Session::new("s3".into(), "w".into(), vec!["t".into()], 4)
            .with_principal(Some("x".into()));
        assert!(registry.open(Arc::new(impostor)).is_empty());

        let back = Arc::new(Session::new("s4".into(), "w".into(), vec!["t".into()], 4));
        let adopted = registry.open(back.clone());
        assert_eq!(
            adopted,
            vec![Adopted { token: "b".into(), execution_id: "e2".into(), heartbeat_ms: Some(500) }]
        );
        assert_eq!(back.execution_of("b").as_deref(), Some("e2"));
        assert!(back.last_beat("b").is_some());
        assert_eq!(back.counters().credits, 0, "adopting uses no credits");
        assert!(registry.unpark("s1").is_none(), "adopted: its timeout reports nothing");
        assert!(!old.has_in_flight());
    }

    #[test]
    fn an_ended_session_is_adopted_at_once_by_its_workers_live_session() {
        let registry = Registry::default();
        let live = Arc::new(Session::new("s2".into(), "w".into(), vec!["t".into()], 4));
        registry.insert(live.clone());
        let ended = Arc::new(Session::new("s1".into(), "w".into(), vec!["t".into()], 4));
        ended.add_credits(1);
        ended.took("a", "e1");
        ended.stop();
        let (to, adopted) = registry.park(ended).expect("adopted by the live session");
        assert_eq!(to.id, "s2");
        assert_eq!(adopted.len(), 1);
        assert_eq!(live.execution_of("a").as_deref(), Some("e1"));
        assert!(registry.unpark("s1").is_none());
    }

    #[test]
    fn a_complete_heartbeat_hands_back_only_unlisted_adopted_attempts() {
        let registry = Registry::default();
        let old = Arc::new(Session::new("s1".into(), "w".into(), vec!["t".into()], 4));
        old.add_credits(3);
        for (t, e) in [("kept", "e1"), ("lost", "e2"), ("reported", "e3")] {
            old.took(t, e);
        }
        old.stop();
        assert!(registry.park(old).is_none());
        let back = Arc::new(Session::new("s2".into(), "w".into(), vec!["t".into()], 4));
        back.add_credits(1);
        assert_eq!(registry.open(back.clone()).len(), 3);
        back.took("own", "e4");
        // A result for `reported` arrived on the new stream before the heartbeat.
        back.reported("reported");
        let lost = back.unconfirmed(&["kept".to_string()]);
        assert_eq!(lost, vec![("lost".to_string(), "e2".to_string())]);
        assert_eq!(back.execution_of("lost"), None, "handed back: out of the session");
        for t in ["kept", "reported", "own"] {
            assert!(back.execution_of(t).is_some(), "{t} stays in flight");
        }
        assert!(back.unconfirmed(&[]).is_empty(), "confirmed once: later heartbeats keep them");
    }
}
