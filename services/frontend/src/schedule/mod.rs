//! `orbit.v1.ScheduleService`: create and manage schedules, trigger, backfill, preview.
//!
//! The frontend only writes the `schedules` rows (spec, action, pause) and starts manual
//! and backfilled executions; schedulers fire the rows (services/scheduler). A write that
//! moves a due time wakes the schedulers: in split mode the store's `orbit_timers`
//! notification does, in `orbit dev` the `wake` handed to [`Frontend::schedule_api`]
//! (the scheduler's own `Notify`).
//!
//! Auth: the RPCs' actions are in `orbit_auth`'s table (reads `read`, writes `admin`);
//! here a restricted client's workflow patterns apply to the schedule's workflow, as
//! for executions (`scope.rs`): a schedule of another workflow is answered as missing.
//!
//! [`Frontend::schedule_api`]: crate::Frontend::schedule_api

mod convert;
mod handlers;

use crate::scope::Scope;
use crate::Shared;
use orbit_api::v1::schedule_service_server::ScheduleService;
use orbit_api::v1::{
    BackfillScheduleRequest, BackfillScheduleResponse, CreateScheduleRequest,
    CreateScheduleResponse, DeleteScheduleRequest, DeleteScheduleResponse, GetScheduleRequest,
    GetScheduleResponse, ListSchedulesRequest, ListSchedulesResponse, PauseScheduleRequest,
    PauseScheduleResponse, PreviewScheduleRequest, PreviewScheduleResponse, ResumeScheduleRequest,
    ResumeScheduleResponse, TriggerScheduleRequest, TriggerScheduleResponse, UpdateScheduleRequest,
    UpdateScheduleResponse,
};
use std::sync::Arc;
use tokio::sync::Notify;
use tonic::{Request, Response, Status};

/// The `ScheduleService` implementation; cheap to clone.
#[derive(Clone)]
pub struct ScheduleApi {
    shared: Arc<Shared>,
    wake: Arc<Notify>,
}

impl ScheduleApi {
    pub(crate) fn new(shared: Arc<Shared>, wake: Arc<Notify>) -> ScheduleApi {
        ScheduleApi { shared, wake }
    }
}

#[tonic::async_trait]
impl ScheduleService for ScheduleApi {
    async fn create_schedule(
        &self,
        request: Request<CreateScheduleRequest>,
    ) -> Result<Response<CreateScheduleResponse>, Status> {
        self.create(&Scope::of(&request), request.into_inner())
            .await
            .map(Response::new)
            .map_err(Status::from)
    }

    async fn get_schedule(
        &self,
        request: Request<GetScheduleRequest>,
    ) -> Result<Response<GetScheduleResponse>, Status> {
        let scope = Scope::of(&request);
        let schedule = self.get(&scope, &request.into_inner().schedule_id).await?;
        Ok(Response::new(GetScheduleResponse { schedule: Some(schedule) }))
    }

    async fn list_schedules(
        &self,
        request: Request<ListSchedulesRequest>,
    ) -> Result<Response<ListSchedulesResponse>, Status> {
        self.list(&Scope::of(&request), request.into_inner())
            .await
            .map(Response::new)
            .map_err(Status::from)
    }

    async fn update_schedule(
        &self,
        request: Request<UpdateScheduleRequest>,
    ) -> Result<Response<UpdateScheduleResponse>, Status> {
        let schedule = self.update(&Scope::of(&request), request.into_inner()).await?;
        Ok(Response::new(UpdateScheduleResponse { schedule: Some(schedule) }))
    }

    async fn pause_schedule(
        &self,
        request: Request<PauseScheduleRequest>,
    ) -> Result<Response<PauseScheduleResponse>, Status> {
        let scope = Scope::of(&request);
        let req = request.into_inner();
        let schedule = self.set_paused(&scope, &req.schedule_id, true, &req.note).await?;
        Ok(Response::new(PauseScheduleResponse { schedule: Some(schedule) }))
    }

    async fn resume_schedule(
        &self,
        request: Request<ResumeScheduleRequest>,
    ) -> Result<Response<ResumeScheduleResponse>, Status> {
        let scope = Scope::of(&request);
        let schedule =
            self.set_paused(&scope, &request.into_inner().schedule_id, false, "").await?;
        Ok(Response::new(ResumeScheduleResponse { schedule: Some(schedule) }))
    }

    async fn trigger_schedule(
        &self,
        request: Request<TriggerScheduleRequest>,
    ) -> Result<Response<TriggerScheduleResponse>, Status> {
        self.trigger(&Scope::of(&request), request.into_inner())
            .await
            .map(Response::new)
            .map_err(Status::from)
    }

    async fn delete_schedule(
        &self,
        request: Request<DeleteScheduleRequest>,
    ) -> Result<Response<DeleteScheduleResponse>, Status> {
        let scope = Scope::of(&request);
        self.delete(&scope, &request.into_inner().schedule_id).await?;
        Ok(Response::new(DeleteScheduleResponse {}))
    }

    async fn backfill_schedule(
        &self,
        request: Request<BackfillScheduleRequest>,
    ) -> Result<Response<BackfillScheduleResponse>, Status> {
        self.backfill(&Scope::of(&request), request.into_inner())
            .await
            .map(Response::new)
            .map_err(Status::from)
    }

    async fn preview_schedule(
        &self,
        request: Request<PreviewScheduleRequest>,
    ) -> Result<Response<PreviewScheduleResponse>, Status> {
        ScheduleApi::preview(request.into_inner(), self.shared.config.clock.now())
            .map(Response::new)
            .map_err(Status::from)
    }
}
