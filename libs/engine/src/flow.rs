//! Flow control of one task attempt (issue 27; docs/flow-control.md): its priority, the
//! concurrency key it holds while a worker runs it, the rate-limit bucket its start takes
//! from, the fair queue it waits in, the worker labels it requires and the worker it sticks
//! to. Evaluated once, when the attempt is scheduled, from the step's declaration
//! and the run's start request, and recorded in its `StepScheduled`, so a replay, a retry
//! and a redelivery carry exactly the keys the first attempt had. Dispatch (the task
//! queue's claim) is what enforces it; the decider only records it.

use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// The priority of a task nobody gave one: the middle of 1 (first) ..= 5 (last).
pub const DEFAULT_PRIORITY: u8 = 3;

/// What dispatch must respect for one attempt. `None` fields: not declared.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Flow {
    /// 1 (taken first) ..= 5 (taken last); `None`: [`DEFAULT_PRIORITY`].
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub priority: Option<u8>,
    /// At most `limit` attempts holding `key` run at once.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub concurrency: Option<ConcurrencyKey>,
    /// Each start of an attempt takes one from `key`'s window.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rate: Option<RateKey>,
    /// Dispatch shares the workers among the keys of a group by their weights.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fairness: Option<FairKey>,
    /// Worker labels the attempt requires (`on:`, evaluated): only a worker whose
    /// `Hello.labels` hold every pair may take it. Empty: any worker.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub labels: BTreeMap<String, String>,
    /// The worker that ran the execution's previous task attempt (`sticky:`): only it may
    /// take the attempt until `timeout_ms` after it was queued.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sticky: Option<StickyWorker>,
}

impl Flow {
    /// The priority dispatch uses.
    #[must_use]
    pub fn priority(&self) -> u8 {
        self.priority.unwrap_or(DEFAULT_PRIORITY)
    }

    /// Whether only the flow claim may take it: it must count or take something for it (a
    /// concurrency key, a rate limit) or order it by its key's share (a fair key); a
    /// priority alone only orders the ordinary queue.
    #[must_use]
    pub fn is_limited(&self) -> bool {
        self.concurrency.is_some() || self.rate.is_some() || self.fairness.is_some()
    }

    /// Whether a worker announcing `labels` has every label the attempt requires.
    #[must_use]
    pub fn labels_within<'a>(&self, mut has: impl FnMut(&str) -> Option<&'a str>) -> bool {
        self.labels.iter().all(|(k, v)| has(k) == Some(v.as_str()))
    }

    /// Whether `worker_id` may take the attempt before its sticky timeout has passed (a
    /// hand-off happens when the attempt is queued, so only the sticky worker may).
    #[must_use]
    pub fn sticks_to(&self, worker_id: &str) -> bool {
        self.sticky.as_ref().is_none_or(|s| s.worker == worker_id)
    }
}

/// The worker a sticky attempt prefers, as evaluated.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct StickyWorker {
    /// The `worker_id` of the `StepDispatched` of the execution's previous task attempt.
    pub worker: String,
    /// How long after the attempt is queued only that worker may take it, milliseconds.
    pub timeout_ms: u64,
}

/// A concurrency key as evaluated: `key` is the full, scoped key (`<group>/<value>`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ConcurrencyKey {
    /// The scoped key: the group (the declared `group`, else `<workflow>.<step>`), `/`,
    /// the evaluated value.
    pub key: String,
    /// Most attempts holding the key that may run at once (≥ 1).
    pub limit: u32,
}

/// A fair key as evaluated (docs/flow-control.md, "Fair queues").
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct FairKey {
    /// The scoped key: the group (the declared `group`, else `<workflow>.<step>` for a
    /// step's `fairness`, `<workflow>` for the workflow's), `/`, the evaluated value.
    pub key: String,
    /// The key's share of the workers relative to the other keys: 1..=1000.
    pub weight: u32,
}

/// A rate-limit bucket as evaluated.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RateKey {
    /// The full bucket key: `<name or group>/<value>` (or just the name or group when no
    /// `key` was declared).
    pub key: String,
    /// The limit: declared on the step, or a server-wide named limit.
    pub limit: RateSource,
}

/// Where a bucket's limit comes from.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum RateSource {
    /// `rate_limit: {limit, per}` on the step: at most `limit` starts per window of
    /// `per_ms`, windows aligned to the epoch.
    Inline {
        /// Starts per window (≥ 1).
        limit: u32,
        /// The window, milliseconds (≥ 1).
        per_ms: u64,
    },
    /// `rate_limit: {name}`: the server-wide limit of that name (`--rate-limit`, the admin
    /// API), read when the claim takes from the bucket; a name the server does not know
    /// holds the attempt queued.
    Named(String),
}
