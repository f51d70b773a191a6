//! One process per node id: the check a service runs before it first heartbeats.
//!
//! Two processes sharing a node id would overwrite each other's `nodes` row and, as owners,
//! take each other's executions over back and forth (each start fences the other). So a
//! starting process looks at the id's row first:
//!
//! - no row, or a heartbeat older than the node timeout → the id is free;
//! - a live-looking row → it watches the row for at most one node timeout: a heartbeat
//!   that moves on (or a new incarnation) means another process runs the id → refused; a
//!   row that goes stale or is removed means its process died (a crash, SIGKILL) → free.
//!
//! So a process restarted after a crash comes back by itself, at most one node timeout
//! later, while a duplicated deployment fails at start. `take_over` skips the wait (the
//! operator knows the old process is gone, or wants it fenced). Liveness is judged by the
//! store's clock, as everywhere in membership. Two processes starting within the same
//! instant with a fresh id can both pass; the check guards against the common mistake (a
//! second deployment, a copy-pasted id), not against a deliberate race.

use orbit_store::{NodeRow, Nodes, StoreError};
use std::time::Duration;

/// Another process heartbeats the node id.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NodeIdInUse {
    /// What its row said when it was seen beating.
    pub row: NodeRow,
}

impl std::fmt::Display for NodeIdInUse {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let r = &self.row;
        write!(
            f,
            "node id {} is in use: a live {} process (incarnation {}, at {}) heartbeats it; \
             refusing to start a second process with the same id. Stop the other process, \
             start this one with another --node-id, or pass --take-over (ORBIT_TAKE_OVER=true) \
             if the other process is gone for good",
            r.node_id,
            r.service,
            r.incarnation,
            r.addr.as_deref().unwrap_or("no address"),
        )
    }
}

/// Why the node id may not be used.
#[derive(Debug, thiserror::Error)]
pub enum IdentityError {
    /// Another process runs it.
    #[error("{0}")]
    InUse(NodeIdInUse),
    /// The `nodes` table cannot be read.
    #[error("cannot read the nodes table: {0}")]
    Store(#[from] StoreError),
}

/// How the node id came to be free.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum NodeIdClaim {
    /// No row, or one already stale.
    Free,
    /// A row that looked live stopped heartbeating (its process died) within the wait.
    Stale {
        /// How long the check watched it.
        waited: Duration,
    },
    /// A live row, taken over on request without waiting.
    TakenOver,
}

/// Decides whether this process may run `node_id` (see the module docs). `poll` is how
/// often the row is read while waiting (this node's heartbeat interval is a good value).
///
/// # Errors
/// [`IdentityError::InUse`] when another process heartbeats the id; [`IdentityError::Store`]
/// when the table cannot be read.
pub async fn claim_node_id(
    store: &dyn Nodes,
    node_id: &str,
    node_timeout_ms: u64,
    poll: Duration,
    take_over: bool,
) -> Result<NodeIdClaim, IdentityError> {
    let Some(first) = row(store, node_id).await? else { return Ok(NodeIdClaim::Free) };
    if !live(store, node_id, node_timeout_ms).await? {
        return Ok(NodeIdClaim::Free);
    }
    if take_over {
        return Ok(NodeIdClaim::TakenOver);
    }
    tracing::info!(
        node_id,
        incarnation = %first.incarnation,
        node_timeout_ms,
        "the node id heartbeated recently; waiting to see whether its process is alive"
    );
    let poll =
        poll.clamp(Duration::from_millis(10), Duration::from_millis(node_timeout_ms.max(10)));
    let started = tokio::time::Instant::now();
    // A row that neither moves nor goes stale is dead by definition after one timeout; the
    // bound only guards against a clock that misbehaves.
    let bound = Duration::from_millis(node_timeout_ms).saturating_mul(2) + poll;
    loop {
        tokio::time::sleep(poll).await;
        let waited = started.elapsed();
        let Some(now) = row(store, node_id).await? else {
            return Ok(NodeIdClaim::Stale { waited });
        };
        if now.heartbeat_at_ms > first.heartbeat_at_ms || now.incarnation != first.incarnation {
            return Err(IdentityError::InUse(NodeIdInUse { row: now }));
        }
        if !live(store, node_id, node_timeout_ms).await? || waited >= bound {
            return Ok(NodeIdClaim::Stale { waited });
        }
    }
}

async fn row(store: &dyn Nodes, node_id: &str) -> Result<Option<NodeRow>, StoreError> {
    Ok(store.list_nodes().await?.into_iter().find(|n| n.node_id == node_id))
}

async fn live(store: &dyn Nodes, node_id: &str, timeout_ms: u64) -> Result<bool, StoreError> {
    Ok(store.live_nodes(None, timeout_ms).await?.iter().any(|n| n.node_id == node_id))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{Membership, MembershipConfig};
    use orbit_store::{SqliteStore, Store};
    use std::sync::Arc;
    use tokio_util::sync::CancellationToken;

    const TIMEOUT_MS: u64 = 300;
    const POLL: Duration = Duration::from_millis(20);

    async fn store(dir: &tempfile::TempDir) -> Arc<dyn Store> {
        Arc::new(SqliteStore::open_and_migrate(dir.path().join("i.db")).await.expect("store"))
    }

    fn member(store: &Arc<dyn Store>, node_id: &str) -> Membership {
        Membership::new(
            store.clone(),
            MembershipConfig {
                node_id: node_id.into(),
                service: "owner".into(),
                addr: Some("127.0.0.1:1".into()),
                heartbeat_interval: Duration::from_millis(30),
                node_timeout_ms: TIMEOUT_MS,
            },
        )
    }

    #[tokio::test]
    async fn an_unknown_or_stale_id_is_free() {
        let dir = tempfile::tempdir().expect("dir");
        let store = store(&dir).await;
        let claim = claim_node_id(store.as_ref(), "owner-1", TIMEOUT_MS, POLL, false).await;
        assert_eq!(claim.expect("free"), NodeIdClaim::Free);
        member(&store, "owner-1").beat().await.expect("beat");
        tokio::time::sleep(Duration::from_millis(TIMEOUT_MS + 50)).await;
        let claim = claim_node_id(store.as_ref(), "owner-1", TIMEOUT_MS, POLL, false).await;
        assert_eq!(claim.expect("stale"), NodeIdClaim::Free);
    }

    #[tokio::test]
    async fn a_beating_id_is_refused_unless_taken_over() {
        let dir = tempfile::tempdir().expect("dir");
        let store = store(&dir).await;
        let alive = member(&store, "owner-1");
        let stop = CancellationToken::new();
        let run = tokio::spawn({
            let (alive, stop) = (alive.clone(), stop.clone());
            async move { alive.run(stop).await }
        });
        tokio::time::sleep(Duration::from_millis(50)).await;
        let claim = claim_node_id(store.as_ref(), "owner-1", TIMEOUT_MS, POLL, false).await;
        let Err(IdentityError::InUse(in_use)) = claim else { panic!("refused: {claim:?}") };
        assert_eq!(in_use.row.incarnation, alive.info().incarnation);
        let message = in_use.to_string();
        assert!(message.contains("node id owner-1 is in use"), "{message}");
        let claim = claim_node_id(store.as_ref(), "owner-1", TIMEOUT_MS, POLL, true).await;
        assert_eq!(claim.expect("take over"), NodeIdClaim::TakenOver);
        stop.cancel();
        run.await.expect("run");
    }

    #[tokio::test]
    async fn a_crashed_process_is_waited_out() {
        let dir = tempfile::tempdir().expect("dir");
        let store = store(&dir).await;
        // One beat, then silence: a process killed right after it beat.
        member(&store, "owner-1").beat().await.expect("beat");
        let claim = claim_node_id(store.as_ref(), "owner-1", TIMEOUT_MS, POLL, false).await;
        let Ok(NodeIdClaim::Stale { waited }) = claim else { panic!("stale: {claim:?}") };
        assert!(waited <= Duration::from_millis(TIMEOUT_MS * 2 + 100), "{waited:?}");
    }
}
