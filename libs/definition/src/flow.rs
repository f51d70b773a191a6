//! Flow control a task step declares (issue 27; docs/flow-control.md): the priority of its
//! attempts, the concurrency key they hold while a worker runs them, the rate-limit
//! bucket each start takes from and the fair queue whose share of the workers they use.
//!
//! This is the declaration as written, validated: expressions compiled, limits checked,
//! group and limit names well-formed. The engine evaluates it when it schedules an attempt
//! (the `for_each` element in scope) and records the result; dispatch enforces it.

use crate::expr::{Expr, Template};

/// The first priority: attempts of priority 1 are taken first.
pub const MIN_PRIORITY: u8 = 1;

/// The last priority: attempts of priority 5 are taken last.
pub const MAX_PRIORITY: u8 = 5;

/// Longest `group` or named-limit `name`.
pub const MAX_FLOW_NAME_LEN: usize = 128;

/// The largest fairness `weight`; the smallest is 1, the default.
pub const MAX_FAIR_WEIGHT: u32 = 1000;

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
}

impl StepFlow {
    /// Whether nothing is declared.
    #[must_use]
    pub fn is_empty(&self) -> bool {
        self.priority.is_none()
            && self.concurrency.is_none()
            && self.rate_limit.is_none()
            && self.fairness.is_none()
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
        out
    }
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
    fn names_and_priorities() {
        assert!(is_flow_name("billing.eu-1_a") && is_flow_name(&"a".repeat(128)));
        assert!(!is_flow_name("") && !is_flow_name(&"a".repeat(129)) && !is_flow_name("a/b"));
        assert!(!is_flow_name("a b"));
        assert!((1..=5).all(is_priority));
        assert!(!is_priority(0) && !is_priority(6));
        assert!(is_fair_weight(1) && is_fair_weight(1000));
        assert!(!is_fair_weight(0) && !is_fair_weight(1001));
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
        };
        assert_eq!(flow.templates().len(), 4);
        assert!(!flow.is_empty() && StepFlow::default().is_empty());
    }
}
