//! [`Schedules`] on PostgreSQL: the role's methods over the statements of `schedules.rs`.

use super::{conn, error, schedules, Kind, PgStore};
use crate::error::Result;
use crate::roles::Schedules;
use crate::schedule::{ScheduleFire, ScheduleRow, ScheduleUpdate};

#[async_trait::async_trait]
impl Schedules for PgStore {
    async fn create_schedule(&self, row: &ScheduleRow) -> Result<(ScheduleRow, bool)> {
        run!(self, Kind::Write, |c| schedules::create(c, row))
    }

    async fn get_schedule(&self, schedule_id: &str) -> Result<Option<ScheduleRow>> {
        run!(self, Kind::Read, |c| schedules::get_one(c, schedule_id))
    }

    async fn list_schedules(
        &self,
        workflow: Option<&str>,
        after_id: Option<&str>,
        limit: u32,
    ) -> Result<Vec<ScheduleRow>> {
        run!(self, Kind::Read, |c| schedules::list(c, workflow, after_id, limit))
    }

    async fn update_schedule(&self, update: &ScheduleUpdate) -> Result<Option<ScheduleRow>> {
        run!(self, Kind::Write, |c| schedules::update(c, update))
    }

    async fn set_schedule_paused(
        &self,
        schedule_id: &str,
        paused: bool,
        note: &str,
        now_ms: u64,
    ) -> Result<Option<ScheduleRow>> {
        run!(self, Kind::Write, |c| schedules::set_paused(c, schedule_id, paused, note, now_ms))
    }

    async fn delete_schedule(&self, schedule_id: &str) -> Result<bool> {
        run!(self, Kind::Write, |c| schedules::delete(c, schedule_id))
    }

    async fn claim_due_schedules(
        &self,
        now_ms: u64,
        claimer: &str,
        lease_ms: u64,
        limit: u32,
    ) -> Result<Vec<ScheduleRow>> {
        run!(self, Kind::Write, |c| schedules::claim_due(c, now_ms, claimer, lease_ms, limit))
    }

    async fn next_schedule_due_at(&self) -> Result<Option<u64>> {
        run!(self, Kind::Read, |c| schedules::next_due(c))
    }

    async fn count_due_schedules(&self, now_ms: u64) -> Result<u64> {
        run!(self, Kind::Read, |c| schedules::count_due(c, now_ms))
    }

    async fn finish_schedule_fire(&self, fire: &ScheduleFire) -> Result<bool> {
        run!(self, Kind::Write, |c| schedules::finish(c, fire))
    }

    async fn release_schedule_claim(
        &self,
        schedule_id: &str,
        claimer: &str,
        retry_at_ms: u64,
        error: &str,
        now_ms: u64,
    ) -> Result<bool> {
        run!(self, Kind::Write, |c| schedules::release(
            c,
            schedule_id,
            claimer,
            retry_at_ms,
            error,
            now_ms
        ))
    }

    async fn record_schedule_start(
        &self,
        schedule_id: &str,
        execution_id: &str,
        now_ms: u64,
    ) -> Result<bool> {
        run!(self, Kind::Write, |c| schedules::record_start(c, schedule_id, execution_id, now_ms))
    }
}
