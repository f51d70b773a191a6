//! The stored form of a schedule: [`ScheduleDef`] as JSON in `schedules.spec`.
//!
//! Serde defaults keep old rows readable when a field is added; the API maps its messages
//! to and from these types (services/frontend/src/schedule).

use serde::{Deserialize, Serialize};

/// Catch-up windows default to one day.
pub const DEFAULT_CATCH_UP_WINDOW_MS: u64 = 86_400_000;

/// What to do when an occurrence is due while an execution the schedule started still runs.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
pub enum Overlap {
    /// Skip the occurrence (counted as skipped). The default.
    #[default]
    Skip,
    /// Keep at most one occurrence waiting; it starts when the running execution closes.
    BufferOne,
    /// Keep every occurrence waiting (up to [`MAX_BUFFERED`](crate::MAX_BUFFERED)).
    BufferAll,
    /// Cancel the running execution, then start the new one.
    CancelOther,
    /// Terminate the running execution, then start the new one.
    TerminateOther,
    /// Start the new execution alongside the running ones.
    AllowAll,
}

/// What to do with occurrences missed while the schedule was paused or no scheduler ran.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
pub enum CatchUp {
    /// Drop every missed occurrence; only an on-time one fires.
    Skip,
    /// Fire the most recent missed occurrence within the window, drop the others. Default.
    #[default]
    One,
    /// Fire every missed occurrence within the window, oldest first.
    All,
}

/// A fixed interval: occurrences at `offset_ms + k * every_ms` after the Unix epoch.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct IntervalDef {
    /// The period, at least one second.
    pub every_ms: u64,
    /// The phase, smaller than `every_ms`.
    #[serde(default)]
    pub offset_ms: u64,
}

/// When a schedule fires and how it treats overlaps and missed occurrences.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct SpecDef {
    /// Cron expressions (5 or 6 fields, or `@daily`-style aliases), in `timezone`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub crons: Vec<String>,
    /// Intervals (absolute time: DST does not move them).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub intervals: Vec<IntervalDef>,
    /// IANA time zone of the crons; empty means UTC.
    #[serde(default)]
    pub timezone: String,
    /// Upper bound (exclusive) of the deterministic delay added to each occurrence.
    #[serde(default)]
    pub jitter_ms: u64,
    /// No occurrence before this time.
    #[serde(default)]
    pub start_at_ms: Option<u64>,
    /// No occurrence at or after this time.
    #[serde(default)]
    pub end_at_ms: Option<u64>,
    /// The overlap policy.
    #[serde(default)]
    pub overlap: Overlap,
    /// The catch-up policy.
    #[serde(default)]
    pub catch_up: CatchUp,
    /// How far back missed occurrences are considered; `None` means one day.
    #[serde(default)]
    pub catch_up_window_ms: Option<u64>,
    /// Pause the schedule when an execution it started fails.
    #[serde(default)]
    pub pause_on_failure: bool,
    /// The number of scheduled starts allowed when the spec is set; `None` means no limit.
    #[serde(default)]
    pub remaining_actions: Option<u64>,
}

impl SpecDef {
    /// The catch-up window in force.
    #[must_use]
    pub fn window_ms(&self) -> u64 {
        self.catch_up_window_ms.unwrap_or(DEFAULT_CATCH_UP_WINDOW_MS)
    }
}

/// What each fire starts.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ActionDef {
    /// The workflow name.
    pub workflow: String,
    /// The version; empty means the latest at each fire.
    #[serde(default)]
    pub version: String,
    /// The input of every execution.
    #[serde(default)]
    pub input: serde_json::Value,
}

/// A whole schedule definition as stored.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ScheduleDef {
    /// When it fires.
    pub spec: SpecDef,
    /// What it starts.
    pub action: ActionDef,
}

impl ScheduleDef {
    /// The JSON stored in `schedules.spec`.
    #[must_use]
    pub fn to_json(&self) -> String {
        serde_json::to_string(self).unwrap_or_default()
    }

    /// Reads a stored definition.
    ///
    /// # Errors
    /// The JSON is not a schedule definition.
    pub fn from_json(text: &str) -> Result<ScheduleDef, serde_json::Error> {
        serde_json::from_str(text)
    }
}
