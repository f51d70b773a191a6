//! The resume state of a long loop's continue-as-new (issue 29): what a run hands the
//! next run of its execution when a top-level `repeat` continued it as new near the history
//! limit (`crate::decide` decides when, docs/definitions.md "Long loops continue as new").
//!
//! It is recorded twice: on the `WorkflowContinuedAsNew` that ends the run (decided, so
//! the replay check recomputes it) and on the next run's `WorkflowCreated` (recorded, as
//! [`crate::command::next_run`] copies it), so each run's history folds on its own. The
//! fold (`crate::state::State`) makes the next run's state what the finished run's was for
//! everything that follows: the carried units resolved with their outputs, the compensation
//! order, the frozen lists compensation reads, the search attributes, the workflow timeout's
//! start, and the repeat at iteration [`Resume::iteration`] with its `previous` output.
//!
//! What is carried (see `crate::decide`'s `autocan::capture`): every resolved main-body unit
//! outside the runs of a list (no `[` in its key: `a`, `g`, `g.sub`, the repeat's earlier
//! steps), and, for each unit compensation will undo, the units of the list runs around it
//! (its iteration's or element's siblings, the run before it for `previous`) and the frozen
//! lists its `for_each` items come from. Other units of earlier iterations are dropped, so
//! the resume stays the size of the definition plus what compensation needs.

use super::TaskError;
use orbit_definition::SearchValue;
use serde::{Deserialize, Serialize};
use serde_json::Value;
use std::collections::{BTreeMap, BTreeSet};

/// How a carried unit ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum CarriedStatus {
    /// Succeeded with its output.
    Succeeded,
    /// Failed, but `continue_on_failure` / `on_failure` caught it: completed with its
    /// output (`StepFailureCaught`), never compensated.
    Caught,
    /// Skipped.
    Skipped,
    /// Failed (inside a group whose failure was caught).
    Failed,
    /// Cancelled (a race's losing branch).
    Cancelled,
}

/// One resolved unit of the finished run.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CarriedUnit {
    /// How it ended.
    pub status: CarriedStatus,
    /// Its output (null when it has none).
    #[serde(default, skip_serializing_if = "Value::is_null")]
    pub output: Value,
    /// Its error (caught or failed units).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<TaskError>,
}

/// What the next run starts from (see the module docs).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Resume {
    /// The repeat's unit key (a main-body step id).
    pub repeat: String,
    /// The iteration the next run starts with (iterations recorded over all runs so far).
    pub iteration: u64,
    /// The output of iteration `iteration - 1`: the next run's `previous`.
    #[serde(default)]
    pub previous: Value,
    /// Resolved main-body units, by unit key.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub units: BTreeMap<String, CarriedUnit>,
    /// The carried units compensation would undo, in success order (oldest first).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub compensate: Vec<String>,
    /// Frozen `for_each` lists the compensation of carried elements reads, by fan-out key.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub fanouts: BTreeMap<String, Vec<Value>>,
    /// The run's search attributes.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub search: BTreeMap<String, SearchValue>,
    /// Main steps whose `search:` was decided.
    #[serde(default, skip_serializing_if = "BTreeSet::is_empty")]
    pub search_steps: BTreeSet<String>,
    /// Whether the workflow's own `search:` was decided.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub search_started: bool,
    /// When the execution's first run started (`WorkflowStarted`): the workflow timeout
    /// counts from here, over all runs.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub started_at: Option<u64>,
}
