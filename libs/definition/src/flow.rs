//! Flow control a task step declares (issue 27; docs/flow-control.md): the priority of its
//! attempts, the concurrency key they hold while a worker runs them, the rate-limit
//! bucket each start takes from, the fair queue whose share of the workers they use, the
//! worker labels they require (`on:`) and whether they prefer the execution's previous
//! worker (`sticky:`).
//!
//! This is the declaration as written, validated: expressions compiled, limits checked,
//! group and limit names well-formed. The engine evaluates it when it schedules an attempt
//! (the `for_each` element in scope) and records the result; dispatch enforces it.

use crate::expr::{Expr, Template};
use std::collections::BTreeMap;

/// The first priority: attempts of priority 1 are taken first.
pub const MIN_PRIORITY: u8 = 1;

/// The last priority: attempts of priority 5 are taken last.
pub const MAX_PRIORITY: u8 = 5;

/// Longest `group` or named-limit `name`.
pub const MAX_FLOW_NAME_LEN: usize = 128;

/// The largest fairness `weight`; the smallest is 1, the default.
pub const MAX_FAIR_WEIGHT: u32 = 1000;

/// The most labels one `on:` may require.
pub const MAX_LABELS: usize = 16;

/// Longest label value, in bytes (literal or evaluated).
pub const MAX_LABEL_VALUE_BYTES: usize = 256;

/// The fallback timeout of `sticky: true`: how long an attempt waits for the execution's
/// previous worker before any eligible worker may take it.
pub const DEFAULT_STICKY_TIMEOUT_MS: u64 = 5_000;

/// The longest `sticky: {timeout}`: one hour.
pub const MAX_STICKY_TIMEOUT_MS: u64 = 3_600_000;

/// Whether `n` is a fairness weight (`1..=1000`).
#[must_use]
pub fn is_fair_weight(n: u64) -> bool {
    (1..=u64::from(MAX_FAIR_WEIGHT)).contains(&n)
}

/// Whether `n` is a priority (`1..=5`).
#[must_use]
pub fn is_priority(n: u64) -> bool {
    (u64::from(MIN_PRIORITY)..=u64::from(MAX_PRIORITY)).contains(&n)
}

/// Whether `s` is a `group` or a named limit: `[A-Za-z0-9_.-]{1,128}`.
#[must_use]
pub fn is_flow_name(s: &str) -> bool {
    !s.is_empty()
        && s.len() <= MAX_FLOW_NAME_LEN
        && s.bytes().all(|b| b.is_ascii_alphanumeric() || matches!(b, b'_' | b'.' | b'-'))
}

/// The flow control of one task step; every field optional.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct StepFlow {
    /// `priority:`: overrides the run's and the workflow's priority.
    pub priority: Option<Priority>,
    /// `concurrency:`: at most `limit` attempts holding the same key run at once.
    pub concurrency: Option<Concurrency>,
    /// `rate_limit:`: each start of an attempt takes one from the bucket.
    pub rate_limit: Option<RateLimit>,
    /// `fairness:`: the fair queue the attempts wait in (the workflow's when `None`).
    pub fairness: Option<Fairness>,
    /// `on:`: the worker labels an attempt requires (the workflow's `worker_labels` when
    /// `None`; the step's map replaces it, it is not merged).
    pub labels: Option<Labels>,
    /// `sticky:`: prefer the execution's previous worker (the workflow's when `None`).
    pub sticky: Option<Sticky>,
}

impl StepFlow {
    /// Whether nothing is declared.
    #[must_use]
    pub fn is_empty(&self) -> bool {
        self.priority.is_none()
            && self.concurrency.is_none()
            && self.rate_limit.is_none()
            && self.fairness.is_none()
            && self.labels.is_none()
            && self.sticky.is_none()
    }

    /// The templates evaluated when an attempt is scheduled (what the scope must bind).
    #[must_use]
    pub fn templates(&self) -> Vec<Template> {
        let mut out = Vec::new();
        if let Some(Priority::Expr(e)) = &self.priority {
            out.push(Template::Expr(e.clone()));
        }
        if let Some(c) = &self.concurrency {
            out.push(c.key.clone());
        }
        if let Some(key) = self.rate_limit.as_ref().and_then(|r| r.key.as_ref()) {
            out.push(key.clone());
        }
        if let Some(f) = &self.fairness {
            out.extend(f.templates());
        }
        if let Some(l) = &self.labels {
            out.extend(l.values().cloned());
        }
        out
    }
}

/// `on: {label: value, ...}`: a worker takes the attempt only if its `Hello.labels` hold
/// every pair. Values are string templates, evaluated when the attempt is scheduled.
pub type Labels = BTreeMap<String, Template>;

/// `sticky:` as declared.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Sticky {
    /// `sticky: false`: not sticky (a step turning the workflow's default off).
    Off,
    /// `sticky: true` or `sticky: {timeout}`: only the execution's previous worker may take
    /// the attempt until `timeout_ms` after it was queued; any eligible worker after that.
    On {
        /// The fallback timeout, 1 ms ..= [`MAX_STICKY_TIMEOUT_MS`].
        timeout_ms: u64,
    },
}

/// Whether `s` is a label name: `[A-Za-z0-9_.-/]{1,128}`.
#[must_use]
pub fn is_label_name(s: &str) -> bool {
    !s.is_empty()
        && s.len() <= MAX_FLOW_NAME_LEN
        && s.bytes().all(|b| b.is_ascii_alphanumeric() || matches!(b, b'_' | b'.' | b'-' | b'/'))
}

/// A step's priority: a number, or an expression evaluated per attempt.
#[derive(Debug, Clone, PartialEq)]
pub enum Priority {
    /// `priority: 2`, within `1..=5`.
    Fixed(u8),
    /// `priority: ${{ ... }}`: must evaluate to an integer within `1..=5`.
    Expr(Expr),
}

/// `concurrency: {key, limit, group?}`.
#[derive(Debug, Clone, PartialEq)]
pub struct Concurrency {
    /// A string template (literal, one expression, or text around expressions), evaluated
    /// to the key's value; a number or boolean counts as its JSON text.
    pub key: Template,
    /// Most attempts holding one key that may run at once (≥ 1).
    pub limit: u32,
    /// The scope of the keys; `None`: `<workflow name>.<step id>`.
    pub group: Option<String>,
}

/// `rate_limit: {key?, limit, per, group?}` or `rate_limit: {key?, name}`.
#[derive(Debug, Clone, PartialEq)]
pub struct RateLimit {
    /// The partition key template; `None`: one bucket for the whole group (or name).
    pub key: Option<Template>,
    /// Where the limit comes from.
    pub limit: RateLimitKind,
    /// The scope of an inline limit's buckets; `None`: `<workflow name>.<step id>`. Always
    /// `None` with a named limit, which is its own scope.
    pub group: Option<String>,
}

/// `fairness: {key, weight?, group?}`: dispatch shares the workers among the keys of a
/// group in proportion to their weights (docs/flow-control.md, "Fair queues").
#[derive(Debug, Clone, PartialEq)]
pub struct Fairness {
    /// A string template, evaluated to the key's value as a concurrency key is.
    pub key: Template,
    /// The key's weight; `weight: 1` when not written.
    pub weight: Weight,
    /// The scope of the keys; `None`: `<workflow name>.<step id>` on a step,
    /// `<workflow name>` for the workflow's default.
    pub group: Option<String>,
}

impl Fairness {
    /// The templates evaluated when an attempt is scheduled.
    #[must_use]
    pub fn templates(&self) -> Vec<Template> {
        let mut out = vec![self.key.clone()];
        if let Weight::Expr(e) = &self.weight {
            out.push(Template::Expr(e.clone()));
        }
        out
    }
}

/// A fairness weight: a number, or an expression evaluated per attempt.
#[derive(Debug, Clone, PartialEq)]
pub enum Weight {
    /// `weight: 2`, within `1..=1000`.
    Fixed(u32),
    /// `weight: ${{ ... }}`: must evaluate to an integer within `1..=1000`.
    Expr(Expr),
}

/// What happens to a new execution whose workflow-level concurrency key is full
/// (`on_limit:`; docs/flow-control.md, "Workflow concurrency").
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum OnLimit {
    /// It is created and waits, in start order, until it holds a slot (the default).
    #[default]
    Queue,
    /// It is cancelled at once and never runs a step.
    CancelNewest,
    /// It takes a slot; the oldest holders beyond the limit are cancelled.
    CancelInProgress,
}

impl OnLimit {
    /// Every value, as written in a definition.
    pub const ALL: [OnLimit; 3] =
        [OnLimit::Queue, OnLimit::CancelNewest, OnLimit::CancelInProgress];

    /// The name written in a definition (and stored with a slot request).
    #[must_use]
    pub fn as_str(self) -> &'static str {
        match self {
            OnLimit::Queue => "queue",
            OnLimit::CancelNewest => "cancel_newest",
            OnLimit::CancelInProgress => "cancel_in_progress",
        }
    }

    /// Parses a written name.
    #[must_use]
    pub fn parse(s: &str) -> Option<OnLimit> {
        OnLimit::ALL.into_iter().find(|o| o.as_str() == s)
    }
}

/// One workflow-level `concurrency:` key: a whole execution holds a slot of it from before
/// its first step until it closes.
#[derive(Debug, Clone, PartialEq)]
pub struct WorkflowConcurrency {
    /// A string template over `input` and `execution`, evaluated once per run.
    pub key: Template,
    /// Most executions holding one key at once (≥ 1).
    pub limit: u32,
    /// What a new execution does when the key is full.
    pub on_limit: OnLimit,
}

/// The limit of a [`RateLimit`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RateLimitKind {
    /// `limit` starts per window of `per_ms` milliseconds.
    Inline {
        /// Starts per window (≥ 1).
        limit: u32,
        /// The window, milliseconds (≥ 1).
        per_ms: u64,
    },
    /// A server-wide limit of this name.
    Named(String),
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn on_limit_names_round_trip() {
        for o in OnLimit::ALL {
            assert_eq!(OnLimit::parse(o.as_str()), Some(o));
        }
        assert_eq!(OnLimit::parse("drop"), None);
        assert_eq!(OnLimit::default(), OnLimit::Queue);
    }

    #[test]
    fn names_and_priorities() {
        assert!(is_flow_name("billing.eu-1_a") && is_flow_name(&"a".repeat(128)));
        assert!(!is_flow_name("") && !is_flow_name(&"a".repeat(129)) && !is_flow_name("a/b"));
        assert!(!is_flow_name("a b"));
        assert!((1..=5).all(is_priority));
        assert!(!is_priority(0) && !is_priority(6));
        assert!(is_fair_weight(1) && is_fair_weight(1000));
        assert!(!is_fair_weight(0) && !is_fair_weight(1001));
        assert!(is_label_name("pool") && is_label_name("orbit.dev/zone-1_a"));
        assert!(!is_label_name("") && !is_label_name("a b") && !is_label_name("a=b"));
        assert!(!is_label_name(&"a".repeat(129)));
    }

    #[test]
    fn templates_list_what_is_evaluated() {
        let key = Template::compile(&serde_json::json!("${{ input.a }}")).unwrap();
        let flow = StepFlow {
            priority: Some(Priority::Expr(Expr::compile("input.p").unwrap())),
            concurrency: Some(Concurrency { key: key.clone(), limit: 1, group: None }),
            rate_limit: Some(RateLimit {
                key: None,
                limit: RateLimitKind::Named("stripe".into()),
                group: None,
            }),
            fairness: Some(Fairness {
                key: key.clone(),
                weight: Weight::Expr(Expr::compile("input.w").unwrap()),
                group: None,
            }),
            labels: Some(Labels::from([("pool".to_string(), key.clone())])),
            sticky: Some(Sticky::On { timeout_ms: DEFAULT_STICKY_TIMEOUT_MS }),
        };
        assert_eq!(flow.templates().len(), 5);
        assert!(!flow.is_empty() && StepFlow::default().is_empty());
    }
}
