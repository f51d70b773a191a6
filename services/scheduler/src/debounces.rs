//! Firing debounced starts (`dedupe: {keep: last}`; docs/flow-control.md, "Debounce and
//! singleton starts"): the scheduler's third duty beside timers and schedules.
//!
//! Each pass moves the debounces due now to the fires and leases them
//! (`StartDedupe::claim_debounce_fires`: schedulers take disjoint rows), then starts each
//! execution through the owner's normal start path with its reserved id and the last
//! start's request. The owner is idempotent by id, so a fire retried after a crash or a
//! lost lease starts nothing twice. A started (or permanently refused: the workflow
//! version was deleted, the input no longer fits) fire is forgotten; a transient failure
//! (no owner reachable) is left to be claimed again when its lease runs out.

use orbit_api::internal::v1 as pb;
use orbit_api::internal::v1::owner_service_server::OwnerService;
use orbit_store::{DebounceFire, SchedulerStore, StoreError};
use std::sync::Arc;
use tonic::{Code, Request};

/// How long a claim on a fire lasts: a scheduler that dies mid-fire delays the execution's
/// creation by at most this much.
pub const LEASE_MS: u64 = 5_000;

/// Fires claimed per pass.
pub(crate) const BATCH: u32 = 256;

/// What one scheduler needs to fire debounces.
#[derive(Clone)]
pub(crate) struct Firing {
    pub(crate) store: Arc<dyn SchedulerStore>,
    pub(crate) owner: Arc<dyn OwnerService>,
}

impl Firing {
    /// Claims and fires what is due at `now`; how many fires were claimed.
    pub(crate) async fn pass(&self, now: u64) -> Result<usize, StoreError> {
        // A read first: the claim is a write, and most wake-ups have no debounce due.
        match self.store.next_debounce_at().await? {
            Some(at) if at <= now => {}
            _ => return Ok(0),
        }
        let fires = self.store.claim_debounce_fires(now, LEASE_MS, BATCH).await?;
        let claimed = fires.len();
        let mut set = tokio::task::JoinSet::new();
        for fire in fires {
            let me = self.clone();
            set.spawn(async move { me.fire(fire).await });
        }
        while let Some(done) = set.join_next().await {
            if let Err(e) = done {
                tracing::warn!(error = %e, "a debounce fire panicked");
            }
        }
        Ok(claimed)
    }

    async fn fire(&self, fire: DebounceFire) {
        let request = pb::StartExecutionRequest {
            execution_id: fire.execution_id.clone(),
            workflow: fire.workflow.clone(),
            version: fire.version.clone(),
            definition_hash: fire.definition_hash.clone(),
            input: Some(orbit_server_kit::payload::json_to_proto(fire.input.clone())),
            // The last start's memo goes with its input.
            memo: fire.memo.clone().and_then(orbit_server_kit::payload::object_to_struct),
            priority: fire.priority,
            ..pb::StartExecutionRequest::default()
        };
        let id = &fire.execution_id;
        match self.owner.start_execution(Request::new(request)).await {
            Ok(started) => {
                let created = started.into_inner().created;
                tracing::info!(workflow = %fire.workflow, execution_id = %id, created, "debounced start fired");
            }
            Err(status) if transient(status.code()) => {
                tracing::warn!(execution_id = %id, error = %status.message(), "debounced start failed; retrying after its lease");
                return;
            }
            Err(status) => {
                tracing::error!(workflow = %fire.workflow, execution_id = %id, code = ?status.code(), error = %status.message(), "debounced start refused; dropped");
            }
        }
        if let Err(e) = self.store.finish_debounce_fire(id).await {
            tracing::warn!(execution_id = %id, error = %e, "cannot forget a fired debounce; it fires again (idempotent)");
        }
    }
}

/// Whether a failed start may succeed on a retry.
fn transient(code: Code) -> bool {
    !matches!(
        code,
        Code::NotFound | Code::InvalidArgument | Code::FailedPrecondition | Code::AlreadyExists
    )
}
