//! [`Schedules`] on SQLite: the role's methods over the statements of `schedules.rs`.

use super::{schedules, SqliteStore};
use crate::error::Result;
use crate::roles::Schedules;
use crate::schedule::{ScheduleFire, ScheduleRow, ScheduleUpdate};

#[async_trait::async_trait]
impl Schedules for SqliteStore {
    async fn create_schedule(&self, row: &ScheduleRow) -> Result<(ScheduleRow, bool)> {
        let row = row.clone();
        self.writer.run(move |c| schedules::create(c, &row)).await
    }

    async fn get_schedule(&self, schedule_id: &str) -> Result<Option<ScheduleRow>> {
        let id = schedule_id.to_string();
        self.readers.run(move |c| schedules::get(c, &id)).await
    }

    async fn list_schedules(
        &self,
        workflow: Option<&str>,
        after_id: Option<&str>,
        limit: u32,
    ) -> Result<Vec<ScheduleRow>> {
        let (workflow, after) = (workflow.map(str::to_string), after_id.map(str::to_string));
        self.readers
            .run(move |c| schedules::list(c, workflow.as_deref(), after.as_deref(), limit))
            .await
    }

    async fn update_schedule(&self, update: &ScheduleUpdate) -> Result<Option<ScheduleRow>> {
        let update = update.clone();
        self.writer.run(move |c| schedules::update(c, &update)).await
    }

    async fn set_schedule_paused(
        &self,
        schedule_id: &str,
        paused: bool,
        note: &str,
        now_ms: u64,
    ) -> Result<Option<ScheduleRow>> {
        let (id, note) = (schedule_id.to_string(), note.to_string());
        self.writer.run(move |c| schedules::set_paused(c, &id, paused, &note, now_ms)).await
    }

    async fn delete_schedule(&self, schedule_id: &str) -> Result<bool> {
        let id = schedule_id.to_string();
        self.writer.run(move |c| schedules::delete(c, &id)).await
    }

    async fn claim_due_schedules(
        &self,
        now_ms: u64,
        claimer: &str,
        lease_ms: u64,
        limit: u32,
    ) -> Result<Vec<ScheduleRow>> {
        let claimer = claimer.to_string();
        self.writer.run(move |c| schedules::claim_due(c, now_ms, &claimer, lease_ms, limit)).await
    }

    async fn next_schedule_due_at(&self) -> Result<Option<u64>> {
        self.readers.run(schedules::next_due).await
    }

    async fn count_due_schedules(&self, now_ms: u64) -> Result<u64> {
        self.readers.run(move |c| schedules::count_due(c, now_ms)).await
    }

    async fn finish_schedule_fire(&self, fire: &ScheduleFire) -> Result<bool> {
        let fire = fire.clone();
        self.writer.run(move |c| schedules::finish(c, &fire)).await
    }

    async fn release_schedule_claim(
        &self,
        schedule_id: &str,
        claimer: &str,
        retry_at_ms: u64,
        error: &str,
        now_ms: u64,
    ) -> Result<bool> {
        let (id, claimer, error) =
            (schedule_id.to_string(), claimer.to_string(), error.to_string());
        self.writer
            .run(move |c| schedules::release(c, &id, &claimer, retry_at_ms, &error, now_ms))
            .await
    }

    async fn record_schedule_start(
        &self,
        schedule_id: &str,
        execution_id: &str,
        now_ms: u64,
    ) -> Result<bool> {
        let (id, execution) = (schedule_id.to_string(), execution_id.to_string());
        self.writer.run(move |c| schedules::record_start(c, &id, &execution, now_ms)).await
    }
}
