//! Task hand-off in the split (issue 14), the owner's side: `HandoffService.Lend`. Each
//! frontend keeps one stream open to this owner and lends it free credits of its drained
//! worker sessions, one task token per credit. The owner's pass reserves from them in
//! memory ([`Handoff::reserve`]: no IO, nothing blocking), records the claim in the commit
//! that queues the task (`CommitBatch::task_claims`, exactly as `orbit dev` does), and
//! after the commit sends the claimed rows down the stream ([`Handoff::settle`]).
//!
//! What can be lost, and who recovers it:
//! - a row committed claimed whose frontend's stream is gone (or cannot be written) is
//!   reported `uncertain` (`SESSION_LOST`) here, through this owner's own inbox, so the
//!   engine redelivers the attempt with the same idempotency key;
//! - a row sent down a stream that broke before the frontend read it: the frontend still
//!   holds its token as lent to this owner and settles it when the stream ends (see
//!   `orbit_frontend`'s `worker::lend`);
//! - this owner dying: the same, for every token lent to it;
//! - the frontend dying: the claim sweep of a dead frontend's claims.
//!
//! Reporting one attempt uncertain twice is harmless: the second finds it no longer in
//! flight and is ignored as stale.
//!
//! The streams also carry what the owner's commits change (`Changed`, issue 25). While
//! every live frontend (as of this owner's last heartbeat) holds a stream here, the pass
//! marks its batches `changes_sent`: the commit sends no `orbit_changes` notification,
//! which PostgreSQL would deliver by waking every listening backend of the database, and
//! this owner sends the payloads down every stream right after the commit instead. A
//! frontend without a stream here (starting, reconnecting) makes the commits notify as
//! before. A change lost with a stream that breaks after the commit is what a notification
//! lost with a listener's connection is: watchers and waiters read at their fallback.
//!
//! A frontend (one that takes changes: `LendHello.takes_changes`) gets the changes
//! every reader may need (`CommitBatch::concerns_every_reader`: a run closed or a later one
//! began, inbox entries applied, units cancelled) and, of a step's mere progress, only
//! that of the executions it named (`Interest`: a whole-history watch, an update wait).
//! So a step wakes no frontend where nobody waits on it. An `add` for an execution this
//! owner changed lately is answered with a change without detail (the reader reads), so
//! one committed while the `add` was on its way is not missed.

use crate::owner::Owner;
use orbit_api::internal::v1::handoff_service_server::{HandoffService, HandoffServiceServer};
use orbit_api::internal::v1::{
    lend_request, lend_response, Changed, Handed, HandedTask, Interest, LendRequest, LendResponse,
    LentCredits, Returned,
};
use orbit_cluster::Membership;
use orbit_server_kit::payload::{ms_to_timestamp, opt_ms_to_timestamp};
use orbit_store::inbox::Uncertain;
use orbit_store::{
    ClaimFilter, Handoff, InboxMessage, NewTask, OwnerStore, SentChange, TaskClaim, TaskRow,
};
use std::collections::{HashMap, HashSet};
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError, Weak};
use tokio::sync::mpsc;
use tokio_stream::wrappers::UnboundedReceiverStream;
use tonic::{Request, Response, Status, Streaming};

type Tx = mpsc::UnboundedSender<Result<LendResponse, Status>>;

/// The credits frontends lent this owner. Cheap to share; the owner holds it as its
/// [`Handoff`] and serves it as `HandoffService`.
pub struct Lenders {
    links: Mutex<Links>,
    store: Arc<dyn OwnerStore>,
    owner: Weak<crate::context::Inner>,
    /// This owner's membership, for the live frontends (see the module docs); unset: the
    /// commits always notify.
    membership: Option<Membership>,
    /// What [`Handoff::carries_changes`] answered last, so a switch is logged once.
    carrying: AtomicBool,
}

#[derive(Default)]
struct Links {
    next: u64,
    /// Frontend node id → its open stream (a newer stream of the same node replaces it).
    by_node: HashMap<String, Link>,
    /// Execution id → (workflow, version, definition hash) of the runs whose tasks the
    /// current pass reserves (`Handoff::describe`), sent with each handed task. Bounded:
    /// cleared when full (a task without it makes the frontend read the execution).
    runs: HashMap<String, (String, String, String)>,
    /// The executions this owner committed changes of lately, for an `Interest` that comes
    /// after one. Bounded as `runs` (an execution forgotten the moment before its
    /// interest arrives: the reader reads at its fallback).
    recent: HashSet<String>,
}

/// How many executions' run descriptions the lenders keep.
const RUNS: usize = 10_000;

struct Link {
    id: u64,
    tx: Tx,
    sessions: HashMap<String, Lent>,
    /// The frontend takes changes down the stream (`LendHello.takes_changes`); an older
    /// one does not, and the commits then notify.
    takes_changes: bool,
    /// Those executions.
    interest: HashSet<String>,
}

impl Link {
    /// Whether the frontend needs `change`.
    fn wants(&self, change: &SentChange) -> bool {
        change.everyone || self.interest.contains(&change.execution_id)
    }

    fn send_changes(&self, payloads: Vec<String>) {
        if payloads.is_empty() {
            return;
        }
        let kind = lend_response::Kind::Changed(Changed { payloads });
        // A stream gone meanwhile: its frontend's readers read at their fallback.
        let _ = self.tx.send(Ok(LendResponse { kind: Some(kind) }));
    }
}

/// What one session lent.
struct Lent {
    worker_id: String,
    filter: ClaimFilter,
    tokens: Vec<String>,
}

impl Lenders {
    /// Lenders for `owner`, installed as its hand-off. With `membership` (the owner's),
    /// the streams carry its commits' changes while every live frontend holds one.
    #[must_use]
    pub fn install(owner: &Owner, membership: Option<Membership>) -> Arc<Lenders> {
        let lenders = Arc::new(Lenders {
            links: Mutex::new(Links::default()),
            store: owner.inner.store.clone(),
            owner: Arc::downgrade(&owner.inner),
            membership,
            carrying: AtomicBool::new(false),
        });
        owner.set_handoff(lenders.clone());
        lenders
    }

    /// The gRPC service.
    #[must_use]
    pub fn service(self: &Arc<Self>) -> HandoffServiceServer<Service> {
        HandoffServiceServer::new(Service(self.clone()))
    }

    fn links(&self) -> MutexGuard<'_, Links> {
        // Plain maps under a short lock; a panic elsewhere leaves them consistent.
        self.links.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// A stream opened by `node`: replaces an older one of the same node.
    fn open(&self, node: &str, tx: Tx, takes_changes: bool) -> u64 {
        let mut links = self.links();
        links.next += 1;
        let id = links.next;
        let link =
            Link { id, tx, sessions: HashMap::new(), takes_changes, interest: HashSet::new() };
        links.by_node.insert(node.to_string(), link);
        id
    }

    /// `node` needs every change of `add` from now on, and no longer those of `drop`. Each
    /// added execution this owner changed lately gets a change without detail at once: the
    /// reader reads, so a change committed while the declaration was on its way (after the
    /// reader's first read) is not missed.
    fn interest(&self, node: &str, id: u64, interest: Interest) {
        let mut links = self.links();
        let Links { by_node, recent, .. } = &mut *links;
        let Some(link) = by_node.get_mut(node).filter(|l| l.id == id) else { return };
        for e in &interest.drop {
            link.interest.remove(e);
        }
        let read = interest.add.iter().filter(|e| recent.contains(*e));
        let read = read.map(|e| orbit_store::Change::unknown(e).encode()).collect();
        link.interest.extend(interest.add);
        link.send_changes(read);
    }

    fn close(&self, node: &str, id: u64) {
        let mut links = self.links();
        if links.by_node.get(node).is_some_and(|l| l.id == id) {
            links.by_node.remove(node);
        }
    }

    fn lend(&self, node: &str, id: u64, c: LentCredits) {
        let mut links = self.links();
        let Some(link) = links.by_node.get_mut(node).filter(|l| l.id == id) else { return };
        let tasks: Vec<(String, String)> =
            c.tasks.into_iter().map(|t| (t.name, t.version)).collect();
        let lent = link.sessions.entry(c.session_id).or_insert_with(|| Lent {
            worker_id: c.worker_id,
            filter: ClaimFilter::worker(&tasks, &c.runtime),
            tokens: Vec::new(),
        });
        lent.tokens.extend(c.tokens);
    }

    fn recall(&self, node: &str, id: u64, session_id: String) {
        let mut links = self.links();
        let Some(link) = links.by_node.get_mut(node).filter(|l| l.id == id) else { return };
        let tokens = link.sessions.remove(&session_id).map(|l| l.tokens).unwrap_or_default();
        let returned = Returned { session_id, tokens };
        let _ =
            link.tx.send(Ok(LendResponse { kind: Some(lend_response::Kind::Returned(returned)) }));
    }

    /// Reports rows that reached no frontend as uncertain, through this owner's inbox.
    fn lose(&self, rows: Vec<TaskRow>) {
        let (store, owner) = (self.store.clone(), self.owner.clone());
        tokio::spawn(async move {
            for row in rows {
                let Some(token) = row.token else { continue };
                let reason = "SESSION_LOST".to_string();
                let message = InboxMessage::Uncertain(Uncertain { token: token.clone(), reason });
                if let Err(e) = store.enqueue_inbox(&row.execution_id, &message).await {
                    // The claim sweep (a dead frontend) or the frontend's own settling of
                    // its lent tokens still resolves it.
                    tracing::warn!(%token, error = %e, "recording a lost hand-off failed");
                }
            }
            if let Some(inner) = owner.upgrade() {
                inner.kick_inbox();
            }
        });
    }
}

impl Handoff for Lenders {
    fn carries_changes(&self) -> bool {
        let Some(membership) = &self.membership else { return false };
        let carries = {
            let links = self.links();
            membership.every_frontend(|id| links.by_node.get(id).is_some_and(|l| l.takes_changes))
        };
        if self.carrying.swap(carries, Ordering::Relaxed) != carries {
            if carries {
                tracing::info!(
                    "every live frontend holds a hand-off stream: commits' changes go down \
                     the streams, not orbit_changes"
                );
            } else {
                tracing::info!(
                    "a live frontend holds no hand-off stream here: commits notify \
                     orbit_changes"
                );
            }
        }
        carries
    }

    fn changed(&self, changes: Vec<SentChange>) {
        let mut links = self.links();
        for link in links.by_node.values() {
            link.send_changes(
                changes.iter().filter(|c| link.wants(c)).map(|c| c.payload.clone()).collect(),
            );
        }
        if links.recent.len() >= RUNS {
            links.recent.clear();
        }
        for c in changes {
            links.recent.insert(c.execution_id);
        }
    }

    fn describe(&self, execution_id: &str, workflow: &str, version: &str, hash: &str) {
        let mut links = self.links();
        if links.runs.len() >= RUNS && !links.runs.contains_key(execution_id) {
            links.runs.clear();
        }
        let run = (workflow.to_string(), version.to_string(), hash.to_string());
        links.runs.insert(execution_id.to_string(), run);
    }

    fn reserve(&self, _execution_id: &str, task: &NewTask) -> Option<TaskClaim> {
        let mut links = self.links();
        // The session with the most tokens left, so hand-offs spread over the workers.
        let (node, session, lent) = links
            .by_node
            .iter_mut()
            .flat_map(|(node, link)| link.sessions.iter_mut().map(move |(s, l)| (node, s, l)))
            .filter(|(_, _, l)| !l.tokens.is_empty())
            .filter(|(_, _, l)| {
                l.filter.admits(&task.task, &task.task_version, task.language.as_deref())
                    && l.filter.admits_flow(task.flow.as_ref(), &l.worker_id)
            })
            .max_by_key(|(_, _, l)| l.tokens.len())?;
        let token = lent.tokens.pop()?;
        Some(TaskClaim {
            unit: task.unit.clone(),
            attempt: task.attempt,
            offer: task.offer,
            claimer: node.clone(),
            session: session.clone(),
            worker_id: lent.worker_id.clone(),
            token,
        })
    }

    fn settle(&self, claimed: Vec<TaskRow>, unused: Vec<TaskClaim>) {
        let mut lost = Vec::new();
        {
            let mut links = self.links();
            for u in unused {
                let Some(link) = links.by_node.get_mut(&u.claimer) else { continue };
                match link.sessions.get_mut(&u.session) {
                    Some(lent) => lent.tokens.push(u.token),
                    // Recalled meanwhile: the token goes back to the frontend.
                    None => {
                        let returned = Returned { session_id: u.session, tokens: vec![u.token] };
                        let kind = lend_response::Kind::Returned(returned);
                        let _ = link.tx.send(Ok(LendResponse { kind: Some(kind) }));
                    }
                }
            }
            let mut by_node: HashMap<String, Vec<TaskRow>> = HashMap::new();
            for row in claimed {
                by_node.entry(row.claimed_by.clone().unwrap_or_default()).or_default().push(row);
            }
            for (node, rows) in by_node {
                let Some(link) = links.by_node.get(&node) else {
                    lost.extend(rows);
                    continue;
                };
                let tasks =
                    rows.iter().map(|r| handed_task(r, links.runs.get(&r.execution_id))).collect();
                let kind = lend_response::Kind::Handed(Handed { tasks });
                if link.tx.send(Ok(LendResponse { kind: Some(kind) })).is_err() {
                    lost.extend(rows);
                }
            }
        }
        if !lost.is_empty() {
            tracing::info!(
                count = lost.len(),
                "handed-off tasks whose frontend stream is gone: reported lost"
            );
            self.lose(lost);
        }
    }
}

/// A claimed row as the frontend needs it, with its run's (workflow, version, hash).
fn handed_task(row: &TaskRow, run: Option<&(String, String, String)>) -> HandedTask {
    let (workflow, version, definition_hash) = run.cloned().unwrap_or_default();
    HandedTask {
        workflow,
        version,
        definition_hash,
        id: row.id,
        execution_id: row.execution_id.clone(),
        run: row.run,
        unit_key: row.unit_key.clone(),
        attempt: row.attempt,
        offer: row.offer,
        task: row.task.clone(),
        task_version: row.task_version.clone(),
        input: row.input.to_string(),
        idempotency_key: row.idempotency_key.clone(),
        session: row.session.clone().unwrap_or_default(),
        token: row.token.clone().unwrap_or_default(),
        worker_id: row.worker_id.clone().unwrap_or_default(),
        language: row.language.clone(),
        created_at: Some(ms_to_timestamp(row.created_at_ms)),
        claimed_at: opt_ms_to_timestamp(row.claimed_at_ms),
    }
}

/// `HandoffService` of an owner.
#[derive(Clone)]
pub struct Service(Arc<Lenders>);

type LendStream =
    Pin<Box<dyn futures_util::Stream<Item = Result<LendResponse, Status>> + Send + 'static>>;

#[tonic::async_trait]
impl HandoffService for Service {
    type LendStream = LendStream;

    async fn lend(
        &self,
        request: Request<Streaming<LendRequest>>,
    ) -> Result<Response<Self::LendStream>, Status> {
        let mut inbound = request.into_inner();
        let first = inbound.message().await?;
        let Some(LendRequest { kind: Some(lend_request::Kind::Hello(hello)) }) = first else {
            return Err(Status::invalid_argument("a Lend stream starts with `hello`"));
        };
        let (tx, rx) = mpsc::unbounded_channel();
        let node = hello.node_id;
        let id = self.0.open(&node, tx, hello.takes_changes);
        tracing::info!(frontend = %node, "a frontend lends credits");
        let lenders = self.0.clone();
        tokio::spawn(async move {
            while let Ok(Some(m)) = inbound.message().await {
                match m.kind {
                    Some(lend_request::Kind::Credits(c)) => lenders.lend(&node, id, c),
                    Some(lend_request::Kind::Recall(r)) => lenders.recall(&node, id, r.session_id),
                    Some(lend_request::Kind::Interest(i)) => lenders.interest(&node, id, i),
                    Some(lend_request::Kind::Hello(_)) | None => {}
                }
            }
            // Its tokens are abandoned: the frontend settles them (see the module docs).
            lenders.close(&node, id);
            tracing::info!(frontend = %node, "a frontend's lend stream ended");
        });
        Ok(Response::new(Box::pin(UnboundedReceiverStream::new(rx))))
    }
}
