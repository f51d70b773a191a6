//! The worker sessions this frontend holds, open and parked, by id: opening and parking
//! them (with the adoption of a worker's attempts by its next session), task hand-off's
//! pick of a session, and the look-up of a token across all of them. What one session
//! keeps is [`super::session::Session`]'s.
//!
//! Invariant: a token is in flight on at most one session, from the moment its row was
//! claimed for the session until a result for it is recorded (through any session or the
//! unary RPCs) or the session ends. A session whose stream ended with attempts in flight is
//! parked until the session timeout (counted from when the worker was last heard): a new
//! session of the same worker (same `worker_id` and caller identity) adopts its attempts,
//! as worker.proto promises; otherwise they are reported `uncertain` to the owner then.

use super::common::lock;
use super::ledger::Adopted;
use super::session::Session;
use std::collections::HashMap;
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};

/// Every open session, by id, and the parked ones (stream ended, attempts in flight).
#[derive(Default)]
pub(crate) struct Registry {
    sessions: Mutex<HashMap<String, Arc<Session>>>,
    parked: Mutex<HashMap<String, Arc<Session>>>,
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

    /// Task hand-off: an open session that serves `task` (the claim statements' rule: its
    /// name, version and language, its worker labels, its sticky worker), has nothing queued
    /// left to claim and a free credit, with the credit taken for `token`; the one with the
    /// most free credits, so hand-offs spread over the workers.
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
            .filter(|s| s.claim.admits_flow(task.flow.as_ref(), &s.worker_id))
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
        self.all().iter().find_map(|s| s.execution_of(token))
    }

    /// The execution, task name and claim time of a token a session here claimed itself.
    pub(crate) fn claimed_here(&self, token: &str) -> Option<(String, String, Option<u64>)> {
        self.all().iter().find_map(|s| s.claimed(token))
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

#[cfg(test)]
mod tests {
    use super::super::ledger::SessionCounters;
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
            flow: None,
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
    fn a_hand_off_respects_worker_labels_and_the_sticky_worker() {
        let offer = |flow: orbit_engine::Flow| orbit_store::NewTask {
            unit: "u".into(),
            attempt: 1,
            offer: 1,
            task: "t".into(),
            task_version: "1".into(),
            language: None,
            input: serde_json::Value::Null,
            idempotency_key: "k".into(),
            flow: Some(flow),
        };
        let registry = Registry::default();
        let open = |id: &str, worker: &str, labels: &[(&str, &str)]| {
            let mut s = Session::new(id.into(), worker.into(), vec!["t".into()], 4);
            s.claim = s
                .claim
                .clone()
                .with_labels(labels.iter().map(|(k, v)| ((*k).to_string(), (*v).to_string())));
            let s = Arc::new(s);
            s.add_credits(4);
            s.drained.store(true, Ordering::SeqCst);
            registry.insert(s.clone());
            s
        };
        let _cpu = open("s-cpu", "w-cpu", &[("pool", "cpu")]);
        let _gpu = open("s-gpu", "w-gpu", &[("pool", "gpu"), ("zone", "a")]);
        let gpu = orbit_engine::Flow {
            labels: [("pool".to_string(), "gpu".to_string())].into(),
            ..Default::default()
        };
        for n in 0..3 {
            let got = registry.take_for(&offer(gpu.clone()), "e", &format!("g{n}")).unwrap();
            assert_eq!(got.worker_id, "w-gpu", "only the gpu worker");
        }
        let tpu = orbit_engine::Flow {
            labels: [("pool".to_string(), "tpu".to_string())].into(),
            ..Default::default()
        };
        assert!(registry.take_for(&offer(tpu), "e", "x").is_none(), "nobody: it is queued");
        // The cpu session has more free credits now, but the attempt sticks to the gpu one.
        let sticky = orbit_engine::Flow {
            sticky: Some(orbit_engine::StickyWorker { worker: "w-gpu".into(), timeout_ms: 5 }),
            ..Default::default()
        };
        let got = registry.take_for(&offer(sticky.clone()), "e", "s1").unwrap();
        assert_eq!(got.worker_id, "w-gpu");
        assert!(registry.take_for(&offer(sticky), "e", "s2").is_none(), "its worker is full");
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
