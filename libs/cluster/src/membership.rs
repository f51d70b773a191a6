//! [`Membership`]: this node's row in the `nodes` table and the live owners it sees.
//!
//! A node heartbeats every `heartbeat_interval`; the store's clock (the database clock on
//! PostgreSQL) stamps each beat, so liveness never depends on the clocks of the processes.
//! After each beat the list of live owners is read again and cached, because every start a
//! frontend or scheduler routes needs it. A failed beat (the database restarting) is
//! logged and retried at the next tick; the node simply looks dead to the others meanwhile.
//! On a clean shutdown the node deletes its row, so owners take over its work at once
//! instead of after the timeout.
//!
//! A node may report something with each beat ([`Membership::report_with`]): a frontend
//! writes a summary of its worker sessions into its row, so the others learn it from the
//! write the beat does anyway instead of asking on a timer of their own.

use orbit_store::{MembershipStore, NodeInfo, NodeRow, StoreError};
use std::sync::{Arc, RwLock};
use std::time::Duration;
use tokio_util::sync::CancellationToken;

/// The `service` name owners register under.
pub const OWNER_SERVICE: &str = "owner";

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
    /// When the last beat reached the store (process clock), for readiness.
    last_beat: std::sync::Mutex<Option<std::time::Instant>>,
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
                last_beat: std::sync::Mutex::new(None),
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

    /// Heartbeats once, then refreshes the cached live owners.
    ///
    /// # Errors
    /// The store cannot be written or read.
    pub async fn beat(&self) -> Result<(), StoreError> {
        let gauge =
            orbit_metrics::get().node_membership.with_label_values(&[&self.inner.info.service]);
        let report = self.inner.report.read().ok().and_then(|r| r.clone());
        let beat = match report {
            Some(report) => {
                let mut info = self.inner.info.clone();
                info.sessions = report();
                self.inner.store.heartbeat_node(&info).await
            }
            None => self.inner.store.heartbeat_node(&self.inner.info).await,
        };
        if let Err(e) = beat {
            gauge.set(0);
            return Err(e);
        }
        if let Ok(mut last) = self.inner.last_beat.lock() {
            *last = Some(std::time::Instant::now());
        }
        gauge.set(1);
        self.refresh().await?;
        Ok(())
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

    #[test]
    fn incarnations_grow() {
        let first: u128 = new_incarnation().parse().expect("number");
        std::thread::sleep(Duration::from_millis(2));
        let second: u128 = new_incarnation().parse().expect("number");
        assert!(second > first);
    }
}
