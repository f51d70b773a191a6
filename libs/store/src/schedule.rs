//! The rows of the `schedules` table and the writes of the scheduler that fires them (the
//! [`Schedules`](crate::roles::Schedules) role).
//!
//! The spec is opaque here (JSON text the frontend writes, `orbit-schedule`'s form); the
//! store only keeps it with the progress and the claim. A scheduler claims a due row for a
//! lease ([`Schedules::claim_due_schedules`](crate::roles::Schedules::claim_due_schedules)),
//! fires it, and records the outcome with [`ScheduleFire`] only while it still holds the
//! claim, so any number of schedulers fire each occurrence once (and a fire retried by
//! another scheduler after a lease ran out starts the same deterministic execution id).

/// One schedule with its progress.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct ScheduleRow {
    /// The schedule id.
    pub schedule_id: String,
    /// The workflow it starts.
    pub workflow: String,
    /// Its definition (spec and action), JSON.
    pub spec: String,
    /// Whether it is paused.
    pub paused: bool,
    /// Why it is paused (empty when not, or no note was given).
    pub note: String,
    /// The nominal next occurrence; `None` once the schedule ended.
    pub next_fire_at_ms: Option<u64>,
    /// When the row is due: the next occurrence plus its jitter, or a retry time.
    pub due_at_ms: Option<u64>,
    /// The last handled occurrence.
    pub last_fire_at_ms: Option<u64>,
    /// The last execution the schedule started.
    pub last_execution_id: Option<String>,
    /// Executions started (manual triggers included).
    pub fired_count: u64,
    /// Occurrences skipped by the policies.
    pub skipped_count: u64,
    /// The error of the last failed fire.
    pub last_error: Option<String>,
    /// Scheduled starts still allowed; `None` means no limit.
    pub remaining: Option<u64>,
    /// Occurrences waiting under a `BUFFER_*` overlap policy, oldest first.
    pub buffered: Vec<u64>,
    /// Creation time (caller's clock).
    pub created_at_ms: u64,
    /// Last change (caller's clock).
    pub updated_at_ms: u64,
}

/// A new definition for an existing schedule (`UpdateSchedule`): progress counters stay,
/// the next occurrence, remaining actions and buffer are replaced, a claim is dropped (the
/// scheduler holding it then cannot record its now stale fire).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ScheduleUpdate {
    /// The schedule id.
    pub schedule_id: String,
    /// The workflow it starts now.
    pub workflow: String,
    /// The new definition, JSON.
    pub spec: String,
    /// The next occurrence under the new spec.
    pub next_fire_at_ms: Option<u64>,
    /// Its due time.
    pub due_at_ms: Option<u64>,
    /// Scheduled starts allowed from now on.
    pub remaining: Option<u64>,
    /// The caller's clock.
    pub now_ms: u64,
}

/// The outcome of one fire, recorded by the scheduler that holds the claim.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct ScheduleFire {
    /// The schedule id.
    pub schedule_id: String,
    /// The claimer (scheduler node id) that took the row.
    pub claimer: String,
    /// The next nominal occurrence.
    pub next_fire_at_ms: Option<u64>,
    /// When the row is due again.
    pub due_at_ms: Option<u64>,
    /// The latest occurrence handled, if this fire handled any (else kept).
    pub last_fire_at_ms: Option<u64>,
    /// The last execution started, if this fire started any (else kept).
    pub last_execution_id: Option<String>,
    /// Executions started by this fire.
    pub fired: u64,
    /// Occurrences skipped by this fire.
    pub skipped: u64,
    /// The error of this fire; `None` clears the recorded one.
    pub last_error: Option<String>,
    /// Scheduled starts still allowed.
    pub remaining: Option<u64>,
    /// Occurrences still waiting.
    pub buffered: Vec<u64>,
    /// Pause the schedule with this note (pause on failure).
    pub pause: Option<String>,
    /// The caller's clock.
    pub now_ms: u64,
}

/// The buffer as stored.
pub(crate) fn buffered_text(buffered: &[u64]) -> String {
    serde_json::to_string(buffered).unwrap_or_else(|_| "[]".into())
}

/// The stored buffer.
pub(crate) fn parse_buffered(text: &str) -> crate::Result<Vec<u64>> {
    serde_json::from_str(text).map_err(|e| crate::StoreError::corrupt("schedule buffered", e))
}
