//! The scheduler's roles: schedules (created by the frontend, claimed and fired by
//! schedulers) and batch jobs (created by the frontend, leased and walked by a scheduler).
//! A child of `roles.rs` (re-exported there).

use crate::batch_job::{BatchItem, BatchRow, BatchSelector, BatchState, ItemOutcome};
use crate::error::Result;
use crate::schedule::{ScheduleFire, ScheduleRow, ScheduleUpdate};

/// Schedules: the frontend creates and manages them, schedulers claim and fire them. Times
/// are the caller's (like timer due times).
#[async_trait::async_trait]
pub trait Schedules: Send + Sync {
    /// Inserts `row` unless the id exists; returns the stored row and whether this call
    /// inserted it.
    async fn create_schedule(&self, row: &ScheduleRow) -> Result<(ScheduleRow, bool)>;

    /// One schedule.
    async fn get_schedule(&self, schedule_id: &str) -> Result<Option<ScheduleRow>>;

    /// Up to `limit` schedules by id after `after_id`, of `workflow` or of all.
    async fn list_schedules(
        &self,
        workflow: Option<&str>,
        after_id: Option<&str>,
        limit: u32,
    ) -> Result<Vec<ScheduleRow>>;

    /// Replaces a schedule's definition (see [`ScheduleUpdate`]); `None` when it is missing.
    async fn update_schedule(&self, update: &ScheduleUpdate) -> Result<Option<ScheduleRow>>;

    /// Pauses (with `note`) or resumes a schedule; `None` when it is missing. Resuming keeps
    /// the next occurrence: what was missed meanwhile follows the catch-up policy.
    async fn set_schedule_paused(
        &self,
        schedule_id: &str,
        paused: bool,
        note: &str,
        now_ms: u64,
    ) -> Result<Option<ScheduleRow>>;

    /// Deletes a schedule; false when it was missing.
    async fn delete_schedule(&self, schedule_id: &str) -> Result<bool>;

    /// Claims up to `limit` unpaused schedules due at `now_ms` that no live claim holds, by due
    /// time, for `claimer` until `now_ms + lease_ms`. Concurrent callers take disjoint rows
    /// (PostgreSQL: `FOR UPDATE SKIP LOCKED`); a claim whose lease ran out is taken again.
    async fn claim_due_schedules(
        &self,
        now_ms: u64,
        claimer: &str,
        lease_ms: u64,
        limit: u32,
    ) -> Result<Vec<ScheduleRow>>;

    /// When the next unpaused schedule is due (a claimed one not before its lease ends).
    async fn next_schedule_due_at(&self) -> Result<Option<u64>>;

    /// Unpaused schedules due at `now_ms` (claimed or not).
    async fn count_due_schedules(&self, now_ms: u64) -> Result<u64>;

    /// Records a fire and drops the claim, only if `fire.claimer` still holds it; false
    /// otherwise (the lease ran out and another scheduler took the row, or the schedule
    /// was updated or deleted meanwhile): nothing is written.
    async fn finish_schedule_fire(&self, fire: &ScheduleFire) -> Result<bool>;

    /// Drops `claimer`'s claim without firing, due again at `retry_at_ms`, recording
    /// `error`; false when the claim is not held.
    async fn release_schedule_claim(
        &self,
        schedule_id: &str,
        claimer: &str,
        retry_at_ms: u64,
        error: &str,
        now_ms: u64,
    ) -> Result<bool>;

    /// Counts a start outside the scheduled occurrences (trigger, backfill): `fired_count`
    /// plus one and the last execution id. False when the schedule is missing.
    async fn record_schedule_start(
        &self,
        schedule_id: &str,
        execution_id: &str,
        now_ms: u64,
    ) -> Result<bool>;
}

/// Batch jobs (see [`crate::batch_job`]): the frontend creates, reads and cancels them, a
/// scheduler leases one and walks its executions. Times are the caller's. Every write that
/// moves a batch is conditional on the lease, so a runner that lost it changes nothing.
#[async_trait::async_trait]
pub trait BatchJobs: Send + Sync {
    /// Inserts `row` unless its id, or its request id, exists; returns the stored row (for a
    /// request id already used: that batch) and whether this call inserted it.
    async fn create_batch(&self, row: &BatchRow) -> Result<(BatchRow, bool)>;

    /// One batch.
    async fn get_batch(&self, batch_id: &str) -> Result<Option<BatchRow>>;

    /// Up to `limit` batches, newest first (by id, descending), with ids before `before_id`.
    async fn list_batches(&self, before_id: Option<&str>, limit: u32) -> Result<Vec<BatchRow>>;

    /// A `RUNNING` batch becomes `CANCELLED` with `reason` (its runner stops before the next
    /// execution); any other state is left alone. Returns the row, `None` when missing.
    async fn cancel_batch(
        &self,
        batch_id: &str,
        reason: &str,
        now_ms: u64,
    ) -> Result<Option<BatchRow>>;

    /// Leases the oldest `RUNNING` batch whose lease is free, ended, or already `holder`'s,
    /// until `now_ms + lease_ms`. Concurrent callers never hold one batch at once.
    async fn lease_batch(
        &self,
        holder: &str,
        now_ms: u64,
        lease_ms: u64,
    ) -> Result<Option<BatchRow>>;

    /// Extends `holder`'s lease and returns the batch (in any state: a cancel shows here);
    /// `None` when `holder` no longer holds it.
    async fn renew_batch_lease(
        &self,
        batch_id: &str,
        holder: &str,
        now_ms: u64,
        lease_ms: u64,
    ) -> Result<Option<BatchRow>>;

    /// Begins `execution_id`, in ONE transaction: a `PENDING` item (kept if it exists) and
    /// the cursor moved to it, while `holder` holds the batch and it is `RUNNING`. False
    /// (nothing written) otherwise.
    async fn begin_batch_item(
        &self,
        batch_id: &str,
        holder: &str,
        execution_id: &str,
        now_ms: u64,
    ) -> Result<bool>;

    /// Records the outcome of a `PENDING` item and counts it (`done` and its outcome's
    /// counter), in ONE transaction, while `holder` holds the batch (in any state: the
    /// items in flight when a batch is cancelled are still recorded). An item already
    /// recorded is not counted again. Returns the batch after it; `None` when not held.
    async fn record_batch_item(
        &self,
        holder: &str,
        item: &BatchItem,
        now_ms: u64,
    ) -> Result<Option<BatchRow>>;

    /// Ends `holder`'s run of a batch: a `RUNNING` batch takes `state` when one is given
    /// (`COMPLETED` also sets `total` to `done`), and the lease is dropped. False when not
    /// held.
    async fn finish_batch(
        &self,
        batch_id: &str,
        holder: &str,
        state: Option<BatchState>,
        now_ms: u64,
    ) -> Result<bool>;

    /// Up to `limit` items of a batch by execution id after `after`, only those with
    /// `outcome` when given.
    async fn list_batch_items(
        &self,
        batch_id: &str,
        after: Option<&str>,
        outcome: Option<ItemOutcome>,
        limit: u32,
    ) -> Result<Vec<BatchItem>>;

    /// Up to `limit` ids of the executions `selector` matches now, by id after `after`.
    async fn batch_targets(
        &self,
        selector: &BatchSelector,
        after: Option<&str>,
        limit: u32,
    ) -> Result<Vec<String>>;

    /// How many executions `selector` matches now.
    async fn count_batch_targets(&self, selector: &BatchSelector) -> Result<u64>;
}
