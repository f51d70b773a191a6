//! Claims whose frontend is gone: handing them back so their attempts are redelivered.
//!
//! A claim lives on the frontend that holds the worker's stream. When that frontend dies
//! (or restarts with the same node id) the stream is gone, so each attempt it still held is
//! released with `Store::release_claims`: the row becomes cancelled and one `uncertain`
//! inbox entry is written for its owner, in one transaction, so two frontends sweeping the
//! same dead claimer never release a row twice. The owner then redelivers the attempt with
//! the same idempotency key; a result the worker still sends for the old token (through any
//! frontend: results are found by token) is recorded, and the owner decides (rule 4).

use crate::Shared;
use orbit_api::internal::v1::OwnerServiceWakeRequest;
use orbit_store::StoreError;
use std::time::Duration;
use tokio_util::sync::CancellationToken;

/// Why released attempts became uncertain.
const REASON: &str = "SESSION_LOST";

/// Releases `claimer`'s claims and wakes the owners of the executions concerned; returns
/// how many rows were released.
async fn release(shared: &Shared, claimer: &str) -> Result<usize, StoreError> {
    let released = shared.store.release_claims(claimer, REASON).await?;
    if released.is_empty() {
        return Ok(0);
    }
    let mut executions: Vec<String> = released.iter().map(|t| t.execution_id.clone()).collect();
    executions.sort();
    executions.dedup();
    let wake = OwnerServiceWakeRequest { execution_ids: executions };
    if let Err(e) = shared.owner.wake(tonic::Request::new(wake)).await {
        // The entries are durable; the owner finds them at its next pass anyway.
        tracing::warn!(error = %e, "cannot wake the owner after handing back claims");
    }
    Ok(released.len())
}

/// At start: the claims a previous run of this node id left.
pub(crate) async fn recover(shared: &Shared) -> Result<usize, StoreError> {
    let n = release(shared, &shared.config.node_id).await?;
    if n > 0 {
        tracing::info!(count = n, node_id = %shared.config.node_id, "claims of a previous run handed back as uncertain");
    }
    Ok(n)
}

/// One sweep over the claims of dead frontends.
pub(crate) async fn sweep(shared: &Shared, node_timeout_ms: u64) -> Result<usize, StoreError> {
    let mut total = 0;
    for claimer in shared.store.orphaned_claimers(node_timeout_ms).await? {
        // This frontend's own streams are alive whatever its heartbeat says (it may have
        // lapsed while the database was away): never release them here.
        if claimer == shared.config.node_id {
            continue;
        }
        let n = release(shared, &claimer).await?;
        if n > 0 {
            tracing::info!(count = n, claimer = %claimer, "claims of a dead frontend handed back as uncertain");
        }
        total += n;
    }
    Ok(total)
}

/// Sweeps every `interval` until `shutdown`.
pub(crate) async fn sweep_until(
    shared: &Shared,
    node_timeout_ms: u64,
    interval: Duration,
    shutdown: CancellationToken,
) {
    loop {
        if let Err(e) = sweep(shared, node_timeout_ms).await {
            tracing::warn!(error = %e, "sweeping the claims of dead frontends failed");
        }
        tokio::select! {
            () = shutdown.cancelled() => break,
            () = tokio::time::sleep(interval) => {}
        }
    }
}

/// Sweeps at once, then on every change of `changes` (the live nodes), at least every
/// `safety_net`, and a second after a failed sweep, until `shutdown`.
pub(crate) async fn sweep_on(
    shared: &Shared,
    node_timeout_ms: u64,
    mut changes: tokio::sync::watch::Receiver<u64>,
    safety_net: Duration,
    shutdown: CancellationToken,
) {
    loop {
        let wait = match sweep(shared, node_timeout_ms).await {
            Ok(_) => safety_net,
            Err(e) => {
                tracing::warn!(error = %e, "sweeping the claims of dead frontends failed");
                safety_net.min(RETRY)
            }
        };
        tokio::select! {
            () = shutdown.cancelled() => break,
            changed = changes.changed() => {
                if changed.is_err() {
                    // The membership stopped (shutting down): the safety net alone remains.
                    tokio::select! {
                        () = shutdown.cancelled() => break,
                        () = tokio::time::sleep(wait) => {}
                    }
                }
            }
            () = tokio::time::sleep(wait) => {}
        }
    }
}

/// The pause before a failed sweep is tried again.
const RETRY: Duration = Duration::from_secs(1);
