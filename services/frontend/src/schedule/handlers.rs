//! The handlers of `ScheduleService`: validation, the restricted caller's workflow check,
//! the store, and starts through the owner (trigger, backfill) with the schedule's ids.

use super::convert::{action_def, overlap_of, schedule_id, schedule_message, spec_def};
use super::ScheduleApi;
use crate::error::{err, ApiResult, FrontendError};
use crate::scope::Scope;
use orbit_api::internal::v1 as internal;
use orbit_api::v1::{
    BackfillScheduleRequest, BackfillScheduleResponse, CreateScheduleRequest,
    CreateScheduleResponse, ListSchedulesRequest, ListSchedulesResponse, PreviewScheduleRequest,
    PreviewScheduleResponse, Schedule, TriggerScheduleRequest, TriggerScheduleResponse,
    UpdateScheduleRequest,
};
use orbit_auth::Action;
use orbit_schedule::{execution_id, jitter_ms, rfc3339, Overlap, ScheduleDef, Spec};
use orbit_server_kit::payload::{json_to_proto, ms_to_timestamp, timestamp_to_ms};
use orbit_server_kit::validate::{self as rules, invalid};
use orbit_server_kit::{ErrorCode, OrbitError};
use orbit_store::inbox::{Cancel, Terminate};
use orbit_store::{InboxMessage, ScheduleRow, ScheduleUpdate};

/// Occurrences one backfill may start.
const MAX_BACKFILL: usize = 1_000;

fn missing(id: &str) -> FrontendError {
    err(ErrorCode::ScheduleNotFound, format!("schedule `{id}` does not exist"))
}

impl ScheduleApi {
    /// A stored schedule the caller may see; one of a workflow outside a restricted
    /// caller's patterns is answered as missing (as executions are).
    pub(crate) async fn visible(&self, scope: &Scope, id: &str) -> ApiResult<ScheduleRow> {
        let row = self.shared.store.get_schedule(id).await?;
        match row {
            Some(row) if scope.sees(&row.workflow) => Ok(row),
            Some(row) => {
                tracing::warn!(schedule = id, workflow = %row.workflow, "refused: schedule of a workflow outside the identity's patterns (answered as not found)");
                Err(missing(id))
            }
            None => Err(missing(id)),
        }
    }

    fn changed(&self) {
        self.wake.notify_one();
    }

    pub(crate) async fn create(
        &self,
        scope: &Scope,
        req: CreateScheduleRequest,
    ) -> ApiResult<CreateScheduleResponse> {
        let id = schedule_id(&req.schedule_id)?.to_string();
        let action = action_def(req.action, self.shared.config.max_payload_bytes)?;
        scope.workflow(Action::Admin, &action.workflow)?;
        let (spec, compiled) = spec_def(req.spec)?;
        let version = (!action.version.is_empty()).then_some(action.version.as_str());
        let exists = self.shared.store.get_definition(&action.workflow, version);
        if exists.await?.is_none() {
            return Err(err(
                ErrorCode::WorkflowNotFound,
                format!("workflow `{}` is not registered", action.workflow),
            ));
        }
        let def = ScheduleDef { spec, action };
        let now = self.now_ms();
        let next = compiled.next_after(now);
        let row = ScheduleRow {
            schedule_id: id.clone(),
            workflow: def.action.workflow.clone(),
            spec: def.to_json(),
            paused: req.paused,
            next_fire_at_ms: next,
            due_at_ms: next.map(|n| n + jitter_ms(&id, n, compiled.jitter_bound_ms())),
            remaining: def.spec.remaining_actions,
            created_at_ms: now,
            updated_at_ms: now,
            ..ScheduleRow::default()
        };
        let (stored, created) = self.shared.store.create_schedule(&row).await?;
        if !created && (stored.spec != row.spec || !scope.sees(&stored.workflow)) {
            return Err(err(
                ErrorCode::ScheduleExists,
                format!("schedule `{id}` exists with a different spec or action"),
            ));
        }
        if created {
            self.changed();
        }
        Ok(CreateScheduleResponse { schedule: Some(schedule_message(&stored)), created })
    }

    pub(crate) async fn get(&self, scope: &Scope, id: &str) -> ApiResult<Schedule> {
        let id = schedule_id(id)?;
        Ok(schedule_message(&self.visible(scope, id).await?))
    }

    pub(crate) async fn list(
        &self,
        scope: &Scope,
        req: ListSchedulesRequest,
    ) -> ApiResult<ListSchedulesResponse> {
        let workflow = rules::optional("workflow", &req.workflow)?;
        if let Some(w) = workflow {
            scope.workflow(Action::Read, w)?;
        }
        let size = crate::validate::page_size(req.page_size, 100, 1000);
        let after = (!req.page_token.is_empty()).then_some(req.page_token.as_str());
        let limit = u32::try_from(size + 1).unwrap_or(1001);
        let mut rows = self.shared.store.list_schedules(workflow, after, limit).await?;
        let more = rows.len() > size;
        rows.truncate(size);
        let next_page_token = if more {
            rows.last().map(|r| r.schedule_id.clone()).unwrap_or_default()
        } else {
            String::new()
        };
        let schedules =
            rows.iter().filter(|r| scope.sees(&r.workflow)).map(schedule_message).collect();
        Ok(ListSchedulesResponse { schedules, next_page_token })
    }

    pub(crate) async fn update(
        &self,
        scope: &Scope,
        req: UpdateScheduleRequest,
    ) -> ApiResult<Schedule> {
        let id = schedule_id(&req.schedule_id)?.to_string();
        let action = action_def(req.action, self.shared.config.max_payload_bytes)?;
        scope.workflow(Action::Admin, &action.workflow)?;
        let (spec, compiled) = spec_def(req.spec)?;
        self.visible(scope, &id).await?;
        let def = ScheduleDef { spec, action };
        let now = self.now_ms();
        let next = compiled.next_after(now);
        let update = ScheduleUpdate {
            schedule_id: id.clone(),
            workflow: def.action.workflow.clone(),
            spec: def.to_json(),
            next_fire_at_ms: next,
            due_at_ms: next.map(|n| n + jitter_ms(&id, n, compiled.jitter_bound_ms())),
            remaining: def.spec.remaining_actions,
            now_ms: now,
        };
        let row = self.shared.store.update_schedule(&update).await?;
        let row = row.ok_or_else(|| missing(&id))?;
        self.changed();
        Ok(schedule_message(&row))
    }

    pub(crate) async fn set_paused(
        &self,
        scope: &Scope,
        id: &str,
        paused: bool,
        note: &str,
    ) -> ApiResult<Schedule> {
        let id = schedule_id(id)?;
        let row = self.visible(scope, id).await?;
        scope.workflow(Action::Admin, &row.workflow)?;
        if row.paused == paused && (!paused || note.is_empty() || row.note == note) {
            return Ok(schedule_message(&row));
        }
        let found = self.shared.store.set_schedule_paused(id, paused, note, self.now_ms()).await;
        let row = found?.ok_or_else(|| missing(id))?;
        if !paused {
            self.changed();
        }
        Ok(schedule_message(&row))
    }

    pub(crate) async fn delete(&self, scope: &Scope, id: &str) -> ApiResult<()> {
        let id = schedule_id(id)?;
        let row = self.visible(scope, id).await?;
        scope.workflow(Action::Admin, &row.workflow)?;
        if !self.shared.store.delete_schedule(id).await? {
            return Err(missing(id));
        }
        Ok(())
    }

    /// Starts one execution of the schedule's action through the owner; `created` as the
    /// owner answers.
    async fn start(&self, schedule: &str, def: &ScheduleDef, id: &str) -> ApiResult<bool> {
        let request = internal::StartExecutionRequest {
            execution_id: id.to_string(),
            workflow: def.action.workflow.clone(),
            version: def.action.version.clone(),
            input: Some(json_to_proto(def.action.input.clone())),
            schedule_id: schedule.to_string(),
            ..internal::StartExecutionRequest::default()
        };
        let started = self.shared.owner.start_execution(tonic::Request::new(request)).await;
        let created = started.map_err(FrontendError::Owner)?.into_inner().created;
        if created {
            self.shared.store.record_schedule_start(schedule, id, self.now_ms()).await?;
        }
        Ok(created)
    }

    pub(crate) async fn trigger(
        &self,
        scope: &Scope,
        req: TriggerScheduleRequest,
    ) -> ApiResult<TriggerScheduleResponse> {
        let id = schedule_id(&req.schedule_id)?;
        let row = self.visible(scope, id).await?;
        scope.workflow(Action::Start, &row.workflow)?;
        let def = stored(&row)?;
        let execution_id = match req.execution_id.as_str() {
            "" => format!("{id}:{}", rfc3339(self.now_ms())),
            given => rules::new_execution_id("execution_id", given)?.to_string(),
        };
        let created = self.start(id, &def, &execution_id).await?;
        Ok(TriggerScheduleResponse { execution_id, created })
    }

    pub(crate) async fn backfill(
        &self,
        scope: &Scope,
        req: BackfillScheduleRequest,
    ) -> ApiResult<BackfillScheduleResponse> {
        let id = schedule_id(&req.schedule_id)?;
        let start_at = required_at("start_at", req.start_at.as_ref())?;
        let end_at = required_at("end_at", req.end_at.as_ref())?;
        if end_at <= start_at {
            return Err(invalid("end_at", "must be after start_at").into());
        }
        let overlap = match req.overlap {
            0 => Overlap::AllowAll,
            raw => overlap_of(raw, "overlap")?,
        };
        if matches!(overlap, Overlap::BufferOne | Overlap::BufferAll) {
            return Err(invalid(
                "overlap",
                "a backfill does not wait: use SKIP, ALLOW, CANCEL_PREVIOUS or TERMINATE_PREVIOUS",
            )
            .into());
        }
        let row = self.visible(scope, id).await?;
        scope.workflow(Action::Start, &row.workflow)?;
        let def = stored(&row)?;
        let spec =
            Spec::compile(&def.spec).map_err(|e| err(ErrorCode::StorageError, e.to_string()))?;
        let mut occurrences = Vec::new();
        let mut at = start_at.saturating_sub(1);
        while let Some(next) = spec.next_after(at).filter(|n| *n < end_at) {
            if occurrences.len() == MAX_BACKFILL {
                return Err(invalid(
                    "end_at",
                    format!("the range holds more than {MAX_BACKFILL} occurrences"),
                )
                .into());
            }
            occurrences.push(next);
            at = next;
        }
        let mut out = BackfillScheduleResponse::default();
        let mut previous: Option<String> = None;
        for occ in occurrences {
            let exec = execution_id(id, occ);
            if let Some(prev) = previous.as_deref() {
                let running = self
                    .shared
                    .store
                    .get_execution(prev)
                    .await?
                    .is_some_and(|e| !e.status.is_closed());
                if running {
                    match overlap {
                        Overlap::Skip => {
                            out.skipped += 1;
                            continue;
                        }
                        Overlap::CancelOther => {
                            self.stop(
                                prev,
                                InboxMessage::Cancel(Cancel {
                                    reason: format!("replaced by backfill of schedule {id}"),
                                    request_id: None,
                                }),
                            )
                            .await?
                        }
                        Overlap::TerminateOther => {
                            self.stop(
                                prev,
                                InboxMessage::Terminate(Terminate {
                                    reason: format!("replaced by backfill of schedule {id}"),
                                    request_id: None,
                                }),
                            )
                            .await?
                        }
                        _ => {}
                    }
                }
            }
            out.started += u64::from(self.start(id, &def, &exec).await?);
            out.execution_ids.push(exec.clone());
            previous = Some(exec);
        }
        Ok(out)
    }

    async fn stop(&self, execution_id: &str, message: InboxMessage) -> ApiResult<()> {
        self.shared.store.enqueue_inbox(execution_id, &message).await?;
        let wake =
            internal::OwnerServiceWakeRequest { execution_ids: vec![execution_id.to_string()] };
        if let Err(status) = self.shared.owner.wake(tonic::Request::new(wake)).await {
            tracing::warn!(%status, "waking the owner failed");
        }
        Ok(())
    }

    /// The frontend's `now` (see `FrontendConfig::clock`).
    fn now_ms(&self) -> u64 {
        self.shared.config.clock.now()
    }

    /// The next `count` fire times after `req.after`, or after `now_ms`.
    pub(crate) fn preview(
        req: PreviewScheduleRequest,
        now_ms: u64,
    ) -> ApiResult<PreviewScheduleResponse> {
        let (def, spec) = spec_def(req.spec)?;
        let count = match req.count {
            0 => 10,
            n if n > 1_000 => return Err(invalid("count", "at most 1000").into()),
            n => n as usize,
        };
        let after = match req.after.as_ref() {
            Some(t) => timestamp_to_ms(t).map_err(|e| invalid("after", e.to_string()))?,
            None => now_ms,
        };
        let fires = spec.preview(after, count);
        let due = fires
            .iter()
            .map(|&f| ms_to_timestamp(f + jitter_ms(&req.schedule_id, f, def.jitter_ms)))
            .collect();
        Ok(PreviewScheduleResponse {
            fire_times: fires.into_iter().map(ms_to_timestamp).collect(),
            due_times: due,
        })
    }
}

fn required_at(field: &str, t: Option<&prost_types::Timestamp>) -> Result<u64, OrbitError> {
    let t = t.ok_or_else(|| invalid(field, "is required"))?;
    timestamp_to_ms(t).map_err(|e| invalid(field, e.to_string()))
}

fn stored(row: &ScheduleRow) -> ApiResult<ScheduleDef> {
    ScheduleDef::from_json(&row.spec).map_err(|e| {
        err(ErrorCode::StorageError, format!("schedule `{}` is unreadable: {e}", row.schedule_id))
    })
}
