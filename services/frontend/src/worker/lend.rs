//! Task hand-off in the split (issue 14), the frontend's side: one `HandoffService.Lend`
//! stream to each live owner (opened by the caller, see [`crate::Frontend::lend_to`]).
//! A drained session's free credits are lent to owners, one fresh task token each, and
//! taken out of the session meanwhile (`Session::lend`), so its own claims cannot use them
//! too: a worker never gets more tasks than its credits. An owner queues a new task that
//! such a session serves already claimed under one of the tokens, in the commit that
//! queues it, and sends the row here; it is delivered as `orbit dev`'s hand-off does.
//!
//! Starvation: credits lent to an owner with no work are recalled when the session's
//! dispatcher is woken by queued tasks and finds no free credit; the owner gives back what
//! it has not used, the session claims, and lends what is left afterwards.
//!
//! Loss: every lent token is remembered here until the owner hands a row under it or
//! gives it back. When a stream ends (the owner died, the connection broke), its tokens'
//! credits come back, and after [`SETTLE_AFTER`] each token is looked up: a row still
//! claimed under it that no session here holds was committed but never delivered, and is
//! reported uncertain (`SESSION_LOST`) so the engine redelivers the attempt with the same
//! idempotency key. Failure path only: nothing is read while streams are healthy.
//!
//! Changes (issue 25): owners send what their commits change down these streams. This
//! frontend declares which executions' every change it needs ([`Lending::interest`]: a
//! whole-history watch, an update wait), on every stream, now and when one opens; an owner
//! sends it those and the changes every reader may need (a run closed, replies, cancels),
//! not every step's progress.

use super::context::learn_context;
use super::session::Session;
use super::{handoff, loss};
use crate::Shared;
use orbit_api::internal::v1::{
    lend_request, HandedTask, Interest, LendHello, LendRequest, LentCredits, LentTask, Recall,
};
use orbit_server_kit::payload::timestamp_to_ms;
use orbit_store::{TaskRow, TaskState};
use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Duration;
use tokio::sync::mpsc;

/// How long after a stream ended its open tokens are looked up: the owner's pass that
/// reserved one may still be committing, and an owner that is alive reports what it could
/// not send itself once it saw the stream end.
pub(crate) const SETTLE_AFTER: Duration = Duration::from_secs(3);

type Link = mpsc::UnboundedSender<LendRequest>;

/// The streams to owners and the tokens lent over them.
#[derive(Default)]
pub(crate) struct Lending {
    state: Mutex<State>,
    /// Where the next lending without a preferred owner starts, so credits spread.
    rotate: AtomicUsize,
}

#[derive(Default)]
struct State {
    /// Owner node id → (stream generation, its sender).
    links: BTreeMap<String, (u64, Link)>,
    next: u64,
    /// Token → (owner node id, stream generation, session id), while lent.
    outstanding: HashMap<String, (String, u64, String)>,
    /// Token → the owner that handed its row here, until the result is handed back: the
    /// result goes straight to that owner, without reading the owners row (bounded:
    /// cleared when full; a missing entry only costs that read).
    handed_by: HashMap<String, String>,
    /// Execution id → how many readers here need its every change ([`Lending::interest`]).
    interest: HashMap<String, usize>,
}

/// A reader's need of every change of one execution, declared to the owners while held.
pub(crate) struct Interested {
    lending: Arc<Lending>,
    execution_id: String,
}

impl Drop for Interested {
    fn drop(&mut self) {
        let mut state = self.lending.state();
        let Some(n) = state.interest.get_mut(&self.execution_id) else { return };
        *n -= 1;
        if *n == 0 {
            state.interest.remove(&self.execution_id);
            let drop = vec![std::mem::take(&mut self.execution_id)];
            send_interest(&state, &Interest { add: Vec::new(), drop });
        }
    }
}

/// Sends `interest` on every open stream.
fn send_interest(state: &State, interest: &Interest) {
    for (_, link) in state.links.values() {
        let kind = lend_request::Kind::Interest(interest.clone());
        let _ = link.send(LendRequest { kind: Some(kind) });
    }
}

/// How many handed tokens' owners a frontend remembers.
const HANDED_BY: usize = 100_000;

impl Lending {
    fn state(&self) -> MutexGuard<'_, State> {
        // Plain maps under a short lock; a panic elsewhere leaves them consistent.
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// The owner that handed the row of `token` here, if one did (forgotten once asked).
    pub(crate) fn handed_by(&self, token: &str) -> Option<String> {
        self.state().handed_by.remove(token)
    }

    /// Whether any owner stream is open (only then are credits lent).
    pub(crate) fn active(&self) -> bool {
        !self.state().links.is_empty()
    }

    /// Declares that a reader here needs every change of `execution_id` (not only those
    /// every reader needs) until the returned value is dropped. Take it before the
    /// reader's first read: an owner that changed the execution lately answers the
    /// declaration with a change that makes the reader read.
    pub(crate) fn interest(self: &Arc<Self>, execution_id: &str) -> Interested {
        let mut state = self.state();
        let n = state.interest.entry(execution_id.to_string()).or_default();
        *n += 1;
        if *n == 1 {
            let add = vec![execution_id.to_string()];
            send_interest(&state, &Interest { add, drop: Vec::new() });
        }
        Interested { lending: self.clone(), execution_id: execution_id.to_string() }
    }

    /// A stream to `owner` opened: what to send on it, and its generation.
    fn open(&self, owner: &str, node_id: &str) -> (u64, mpsc::UnboundedReceiver<LendRequest>) {
        let (tx, rx) = mpsc::unbounded_channel();
        let hello = LendHello { node_id: node_id.to_string(), takes_changes: true };
        let _ = tx.send(LendRequest { kind: Some(lend_request::Kind::Hello(hello)) });
        let mut state = self.state();
        // The executions readers here need every change of, as on every other stream.
        if !state.interest.is_empty() {
            let add = state.interest.keys().cloned().collect();
            let interest = Interest { add, drop: Vec::new() };
            let _ = tx.send(LendRequest { kind: Some(lend_request::Kind::Interest(interest)) });
        }
        state.next += 1;
        let generation = state.next;
        state.links.insert(owner.to_string(), (generation, tx));
        (generation, rx)
    }

    /// Lends `session`'s free credits (it is drained: nothing queued for it), first to the
    /// owner that last handed it a task, then spread over the others.
    pub(crate) fn offer(&self, session: &Session) {
        let mut state = self.state();
        if state.links.is_empty() || session.wanted() == 0 {
            return;
        }
        let n = session.lend(orbit_store::MAX_CLAIM);
        let mut owners: Vec<String> = state.links.keys().cloned().collect();
        let preferred = session.last_owner.lock().ok().and_then(|o| o.clone());
        let start = preferred
            .and_then(|p| owners.iter().position(|o| *o == p))
            .unwrap_or_else(|| self.rotate.fetch_add(1, Ordering::Relaxed) % owners.len());
        owners.rotate_left(start);
        let mut per_owner: Vec<Vec<String>> = vec![Vec::new(); owners.len()];
        let mut made = 0;
        for i in 0..n as usize {
            let Ok(token) = orbit_store::new_task_token() else { break };
            per_owner[i % owners.len()].push(token);
            made += 1;
        }
        if made < n {
            session.lent_back(n - made);
        }
        let tasks: Vec<LentTask> = session
            .meta
            .tasks
            .iter()
            .map(|(name, version)| LentTask { name: name.clone(), version: version.clone() })
            .collect();
        for (owner, tokens) in owners.into_iter().zip(per_owner) {
            if tokens.is_empty() {
                continue;
            }
            let Some((generation, link)) = state.links.get(&owner).cloned() else { continue };
            for t in &tokens {
                state
                    .outstanding
                    .insert(t.clone(), (owner.clone(), generation, session.id.clone()));
            }
            let credits = LentCredits {
                session_id: session.id.clone(),
                worker_id: session.worker_id.clone(),
                tasks: tasks.clone(),
                runtime: session.meta.runtime.clone(),
                tokens,
            };
            // A closed stream's tokens are settled by its end (`close`), like any other.
            let _ = link.send(LendRequest { kind: Some(lend_request::Kind::Credits(credits)) });
        }
    }

    /// Asks every owner holding credits of `session` to give back the ones it has not used
    /// (the session ended, or queued tasks wait for credits it lent).
    pub(crate) fn recall(&self, session_id: &str) {
        let state = self.state();
        let mut owners: Vec<&String> = state
            .outstanding
            .values()
            .filter(|(_, _, s)| s == session_id)
            .map(|(o, _, _)| o)
            .collect();
        owners.sort();
        owners.dedup();
        for owner in owners {
            if let Some((_, link)) = state.links.get(owner) {
                let recall = Recall { session_id: session_id.to_string() };
                let _ = link.send(LendRequest { kind: Some(lend_request::Kind::Recall(recall)) });
            }
        }
    }

    /// Tokens an owner gave back unused: their credits return to their sessions.
    fn returned(&self, shared: &Shared, session_id: &str, tokens: Vec<String>) {
        let mut state = self.state();
        let n = tokens.iter().filter(|t| state.outstanding.remove(*t).is_some()).count();
        drop(state);
        if let Some(session) = shared.sessions.get(session_id) {
            session.lent_back(u32::try_from(n).unwrap_or(u32::MAX));
        }
    }

    /// Rows `owner` committed claimed under lent tokens: each goes to its session (the
    /// credit lent becomes the task's), and what cannot is reported lost (`handoff`).
    async fn handed(&self, shared: &Arc<Shared>, owner: &str, tasks: Vec<HandedTask>) {
        let mut rows = Vec::with_capacity(tasks.len());
        for t in tasks {
            let known = {
                let mut state = self.state();
                if state.handed_by.len() >= HANDED_BY {
                    state.handed_by.clear();
                }
                state.handed_by.insert(t.token.clone(), owner.to_string());
                state.outstanding.remove(&t.token)
            };
            if let Some(session) = known.and_then(|(_, _, s)| shared.sessions.get(&s)) {
                // A draining session takes no new task: reported lost, redelivered elsewhere.
                if !session.counters().draining && session.lent_used(&t.token, &t.execution_id) {
                    if let Ok(mut last) = session.last_owner.lock() {
                        *last = Some(owner.to_string());
                    }
                }
            }
            let run = (t.workflow.as_str(), t.version.as_str(), t.definition_hash.as_str());
            learn_context(shared, &t.execution_id, t.run, run).await;
            // A token not lent here any more (its stream was settled) or whose session is
            // gone is in no session: `hand_over` reports it lost.
            rows.push(task_row(t));
        }
        handoff::hand_over(shared.clone(), rows).await;
    }

    /// The stream to `owner` (generation `generation`) ended: its tokens' credits come back
    /// and, after [`SETTLE_AFTER`], every one still claimed and delivered nowhere is
    /// reported lost.
    fn close(&self, shared: &Arc<Shared>, owner: &str, generation: u64) {
        let mut state = self.state();
        if state.links.get(owner).is_some_and(|(g, _)| *g == generation) {
            state.links.remove(owner);
        }
        let tokens: Vec<(String, String)> = state
            .outstanding
            .iter()
            .filter(|(_, (o, g, _))| o == owner && *g == generation)
            .map(|(t, (_, _, s))| (t.clone(), s.clone()))
            .collect();
        for (t, _) in &tokens {
            state.outstanding.remove(t);
        }
        drop(state);
        let mut per_session: HashMap<&str, u32> = HashMap::new();
        for (_, s) in &tokens {
            *per_session.entry(s.as_str()).or_default() += 1;
        }
        for (s, n) in per_session {
            if let Some(session) = shared.sessions.get(s) {
                session.lent_back(n);
            }
        }
        if tokens.is_empty() {
            return;
        }
        let shared = shared.clone();
        tokio::spawn(async move {
            tokio::time::sleep(SETTLE_AFTER).await;
            settle(&shared, tokens.into_iter().map(|(t, _)| t).collect()).await;
        });
    }
}

/// Reports lost the tokens of an ended stream that were committed claimed but reached no
/// session here.
async fn settle(shared: &Arc<Shared>, tokens: Vec<String>) {
    let mut lost = Vec::new();
    for token in tokens {
        if shared.sessions.execution_of(&token).is_some() {
            continue;
        }
        match shared.store.task_by_token(&token).await {
            Ok(Some(row)) if row.state == TaskState::Claimed => {
                lost.push((token, row.execution_id));
            }
            // Never used (no row), or already resolved.
            Ok(_) => {}
            // The owner's attempt deadline, or the sweep if this frontend dies, still
            // resolves it.
            Err(e) => tracing::warn!(%token, error = %e, "cannot settle a lent token"),
        }
    }
    if !lost.is_empty() {
        tracing::info!(
            count = lost.len(),
            "hand-offs of an ended owner stream never delivered: reported lost"
        );
    }
    loss::hand_back(shared, lost).await;
}

/// The row a handed task stands for.
fn task_row(t: HandedTask) -> TaskRow {
    TaskRow {
        id: t.id,
        execution_id: t.execution_id,
        run: t.run,
        unit_key: t.unit_key,
        attempt: t.attempt,
        offer: t.offer,
        task: t.task,
        task_version: t.task_version,
        input: serde_json::from_str(&t.input).unwrap_or(serde_json::Value::Null),
        idempotency_key: t.idempotency_key,
        state: TaskState::Claimed,
        claimed_by: None,
        session: Some(t.session),
        token: Some(t.token),
        worker_id: Some(t.worker_id),
        language: t.language,
        created_at_ms: t.created_at.as_ref().and_then(|ts| timestamp_to_ms(ts).ok()).unwrap_or(0),
        claimed_at_ms: t.claimed_at.as_ref().and_then(|ts| timestamp_to_ms(ts).ok()),
        // Not carried by `HandedTask`; nothing downstream of a hand-off reads them.
        priority: orbit_engine::flow::DEFAULT_PRIORITY,
        flow: None,
    }
}

/// What an owner's commit changed, sent down its stream in place of `orbit_changes`:
/// published to this frontend's watchers and waiters as the notification would be.
fn changed(shared: &Shared, payloads: &[String]) {
    let changes: Vec<orbit_store::Change> =
        payloads.iter().map(|p| orbit_store::Change::decode(p)).collect();
    orbit_metrics::get()
        .changes_received
        .with_label_values(&["stream"])
        .inc_by(changes.len() as u64);
    shared.changes.publish_changes(&changes);
}

/// One `Lend` stream to `owner`, until it ends: `connect` opens it with the requests to
/// send and yields the owner's responses.
pub(crate) async fn run<S>(shared: Arc<Shared>, owner: String, open: S)
where
    S: FnOnce(
        mpsc::UnboundedReceiver<LendRequest>,
    ) -> futures_util::future::BoxFuture<
        'static,
        Result<tonic::Streaming<orbit_api::internal::v1::LendResponse>, tonic::Status>,
    >,
{
    use orbit_api::internal::v1::lend_response::Kind;
    let lending = &shared.lending;
    let (generation, rx) = lending.open(&owner, &shared.config.node_id);
    match open(rx).await {
        Ok(mut inbound) => {
            tracing::info!(%owner, "lending credits to an owner");
            // Sessions drained before the stream opened lend their credits now.
            for s in shared.sessions.snapshot() {
                s.changed.notify_waiters();
            }
            while let Ok(Some(m)) = inbound.message().await {
                match m.kind {
                    Some(Kind::Handed(h)) => lending.handed(&shared, &owner, h.tasks).await,
                    Some(Kind::Returned(r)) => lending.returned(&shared, &r.session_id, r.tokens),
                    Some(Kind::Changed(c)) => changed(&shared, &c.payloads),
                    None => {}
                }
            }
            tracing::info!(%owner, "the lend stream to an owner ended");
        }
        Err(status) => tracing::debug!(%owner, %status, "cannot open a lend stream"),
    }
    lending.close(&shared, &owner, generation);
}
