//! The worker sessions this frontend holds: credits, in-flight tokens and drain state.
//!
//! Invariant: a token is in flight on at most one session, from the moment its row was
//! claimed for the session until a result for it is recorded (through any session or the
//! unary RPCs) or the session ends, when it is reported `uncertain` to the owner.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::{SystemTime, UNIX_EPOCH};
use tokio::sync::Notify;

/// Every open session, by id.
#[derive(Default)]
pub(crate) struct Registry {
    sessions: Mutex<HashMap<String, Arc<Session>>>,
}

impl Registry {
    pub(crate) fn insert(&self, session: Arc<Session>) {
        lock(&self.sessions).insert(session.id.clone(), session);
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

    /// The execution of a token in flight on any session here.
    pub(crate) fn execution_of(&self, token: &str) -> Option<String> {
        let sessions: Vec<_> = lock(&self.sessions).values().cloned().collect();
        sessions.iter().find_map(|s| lock(&s.state).in_flight.get(token).cloned())
    }

    /// Removes a token from whichever session holds it (a result was recorded).
    pub(crate) fn forget_token(&self, token: &str) {
        let sessions: Vec<_> = lock(&self.sessions).values().cloned().collect();
        for s in sessions {
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
    max_concurrency: u32,
    /// What the worker said about itself in `hello`, shown by the admin API.
    pub(crate) meta: WorkerMeta,
    /// When the session was opened, epoch milliseconds.
    pub(crate) connected_at_ms: u64,
    /// When the worker was last heard from on this session, epoch milliseconds.
    last_seen_ms: AtomicU64,
    state: Mutex<SessionState>,
    stopped: AtomicBool,
    /// Notified when credits arrive, a task finishes or the session stops.
    pub(crate) changed: Notify,
}

/// The descriptive parts of a worker's `hello` (not used for dispatch).
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
    draining: bool,
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
            task_names,
            max_concurrency,
            meta: WorkerMeta::default(),
            connected_at_ms: now,
            last_seen_ms: AtomicU64::new(now),
            state: Mutex::new(SessionState::default()),
            stopped: AtomicBool::new(false),
            changed: Notify::new(),
        }
    }

    /// Attaches what the worker said about itself.
    pub(crate) fn with_meta(mut self, meta: WorkerMeta) -> Session {
        self.meta = meta;
        self
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
        let state = lock(&self.state);
        if state.draining || self.is_stopped() {
            return 0;
        }
        let in_flight = u32::try_from(state.in_flight.len()).unwrap_or(u32::MAX);
        state.credits.min(self.max_concurrency.saturating_sub(in_flight))
    }

    /// A claimed task was handed to this session: one credit used.
    pub(crate) fn took(&self, token: &str, execution_id: &str) {
        let mut state = lock(&self.state);
        state.credits = state.credits.saturating_sub(1);
        state.in_flight.insert(token.to_string(), execution_id.to_string());
        state.beats.insert(token.to_string(), now_ms());
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

    /// When the worker last heartbeated `token`, if the session still holds it.
    pub(crate) fn last_beat(&self, token: &str) -> Option<u64> {
        let state = lock(&self.state);
        state.in_flight.contains_key(token).then(|| state.beats.get(token).copied()).flatten()
    }

    /// Drops a token this session no longer runs (cancelled or timed out).
    pub(crate) fn release(&self, token: &str) -> bool {
        let mut state = lock(&self.state);
        state.beats.remove(token);
        state.in_flight.remove(token).is_some()
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
        lock(&self.state).in_flight.drain().collect()
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
}
