//! The owner: hot executions in memory, one pass loop that turns pending inbox entries and
//! start requests into ONE store transaction, and the calls other services make.
//!
//! This is the facade: the other files of the crate build on `context` and never import
//! this one back (`grpc` and `lend`, the gRPC edges, sit above it).
//!
//! Invariants: only the pass loop writes (it holds the core lock for the whole pass); memory
//! changes only after the store committed; a caller is answered only after its command is
//! durable.

use crate::config::{OwnerConfig, TAKEOVER_SAFETY_NET};
use crate::context::Inner;
use crate::error::OwnerError;
use crate::requests::{Handed, PendingStart, Report, StartRequest, Started};
use crate::{hot, pass, resume, takeover};
use orbit_definition::Definition;
use orbit_engine::ErrorCode;
use orbit_store::{ChangeHub, InboxMessage, OwnerStore};
use serde_json::Value;
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::{oneshot, Notify};
use tokio_util::sync::CancellationToken;

/// The owner service. Cheap to clone.
#[derive(Clone)]
pub struct Owner {
    pub(crate) inner: Arc<Inner>,
}

impl Owner {
    /// An owner over `store`. `tasks_ready` is notified after commits that queue tasks;
    /// `timers_changed` after commits that move timers; `changes` hears every execution
    /// whose history grew.
    #[must_use]
    pub fn new(
        cfg: OwnerConfig,
        store: Arc<dyn OwnerStore>,
        tasks_ready: Arc<Notify>,
        timers_changed: Arc<Notify>,
        changes: Arc<ChangeHub>,
    ) -> Owner {
        Owner { inner: Arc::new(Inner::new(cfg, store, tasks_ready, timers_changed, changes)) }
    }

    /// Runs the pass loop until `shutdown`; first resumes the executions this node id owns
    /// (fencing a previous process of the same id). With `takeover_interval` set, the
    /// takeover loop runs beside it.
    ///
    /// # Errors
    /// Only if recovery fails other than `UNAVAILABLE` (that is retried until `shutdown`);
    /// pass errors are logged and retried.
    pub async fn run(&self, shutdown: CancellationToken) -> Result<(), OwnerError> {
        // Retried while the database is briefly away: an owner serving with no pass loop
        // would take commands it never applies.
        let what = "resume this node's executions";
        let inner = &self.inner;
        let transient = |e: &OwnerError| e.code == ErrorCode::Unavailable;
        let resumed = orbit_server_kit::while_unavailable(what, &shutdown, transient, || {
            resume::recover(inner)
        })
        .await?;
        if resumed.is_none() {
            return Ok(());
        }
        let takeover = self.inner.cfg.takeover_interval.map(|interval| {
            let (owner, stop) = (self.clone(), shutdown.clone());
            let timeout = self.inner.cfg.node_timeout_ms;
            tokio::spawn(async move { owner.run_takeover(timeout, interval, stop).await })
        });
        let cfg = &self.inner.cfg;
        loop {
            let busy = pass::run_pass(&self.inner).await;
            let wait = if busy { cfg.retry_pass.min(cfg.idle_pass) } else { cfg.idle_pass };
            tokio::select! {
                () = shutdown.cancelled() => break,
                () = self.inner.kick.notified() => {}
                // The safety nets (idle, and soon after a busy pass) read the inbox.
                () = tokio::time::sleep(wait) => self.inner.mark_inbox(),
            }
        }
        if let Some(t) = takeover {
            let _ = t.await;
        }
        Ok(())
    }

    /// Until `shutdown`: drops hot executions another node took, and takes over the root
    /// trees of owners silent for `node_timeout_ms` that rendezvous hashing gives this node
    /// (see [`Owner::take_over_once`]). Errors are logged and retried.
    ///
    /// Without `membership_changes`, a round runs every `interval`. With them, the
    /// `interval` tick costs nothing by itself: a round runs when the live nodes changed
    /// (a dead owner drops out of them within the node timeout plus one heartbeat, the
    /// bound takeover always had), again at the next tick while the last round found
    /// orphans or failed, after a stall of this process, and at least every
    /// [`TAKEOVER_SAFETY_NET`]. A dead owner's roots that had no work when it died are not
    /// orphans until work reaches them (a signal, a fired timer): new inbox entries
    /// ([`Owner::inbox_notified`]) bring a round within one `interval`, at most one round
    /// per `interval` for them, so such a signal waits about a heartbeat, not the safety net.
    pub async fn run_takeover(
        &self,
        node_timeout_ms: u64,
        interval: Duration,
        shutdown: CancellationToken,
    ) {
        let timeout = Duration::from_millis(node_timeout_ms);
        let mut changes = self.inner.cfg.membership_changes.clone();
        let mut tick = tokio::time::Instant::now();
        let mut last_round: Option<tokio::time::Instant> = None;
        let mut again = true;
        let mut hinted = false;
        for n in 0u64.. {
            if hinted && last_round.is_none_or(|at| at.elapsed() >= interval) {
                again = true;
                hinted = false;
            }
            // A tick long after the previous one means this process stalled (SIGSTOP, a
            // starved host), whether it slept or was inside a round (waiting on the store)
            // at the time: the others may have taken its trees meanwhile, look now. A round
            // that merely ran long costs one extra check.
            let stalled = tick.elapsed() >= timeout;
            tick = tokio::time::Instant::now();
            let safety = last_round.is_none_or(|at| at.elapsed() >= TAKEOVER_SAFETY_NET);
            if changes.is_none() || again || stalled || safety {
                let check = if stalled {
                    takeover::Check::Fence
                } else if (changes.is_none() && n % takeover::RECONCILE_EVERY == 0)
                    || (changes.is_some() && safety)
                {
                    takeover::Check::Read
                } else {
                    takeover::Check::None
                };
                last_round = Some(tokio::time::Instant::now());
                again = match takeover::round(&self.inner, node_timeout_ms, check).await {
                    Ok(round) => round.orphans > 0,
                    Err(e) => {
                        tracing::warn!(node_id = %self.inner.cfg.node_id, error = %e, "takeover round failed");
                        true
                    }
                };
            }
            let changed = async {
                match changes.as_mut() {
                    Some(rx) => {
                        if rx.changed().await.is_err() {
                            // The membership is gone (shutting down): tick on.
                            std::future::pending::<()>().await;
                        }
                    }
                    None => std::future::pending::<()>().await,
                }
            };
            tokio::select! {
                () = shutdown.cancelled() => break,
                () = tokio::time::sleep(interval) => {}
                () = changed => again = true,
                () = self.inner.takeover_hint.notified() => hinted = true,
            }
        }
    }

    /// One takeover round, including the check that drops held executions another node
    /// took; returns how many root trees this node took.
    ///
    /// # Errors
    /// The store cannot be read or written.
    pub async fn take_over_once(&self, node_timeout_ms: u64) -> Result<usize, OwnerError> {
        Ok(takeover::round(&self.inner, node_timeout_ms, takeover::Check::Read).await?.taken)
    }

    /// Hands new tasks straight to the worker sessions `handoff` holds (the frontend of the
    /// same process in `orbit dev`): a task with a matching session and a free credit is
    /// queued already claimed for it in the commit that queues it, and delivered after the
    /// commit (see `orbit_store::handoff`). Set once; a second call is ignored.
    pub fn set_handoff(&self, handoff: Arc<dyn orbit_store::Handoff>) {
        let _ = self.inner.handoff.set(handoff);
    }

    /// Wakes the pass loop without waiting for the pass (for database notifications).
    pub fn kick(&self) {
        self.inner.kick_inbox();
    }

    /// New inbox entries were notified (split: `orbit_inbox`, or a reconnect after which
    /// some may have been missed): wakes the pass loop, and the takeover loop in case an
    /// entry is for a root of a dead owner (see [`Owner::run_takeover`]).
    pub fn inbox_notified(&self) {
        self.inner.kick_inbox();
        self.inner.takeover_hint.notify_one();
    }

    /// The poison quarantine's counters since this process started.
    #[must_use]
    pub fn quarantine_stats(&self) -> crate::QuarantineStats {
        self.inner.quarantine.snapshot()
    }

    /// This node's id.
    #[must_use]
    pub fn node_id(&self) -> &str {
        &self.inner.cfg.node_id
    }

    /// The executions held in memory, by id.
    pub async fn held(&self) -> Vec<String> {
        let core = self.inner.core.lock().await;
        let mut ids: Vec<String> = core.hot.keys().cloned().collect();
        ids.sort();
        ids
    }

    /// How many open executions are held in memory and how many are evicted (see
    /// [`OwnerConfig::evict_after_ms`]).
    pub async fn memory(&self) -> Memory {
        let core = self.inner.core.lock().await;
        Memory { held: core.hot.len(), evicted: core.evicted.len() }
    }

    /// Hands a worker's result to the pass loop and waits for the pass that applies it:
    /// `true` once it is committed with its events, `false` when it was not taken (see
    /// the module docs; the caller then uses the inbox).
    ///
    /// # Errors
    /// `UNAVAILABLE` when the owner stopped.
    pub async fn report_result(
        &self,
        execution_id: String,
        worker_id: String,
        message: InboxMessage,
    ) -> Result<bool, OwnerError> {
        if !matches!(message, InboxMessage::Complete(_) | InboxMessage::Fail(_)) {
            return Ok(false);
        }
        let (tx, rx) = oneshot::channel();
        let handed = Handed { execution_id, report: Report { worker_id, message }, reply: tx };
        self.inner
            .handed
            .lock()
            .map_err(|_| OwnerError::unavailable("owner lock poisoned"))?
            .push(handed);
        self.inner.kick.notify_one();
        rx.await.map_err(|_| OwnerError::unavailable("the owner stopped"))
    }

    /// Starts an execution; idempotent by id. Answers once the start is durable.
    ///
    /// # Errors
    /// `WORKFLOW_NOT_FOUND`, `INVALID_INPUT`, `PAYLOAD_TOO_LARGE`, `RESOURCE_EXHAUSTED`
    /// (over `max_active_executions`), `UNAVAILABLE`.
    pub async fn start(&self, request: StartRequest) -> Result<Started, OwnerError> {
        crate::admission::admit(&self.inner, &request.execution_id).await?;
        let (tx, rx) = oneshot::channel();
        self.inner
            .starts
            .lock()
            .map_err(|_| OwnerError::unavailable("owner lock poisoned"))?
            .push(PendingStart { request, reply: Some(tx), retries: 0 });
        self.inner.kick.notify_one();
        rx.await.map_err(|_| OwnerError::unavailable("the owner stopped"))?
    }

    /// Returns once a pass that started after this call has finished, so every inbox entry
    /// written before the call has been applied.
    pub async fn wake(&self) {
        let mut rx = self.inner.passes.subscribe();
        let target = rx.borrow().started + 1;
        self.inner.kick_inbox();
        // The sender lives as long as `self`; an error cannot happen while we hold it.
        let _ = rx.wait_for(|p| p.finished >= target).await;
    }

    /// The definition of (workflow, version), latest version when `None`, from the cache or
    /// the store.
    ///
    /// # Errors
    /// `WORKFLOW_NOT_FOUND` or `STORAGE_ERROR`.
    pub async fn definition(
        &self,
        workflow: &str,
        version: Option<&str>,
    ) -> Result<Arc<Definition>, OwnerError> {
        // A version read before needs no core lock (a pass holds it through its commit).
        if let Some(def) = version.and_then(|v| hot::pinned(&self.inner, workflow, v)) {
            return Ok(def);
        }
        let mut core = self.inner.core.lock().await;
        hot::definition(&self.inner, &mut core, workflow, version).await
    }

    /// Evaluates a query over an execution's current state.
    ///
    /// # Errors
    /// `EXECUTION_NOT_FOUND`, `UNKNOWN_QUERY`, `QUERY_FAILED`, `EXPRESSION_LIMIT`.
    pub async fn query(
        &self,
        execution_id: &str,
        name: &str,
    ) -> Result<(Value, u64, u32), OwnerError> {
        let snap = self.snapshot(execution_id).await?;
        let (seq, run) = (snap.state.last_seq, snap.state.run);
        let name = name.to_string();
        // Bounded by the expression budget, but CPU work: off the async runtime.
        let value = tokio::task::spawn_blocking(move || {
            orbit_engine::query::query(&snap.def, &snap.state, &name)
        })
        .await
        .map_err(|e| {
            OwnerError::new(ErrorCode::QueryFailed, format!("the query evaluation failed: {e}"))
        })?
        .map_err(OwnerError::from)?;
        Ok((value, seq, run))
    }

    /// The definition and current state of an execution: the hot copy, or one rebuilt from
    /// history for this read only (a read never makes this owner hold an execution).
    ///
    /// # Errors
    /// `EXECUTION_NOT_FOUND` or `STORAGE_ERROR`.
    pub async fn snapshot(&self, execution_id: &str) -> Result<Snapshot, OwnerError> {
        let mut core = self.inner.core.lock().await;
        let hot = match core.hot.get(execution_id) {
            Some(h) => h.clone(),
            None => hot::read(&self.inner, &mut core, execution_id).await?,
        };
        Ok(Snapshot { def: hot.def, state: hot.state, root_id: hot.root_id, epoch: hot.epoch })
    }
}

/// What [`Owner::memory`] answers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Memory {
    /// Open executions held in memory.
    pub held: usize,
    /// Open executions evicted (reloaded from history at their next event).
    pub evicted: usize,
}

/// An execution's definition and state at one moment.
#[derive(Debug, Clone)]
pub struct Snapshot {
    /// Pinned definition.
    pub def: Arc<Definition>,
    /// Current run's state.
    pub state: orbit_engine::State,
    /// Root of its tree.
    pub root_id: String,
    /// Ownership epoch held.
    pub epoch: Option<u64>,
}

impl Owner {
    /// Runs the owner as its own service: the pass loop plus `orbit.internal.v1.OwnerService`
    /// (with health and reflection) on `listener`, until `shutdown`.
    ///
    /// # Errors
    /// Recovery cannot read the store, or the server fails.
    pub async fn serve(
        self,
        listener: tokio::net::TcpListener,
        shutdown: CancellationToken,
    ) -> Result<(), Box<dyn std::error::Error + Send + Sync>> {
        self.serve_with(listener, shutdown, orbit_server_kit::ConnectionOptions::default()).await
    }

    /// [`Owner::serve`] with the given keepalive and idle settings for connections.
    ///
    /// # Errors
    /// Recovery cannot read the store, or the server fails.
    pub async fn serve_with(
        self,
        listener: tokio::net::TcpListener,
        shutdown: CancellationToken,
        connections: orbit_server_kit::ConnectionOptions,
    ) -> Result<(), Box<dyn std::error::Error + Send + Sync>> {
        self.serve_lent(listener, shutdown, connections, None).await
    }

    /// [`Owner::serve_with`], also serving `HandoffService` when `lenders` is given (the
    /// split's task hand-off, see `lend`).
    ///
    /// # Errors
    /// Recovery cannot read the store, or the server fails.
    pub async fn serve_lent(
        self,
        listener: tokio::net::TcpListener,
        shutdown: CancellationToken,
        connections: orbit_server_kit::ConnectionOptions,
        lenders: Option<Arc<crate::Lenders>>,
    ) -> Result<(), Box<dyn std::error::Error + Send + Sync>> {
        let runner = self.clone();
        let stop = shutdown.clone();
        let passes = tokio::spawn(async move { runner.run(stop).await });
        let mut kit = orbit_server_kit::ServerKit::new()
            .connections(connections)
            .register_file_descriptor_set(orbit_api::FILE_DESCRIPTOR_SET)
            .add_service(orbit_api::internal::v1::owner_service_server::OwnerServiceServer::new(
                self,
            ));
        if let Some(lenders) = lenders {
            kit = kit.add_service(lenders.service());
        }
        kit.serve(listener, shutdown.clone()).await?;
        shutdown.cancel();
        passes.await??;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use futures_util::FutureExt;
    use orbit_store::{SqliteStore, Store};
    use tokio::sync::Notify;

    /// A start looks its pinned definition up without the core lock, which a pass holds
    /// through its commit: once read, a version's definition is served while the lock is
    /// held; without a version (the latest may change) the lookup still waits for it.
    #[tokio::test]
    async fn a_pinned_definition_is_read_without_the_core_lock() {
        let dir = tempfile::tempdir().unwrap();
        let store: Arc<dyn Store> =
            Arc::new(SqliteStore::open_and_migrate(dir.path().join("o.db")).await.unwrap());
        let def = orbit_definition::parse(
            "name: wf\nversion: '1'\ntasks: { t: {} }\nsteps:\n  - { id: a, task: t }\n",
        )
        .unwrap();
        let doc = orbit_definition::canonical_json(&orbit_definition::to_document(&def));
        store.put_definition(&def.name, &def.version, &def.hash, &doc).await.unwrap();
        let owner = Owner::new(
            OwnerConfig { node_id: "n".into(), ..OwnerConfig::default() },
            store,
            Arc::new(Notify::new()),
            Arc::new(Notify::new()),
            Arc::new(ChangeHub::new()),
        );
        let first = owner.definition("wf", Some("1")).await.unwrap();
        let held = owner.inner.core.lock().await;
        let again = owner.definition("wf", Some("1")).now_or_never();
        let again = again.expect("waited for the core lock").unwrap();
        assert!(Arc::ptr_eq(&first, &again));
        assert!(owner.definition("wf", None).now_or_never().is_none(), "latest: under the lock");
        drop(held);
    }
}
