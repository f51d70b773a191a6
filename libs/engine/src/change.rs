//! One entry of a migration's checked diff ([`Change`]): what differs between two versions of
//! a workflow for one step (or for the workflow itself), and whether it is safe for one
//! execution. Kept apart from `crate::migrate` (which computes them) because history events
//! carry them (`Event::DefinitionMigrated::changes`): the event model sits below the planner.
//!
//! The serde names of [`ChangeKind`] are part of the API (histories show them): never renamed.

use serde::{Deserialize, Serialize};

/// One difference between two versions of a workflow, judged against one execution.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Change {
    /// What kind of difference.
    pub kind: ChangeKind,
    /// The body-qualified step id as the running execution knows it (the old id of a renamed
    /// step, the new id of an added one): `charge`, `on:failure:alert`,
    /// `on_signal:approve:notify`, `update:resize:apply` (the unit-key scopes of
    /// `crate::unit`, without instance seqs). Empty for workflow-level changes (input
    /// contract, output, signals, queries, updates, task declarations, settings).
    pub step: String,
    /// What differs, for people (`task `charge` -> `charge_v2``, `needs [a] -> [a, b]`).
    pub detail: String,
    /// Whether it is safe for this execution's state.
    pub safe: bool,
    /// Why it is safe or unsafe for this execution (`pending: not started yet`, ...).
    pub reason: String,
}

impl Change {
    /// `step: detail (reason)`, or `detail (reason)` for a workflow-level change: how a
    /// refusal lists it.
    #[must_use]
    pub fn describe(&self) -> String {
        if self.step.is_empty() {
            format!("{} ({})", self.detail, self.reason)
        } else {
            format!("{}: {} ({})", self.step, self.detail, self.reason)
        }
    }
}

/// What differs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ChangeKind {
    /// A step the old version lacks.
    Added,
    /// A step the new version lacks (and no step declares `renamed_from` for).
    Removed,
    /// A step the new version declares `renamed_from` the old id for.
    Renamed,
    /// The step's kind (`task`, `compute`, `sleep`, ...) differs.
    KindChanged,
    /// What the step calls differs: the task (or its declared version or language), the
    /// child workflow, the awaited signal.
    TaskChanged,
    /// The value a unit starts with: `input`, or the kind's template (`compute`, `until`,
    /// `http`, `continue_as_new.input`) or duration (`sleep`).
    InputChanged,
    /// `needs`.
    NeedsChanged,
    /// `when`.
    WhenChanged,
    /// `for_each` (its list or `as`).
    ForEachChanged,
    /// `retry`, `timeout`, `queue_timeout`, `heartbeat_timeout`, `compensate`,
    /// `max_concurrency`, flow control (`priority`, `concurrency`, `rate_limit`): they
    /// apply to the next attempts.
    PolicyChanged,
    /// The output contract of the task the step calls.
    OutputContractChanged,
    /// The workflow's `input` contract (empty `step`), or the input contract of the task a
    /// step calls.
    InputContractChanged,
    /// The workflow's `output` template.
    OutputChanged,
    /// A `signals` declaration (added, removed, its payload contract).
    SignalChanged,
    /// A `queries` entry.
    QueryChanged,
    /// An `updates` handler's declaration (added, removed, its input, validator or reply).
    UpdateChanged,
    /// Workflow settings: `description`, `timeout`, `retention`, `priority`, `limits`.
    SettingsChanged,
    /// The recorded outputs of the step are replaced by the ones the target's migration
    /// hint (`migrations[].outputs`) maps them to.
    OutputMapped,
}
