//! [`Membership`]: this node's row in the `nodes` table and the live owners it sees.
//!
//! A node heartbeats every `heartbeat_interval`; the store's clock (the database clock on
//! PostgreSQL) stamps each beat, so liveness never depends on the clocks of the processes.
//! Each beat also reads the live nodes, in the same transaction as the write
//! (`Nodes::beat_and_list`), and caches them: every start a frontend or scheduler routes
//! needs the live owners, and the loops that react to a node's death (owners' takeover,
//! frontends' claim sweep) wait on [`Membership::changes`] instead of querying on a timer
//! (issue 14: an idle node makes one transaction per beat). A failed beat (the database
//! restarting) is logged and retried at the next tick; the node simply looks dead to the
//! others meanwhile, and [`Membership::beat_failure`] says why (readiness).
//! On a clean shutdown the node deletes its row, so owners take over its work at once
//! instead of after the timeout.
//!
//! A node may report something with each beat ([`Membership::report_with`]): a frontend
//! writes a summary of its worker sessions into its row, so the others learn it from the
//! write the beat does anyway instead of asking on a timer of their own.

use orbit_store::{MembershipStore, NodeInfo, NodeRow, StoreError};
use std::sync::{Arc, RwLock};
use std::time::Duration;
use tokio::sync::watch;
use tokio_util::sync::CancellationToken;

/// The `service` name owners register under.
pub const OWNER_SERVICE: &str = "owner";
/// The `service` of frontends' rows.
pub const FRONTEND_SERVICE: &str = "frontend";

/// How a node takes part in the cluster.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MembershipConfig {
    /// Stable node id (a restarted process keeps it).
    pub node_id: String,
    /// `frontend`, `owner` or `scheduler`.
    pub service: String,
    /// The address other services reach this node at (`host:port`), if it serves one.
    pub addr: Option<String>,
    /// How often to heartbeat.
    pub heartbeat_interval: Duration,
    /// A node whose last heartbeat is older than this is dead.
    pub node_timeout_ms: u64,
}

/// Produces what a node reports with each beat (see [`NodeInfo::sessions`]).
pub type Report = Arc<dyn Fn() -> Option<String> + Send + Sync>;

/// This node's membership. Cheap to clone.
#[derive(Clone)]
pub struct Membership {
    inner: Arc<Inner>,
}

struct Inner {
    store: Arc<dyn MembershipStore>,
    info: NodeInfo,
    heartbeat_interval: Duration,
    node_timeout_ms: u64,
    owners: RwLock<Vec<NodeRow>>,
    /// The node ids of the live frontends as of the last beat.
    frontends: RwLock<Vec<String>>,
    /// The live nodes of every service as of the last beat, by (node id, incarnation);
    /// the generation counts the beats that found them different from the beat before.
    live: RwLock<Vec<(String, String)>>,
    generation: watch::Sender<u64>,
    /// When the last beat reached the store (process clock), for readiness.
    last_beat: std::sync::Mutex<Option<tokio::time::Instant>>,
    /// Why the last beat failed; `None` once one succeeds again.
    failure: std::sync::Mutex<Option<String>>,
    /// When the beat in flight started (`None`: none is).
    in_flight: std::sync::Mutex<Option<tokio::time::Instant>>,
    /// Called at each beat for the row's `sessions`; none: the node reports nothing.
    report: RwLock<Option<Report>>,
}

impl Membership {
    /// Membership of a new incarnation of `config.node_id` (not yet registered: call
    /// [`Membership::beat`] or [`Membership::run`]).
    #[must_use]
    pub fn new(store: Arc<dyn MembershipStore>, config: MembershipConfig) -> Membership {
        let info = NodeInfo {
            node_id: config.node_id,
            service: config.service,
            incarnation: new_incarnation(),
            addr: config.addr,
            sessions: None,
        };
        Membership {
            inner: Arc::new(Inner {
                store,
                info,
                heartbeat_interval: config.heartbeat_interval.max(Duration::from_millis(10)),
                node_timeout_ms: config.node_timeout_ms,
                owners: RwLock::new(Vec::new()),
                frontends: RwLock::new(Vec::new()),
                live: RwLock::new(Vec::new()),
                generation: watch::channel(0).0,
                last_beat: std::sync::Mutex::new(None),
                failure: std::sync::Mutex::new(None),
                in_flight: std::sync::Mutex::new(None),
                report: RwLock::new(None),
            }),
        }
    }

    /// This node as it registers itself.
    #[must_use]
    pub fn info(&self) -> &NodeInfo {
        &self.inner.info
    }

    /// This node's id.
    #[must_use]
    pub fn node_id(&self) -> &str {
        &self.inner.info.node_id
    }

    /// The liveness timeout, milliseconds.
    #[must_use]
    pub fn node_timeout_ms(&self) -> u64 {
        self.inner.node_timeout_ms
    }

    /// The store the membership lives in.
    #[must_use]
    pub fn store(&self) -> &Arc<dyn MembershipStore> {
        &self.inner.store
    }

    /// Makes every later beat write `report()` into this node's row (a frontend: its worker
    /// sessions). Called once per beat, so the others see it at most one interval late.
    pub fn report_with(&self, report: Report) {
        if let Ok(mut slot) = self.inner.report.write() {
            *slot = Some(report);
        }
    }

    /// Heartbeats once and caches the live nodes the same transaction read; a live set
    /// different from the last beat's (a node came, went, or restarted) bumps
    /// [`Membership::changes`].
    ///
    /// # Errors
    /// The store cannot be written or read.
    pub async fn beat(&self) -> Result<(), StoreError> {
        let gauge =
            orbit_metrics::get().node_membership.with_label_values(&[&self.inner.info.service]);
        let report = self.inner.report.read().ok().and_then(|r| r.clone());
        let timeout = self.inner.node_timeout_ms;
        if let Ok(mut started) = self.inner.in_flight.lock() {
            *started = Some(tokio::time::Instant::now());
        }
        let beat = match report {
            Some(report) => {
                let mut info = self.inner.info.clone();
                info.sessions = report();
                self.inner.store.beat_and_list(&info, timeout).await
            }
            None => self.inner.store.beat_and_list(&self.inner.info, timeout).await,
        };
        if let Ok(mut started) = self.inner.in_flight.lock() {
            *started = None;
        }
        let live = match beat {
            Ok(live) => live,
            Err(e) => {
                gauge.set(0);
                if let Ok(mut failure) = self.inner.failure.lock() {
                    *failure = Some(e.to_string());
                }
                return Err(e);
            }
        };
        if let Ok(mut last) = self.inner.last_beat.lock() {
            *last = Some(tokio::time::Instant::now());
        }
        if let Ok(mut failure) = self.inner.failure.lock() {
            *failure = None;
        }
        gauge.set(1);
        self.cache(&live);
        Ok(())
    }

    /// Caches `live` (every service): the owners for routing, the set for [`Membership::changes`].
    fn cache(&self, live: &[NodeRow]) {
        let owners: Vec<NodeRow> =
            live.iter().filter(|n| n.service == OWNER_SERVICE).cloned().collect();
        if let Ok(mut cached) = self.inner.owners.write() {
            *cached = owners;
        }
        let frontends = live.iter().filter(|n| n.service == FRONTEND_SERVICE);
        if let Ok(mut cached) = self.inner.frontends.write() {
            *cached = frontends.map(|n| n.node_id.clone()).collect();
        }
        let set: Vec<(String, String)> =
            live.iter().map(|n| (n.node_id.clone(), n.incarnation.clone())).collect();
        let changed = match self.inner.live.write() {
            Ok(mut cached) if *cached != set => {
                *cached = set;
                true
            }
            _ => false,
        };
        if changed {
            self.inner.generation.send_modify(|g| *g += 1);
        }
    }

    /// A receiver that sees a new value whenever a beat finds the live nodes (of any
    /// service, with their incarnations) different from the previous beat's: a node joined,
    /// left, went silent past the node timeout, or restarted. Waiters react to a death
    /// within the node timeout plus one heartbeat, with no query of their own.
    #[must_use]
    pub fn changes(&self) -> watch::Receiver<u64> {
        self.inner.generation.subscribe()
    }

    /// Why the last beat failed (the database is unreachable or refuses the write), or
    /// that the beat in flight has not answered for longer than `patience` (a database that
    /// hangs); `None` when the last one succeeded, or before the first one.
    #[must_use]
    pub fn beat_failure(&self, patience: Duration) -> Option<String> {
        let pending = self.inner.in_flight.lock().ok().and_then(|s| *s).map(|s| s.elapsed());
        if let Some(waited) = pending.filter(|w| *w > patience) {
            return Some(format!("the heartbeat has had no answer for {waited:?}"));
        }
        self.inner.failure.lock().ok().and_then(|f| f.clone())
    }

    /// Why this node does not hold its membership (`None`: it does): no beat has reached
    /// the store yet, or the last one is older than the node timeout, so the others may
    /// already count this node dead and take its work over.
    #[must_use]
    pub fn membership_problem(&self) -> Option<String> {
        let last = self.inner.last_beat.lock().ok().and_then(|l| *l);
        let timeout = Duration::from_millis(self.inner.node_timeout_ms);
        match last {
            None => Some("not registered in the nodes table yet".into()),
            Some(at) if at.elapsed() > timeout => Some(format!(
                "last heartbeat reached the store {:?} ago (node timeout {timeout:?})",
                at.elapsed()
            )),
            Some(_) => None,
        }
    }

    /// Reads the live owners again (by node id) and caches them.
    ///
    /// # Errors
    /// The store cannot be read; the cache keeps its previous value.
    pub async fn refresh(&self) -> Result<Vec<NodeRow>, StoreError> {
        let owners =
            self.inner.store.live_nodes(Some(OWNER_SERVICE), self.inner.node_timeout_ms).await?;
        if let Ok(mut cached) = self.inner.owners.write() {
            cached.clone_from(&owners);
        }
        Ok(owners)
    }

    /// The live owners as of the last beat or refresh, by node id.
    #[must_use]
    pub fn live_owners(&self) -> Vec<NodeRow> {
        self.inner.owners.read().map(|o| o.clone()).unwrap_or_default()
    }

    /// Whether `has` holds for every live frontend as of the last beat (an owner asks
    /// whether each holds a hand-off stream to it). True when none is live.
    #[must_use]
    pub fn every_frontend(&self, has: impl Fn(&str) -> bool) -> bool {
        self.inner.frontends.read().is_ok_and(|f| f.iter().all(|id| has(id)))
    }

    /// Heartbeats until `shutdown`, then deletes this node's row. Failures are logged and
    /// retried at the next tick.
    pub async fn run(&self, shutdown: CancellationToken) {
        let mut failing = false;
        loop {
            match self.beat().await {
                Ok(()) if failing => {
                    failing = false;
                    tracing::info!(node_id = %self.node_id(), "heartbeats reach the store again");
                }
                Ok(()) => {}
                Err(e) => {
                    // Logged once per outage, not once per beat.
                    if !failing {
                        tracing::warn!(node_id = %self.node_id(), error = %e, "heartbeat failed; retrying");
                    }
                    failing = true;
                }
            }
            tokio::select! {
                () = shutdown.cancelled() => break,
                () = tokio::time::sleep(self.inner.heartbeat_interval) => {}
            }
        }
        self.leave().await;
    }

    /// Deletes this node's row: the others see it dead at once.
    pub async fn leave(&self) {
        match self.inner.store.remove_node(self.node_id()).await {
            Ok(()) => tracing::info!(node_id = %self.node_id(), "left the cluster"),
            Err(e) => {
                tracing::warn!(node_id = %self.node_id(), error = %e, "cannot remove the node row; it expires by timeout")
            }
        }
    }
}

/// A new incarnation: the start time in microseconds, as decimal. It grows with every
/// restart (what `ClusterStatus` reports) and two starts of one node id never share it.
#[allow(clippy::disallowed_methods)] // An id that grows with every start, not a time reading.
fn new_incarnation() -> String {
    let micros = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_micros());
    micros.to_string()
}

#[cfg(test)]
mod tests {
    use super::*;
    use orbit_store::{SqliteStore, Store};

    async fn store(dir: &tempfile::TempDir) -> Arc<dyn Store> {
        Arc::new(SqliteStore::open_and_migrate(dir.path().join("m.db")).await.expect("store"))
    }

    fn config(node_id: &str, service: &str) -> MembershipConfig {
        MembershipConfig {
            node_id: node_id.into(),
            service: service.into(),
            addr: Some(format!("{node_id}.local:7234")),
            heartbeat_interval: Duration::from_millis(20),
            node_timeout_ms: 200,
        }
    }

    #[tokio::test]
    async fn a_running_node_is_live_until_it_leaves() {
        let dir = tempfile::tempdir().expect("dir");
        let store = store(&dir).await;
        let a = Membership::new(store.clone(), config("owner-a", "owner"));
        let f = Membership::new(store.clone(), config("frontend-1", "frontend"));
        let stop = CancellationToken::new();
        let runs = [
            tokio::spawn({
                let (a, stop) = (a.clone(), stop.clone());
                async move { a.run(stop).await }
            }),
            tokio::spawn({
                let (f, stop) = (f.clone(), stop.clone());
                async move { f.run(stop).await }
            }),
        ];
        tokio::time::sleep(Duration::from_millis(100)).await;
        // Only owners are cached, with the advertised address.
        let owners = f.live_owners();
        assert_eq!(owners.len(), 1);
        assert_eq!(owners[0].node_id, "owner-a");
        assert_eq!(owners[0].addr.as_deref(), Some("owner-a.local:7234"));
        assert_eq!(owners[0].incarnation, a.info().incarnation);
        // Heartbeats keep it live well past the timeout.
        tokio::time::sleep(Duration::from_millis(400)).await;
        assert_eq!(store.live_nodes(None, 200).await.expect("live").len(), 2);

        stop.cancel();
        for r in runs {
            r.await.expect("run");
        }
        assert!(store.list_nodes().await.expect("nodes").is_empty(), "both rows removed");
    }

    #[tokio::test]
    async fn each_beat_writes_the_current_report() {
        let dir = tempfile::tempdir().expect("dir");
        let store = store(&dir).await;
        let f = Membership::new(store.clone(), config("frontend-1", "frontend"));
        let count = Arc::new(std::sync::atomic::AtomicU32::new(0));
        f.report_with(Arc::new({
            let count = count.clone();
            move || {
                let n = count.fetch_add(1, std::sync::atomic::Ordering::SeqCst) + 1;
                Some(format!("beat {n}"))
            }
        }));
        let row = || async { store.list_nodes().await.expect("nodes").remove(0).sessions };
        f.beat().await.expect("beat");
        assert_eq!(row().await.as_deref(), Some("beat 1"));
        f.beat().await.expect("beat");
        assert_eq!(row().await.as_deref(), Some("beat 2"), "each beat asks again");
    }

    #[tokio::test]
    async fn a_node_that_stops_beating_drops_out_of_the_live_list() {
        let dir = tempfile::tempdir().expect("dir");
        let store = store(&dir).await;
        let a = Membership::new(store.clone(), config("owner-a", "owner"));
        let b = Membership::new(store.clone(), config("owner-b", "owner"));
        a.beat().await.expect("beat a");
        b.beat().await.expect("beat b");
        assert_eq!(b.live_owners().len(), 2);
        // `a` stops (no leave: a crash); `b` keeps beating and sees it go after the timeout.
        tokio::time::sleep(Duration::from_millis(300)).await;
        b.beat().await.expect("beat b");
        let live: Vec<String> = b.live_owners().into_iter().map(|n| n.node_id).collect();
        assert_eq!(live, vec!["owner-b".to_string()]);
        assert_eq!(store.list_nodes().await.expect("nodes").len(), 2, "the dead row stays");
    }

    #[tokio::test]
    async fn changes_follow_the_live_set_not_the_beats() {
        let dir = tempfile::tempdir().expect("dir");
        let store = store(&dir).await;
        let a = Membership::new(store.clone(), config("owner-a", "owner"));
        let f = Membership::new(store.clone(), config("frontend-1", "frontend"));
        let changes = f.changes();
        f.beat().await.expect("beat");
        assert_eq!(*changes.borrow(), 1, "the first beat finds a live set");
        f.beat().await.expect("beat");
        assert_eq!(*changes.borrow(), 1, "the same live set: no change");
        a.beat().await.expect("beat a");
        f.beat().await.expect("beat");
        assert_eq!(*changes.borrow(), 2, "an owner joined");
        assert_eq!(f.live_owners().len(), 1, "routing sees it from the same beat");
        // `a` goes silent (a crash): the beat after the timeout sees it gone.
        tokio::time::sleep(Duration::from_millis(300)).await;
        f.beat().await.expect("beat");
        assert_eq!(*changes.borrow(), 3, "the owner went silent");
        assert!(f.live_owners().is_empty());
        assert_eq!(f.beat_failure(Duration::from_secs(1)), None);
    }

    #[test]
    fn incarnations_grow() {
        let first: u128 = new_incarnation().parse().expect("number");
        std::thread::sleep(Duration::from_millis(2));
        let second: u128 = new_incarnation().parse().expect("number");
        assert!(second > first);
    }
}
