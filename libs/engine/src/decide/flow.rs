//! Flow control of an attempt (issue 27; docs/flow-control.md): evaluated when a unit's
//! first attempt is scheduled, in the scope its `input` is rendered in (a `for_each`
//! element sees its element), and recorded in that `StepScheduled`. Retries and
//! redeliveries record the unit's flow again as it is (`units::reschedule`), so an attempt
//! never changes keys midway; a redelivery drops only the sticky worker (it was lost).
//!
//! Keys are scoped: a concurrency key and a fair key are `<group>/<value>`, a rate bucket
//! `<name or group>/<value>` (or just `<name or group>` without a `key`), the group being
//! the declared `group` or `<workflow name>.<step id>` (`<workflow name>` for the
//! workflow's `fairness`). Priority: the step's own, else the run's (its start request),
//! else the workflow's; fairness: the step's own, else the workflow's. The default
//! priority (3) is not recorded, so a definition without flow control records exactly
//! what it did before.
//!
//! Worker labels (`on:`, else the workflow's `worker_labels`) are evaluated like keys, each
//! value a string of at most [`MAX_KEY_BYTES`]. `sticky:` (the step's, else the
//! workflow's) records the worker of the run's latest `StepDispatched` with the timeout;
//! with no such worker yet nothing is sticky.

use super::Ctx;
use crate::event::Event;
use crate::flow::{
    ConcurrencyKey, FairKey, Flow, RateKey, RateSource, StickyWorker, DEFAULT_PRIORITY,
};
use crate::scope::{self, Site};
use crate::task_code::TaskCode;
use orbit_definition::flow::MAX_FAIR_WEIGHT;
use orbit_definition::{Priority, RateLimitKind, Step, Sticky, Template, Weight};
use serde_json::Value;

/// Why a field could not be evaluated: the `StepFailed` of the unit, ready to record.
pub(crate) type Failed = Box<Event>;

/// The flow of a task step's unit `k`, or the unit's `StepFailed` naming the field.
pub(crate) fn of_step(
    ctx: &Ctx<'_>,
    step: &Step,
    k: &str,
    site: &Site<'_>,
) -> Result<Option<Flow>, Failed> {
    let declared = &step.flow;
    // The step's own fair queue, else the workflow's, with its default group.
    let fair = match (&declared.fairness, &ctx.def.fairness) {
        (Some(f), _) => Some((f, format!("{}.{}", ctx.def.name, step.id))),
        (None, Some(f)) => Some((f, ctx.def.name.clone())),
        (None, None) => None,
    };
    // The step's own labels, else the workflow's (replaced, never merged).
    let labels = declared.labels.as_ref().or(ctx.def.worker_labels.as_ref());
    let sticky = match declared.sticky.or(ctx.def.sticky) {
        Some(Sticky::On { timeout_ms }) => ctx
            .state
            .last_worker
            .as_ref()
            .map(|worker| StickyWorker { worker: worker.clone(), timeout_ms }),
        Some(Sticky::Off) | None => None,
    };
    if declared.is_empty() && fair.is_none() && labels.is_none() && sticky.is_none() {
        return Ok(of_run(ctx));
    }
    let mut templates = declared.templates();
    if declared.fairness.is_none() {
        templates.extend(fair.iter().flat_map(|(f, _)| f.templates()));
    }
    if declared.labels.is_none() {
        templates.extend(labels.iter().flat_map(|l| l.values().cloned()));
    }
    let refs: Vec<&Template> = templates.iter().collect();
    let scope = scope::build(ctx.def, ctx.state, site, &refs);
    let eval = |t: &Template, field: &str| -> Result<Value, Failed> {
        t.render(&scope).map_err(|e| {
            let message = format!("step `{k}` {}", e.in_field(field));
            Box::new(Event::StepFailed {
                step: k.into(),
                error: crate::event::TaskError::fatal(e.code(), message),
            })
        })
    };
    let priority = match &declared.priority {
        Some(Priority::Fixed(p)) => Some(*p),
        Some(Priority::Expr(e)) => {
            let value = eval(&Template::Expr(e.clone()), "priority")?;
            Some(priority_of(&value).ok_or_else(|| {
                let got = shown(&value);
                failed(k, "priority", &format!("expected an integer from 1 to 5, got {got}"))
            })?)
        }
        None => run_priority(ctx),
    };
    let group = |declared: Option<&String>| {
        declared.cloned().unwrap_or_else(|| format!("{}.{}", ctx.def.name, step.id))
    };
    let concurrency = match &declared.concurrency {
        Some(c) => {
            let value = key_text(&eval(&c.key, "concurrency.key")?)
                .map_err(|m| failed(k, "concurrency.key", &m))?;
            let key = format!("{}/{value}", group(c.group.as_ref()));
            Some(ConcurrencyKey { key, limit: c.limit })
        }
        None => None,
    };
    let rate = match &declared.rate_limit {
        Some(r) => {
            let (scope_name, limit) = match &r.limit {
                RateLimitKind::Inline { limit, per_ms } => {
                    (group(r.group.as_ref()), RateSource::Inline { limit: *limit, per_ms: *per_ms })
                }
                RateLimitKind::Named(name) => (name.clone(), RateSource::Named(name.clone())),
            };
            let key = match &r.key {
                Some(t) => {
                    let value = key_text(&eval(t, "rate_limit.key")?)
                        .map_err(|m| failed(k, "rate_limit.key", &m))?;
                    format!("{scope_name}/{value}")
                }
                None => scope_name,
            };
            Some(RateKey { key, limit })
        }
        None => None,
    };
    let fairness = match fair {
        Some((f, default_group)) => {
            let value = key_text(&eval(&f.key, "fairness.key")?)
                .map_err(|m| failed(k, "fairness.key", &m))?;
            let group = f.group.clone().unwrap_or(default_group);
            let weight = match &f.weight {
                Weight::Fixed(w) => *w,
                Weight::Expr(e) => {
                    let value = eval(&Template::Expr(e.clone()), "fairness.weight")?;
                    weight_of(&value).ok_or_else(|| {
                        let expected = format!("an integer from 1 to {MAX_FAIR_WEIGHT}");
                        failed(
                            k,
                            "fairness.weight",
                            &format!("expected {expected}, got {}", shown(&value)),
                        )
                    })?
                }
            };
            Some(FairKey { key: format!("{group}/{value}"), weight })
        }
        None => None,
    };
    let mut evaluated = std::collections::BTreeMap::new();
    for (name, template) in labels.into_iter().flatten() {
        let field = format!("on.{name}");
        let value = key_text(&eval(template, &field)?).map_err(|m| failed(k, &field, &m))?;
        evaluated.insert(name.clone(), value);
    }
    Ok(normalise(Flow { priority, concurrency, rate, fairness, labels: evaluated, sticky }))
}

/// A redelivery's flow: the unit's, without its sticky worker (the attempt is redelivered
/// because that worker was lost).
pub(crate) fn unstuck(flow: Option<&Flow>) -> Option<Flow> {
    normalise(Flow { sticky: None, ..flow?.clone() })
}

/// The flow of an attempt nothing declares flow control for (a compensation task): the
/// run's priority, if any.
pub(crate) fn of_run(ctx: &Ctx<'_>) -> Option<Flow> {
    normalise(Flow { priority: run_priority(ctx), ..Flow::default() })
}

/// The run's start priority, else the workflow's default.
fn run_priority(ctx: &Ctx<'_>) -> Option<u8> {
    ctx.state.priority.or(ctx.def.priority)
}

/// One spelling per meaning: the default priority is left out, and a flow with nothing
/// left is none.
fn normalise(mut flow: Flow) -> Option<Flow> {
    if flow.priority == Some(DEFAULT_PRIORITY) {
        flow.priority = None;
    }
    (flow != Flow::default()).then_some(flow)
}

/// An evaluated priority: an integer within 1..=5.
fn priority_of(value: &Value) -> Option<u8> {
    // A whole double within 0..=255 converts exactly.
    #[allow(clippy::cast_possible_truncation, clippy::cast_sign_loss)]
    let n = value.as_u64().or_else(|| {
        value.as_f64().filter(|f| f.fract() == 0.0 && (0.0..=255.0).contains(f)).map(|f| f as u64)
    })?;
    orbit_definition::flow::is_priority(n).then(|| u8::try_from(n).ok()).flatten()
}

/// An evaluated weight: an integer within 1..=1000.
fn weight_of(value: &Value) -> Option<u32> {
    // A whole double within 0..=2^32 converts exactly.
    #[allow(clippy::cast_possible_truncation, clippy::cast_sign_loss)]
    let n = value.as_u64().or_else(|| {
        value
            .as_f64()
            .filter(|f| f.fract() == 0.0 && (0.0..=f64::from(u32::MAX)).contains(f))
            .map(|f| f as u64)
    })?;
    orbit_definition::flow::is_fair_weight(n).then(|| u32::try_from(n).ok()).flatten()
}

/// The longest evaluated key, in bytes: keys are recorded in the history and in every
/// task row of the attempt, and indexed.
pub const MAX_KEY_BYTES: usize = 256;

/// An evaluated key as text: a string as is, a number or boolean as its JSON text; at most
/// [`MAX_KEY_BYTES`].
pub(crate) fn key_text(value: &Value) -> Result<String, String> {
    let text = match value {
        Value::String(s) => s.clone(),
        Value::Number(_) | Value::Bool(_) => value.to_string(),
        other => return Err(format!("expected a string, number or boolean, got {}", shown(other))),
    };
    if text.len() > MAX_KEY_BYTES {
        return Err(format!("{} bytes, more than the {MAX_KEY_BYTES} a key may have", text.len()));
    }
    Ok(text)
}

/// A value for a message: its kind, and the value itself when it is short.
fn shown(value: &Value) -> String {
    let kind = orbit_definition::expr::kind_of(value);
    let text = value.to_string();
    if text.len() <= 40 {
        format!("{kind} {text}")
    } else {
        kind.to_string()
    }
}

fn failed(k: &str, field: &str, message: &str) -> Failed {
    let message = format!("step `{k}` {field}: {message}");
    Box::new(Event::StepFailed { step: k.into(), error: TaskCode::ExpressionError.fatal(message) })
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn priorities_and_keys_take_only_their_shapes() {
        assert_eq!(priority_of(&json!(1)), Some(1));
        assert_eq!(priority_of(&json!(5.0)), Some(5));
        for bad in [json!(0), json!(6), json!(2.5), json!(-1), json!("2"), json!(null)] {
            assert_eq!(priority_of(&bad), None, "{bad}");
        }
        assert_eq!(weight_of(&json!(1)), Some(1));
        assert_eq!(weight_of(&json!(1000.0)), Some(1000));
        for bad in [json!(0), json!(1001), json!(1.5), json!(-2), json!("2"), json!(null)] {
            assert_eq!(weight_of(&bad), None, "{bad}");
        }
        assert_eq!(key_text(&json!("eu")), Ok("eu".into()));
        assert!(key_text(&json!("k".repeat(MAX_KEY_BYTES))).is_ok());
        let long = key_text(&json!("k".repeat(MAX_KEY_BYTES + 1))).expect_err("too long");
        assert!(long.contains("257 bytes"), "{long}");
        assert_eq!(key_text(&json!(42)), Ok("42".into()));
        assert_eq!(key_text(&json!(true)), Ok("true".into()));
        for bad in [json!(null), json!([1]), json!({"a": 1})] {
            assert!(key_text(&bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn the_default_priority_alone_is_no_flow() {
        assert_eq!(normalise(Flow { priority: Some(3), ..Flow::default() }), None);
        assert_eq!(normalise(Flow::default()), None);
        let p1 = Flow { priority: Some(1), ..Flow::default() };
        assert_eq!(normalise(p1.clone()), Some(p1));
    }
}
