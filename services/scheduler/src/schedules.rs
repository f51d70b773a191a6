//! Firing schedules: the scheduler's second duty beside timers.
//!
//! Each pass claims the due rows for a lease (`Schedules::claim_due_schedules`: any number
//! of schedulers take disjoint rows), decides each with the pure `orbit_schedule::plan`
//! (catch-up, overlap, remaining actions), starts every execution through the owner's
//! normal start path with the id `<schedule-id>:<occurrence RFC 3339>` — so a fire retried
//! after a crash or by another scheduler after the lease ran out starts nothing twice — and
//! records the progress only while it still holds the claim. A transient start failure
//! (no owner reachable) releases the claim to retry shortly without moving the schedule;
//! a permanent one (`WORKFLOW_NOT_FOUND`, a bad input) is recorded as `last_error` and the
//! schedule goes on.

use orbit_api::internal::v1 as pb;
use orbit_api::internal::v1::owner_service_server::OwnerService;
use orbit_schedule::{execution_id, plan, Prior, ScheduleDef, Spec, Tick};
use orbit_store::inbox::{Cancel, Terminate};
use orbit_store::{InboxMessage, ScheduleFire, ScheduleRow, SchedulerStore, StoreError};
use std::sync::Arc;
use tonic::{Code, Request};

/// How long a claim on a schedule lasts: a scheduler that dies or stops holding one delays
/// the schedule by at most this much (then another one takes it; ids stay the same).
pub const LEASE_MS: u64 = 5_000;

/// Schedules claimed per pass.
pub(crate) const BATCH: u32 = 256;

/// Retry delay after a transient start failure.
const RETRY_MS: u64 = 1_000;

/// Retry delay for a row whose stored definition cannot be read.
const BROKEN_RETRY_MS: u64 = 60_000;

/// What one scheduler needs to fire schedules.
#[derive(Clone)]
pub(crate) struct Firing {
    pub(crate) node_id: String,
    pub(crate) store: Arc<dyn SchedulerStore>,
    pub(crate) owner: Arc<dyn OwnerService>,
}

/// Whether a failed start may succeed on a retry.
fn transient(code: Code) -> bool {
    !matches!(
        code,
        Code::NotFound | Code::InvalidArgument | Code::FailedPrecondition | Code::AlreadyExists
    )
}

impl Firing {
    /// Claims and fires what is due at `now`; returns how many rows were claimed.
    pub(crate) async fn pass(&self, now: u64) -> Result<usize, StoreError> {
        // A read first: the claim is a write (on SQLite a group commit), and most wake-ups
        // of the loop are for timers, with no schedule due.
        match self.store.next_schedule_due_at().await? {
            Some(at) if at <= now => {}
            _ => return Ok(0),
        }
        let rows = self.store.claim_due_schedules(now, &self.node_id, LEASE_MS, BATCH).await?;
        let claimed = rows.len();
        // Rows are independent: fire them side by side (1,000 due in one second should not
        // wait for each other's start round trip).
        let mut set = tokio::task::JoinSet::new();
        for row in rows {
            let me = self.clone();
            set.spawn(async move { me.fire(row, now).await });
        }
        while let Some(done) = set.join_next().await {
            if let Err(e) = done {
                tracing::warn!(error = %e, "a schedule fire panicked");
            }
        }
        Ok(claimed)
    }

    async fn release(&self, row: &ScheduleRow, retry_at: u64, error: &str, now: u64) {
        let id = &row.schedule_id;
        match self.store.release_schedule_claim(id, &self.node_id, retry_at, error, now).await {
            Ok(_) => {}
            Err(e) => tracing::warn!(schedule = %id, error = %e, "cannot release a schedule claim"),
        }
    }

    /// Fires one claimed row (see the module docs).
    async fn fire(&self, row: ScheduleRow, now: u64) {
        let compiled = ScheduleDef::from_json(&row.spec)
            .map_err(|e| e.to_string())
            .and_then(|def| Spec::compile(&def.spec).map(|s| (def, s)).map_err(|e| e.to_string()));
        let (def, spec) = match compiled {
            Ok(found) => found,
            Err(e) => {
                tracing::warn!(schedule = %row.schedule_id, error = %e, "unreadable schedule");
                self.release(&row, now + BROKEN_RETRY_MS, &format!("INTERNAL: {e}"), now).await;
                return;
            }
        };
        // Whether the last execution still runs, and whether it failed (pause on failure).
        let needs_status = def.spec.pause_on_failure
            || !matches!(def.spec.overlap, orbit_schedule::Overlap::AllowAll);
        let mut running = false;
        let mut failed = None;
        if let (true, Some(last)) = (needs_status, row.last_execution_id.as_deref()) {
            match self.store.get_execution(last).await {
                Ok(Some(e)) => {
                    running = !e.status.is_closed();
                    let name = e.status.as_str();
                    if name == "FAILED" || name == "TIMED_OUT" {
                        failed = Some(format!("execution {last} ended {name}"));
                    }
                }
                Ok(None) => {}
                Err(e) => {
                    self.release(&row, now + RETRY_MS, &format!("UNAVAILABLE: {e}"), now).await;
                    return;
                }
            }
        }
        // Pause on failure, once per failed execution (a resume must not pause again).
        if let Some(note) = failed
            .filter(|n| def.spec.pause_on_failure && row.last_error.as_deref() != Some(n.as_str()))
        {
            let fire = ScheduleFire {
                schedule_id: row.schedule_id.clone(),
                claimer: self.node_id.clone(),
                next_fire_at_ms: row.next_fire_at_ms,
                due_at_ms: row.due_at_ms,
                last_error: Some(note.clone()),
                remaining: row.remaining,
                buffered: row.buffered.clone(),
                pause: Some(format!("paused on failure: {note}")),
                now_ms: now,
                ..ScheduleFire::default()
            };
            self.finish(&fire).await;
            return;
        }
        let decided = plan(&Tick {
            schedule_id: &row.schedule_id,
            spec: &spec,
            def: &def.spec,
            now_ms: now,
            next_fire_ms: row.next_fire_at_ms,
            running,
            buffered: &row.buffered,
            remaining: row.remaining,
        });
        let mut fire = ScheduleFire {
            schedule_id: row.schedule_id.clone(),
            claimer: self.node_id.clone(),
            next_fire_at_ms: decided.next_fire_ms,
            due_at_ms: decided.due_ms,
            last_fire_at_ms: decided.last_fire_ms,
            skipped: decided.skipped,
            remaining: decided.remaining,
            buffered: decided.buffered.clone(),
            last_error: None,
            now_ms: now,
            ..ScheduleFire::default()
        };
        let mut previous = row.last_execution_id.clone();
        for start in &decided.starts {
            if let (Some(prior), true) = (previous.as_deref(), start.prior != Prior::Keep) {
                self.stop(prior, start.prior, &row.schedule_id).await;
            }
            let id = execution_id(&row.schedule_id, start.occurrence_ms);
            match self.start(&row.schedule_id, &def, &id).await {
                Ok(_created) => {
                    // Counted whether or not this call created it: an execution that
                    // already exists was started by an earlier attempt at this very
                    // occurrence whose record never landed (crash, lost lease).
                    fire.fired += 1;
                    fire.last_execution_id = Some(id.clone());
                    previous = Some(id);
                }
                Err(status) if transient(status.code()) => {
                    // Nothing moves: the retry plans the same occurrences, and the ones
                    // already started come back as existing.
                    let error = format!("{:?}: {}", status.code(), status.message());
                    tracing::warn!(schedule = %row.schedule_id, execution_id = %id, %error, "schedule start failed; retrying");
                    self.release(&row, now + RETRY_MS, &error, now).await;
                    return;
                }
                Err(status) => {
                    let code = orbit_server_kit::OrbitError::from_status(&status).map_or_else(
                        || format!("{:?}", status.code()),
                        |e| e.code.as_str().to_string(),
                    );
                    tracing::warn!(schedule = %row.schedule_id, execution_id = %id, code, message = status.message(), "schedule start refused");
                    fire.last_error = Some(format!("{code}: {}", status.message()));
                    fire.skipped += 1;
                }
            }
        }
        self.finish(&fire).await;
    }

    async fn finish(&self, fire: &ScheduleFire) {
        match self.store.finish_schedule_fire(fire).await {
            Ok(true) => {}
            Ok(false) => {
                tracing::info!(schedule = %fire.schedule_id, "schedule claim lost (lease ran out, updated or deleted); its starts were idempotent")
            }
            Err(e) => {
                tracing::warn!(schedule = %fire.schedule_id, error = %e, "cannot record a schedule fire; it fires again after the lease")
            }
        }
    }

    /// Starts one execution through the owner; `true` when this call created it.
    async fn start(
        &self,
        schedule_id: &str,
        def: &ScheduleDef,
        id: &str,
    ) -> Result<bool, tonic::Status> {
        let request = pb::StartExecutionRequest {
            execution_id: id.to_string(),
            workflow: def.action.workflow.clone(),
            version: def.action.version.clone(),
            input: Some(orbit_server_kit::payload::json_to_proto(def.action.input.clone())),
            schedule_id: schedule_id.to_string(),
            ..pb::StartExecutionRequest::default()
        };
        let response = self.owner.start_execution(Request::new(request)).await?;
        Ok(response.into_inner().created)
    }

    /// Cancels or terminates the execution an overlap policy replaces (an inbox entry for
    /// its owner, then a wake-up; the owner ignores it for a closed execution).
    async fn stop(&self, execution_id: &str, prior: Prior, schedule_id: &str) {
        let message = match prior {
            Prior::Cancel => InboxMessage::Cancel(Cancel {
                reason: format!("replaced by schedule {schedule_id} (CANCEL_PREVIOUS)"),
                request_id: None,
            }),
            Prior::Terminate => InboxMessage::Terminate(Terminate {
                reason: format!("replaced by schedule {schedule_id} (TERMINATE_PREVIOUS)"),
                request_id: None,
            }),
            Prior::Keep => return,
        };
        if let Err(e) = self.store.enqueue_inbox(execution_id, &message).await {
            tracing::warn!(execution_id, error = %e, "cannot stop the previous execution");
            return;
        }
        let wake = pb::OwnerServiceWakeRequest { execution_ids: vec![execution_id.to_string()] };
        if let Err(e) = self.owner.wake(Request::new(wake)).await {
            tracing::warn!(execution_id, error = %e, "cannot wake the owner");
        }
    }
}
