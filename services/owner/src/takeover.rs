//! Takeover: live owners take over the root trees of owners that stopped heartbeating.
//!
//! Each round (every `takeover_interval`, or, in the split, when the live nodes changed,
//! while orphans remain, and every `TAKEOVER_SAFETY_NET`; see `Owner::run_takeover`):
//! 1. at once after this process stalled for longer than the node timeout (paused,
//!    starved), when others may have taken its trees: prove every held execution through
//!    the write path — an empty commit fenced by the epoch held — and drop those the
//!    database refuses (the epoch check, not a read, decides); every few rounds otherwise,
//!    drop hot executions whose owners row no longer names this node (a cheap read that
//!    frees the memory and keeps them out of the inbox query; their commits would be
//!    fenced anyway);
//! 2. list orphaned roots (owned by a node with no live heartbeat, still with work); for
//!    each, rendezvous hashing of the root id over the live owners decides who takes it, so
//!    the dead node's work spreads and two live owners never compete for one tree;
//! 3. take the winner's trees one at a time (`epoch + 1` on every row of the tree, one
//!    transaction: the dead owner is fenced) and rebuild them from history.
//!
//! The epoch bump waits for commits that hold the old epoch (`FOR SHARE`). An owner paused
//! between the two round trips of a commit holds those locks until the database ends its
//! session, after `idle_in_transaction_session_timeout`, which the split services set to
//! the node timeout: by the time the others see the node dead its locks are gone or go
//! within about one heartbeat, so a round never waits much longer than that (a longer wait
//! is logged).

use crate::context::Inner;
use crate::error::OwnerError;
use crate::resume;
use orbit_cluster::{rendezvous, OWNER_SERVICE};
use orbit_store::{CommitBatch, StoreError};
use std::collections::HashSet;

/// Orphaned roots examined per round.
const ROUND_LIMIT: u32 = 256;

/// Rounds between two checks of the held executions against the owners table (the check
/// reads every id this node owns, so it runs less often than the cheap orphan query; a
/// stale copy that gets work sooner is dropped by its fenced commit anyway).
pub(crate) const RECONCILE_EVERY: u64 = 10;

/// What a round checks first about the executions this process holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Check {
    /// Nothing.
    None,
    /// Compare with the owners table (a read).
    Read,
    /// After a stall: an empty fenced commit per held execution.
    Fence,
}

/// What a round found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Round {
    /// Orphaned roots listed (this node's or others' to take): while any remain, the next
    /// tick runs another round.
    pub orphans: usize,
    /// Root trees this node took.
    pub taken: usize,
}

/// One takeover round, after `check` of the held executions.
pub(crate) async fn round(
    inner: &Inner,
    node_timeout_ms: u64,
    check: Check,
) -> Result<Round, OwnerError> {
    match check {
        Check::None => {}
        Check::Read => drop_lost(inner).await?,
        Check::Fence => fence_held(inner).await?,
    }
    let orphans = inner.store.orphaned_roots(node_timeout_ms, ROUND_LIMIT).await?;
    if orphans.is_empty() {
        return Ok(Round { orphans: 0, taken: 0 });
    }
    let listed = orphans.len();
    let live = inner.store.live_nodes(Some(OWNER_SERVICE), node_timeout_ms).await?;
    let me = inner.cfg.node_id.as_str();
    let mut taken = 0;
    for orphan in orphans {
        let winner = rendezvous::pick(&orphan.root_id, &live).map(|n| n.node_id.as_str());
        if winner != Some(me) {
            continue;
        }
        let began = tokio::time::Instant::now();
        let rows = inner.store.take_over_root(&orphan.root_id, &orphan.node_id, me).await?;
        let waited = began.elapsed();
        if waited.as_millis() > u128::from(node_timeout_ms / 2) {
            // The epoch bump waits for commits still holding the old epoch; a long wait means
            // the old owner left a transaction open (paused mid-commit) and every other
            // orphaned tree of this round waited too.
            tracing::warn!(node_id = %me, root_id = %orphan.root_id, from = %orphan.node_id, waited_ms = waited.as_millis(), "takeover waited for the old owner's row locks");
        }
        if rows.is_empty() {
            // Another node moved it first (it saw a different set of live owners).
            continue;
        }
        resume::adopt(inner, &orphan.root_id, &orphan.node_id, &rows).await?;
        taken += 1;
    }
    Ok(Round { orphans: listed, taken })
}

/// Proves each held execution with an empty commit fenced by the epoch this process holds;
/// drops those the database refuses (another owner took them at a higher epoch).
async fn fence_held(inner: &Inner) -> Result<(), OwnerError> {
    let mut core = inner.core.lock().await;
    let mut held: Vec<(String, u32, u64)> = core
        .hot
        .iter()
        .filter_map(|(id, h)| h.epoch.map(|e| (id.clone(), h.state.run, e)))
        .collect();
    held.sort();
    let mut lost = Vec::new();
    for (id, run, epoch) in held {
        let probe = CommitBatch {
            execution_id: id.clone(),
            run,
            expected_epoch: Some(epoch),
            ..CommitBatch::default()
        };
        match inner.store.commit(probe).await {
            Ok(_) => {}
            Err(StoreError::Fenced(_)) => lost.push(id),
            Err(e) => return Err(e.into()),
        }
    }
    for id in &lost {
        core.hot.remove(id);
        let now = inner.store.get_owner(id).await?.map_or(u64::MAX, |o| o.epoch);
        core.lost.insert(id.clone(), now);
    }
    if !lost.is_empty() {
        tracing::warn!(node_id = %inner.cfg.node_id, executions = ?lost, "after a stall: append refused by the epoch check (another owner took these executions over); dropped them from memory");
    }
    Ok(())
}

/// Drops hot executions this node no longer owns.
async fn drop_lost(inner: &Inner) -> Result<(), OwnerError> {
    // The core lock is held across the read so no pass adds an execution in between.
    let mut core = inner.core.lock().await;
    // Not for evicted records alone: reading every owned id to prune them is not worth a
    // query of its own (see below).
    if core.hot.is_empty() {
        return Ok(());
    }
    let owned: HashSet<String> =
        inner.store.owned_executions(&inner.cfg.node_id).await?.into_iter().collect();
    // Records of evicted executions no longer owned (closed, or taken by another node)
    // go too; one taken over by a newer process with this node id is still listed, and
    // its reload is fenced by the epoch its record holds (see `evict`).
    core.evicted.retain_owned(owned.iter());
    let mut lost: Vec<String> = core
        .hot
        .iter()
        .filter(|(id, h)| h.epoch.is_some() && !owned.contains(*id))
        .map(|(id, _)| id.clone())
        .collect();
    lost.sort();
    for id in &lost {
        core.hot.remove(id);
    }
    if !lost.is_empty() {
        tracing::warn!(node_id = %inner.cfg.node_id, executions = ?lost, "fenced: another owner took these executions over at a higher epoch; dropped them from memory");
    }
    Ok(())
}
