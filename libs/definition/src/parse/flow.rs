//! Flow control fields (issue 27): a task step's `priority`, `concurrency`, `rate_limit`,
//! `fairness`, `on` (worker labels) and `sticky`, and the workflow's default `priority`,
//! `fairness`, `worker_labels` and `sticky`.
//!
//! Keys, weights and step priorities may be expressions; they are compiled in the scope of
//! the step's per-element fields (the `for_each` element and `index` are visible) and, like
//! `input`, order the step after the steps they read. The workflow's `priority` is a number
//! only: it is a default, known before anything runs. The workflow's `fairness` may hold
//! expressions, but they read only `input` and `execution`: it is evaluated for every task
//! step, and a step may run before any other has; so may the values of its
//! `worker_labels` (the workflow's `on:` is taken by its outcome handlers).

use crate::error::ErrorCode;
use crate::expr::Template;
use crate::flow::{
    is_fair_weight, is_flow_name, is_label_name, is_priority, Concurrency, Fairness, Labels,
    OnLimit, Priority, RateLimit, RateLimitKind, StepFlow, Sticky, Weight, WorkflowConcurrency,
    DEFAULT_STICKY_TIMEOUT_MS, MAX_FAIR_WEIGHT, MAX_LABELS, MAX_LABEL_VALUE_BYTES, MAX_PRIORITY,
    MAX_STICKY_TIMEOUT_MS, MIN_PRIORITY,
};
use crate::parse::exprs::{Compiler, Vars};
use crate::parse::fields::duration;
use crate::parse::reader::{index_path, wrong_type, Errors, Obj};
use serde_json::Value;

/// The step fields this module reads.
pub(crate) const FIELDS: [&str; 6] =
    ["priority", "concurrency", "rate_limit", "fairness", "on", "sticky"];

const CONCURRENCY_FIELDS: [&str; 3] = ["key", "limit", "group"];
const RATE_FIELDS: [&str; 5] = ["key", "limit", "per", "name", "group"];
const FAIRNESS_FIELDS: [&str; 3] = ["key", "weight", "group"];
const WORKFLOW_CONCURRENCY_FIELDS: [&str; 3] = ["key", "limit", "on_limit"];

/// Most workflow-level concurrency keys one definition declares.
pub(crate) const MAX_WORKFLOW_KEYS: usize = 8;

/// The refusal of a second concurrency key on one step.
const ONE_KEY: &str = "one concurrency key per step for now";

/// Reads a task step's flow control; `vars` is the scope of its per-element fields.
pub(crate) fn step(obj: &mut Obj, vars: &Vars, c: &mut Compiler) -> StepFlow {
    StepFlow {
        priority: step_priority(obj, vars, c),
        concurrency: concurrency(obj, vars, c),
        rate_limit: rate_limit(obj, vars, c),
        fairness: fairness(obj, vars, c),
        labels: labels(obj, "on", vars, c),
        sticky: sticky(obj, c.errors),
    }
}

/// The workflow's `worker_labels` (a step's `on:` shape) and `sticky`; the labels' values
/// read only `input` and `execution`, as the workflow's `fairness` does.
pub(crate) fn workflow_workers(
    obj: &mut Obj,
    errors: &mut Errors,
) -> (Option<Labels>, Option<Sticky>) {
    let mut refs = Vec::new();
    let labels =
        labels(obj, "worker_labels", &Vars::default(), &mut Compiler { errors, refs: &mut refs });
    for r in refs {
        let message = format!(
            "the workflow's `worker_labels` are evaluated for every task step, before any \
             step has run: they may read `input` and `execution`, not `steps.{}` (a step's \
             own `on` may)",
            r.id
        );
        errors.push(&r.path, ErrorCode::InvalidExpression, message);
    }
    (labels, sticky(obj, errors))
}

/// `on` (or `worker_labels`): a mapping of label name to a string value or template, at
/// most [`MAX_LABELS`] of them.
fn labels(obj: &mut Obj, field: &str, vars: &Vars, c: &mut Compiler) -> Option<Labels> {
    let o = obj.object(field, "worker labels `{name: value}`", c.errors)?;
    let names = o.keys();
    if names.len() > MAX_LABELS {
        let message = format!("{} labels; at most {MAX_LABELS} may be required", names.len());
        c.errors.push(o.path(), ErrorCode::InvalidValue, message);
        return None;
    }
    let mut out = Labels::new();
    let mut ok = true;
    for name in names {
        let at = o.at(&name);
        if !is_label_name(&name) {
            let message =
                format!("label name `{name}` must match [A-Za-z0-9_.-/] (1 to 128 characters)");
            c.errors.push(&at, ErrorCode::InvalidValue, message);
            ok = false;
            continue;
        }
        let value = o.peek(&name).unwrap_or(&Value::Null);
        match value {
            Value::String(s) if s.is_empty() => {
                c.errors.push(&at, ErrorCode::InvalidValue, "a label value must not be empty");
                ok = false;
            }
            Value::String(s) if s.len() > MAX_LABEL_VALUE_BYTES => {
                let message = format!(
                    "{} bytes, more than the {MAX_LABEL_VALUE_BYTES} a label value may have",
                    s.len()
                );
                c.errors.push(&at, ErrorCode::InvalidValue, message);
                ok = false;
            }
            Value::String(_) => match c.template(value, &at, vars, true) {
                Some(t) => {
                    out.insert(name, t);
                }
                None => ok = false,
            },
            other => {
                wrong_type(c.errors, &at, "a string or a `${{ ... }}` expression", other);
                ok = false;
            }
        }
    }
    ok.then_some(out)
}

/// `sticky`: `true` (the default timeout), `false`, or `{timeout}`.
fn sticky(obj: &mut Obj, errors: &mut Errors) -> Option<Sticky> {
    let value = obj.get("sticky")?;
    let path = obj.at("sticky");
    match value {
        Value::Bool(true) => Some(Sticky::On { timeout_ms: DEFAULT_STICKY_TIMEOUT_MS }),
        Value::Bool(false) => Some(Sticky::Off),
        Value::Object(_) => {
            let mut o = Obj::new(value, &path, "`sticky: {timeout}`", errors)?;
            let timeout = if o.peek("timeout").is_some() {
                duration(&mut o, "timeout", true, errors)
            } else {
                Some(DEFAULT_STICKY_TIMEOUT_MS)
            };
            let at = o.at("timeout");
            o.finish(errors, &["timeout"]);
            let timeout_ms = timeout?;
            if timeout_ms > MAX_STICKY_TIMEOUT_MS {
                let message = format!(
                    "{} is longer than the longest sticky timeout, {}",
                    crate::duration::format_duration(timeout_ms),
                    crate::duration::format_duration(MAX_STICKY_TIMEOUT_MS)
                );
                errors.push(&at, ErrorCode::InvalidValue, message);
                return None;
            }
            Some(Sticky::On { timeout_ms })
        }
        other => {
            wrong_type(errors, &path, "`true`, `false` or `{timeout}`", other);
            None
        }
    }
}

/// The workflow's `fairness`: a step's shape, its expressions reading only `input` and
/// `execution` (a `steps.<id>` reference is `INVALID_EXPRESSION` at the field).
pub(crate) fn workflow_fairness(obj: &mut Obj, errors: &mut Errors) -> Option<Fairness> {
    let mut refs = Vec::new();
    let fairness = fairness(obj, &Vars::default(), &mut Compiler { errors, refs: &mut refs });
    for r in refs {
        let message = format!(
            "the workflow's `fairness` is evaluated for every task step, before any step has \
             run: it may read `input` and `execution`, not `steps.{}` (a step's own \
             `fairness` may)",
            r.id
        );
        errors.push(&r.path, ErrorCode::InvalidExpression, message);
    }
    fairness
}

/// The workflow's `concurrency`: a list of `{key, limit, on_limit?}` (one object is a list
/// of one), keys reading only `input` and `execution`.
pub(crate) fn workflow_concurrency(obj: &mut Obj, errors: &mut Errors) -> Vec<WorkflowConcurrency> {
    let Some(value) = obj.get("concurrency") else { return Vec::new() };
    let path = obj.at("concurrency");
    let items: Vec<(&Value, String)> = match value {
        Value::Array(items) => {
            items.iter().enumerate().map(|(i, v)| (v, index_path(&path, i))).collect()
        }
        other => vec![(other, path.clone())],
    };
    if items.is_empty() {
        let message = "expected at least one concurrency key `{key, limit, on_limit?}`";
        errors.push(&path, ErrorCode::InvalidValue, message);
    }
    if items.len() > MAX_WORKFLOW_KEYS {
        let message =
            format!("{} workflow concurrency keys; at most {MAX_WORKFLOW_KEYS}", items.len());
        errors.push(&path, ErrorCode::InvalidValue, message);
    }
    let mut out = Vec::new();
    for (item, at) in items {
        let mut refs = Vec::new();
        let mut c = Compiler { errors: &mut *errors, refs: &mut refs };
        let expected = "a workflow concurrency key `{key, limit, on_limit?}`";
        let Some(mut o) = Obj::new(item, &at, expected, c.errors) else { continue };
        let key = match o.required("key", c.errors) {
            Some(v) => key(v, &o.at("key"), &Vars::default(), &mut c),
            None => None,
        };
        let limit = limit(&mut o, c.errors);
        let on_limit = on_limit(&mut o, c.errors);
        o.finish(c.errors, &WORKFLOW_CONCURRENCY_FIELDS);
        for r in refs {
            let message = format!(
                "a workflow concurrency key is evaluated before any step runs: it may read \
                 `input` and `execution`, not `steps.{}`",
                r.id
            );
            errors.push(&r.path, ErrorCode::InvalidExpression, message);
        }
        if let (Some(key), Some(limit), Some(on_limit)) = (key, limit, on_limit) {
            out.push(WorkflowConcurrency { key, limit, on_limit });
        }
    }
    out
}

/// The optional `on_limit`: `queue` (default), `cancel_newest` or `cancel_in_progress`.
fn on_limit(o: &mut Obj, errors: &mut Errors) -> Option<OnLimit> {
    if o.peek("on_limit").is_none() {
        return Some(OnLimit::Queue);
    }
    let name = o.string("on_limit", errors)?;
    let parsed = OnLimit::parse(name);
    if parsed.is_none() {
        let message = format!(
            "unknown on_limit `{name}`; expected `queue`, `cancel_newest` or `cancel_in_progress`"
        );
        errors.push(&o.at("on_limit"), ErrorCode::InvalidValue, message);
    }
    parsed
}

/// The workflow's `priority`: an integer from 1 to 5.
pub(crate) fn workflow_priority(obj: &mut Obj, errors: &mut Errors) -> Option<u8> {
    let value = obj.get("priority")?;
    let path = obj.at("priority");
    if value.is_string() {
        let message = format!(
            "expected an integer from {MIN_PRIORITY} to {MAX_PRIORITY}; the workflow's \
             priority is a default and takes no expression (a step's `priority` may)"
        );
        errors.push(&path, ErrorCode::InvalidType, message);
        return None;
    }
    fixed_priority(value, &path, errors)
}

fn step_priority(obj: &mut Obj, vars: &Vars, c: &mut Compiler) -> Option<Priority> {
    let value = obj.get("priority")?;
    let path = obj.at("priority");
    if value.is_string() {
        return c.single(value, &path, vars, true, "`priority`").map(Priority::Expr);
    }
    fixed_priority(value, &path, c.errors).map(Priority::Fixed)
}

/// A literal priority: an integer within `1..=5`.
fn fixed_priority(value: &Value, path: &str, errors: &mut Errors) -> Option<u8> {
    let Value::Number(n) = value else {
        let expected = format!("an integer from {MIN_PRIORITY} to {MAX_PRIORITY}");
        wrong_type(errors, path, &expected, value);
        return None;
    };
    match n.as_u64().filter(|n| is_priority(*n)) {
        Some(p) => u8::try_from(p).ok(),
        None => {
            let message = format!(
                "{n} is not a priority; expected an integer from {MIN_PRIORITY} (taken first) \
                 to {MAX_PRIORITY} (taken last)"
            );
            errors.push(path, ErrorCode::InvalidValue, message);
            None
        }
    }
}

/// `concurrency`: one object, or a list holding exactly one.
fn concurrency(obj: &mut Obj, vars: &Vars, c: &mut Compiler) -> Option<Concurrency> {
    let value = obj.get("concurrency")?;
    let path = obj.at("concurrency");
    let (one, at) = match value {
        Value::Array(items) => {
            if items.len() > 1 {
                c.errors.push(&index_path(&path, 1), ErrorCode::InvalidValue, ONE_KEY);
            }
            let Some(first) = items.first() else {
                let message = "expected one concurrency key `{key, limit}`, got an empty list";
                c.errors.push(&path, ErrorCode::InvalidValue, message);
                return None;
            };
            (first, index_path(&path, 0))
        }
        other => (other, path),
    };
    let mut o = Obj::new(one, &at, "a concurrency key `{key, limit, group?}`", c.errors)?;
    let key = match o.required("key", c.errors) {
        Some(v) => key(v, &o.at("key"), vars, c),
        None => None,
    };
    let limit = limit(&mut o, c.errors);
    let group = group(&mut o, c.errors);
    o.finish(c.errors, &CONCURRENCY_FIELDS);
    Some(Concurrency { key: key?, limit: limit?, group })
}

/// `rate_limit`: `{key?, limit, per, group?}` or `{key?, name}`.
fn rate_limit(obj: &mut Obj, vars: &Vars, c: &mut Compiler) -> Option<RateLimit> {
    let mut o =
        obj.object("rate_limit", "a rate limit `{key?, limit, per}` or `{key?, name}`", c.errors)?;
    // `Some(None)`: a key was written and refused; the rest is still checked.
    let key = o.get("key").map(|v| key(v, &o.at("key"), vars, c));
    let named = o.peek("name").is_some();
    let inline = o.peek("limit").is_some() || o.peek("per").is_some();
    let limit = if named {
        if inline {
            let message = "`name` refers to a server-wide limit: write either `name` or \
                           `limit` and `per`, not both";
            c.errors.push(o.path(), ErrorCode::InvalidValue, message);
        }
        if o.peek("group").is_some() {
            let message = "`group` scopes an inline limit; a named limit is its own scope";
            c.errors.push(&o.at("group"), ErrorCode::InvalidValue, message);
        }
        o.string("name", c.errors).and_then(|name| {
            if is_flow_name(name) {
                Some(RateLimitKind::Named(name.to_string()))
            } else {
                bad_name(&o.at("name"), "limit name", name, c.errors);
                None
            }
        })
    } else if !inline {
        let message = "missing field `limit` (with `per`), or `name` for a server-wide limit";
        c.errors.push(o.path(), ErrorCode::MissingField, message);
        None
    } else {
        let limit = limit(&mut o, c.errors);
        let per_ms = duration(&mut o, "per", true, c.errors);
        if o.peek("per").is_none() {
            c.errors.push(o.path(), ErrorCode::MissingField, "missing field `per`");
        }
        limit.zip(per_ms).map(|(limit, per_ms)| RateLimitKind::Inline { limit, per_ms })
    };
    // Read here whatever the branch, so a refused `name`/`group` is not also "unknown".
    let group = if named {
        o.raw("group");
        o.raw("limit");
        o.raw("per");
        None
    } else {
        group(&mut o, c.errors)
    };
    o.finish(c.errors, &RATE_FIELDS);
    let key = match key {
        Some(None) => return None,
        key => key.flatten(),
    };
    Some(RateLimit { key, limit: limit?, group })
}

/// `fairness: {key, weight?, group?}`.
fn fairness(obj: &mut Obj, vars: &Vars, c: &mut Compiler) -> Option<Fairness> {
    let mut o = obj.object("fairness", "a fair queue `{key, weight?, group?}`", c.errors)?;
    let key = match o.required("key", c.errors) {
        Some(v) => key(v, &o.at("key"), vars, c),
        None => None,
    };
    let weight = weight(&mut o, vars, c);
    let group = group(&mut o, c.errors);
    o.finish(c.errors, &FAIRNESS_FIELDS);
    Some(Fairness { key: key?, weight: weight?, group })
}

/// The optional `weight`: an integer from 1 to 1000 or one expression; 1 when absent.
fn weight(o: &mut Obj, vars: &Vars, c: &mut Compiler) -> Option<Weight> {
    let Some(value) = o.get("weight") else {
        return Some(Weight::Fixed(1));
    };
    let path = o.at("weight");
    let expected = format!("an integer from 1 to {MAX_FAIR_WEIGHT}");
    match value {
        Value::String(_) => c.single(value, &path, vars, true, "`weight`").map(Weight::Expr),
        Value::Number(n) => match n.as_u64().filter(|n| is_fair_weight(*n)) {
            Some(w) => u32::try_from(w).ok().map(Weight::Fixed),
            None => {
                let message = format!("{n} is not a weight; expected {expected}");
                c.errors.push(&path, ErrorCode::InvalidValue, message);
                None
            }
        },
        other => {
            wrong_type(
                c.errors,
                &path,
                &format!("{expected} or a `${{{{ ... }}}}` expression"),
                other,
            );
            None
        }
    }
}

/// A key: a string, with or without expressions; a literal must not be empty.
fn key(value: &Value, path: &str, vars: &Vars, c: &mut Compiler) -> Option<Template> {
    match value {
        Value::String(s) if s.is_empty() => {
            c.errors.push(path, ErrorCode::InvalidValue, "a key must not be empty");
            None
        }
        Value::String(_) => c.template(value, path, vars, true),
        other => {
            wrong_type(c.errors, path, "a string or a `${{ ... }}` expression", other);
            None
        }
    }
}

/// The required `limit`: an integer from 1 that fits 32 bits.
fn limit(o: &mut Obj, errors: &mut Errors) -> Option<u32> {
    if o.peek("limit").is_none() {
        errors.push(o.path(), ErrorCode::MissingField, "missing field `limit`");
        o.raw("limit");
        return None;
    }
    let n = o.integer("limit", 1, errors)?;
    let n = u32::try_from(n).ok();
    if n.is_none() {
        errors.push(&o.at("limit"), ErrorCode::InvalidValue, "too large");
    }
    n
}

/// The optional `group`: `[A-Za-z0-9_.-]{1,128}`.
fn group(o: &mut Obj, errors: &mut Errors) -> Option<String> {
    let name = o.string("group", errors)?;
    if is_flow_name(name) {
        Some(name.to_string())
    } else {
        bad_name(&o.at("group"), "group", name, errors);
        None
    }
}

fn bad_name(path: &str, what: &str, name: &str, errors: &mut Errors) {
    let message = format!("{what} `{name}` must match [A-Za-z0-9_.-] (1 to 128 characters)");
    errors.push(path, ErrorCode::InvalidValue, message);
}
