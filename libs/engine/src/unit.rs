//! Unit keys: the names of schedulable pieces of a step, and what is derived from them.
//!
//! Grammar: `step`, `step[i]` (a `for_each` element), `group.step` (a step inside a
//! group, any number of groups deep: `g.h.step`, `g.step[i]`; inside element `i` of a
//! `for_each` group or iteration `i` of a repeat: `g[i].step`), `compensate:<unit>`,
//! `on:<outcome>:<step>`, `on_signal:<signal>@<seq>:<step>`, `update:<update>@<seq>:<step>`
//! (the seq of the instance's `UpdateAccepted`; handler bodies may fan out too:
//! `on:failure:alert[2]`). The idempotency key and the retry jitter are derived from the
//! key, so they are stable across retries, redeliveries and replays.

use orbit_definition::{Body, Outcome, RetryPolicy};
use sha2::{Digest, Sha256};
use std::fmt;

/// Which body a unit's step belongs to, with the handler instance for `on_signal`.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Scope {
    /// The main body.
    Main,
    /// An `on.<outcome>` handler body.
    On(Outcome),
    /// One `on_signal` handler instance, started by the signal with history seq `seq`.
    OnSignal(String, u64),
    /// One update handler instance, started by the `UpdateAccepted` with history seq `seq`.
    Update(String, u64),
}

impl Scope {
    /// The prefix of unit keys in this scope.
    #[must_use]
    pub fn prefix(&self) -> String {
        match self {
            Scope::Main => String::new(),
            Scope::On(o) => format!("on:{}:", o.as_str()),
            Scope::OnSignal(name, seq) => format!("on_signal:{name}@{seq}:"),
            Scope::Update(name, seq) => format!("update:{name}@{seq}:"),
        }
    }

    /// The definition body the scope's steps come from.
    #[must_use]
    pub fn body(&self) -> Body {
        match self {
            Scope::Main => Body::Main,
            Scope::On(o) => Body::On(*o),
            Scope::OnSignal(name, _) => Body::OnSignal(name.clone()),
            Scope::Update(name, _) => Body::Update(name.clone()),
        }
    }
}

/// A parsed unit key.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct UnitKey {
    /// `compensate:` — this unit undoes the inner unit.
    pub compensate: bool,
    /// The body and instance.
    pub scope: Scope,
    /// The step id, or its path inside groups (`group.id`).
    pub step: String,
    /// The `for_each` element.
    pub index: Option<usize>,
}

impl UnitKey {
    /// The unit of a step (no element).
    #[must_use]
    pub fn step(scope: Scope, step: &str) -> UnitKey {
        UnitKey { compensate: false, scope, step: step.to_string(), index: None }
    }

    /// Parses a key; `None` if it does not follow the grammar.
    #[must_use]
    pub fn parse(key: &str) -> Option<UnitKey> {
        if let Some(inner) = key.strip_prefix("compensate:") {
            let mut k = UnitKey::parse(inner)?;
            if k.compensate {
                return None;
            }
            k.compensate = true;
            return Some(k);
        }
        let (scope, rest) = if let Some(rest) = key.strip_prefix("on:") {
            let (outcome, rest) = rest.split_once(':')?;
            (Scope::On(Outcome::parse(outcome)?), rest)
        } else if let Some(rest) = key.strip_prefix("on_signal:") {
            let (instance, rest) = rest.split_once(':')?;
            let (name, seq) = instance.rsplit_once('@')?;
            (Scope::OnSignal(name.to_string(), seq.parse().ok()?), rest)
        } else if let Some(rest) = key.strip_prefix("update:") {
            let (instance, rest) = rest.split_once(':')?;
            let (name, seq) = instance.rsplit_once('@')?;
            (Scope::Update(name.to_string(), seq.parse().ok()?), rest)
        } else {
            (Scope::Main, key)
        };
        let (step, index) = match rest.strip_suffix(']').and_then(|r| r.rsplit_once('[')) {
            Some((step, idx)) => (step, Some(index_of(idx)?)),
            None => (rest, None),
        };
        // `id`, or `group.id` (`g.h.id`) for a step inside groups, where a list that runs
        // more than once names its run (`g[2].id`: an element of a `for_each` group, or an
        // iteration of a repeat).
        let name =
            |p: &str| !p.is_empty() && p.chars().all(|c| c.is_ascii_alphanumeric() || c == '_');
        let mut parts = step.split('.').peekable();
        while let Some(p) = parts.next() {
            let ok = match p.strip_suffix(']').and_then(|r| r.split_once('[')) {
                Some((id, idx)) if parts.peek().is_some() => name(id) && index_of(idx).is_some(),
                _ => name(p),
            };
            if !ok {
                return None;
            }
        }
        Some(UnitKey { compensate: false, scope, step: step.to_string(), index })
    }

    /// The element `i` of this (fan-out) unit.
    #[must_use]
    pub fn element(&self, i: usize) -> UnitKey {
        UnitKey { index: Some(i), ..self.clone() }
    }

    /// The compensation unit of this unit.
    #[must_use]
    pub fn compensation(&self) -> UnitKey {
        UnitKey { compensate: true, ..self.clone() }
    }

    /// The fan-out parent of an element (itself otherwise).
    #[must_use]
    pub fn parent(&self) -> UnitKey {
        UnitKey { index: None, ..self.clone() }
    }
}

/// An element or iteration index: decimal digits, no sign, no leading zero but `0`.
fn index_of(digits: &str) -> Option<usize> {
    let canonical = !digits.is_empty()
        && digits.bytes().all(|b| b.is_ascii_digit())
        && (digits == "0" || !digits.starts_with('0'));
    canonical.then(|| digits.parse().ok()).flatten()
}

impl fmt::Display for UnitKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.compensate {
            f.write_str("compensate:")?;
        }
        write!(f, "{}{}", self.scope.prefix(), self.step)?;
        if let Some(i) = self.index {
            write!(f, "[{i}]")?;
        }
        Ok(())
    }
}

/// The body-qualified name of a step: the unit-key scope prefix of its body without an
/// instance seq, then the id (`charge`, `on:failure:alert`, `on_signal:approve:notify`,
/// `update:resize:apply`). Migrations name steps this way (`crate::migrate`).
#[must_use]
pub fn qualified_step(body: &Body, id: &str) -> String {
    match body {
        Body::Main => id.to_string(),
        Body::On(o) => format!("on:{}:{id}", o.as_str()),
        Body::OnSignal(name) => format!("on_signal:{name}:{id}"),
        Body::Update(name) => format!("update:{name}:{id}"),
    }
}

/// Parses a [`qualified_step`] name back into its body and step id; `None` if it does not
/// follow that grammar.
#[must_use]
pub fn parse_qualified_step(name: &str) -> Option<(Body, String)> {
    let (body, id) = if let Some(rest) = name.strip_prefix("on:") {
        let (outcome, id) = rest.split_once(':')?;
        (Body::On(Outcome::parse(outcome)?), id)
    } else if let Some(rest) = name.strip_prefix("on_signal:") {
        let (signal, id) = rest.split_once(':')?;
        (Body::OnSignal(signal.to_string()), id)
    } else if let Some(rest) = name.strip_prefix("update:") {
        let (update, id) = rest.split_once(':')?;
        (Body::Update(update.to_string()), id)
    } else {
        (Body::Main, name)
    };
    let identifier = id.chars().next().is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
        && id.chars().all(|c| c.is_ascii_alphanumeric() || c == '_');
    identifier.then(|| (body, id.to_string()))
}

/// The idempotency key of a unit: the same for every attempt and redelivery.
#[must_use]
pub fn idempotency_key(execution_id: &str, run: u32, unit: &str) -> String {
    format!("{execution_id}:{run}:{unit}")
}

/// The id of the child execution a unit starts: deterministic, so starting it again after a
/// crash is a no-op. Runs after the first are part of the id.
#[must_use]
pub fn child_execution_id(parent: &str, run: u32, unit: &str) -> String {
    if run <= 1 {
        format!("{parent}/{unit}")
    } else {
        format!("{parent}/run{run}/{unit}")
    }
}

/// The delay before `next_attempt` (2 = the first retry): exponential from
/// `initial_interval`, capped at `max_interval`, minus up to 10% deterministic jitter
/// derived from the idempotency key, so it never exceeds the cap and replays identically.
#[must_use]
#[allow(clippy::cast_possible_truncation, clippy::cast_sign_loss, clippy::cast_precision_loss)]
pub fn retry_delay_ms(policy: &RetryPolicy, next_attempt: u32, idempotency_key: &str) -> u64 {
    let exponent = i32::try_from(next_attempt.saturating_sub(2)).unwrap_or(i32::MAX);
    let raw = policy.initial_interval_ms as f64 * policy.backoff.powi(exponent);
    let capped = raw.min(policy.max_interval_ms as f64);
    let digest = Sha256::digest(format!("{idempotency_key}#{next_attempt}").as_bytes());
    let fraction = f64::from(u16::from_be_bytes([digest[0], digest[1]])) / 65_536.0;
    (capped * (1.0 - 0.1 * fraction)).round() as u64
}

/// The group prefix of a step path: `""` for `id`, `"g."` for `g.id`, `"g.h."` for `g.h.id`.
#[must_use]
pub fn group_prefix(step: &str) -> &str {
    step.rfind('.').map_or("", |i| &step[..=i])
}

/// The group prefixes from `group` out to its body: `"g.h."`, `"g."`, `""` (with the runs
/// of loops: `"g[2].h."`, `"g[2]."`, `""`).
pub fn enclosing(group: &str) -> impl Iterator<Item = &str> {
    let mut next = Some(group);
    std::iter::from_fn(move || {
        let p = next?;
        next = p.strip_suffix('.').map(group_prefix);
        Some(p)
    })
}

/// Whether unit `key` is a step inside a group (its last segment holds a `.`): its failure
/// fails its group, not the run.
#[must_use]
pub fn in_group(key: &str) -> bool {
    key.rsplit(':').next().is_some_and(|last| last.contains('.'))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_of_steps_inside_groups_and_switches() {
        for key in ["g.sub", "g.h.sub[2]", "compensate:g.sub", "on:failure:sw.1.x", "sw.0.g.y"] {
            let parsed = UnitKey::parse(key).unwrap_or_else(|| panic!("{key}"));
            assert_eq!(parsed.to_string(), key);
        }
        assert_eq!(UnitKey::parse("g.sub[2]").unwrap().parent().to_string(), "g.sub");
        for key in ["g[2].sub", "g[0].h[11].sub[3]", "compensate:r[1].x", "on:failure:r[0].x"] {
            let parsed = UnitKey::parse(key).unwrap_or_else(|| panic!("{key}"));
            assert_eq!(parsed.to_string(), key);
        }
        let element = UnitKey::parse("g[1].h[2]").unwrap();
        assert_eq!((element.step.as_str(), element.index), ("g[1].h", Some(2)));
        assert_eq!(group_prefix("g[2].sub"), "g[2].");
        assert!(in_group("g[2].sub") && !in_group("g[2]"));
        for bad in ["g.", ".g", "g..h", "g.h-1", "g[x].a", "g[01].a", "g[].a", "g[1]x.a", "[1].a"] {
            assert!(UnitKey::parse(bad).is_none(), "{bad}");
        }
        assert_eq!((group_prefix("a"), group_prefix("g.h.a")), ("", "g.h."));
        assert!(in_group("g.sub") && in_group("on_signal:a.b@3:g.x"));
        assert!(!in_group("on_signal:a.b@3:x") && !in_group("x"));
    }

    #[test]
    fn keys_round_trip() {
        for key in [
            "charge",
            "reserve[3]",
            "compensate:reserve[3]",
            "on:failure:alert",
            "on:timeout:alert[0]",
            "on_signal:note@12:record",
            "compensate:charge",
        ] {
            let parsed = UnitKey::parse(key).unwrap_or_else(|| panic!("{key}"));
            assert_eq!(parsed.to_string(), key);
        }
        for bad in ["", "a[x]", "on:never:x", "compensate:compensate:a", "on_signal:x:y", "a b"] {
            assert!(UnitKey::parse(bad).is_none(), "{bad}");
        }
    }

    #[test]
    fn qualified_steps_round_trip() {
        for (body, id, name) in [
            (Body::Main, "charge", "charge"),
            (Body::On(Outcome::Failure), "alert", "on:failure:alert"),
            (Body::OnSignal("approve".into()), "notify", "on_signal:approve:notify"),
            (Body::Update("re.size-1".into()), "apply", "update:re.size-1:apply"),
        ] {
            assert_eq!(qualified_step(&body, id), name);
            assert_eq!(parse_qualified_step(name), Some((body, id.to_string())));
        }
        for bad in ["", "on:never:x", "on:failure:", "a[0]", "on_signal:x", "2a", "compensate:a"] {
            assert_eq!(parse_qualified_step(bad), None, "{bad}");
        }
    }

    #[test]
    fn retry_delay_is_capped_exponential_with_bounded_jitter() {
        let p = RetryPolicy {
            max_attempts: 10,
            initial_interval_ms: 1000,
            backoff: 2.0,
            max_interval_ms: 5000,
            non_retryable: vec![],
            max_redeliveries: 5,
        };
        let d2 = retry_delay_ms(&p, 2, "k");
        let d3 = retry_delay_ms(&p, 3, "k");
        let d9 = retry_delay_ms(&p, 9, "k");
        assert!((900..=1000).contains(&d2), "{d2}");
        assert!((1800..=2000).contains(&d3), "{d3}");
        assert!((4500..=5000).contains(&d9), "{d9}");
        assert_eq!(d3, retry_delay_ms(&p, 3, "k"), "deterministic");
    }
}
