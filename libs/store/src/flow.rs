//! Flow control in the task queue (issue 27): what a task row stores of its attempt's
//! [`Flow`], the claim order, the flow claim's outcome, named rate limits and the reads
//! metrics and `DescribeExecution` make of it.
//!
//! **Claim order.** Every row has a `dispatch_rank`: the store's clock when it was queued
//! plus `(priority - 1) ×` [`PRIORITY_STEP_MS`]. Claims take rows by rank, so priority 1 goes
//! first, and a row waiting longer than one step per priority level it is behind passes a
//! fresher, more urgent one: a priority-5 row queued more than 4 minutes before a priority-1
//! row is claimed before it. That is the anti-starvation ageing; nothing updates a rank.
//!
//! **Limited rows.** A row with a concurrency key, a rate limit or a fair key
//! ([`Flow::is_limited`]) is claimed only by
//! [`TaskQueue::claim_limited`](crate::TaskQueue::claim_limited), which counts the key's
//! claimed rows, takes starts from the bucket and orders by share, serialized across
//! processes. The ordinary claim never reads such rows, so a deployment without flow
//! control pays nothing.
//!
//! **Fair order.** Among the limited rows that pass their limits, the flow claim takes
//! first the row of least *share*: for a row with a fair key, (the key's claimed rows + the
//! row's number among the key's passing rows, by rank) / the row's weight; for a row
//! without one, 0. Ties go by rank, then id. So a key with
//! fewer attempts running per weight is served first, a key's own rows go by rank (priority
//! and age), and limited rows without a fair key go ahead of every fair row, by rank, as
//! they did before fair keys existed. The numbers within a concurrency key and a rate
//! bucket (which rows fit the limit) follow the same order, so a limit shared by several
//! fair keys is shared by share too.
//! A row queued already claimed by a commit (a hand-off, [`crate::handoff`]) is counted by
//! later flow claims but checked by none: limited offers must not be handed off.

use orbit_engine::{Flow, RateSource};
use std::sync::atomic::{AtomicU8, Ordering};

/// What one priority level is worth in waiting time, milliseconds: a row's rank is its
/// queue time plus `(priority - 1)` steps (see the module docs).
pub const PRIORITY_STEP_MS: u64 = 60_000;

/// The most concurrency keys [`FlowWaiting::keys`] lists.
pub const FLOW_TOP_KEYS: usize = 20;

/// What [`TaskQueue::claim_limited`](crate::TaskQueue::claim_limited) did.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct LimitedClaim {
    /// The rows claimed, in the order they were picked (share, then rank: see the module
    /// docs), each left exactly as an ordinary claim leaves it.
    pub rows: Vec<crate::TaskRow>,
    /// Whether rows the filter admits stayed queued because of a limit (a full concurrency
    /// key, a bucket with no start left, an unknown named limit); not because the claim
    /// ran out of credits.
    pub blocked: bool,
    /// The earliest start of a rate window (epoch ms, store clock) that would admit a row
    /// left queued by its bucket; `None` when no row waits on a known rate limit.
    pub retry_at_ms: Option<u64>,
}

/// Why a queued limited row is not dispatched.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum WaitReason {
    /// Claimable now as far as its limits go (it waits for a worker).
    Ready,
    /// Its concurrency key is at its limit.
    Concurrency,
    /// Its rate bucket has no start left in the current window, or its named limit is not
    /// defined.
    RateLimit,
}

impl WaitReason {
    /// Every reason.
    pub const ALL: [WaitReason; 3] =
        [WaitReason::Ready, WaitReason::Concurrency, WaitReason::RateLimit];

    /// A metric label: `ready`, `concurrency`, `rate_limit`.
    #[must_use]
    pub fn as_str(self) -> &'static str {
        match self {
            WaitReason::Ready => "ready",
            WaitReason::Concurrency => "concurrency",
            WaitReason::RateLimit => "rate_limit",
        }
    }

    /// The reason of a stored label (see [`WaitReason::as_str`]).
    pub(crate) fn parse(s: &str) -> crate::Result<WaitReason> {
        WaitReason::ALL
            .into_iter()
            .find(|r| r.as_str() == s)
            .ok_or_else(|| crate::StoreError::corrupt("wait reason", s))
    }
}

/// The queued limited rows by why they wait, and the busiest concurrency keys
/// ([`TaskQueue::flow_waiting`](crate::TaskQueue::flow_waiting)).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct FlowWaiting {
    /// Queued limited rows per reason; every reason once, in [`WaitReason::ALL`] order.
    pub by_reason: Vec<(WaitReason, u64)>,
    /// Concurrency keys with claimed or queued rows, most running first (then most queued,
    /// then by key), at most [`FLOW_TOP_KEYS`].
    pub keys: Vec<KeyLoad>,
}

/// One concurrency key's load.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KeyLoad {
    /// The scoped key.
    pub key: String,
    /// Claimed rows holding it.
    pub running: u64,
    /// Queued rows that will hold it.
    pub queued: u64,
    /// Its limit (the largest its rows declare).
    pub limit: u64,
}

/// A server-wide named rate limit ([`RateLimits`](crate::RateLimits)).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RateLimitRow {
    /// The name steps reference.
    pub name: String,
    /// Task starts per window (≥ 1).
    pub limit: u32,
    /// The window, milliseconds (≥ 1); windows are aligned to the epoch.
    pub period_ms: u64,
    /// When it was last set, epoch milliseconds (store clock).
    pub updated_at_ms: u64,
}

/// Refuses a limit no claim could apply (the API validates before; this keeps the table
/// sane for any caller).
pub(crate) fn check_rate_limit(name: &str, limit: u32, period_ms: u64) -> crate::Result<()> {
    if name.is_empty() || limit == 0 || period_ms == 0 || i64::try_from(period_ms).is_err() {
        return Err(crate::StoreError::InvalidArgument(format!(
            "rate limit {name:?}: {limit} per {period_ms} ms (a name, a limit of at least 1 \
             and a period of at least 1 ms are required)"
        )));
    }
    Ok(())
}

/// The flow columns of a task row as the backends write them, from its offer's flow.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct FlowColumns {
    pub(crate) priority: i64,
    /// Added to the store's clock: the row's `dispatch_rank`.
    pub(crate) rank_offset: i64,
    pub(crate) limited: bool,
    pub(crate) concurrency_key: Option<String>,
    pub(crate) concurrency_limit: Option<i64>,
    pub(crate) rate_key: Option<String>,
    pub(crate) rate_starts: Option<i64>,
    pub(crate) rate_period_ms: Option<i64>,
    pub(crate) rate_name: Option<String>,
    pub(crate) fair_key: Option<String>,
    pub(crate) fair_weight: Option<i64>,
    /// The flow as JSON, `None` without one.
    pub(crate) flow: Option<String>,
    /// The required worker labels as a JSON object, `None` without any.
    pub(crate) labels: Option<String>,
    /// The sticky worker and its timeout (ms; `sticky_until` is the queue time plus it).
    pub(crate) sticky_worker: Option<String>,
    pub(crate) sticky_ms: Option<i64>,
}

impl FlowColumns {
    /// The columns of a row offered with `flow` (`None`: priority 3, unlimited).
    pub(crate) fn of(flow: Option<&Flow>) -> crate::Result<FlowColumns> {
        let priority = flow.map_or(orbit_engine::flow::DEFAULT_PRIORITY, Flow::priority);
        let step = i64::try_from(PRIORITY_STEP_MS).unwrap_or(i64::MAX);
        let (rate_starts, rate_period_ms, rate_name) =
            match flow.and_then(|f| f.rate.as_ref()).map(|r| &r.limit) {
                Some(RateSource::Inline { limit, per_ms }) => (
                    Some(i64::from(*limit)),
                    // A window of 0 ms means nothing: one millisecond is the shortest.
                    Some(i64::try_from((*per_ms).max(1)).unwrap_or(i64::MAX)),
                    None,
                ),
                Some(RateSource::Named(name)) => (None, None, Some(name.clone())),
                None => (None, None, None),
            };
        let json = flow.map(serde_json::to_string).transpose().map_err(|e| {
            crate::StoreError::InvalidArgument(format!("flow does not serialise: {e}"))
        })?;
        Ok(FlowColumns {
            priority: i64::from(priority),
            rank_offset: (i64::from(priority) - 1) * step,
            limited: flow.is_some_and(Flow::is_limited),
            concurrency_key: flow.and_then(|f| f.concurrency.as_ref()).map(|c| c.key.clone()),
            concurrency_limit: flow
                .and_then(|f| f.concurrency.as_ref())
                .map(|c| i64::from(c.limit)),
            rate_key: flow.and_then(|f| f.rate.as_ref()).map(|r| r.key.clone()),
            rate_starts,
            rate_period_ms,
            rate_name,
            fair_key: flow.and_then(|f| f.fairness.as_ref()).map(|f| f.key.clone()),
            fair_weight: flow.and_then(|f| f.fairness.as_ref()).map(|f| i64::from(f.weight)),
            flow: json,
            labels: flow.filter(|f| !f.labels.is_empty()).map(|f| labels_json(&f.labels)),
            sticky_worker: flow.and_then(|f| f.sticky.as_ref()).map(|s| s.worker.clone()),
            sticky_ms: flow
                .and_then(|f| f.sticky.as_ref())
                .map(|s| i64::try_from(s.timeout_ms).unwrap_or(i64::MAX)),
        })
    }
}

/// Labels as the queue stores and compares them: a JSON object, keys sorted.
pub(crate) fn labels_json(labels: &std::collections::BTreeMap<String, String>) -> String {
    serde_json::Value::Object(
        labels.iter().map(|(k, v)| (k.clone(), serde_json::Value::String(v.clone()))).collect(),
    )
    .to_string()
}

/// A stored `priority` and `flow` read back.
pub(crate) fn read_flow(priority: i64, flow: Option<&str>) -> crate::Result<(u8, Option<Flow>)> {
    let priority = u8::try_from(priority)
        .map_err(|_| crate::StoreError::corrupt("task priority", priority))?;
    let flow = flow
        .map(|text| {
            serde_json::from_str(text).map_err(|e| crate::StoreError::corrupt("task flow", e))
        })
        .transpose()?;
    Ok((priority, flow))
}

/// Whether limited rows may exist ([`TaskQueue::limited_possible`](crate::TaskQueue::limited_possible)),
/// kept by each store: unknown until the first check, then set by this process's commits
/// of limited rows and (PostgreSQL) by the `orbit_tasks` notifications saying so. Once
/// seen it stays set for the store's life.
#[derive(Debug, Default)]
pub(crate) struct FlowFlag(AtomicU8);

const UNKNOWN: u8 = 0;
const NONE_SEEN: u8 = 1;
const SEEN: u8 = 2;

impl FlowFlag {
    /// What is known without a read: `None` until the first check.
    pub(crate) fn known(&self) -> Option<bool> {
        match self.0.load(Ordering::Acquire) {
            SEEN => Some(true),
            NONE_SEEN => Some(false),
            _ => None,
        }
    }

    /// Limited rows exist (a commit wrote one, a notification said so).
    pub(crate) fn mark(&self) {
        self.0.store(SEEN, Ordering::Release);
    }

    /// The first check's answer; a [`FlowFlag::mark`] that came meanwhile wins.
    pub(crate) fn settle(&self, exists: bool) -> bool {
        if exists {
            self.mark();
            return true;
        }
        let _ = self.0.compare_exchange(UNKNOWN, NONE_SEEN, Ordering::AcqRel, Ordering::Acquire);
        self.known().unwrap_or(false)
    }

    /// Notifications may have been missed (a listener reconnected): a "none" answer is
    /// checked again at the next call.
    pub(crate) fn forget_none(&self) {
        let _ = self.0.compare_exchange(NONE_SEEN, UNKNOWN, Ordering::AcqRel, Ordering::Acquire);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use orbit_engine::{ConcurrencyKey, FairKey, RateKey};

    #[test]
    fn columns_follow_the_flow() {
        let none = FlowColumns::of(None).unwrap();
        assert_eq!((none.priority, none.rank_offset, none.limited), (3, 120_000, false));
        assert_eq!(none.flow, None);
        let urgent = Flow { priority: Some(1), ..Flow::default() };
        let c = FlowColumns::of(Some(&urgent)).unwrap();
        assert_eq!((c.priority, c.rank_offset, c.limited), (1, 0, false));
        assert_eq!(read_flow(c.priority, c.flow.as_deref()).unwrap(), (1, Some(urgent)));
        let limited = Flow {
            priority: Some(5),
            concurrency: Some(ConcurrencyKey { key: "g/a".into(), limit: 2 }),
            rate: Some(RateKey { key: "r/a".into(), limit: RateSource::Named("api".into()) }),
            fairness: Some(FairKey { key: "f/t".into(), weight: 7 }),
            ..Flow::default()
        };
        let c = FlowColumns::of(Some(&limited)).unwrap();
        assert_eq!((c.rank_offset, c.limited), (4 * 60_000, true));
        assert_eq!((c.fair_key.as_deref(), c.fair_weight), (Some("f/t"), Some(7)));
        assert_eq!((c.concurrency_key.as_deref(), c.concurrency_limit), (Some("g/a"), Some(2)));
        assert_eq!((c.rate_key.as_deref(), c.rate_name.as_deref()), (Some("r/a"), Some("api")));
        assert_eq!((c.rate_starts, c.rate_period_ms), (None, None));
        let inline = Flow {
            rate: Some(RateKey {
                key: "r".into(),
                limit: RateSource::Inline { limit: 2, per_ms: 0 },
            }),
            ..Flow::default()
        };
        let c = FlowColumns::of(Some(&inline)).unwrap();
        assert_eq!((c.rate_starts, c.rate_period_ms, c.limited), (Some(2), Some(1), true));
        assert_eq!((c.fair_key, c.fair_weight), (None, None));
        let fair =
            Flow { fairness: Some(FairKey { key: "f/a".into(), weight: 1 }), ..Flow::default() };
        let c = FlowColumns::of(Some(&fair)).unwrap();
        assert!(c.limited, "a fair row goes through the flow claim");
        assert!(read_flow(300, None).is_err());
        assert_eq!((none.labels, none.sticky_worker, none.sticky_ms), (None, None, None));
        let pooled = Flow {
            labels: [("region", "eu"), ("pool", "gpu")]
                .into_iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect(),
            sticky: Some(orbit_engine::StickyWorker { worker: "w1".into(), timeout_ms: 5_000 }),
            ..Flow::default()
        };
        let c = FlowColumns::of(Some(&pooled)).unwrap();
        assert_eq!(c.labels.as_deref(), Some(r#"{"pool":"gpu","region":"eu"}"#));
        assert_eq!(
            (c.sticky_worker.as_deref(), c.sticky_ms, c.limited),
            (Some("w1"), Some(5_000), false)
        );
        assert!(read_flow(3, Some("{")).is_err());
    }

    #[test]
    fn the_flag_is_unknown_until_checked_and_a_mark_wins() {
        let flag = FlowFlag::default();
        assert_eq!(flag.known(), None);
        assert!(!flag.settle(false));
        assert_eq!(flag.known(), Some(false));
        flag.forget_none();
        assert_eq!(flag.known(), None);
        flag.mark();
        assert!(flag.settle(false), "a mark meanwhile wins over a late check");
        flag.forget_none();
        assert_eq!(flag.known(), Some(true), "seen stays seen");
    }

    #[test]
    fn reasons_round_trip() {
        for r in WaitReason::ALL {
            assert_eq!(WaitReason::parse(r.as_str()).unwrap(), r);
        }
        assert!(WaitReason::parse("other").is_err());
    }
}
