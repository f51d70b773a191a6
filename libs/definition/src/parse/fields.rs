//! Step fields shared by several kinds: durations, `needs`, `retry`, `compensate`,
//! `for_each`.

use crate::duration::parse_duration;
use crate::error::ErrorCode;
use crate::expr::Expr;
use crate::model::{ForEach, RetryPolicy, TaskCall};
use crate::parse::exprs::{Compiler, Vars};
use crate::parse::known::Known;
use crate::parse::reader::{a_kind, index_path, is_identifier, wrong_type, Errors, Obj};
use serde_json::Value;

/// Names a `for_each` element may not take: they would hide a name already in scope.
const RESERVED: [&str; 6] = ["input", "steps", "execution", "index", "event", "failure"];

/// An optional duration field; zero is refused when `positive` (a zero timeout or sleep
/// means nothing, or worse, fails every attempt at once).
pub(crate) fn duration(
    obj: &mut Obj,
    field: &str,
    positive: bool,
    errors: &mut Errors,
) -> Option<u64> {
    let value = obj.get(field)?;
    let path = obj.at(field);
    let result = match value {
        Value::String(s) => parse_duration(s),
        Value::Number(n) => Err(format!("a bare number has no unit; write e.g. `{n}s` or `{n}ms`")),
        other => {
            Err(format!("expected a duration such as `30s` or `1m30s`, got {}", a_kind(other)))
        }
    };
    match result {
        Ok(0) if positive => {
            errors.push(&path, ErrorCode::InvalidDuration, "must be greater than zero");
            None
        }
        Ok(ms) => Some(ms),
        Err(message) => {
            errors.push(&path, ErrorCode::InvalidDuration, message);
            None
        }
    }
}

/// `needs`: a list of step ids (a single id is accepted as a one-element list). Returns the
/// ids with the path of each, for reporting unknown ones later.
pub(crate) fn needs(obj: &mut Obj, errors: &mut Errors) -> Vec<(String, String)> {
    let path = obj.at("needs");
    match obj.get("needs") {
        None => Vec::new(),
        Some(Value::String(s)) => vec![(s.clone(), path)],
        Some(Value::Array(items)) => items
            .iter()
            .enumerate()
            .filter_map(|(j, v)| {
                let at = index_path(&path, j);
                match v {
                    Value::String(s) => Some((s.clone(), at)),
                    other => {
                        wrong_type(errors, &at, "a step id", other);
                        None
                    }
                }
            })
            .collect(),
        Some(other) => {
            wrong_type(errors, &path, "a list of step ids", other);
            Vec::new()
        }
    }
}

const RETRY_FIELDS: [&str; 6] = [
    "max_attempts",
    "initial_interval",
    "backoff",
    "max_interval",
    "non_retryable",
    "max_redeliveries",
];

/// `retry: {max_attempts, initial_interval, backoff, max_interval, non_retryable}`, each
/// defaulting to [`RetryPolicy::default`].
pub(crate) fn retry(obj: &mut Obj, errors: &mut Errors) -> RetryPolicy {
    let mut policy = RetryPolicy::default();
    let Some(mut r) = obj.object("retry", "a retry policy", errors) else {
        return policy;
    };
    if let Some(n) = r.integer("max_attempts", 1, errors) {
        match u32::try_from(n) {
            Ok(n) => policy.max_attempts = n,
            Err(_) => errors.push(&r.at("max_attempts"), ErrorCode::InvalidValue, "too large"),
        }
    }
    if let Some(n) = r.integer("max_redeliveries", 0, errors) {
        match u32::try_from(n) {
            Ok(n) => policy.max_redeliveries = n,
            Err(_) => errors.push(&r.at("max_redeliveries"), ErrorCode::InvalidValue, "too large"),
        }
    }
    if let Some(ms) = duration(&mut r, "initial_interval", false, errors) {
        policy.initial_interval_ms = ms;
    }
    if let Some(v) = r.get("backoff") {
        match v.as_f64() {
            Some(b) if b >= 1.0 && b.is_finite() => policy.backoff = b,
            Some(b) => errors.push(
                &r.at("backoff"),
                ErrorCode::InvalidValue,
                format!("{b} would shrink the delay; backoff must be >= 1.0"),
            ),
            None => wrong_type(errors, &r.at("backoff"), "a number", v),
        }
    }
    // Without an explicit cap, a long first interval raises the cap instead of failing.
    policy.max_interval_ms = policy.max_interval_ms.max(policy.initial_interval_ms);
    if let Some(ms) = duration(&mut r, "max_interval", false, errors) {
        if ms < policy.initial_interval_ms {
            errors.push(
                &r.at("max_interval"),
                ErrorCode::InvalidValue,
                "max_interval must be at least initial_interval",
            );
        }
        policy.max_interval_ms = ms;
    }
    if let Some(v) = r.get("non_retryable") {
        let path = r.at("non_retryable");
        match v {
            Value::Array(codes) => {
                for (j, code) in codes.iter().enumerate() {
                    match code.as_str() {
                        Some(c) if !c.trim().is_empty() => policy.non_retryable.push(c.to_string()),
                        Some(_) => errors.push(
                            &index_path(&path, j),
                            ErrorCode::InvalidValue,
                            "empty error code",
                        ),
                        None => {
                            wrong_type(errors, &index_path(&path, j), "an error code string", code)
                        }
                    }
                }
            }
            other => wrong_type(errors, &path, "a list of error codes", other),
        }
    }
    r.finish(errors, &RETRY_FIELDS);
    policy
}

/// `compensate: {task, input?, retry?, timeout?}`. Its input sees the compensated unit's
/// scope (`vars`) and reads steps without ordering anything: it runs after them all.
pub(crate) fn compensate(
    obj: &mut Obj,
    known: &Known,
    vars: &Vars,
    compiler: &mut Compiler,
) -> Option<TaskCall> {
    let mut c = obj.object("compensate", "a task call", compiler.errors)?;
    let task = c.required_string("task", compiler.errors).map(str::to_string);
    if let Some(task) = &task {
        known.check_task(task, &c.at("task"), compiler.errors);
    }
    let input = c.get("input").and_then(|v| compiler.template(v, &c.at("input"), vars, false));
    let retry = retry(&mut c, compiler.errors);
    let timeout_ms = duration(&mut c, "timeout", true, compiler.errors);
    c.finish(compiler.errors, &["task", "input", "retry", "timeout"]);
    Some(TaskCall { task: task?, input, retry, timeout_ms })
}

/// `for_each` (one expression or an array), `as` and `max_concurrency`. `vars` is the
/// scope outside the fan-out.
pub(crate) fn for_each(obj: &mut Obj, vars: &Vars, compiler: &mut Compiler) -> Option<ForEach> {
    let value = obj.get("for_each")?;
    let path = obj.at("for_each");
    let items = match value {
        Value::String(_) => {
            compiler.single(value, &path, vars, true, "`for_each`").map(crate::expr::Template::Expr)
        }
        Value::Array(_) => compiler.template(value, &path, vars, true),
        other => {
            wrong_type(compiler.errors, &path, "one `${{ ... }}` expression or a list", other);
            None
        }
    };
    let as_name = match obj.string("as", compiler.errors) {
        Some(name) if !is_identifier(name) || RESERVED.contains(&name) => {
            let message = if is_identifier(name) {
                format!("`{name}` is already a name in scope; pick another element name")
            } else {
                format!("`{name}` must match [A-Za-z_][A-Za-z0-9_]*")
            };
            compiler.errors.push(&obj.at("as"), ErrorCode::InvalidValue, message);
            "item".to_string()
        }
        Some(name) => name.to_string(),
        None => "item".to_string(),
    };
    let max_concurrency = obj.integer("max_concurrency", 1, compiler.errors).and_then(|n| {
        let n = u32::try_from(n).ok();
        if n.is_none() {
            compiler.errors.push(&obj.at("max_concurrency"), ErrorCode::InvalidValue, "too large");
        }
        n
    });
    Some(ForEach { items: items?, as_name, max_concurrency })
}

/// `when`: one expression, or a boolean literal (kept as the CEL literal).
pub(crate) fn when(obj: &mut Obj, vars: &Vars, compiler: &mut Compiler) -> Option<Expr> {
    let value = obj.get("when")?;
    let path = obj.at("when");
    match value {
        Value::Bool(b) => Expr::compile(if *b { "true" } else { "false" }).ok(),
        _ => compiler.single(value, &path, vars, true, "`when`"),
    }
}

/// A boolean field (`continue_on_failure: true`); absent is false.
pub(crate) fn flag(obj: &mut Obj, field: &str, errors: &mut Errors) -> bool {
    match obj.get(field) {
        None => false,
        Some(Value::Bool(b)) => *b,
        Some(other) => {
            wrong_type(errors, &obj.at(field), "true or false", other);
            false
        }
    }
}
