//! Groups and switches: nested lists of steps driven as one step (issue 29); the lists
//! that run more than once (`for_each` groups, repeats) are driven by `super::loops`.
//!
//! A group or switch has no unit of its own until it resolves: it has started once one of
//! its steps has a unit (`started`), its list is scheduled like a body's
//! (`super::body::schedule_list`, units `<key>.<id>` or `<key>.<branch>.<id>`), and once
//! every step of the list is resolved it resolves — failed with the first failed step's
//! error in document order, else with its output.

use super::body::{expression_error, expression_failure, oversize, schedule_list, started};
use super::Ctx;
use crate::event::{Event, TaskError};
use crate::scope::{self, Site};
use crate::state::UnitStatus;
use crate::task_code::TaskCode;
use crate::unit::UnitKey;
use orbit_definition::{Branch, Step, Template};
use serde_json::{json, Value};

/// Drives a running group (not a `for_each` one: `super::loops`) one round.
pub(super) fn group_round(
    ctx: &Ctx<'_>,
    steps: &[Step],
    output: Option<&Template>,
    key: &UnitKey,
    out: &mut Vec<Event>,
) {
    let prefix = format!("{}.", key.step);
    let end = ListEnd { output, field: "group.output", last: false };
    if let Some(value) = run_list(ctx, key, &prefix, steps, &end, out) {
        out.push(Event::StepSucceeded { step: key.to_string(), attempt: None, output: value });
    }
}

/// How a nested list's output is made.
pub(super) struct ListEnd<'a> {
    /// The declared output template, rendered over the list's steps.
    pub output: Option<&'a Template>,
    /// Where it is written, for errors (`group.output`, `switch[1].output`).
    pub field: &'a str,
    /// Without a template: the last step's output (a switch branch, a repeat's iteration),
    /// else null (a group).
    pub last: bool,
}

/// Drives the nested list `steps` of unit `key` (its units start with `prefix`): schedules
/// them; once all are resolved, either fails `key` (with the first failed step's error in
/// document order) or returns the list's output (see [`ListEnd`]).
pub(super) fn run_list(
    ctx: &Ctx<'_>,
    key: &UnitKey,
    prefix: &str,
    steps: &[Step],
    end: &ListEnd<'_>,
    out: &mut Vec<Event>,
) -> Option<Value> {
    match list_outcome(ctx, key, prefix, steps, end, out)? {
        Ok(value) => Some(value),
        Err(error) => {
            out.push(Event::StepFailed { step: key.to_string(), error });
            None
        }
    }
}

/// [`run_list`] without failing `key`: `None` while the list runs, then its output or the
/// error `key` would fail with.
pub(super) fn list_outcome(
    ctx: &Ctx<'_>,
    key: &UnitKey,
    prefix: &str,
    steps: &[Step],
    end: &ListEnd<'_>,
    out: &mut Vec<Event>,
) -> Option<Result<Value, TaskError>> {
    let field = end.field;
    if !schedule_list(ctx, &key.scope, prefix, steps, out) {
        return None;
    }
    let k = key.to_string();
    let inner =
        |s: &Step| UnitKey::step(key.scope.clone(), &format!("{prefix}{}", s.id)).to_string();
    let failed = steps.iter().find_map(|s| {
        let inner = inner(s);
        let u = ctx.state.unit(&inner).filter(|u| u.status == UnitStatus::Failed)?;
        Some((inner, u.error.clone()))
    });
    if let Some((inner, error)) = failed {
        let mut error = error.unwrap_or_else(|| TaskCode::Failed.fatal(""));
        error.message = format!("step `{inner}`: {}", error.message);
        return Some(Err(error));
    }
    let Some(template) = end.output else {
        if !end.last {
            return Some(Ok(Value::Null));
        }
        let last = steps.last().and_then(|s| ctx.state.unit(&inner(s)));
        return Some(Ok(last.and_then(|u| u.output.clone()).unwrap_or(Value::Null)));
    };
    let site = Site { scope: &key.scope, element: None, group: prefix };
    let scope = scope::build(ctx.def, ctx.state, &site, &[template]);
    Some(match template.render(&scope) {
        Ok(value) => match oversize(ctx, &value, field) {
            Some(error) => Err(error),
            None => Ok(value),
        },
        Err(e) => Err(expression_failure(&k, field, &e)),
    })
}

/// Drives a switch: picks its branch (the one its units already run in, else the first
/// whose `when` holds, else the default one), runs it, and resolves the switch with
/// `{branch, output}` (`{branch: null, output: null}` when no branch holds).
pub(super) fn switch_round(
    ctx: &Ctx<'_>,
    branches: &[Branch],
    key: &UnitKey,
    out: &mut Vec<Event>,
) {
    let k = key.to_string();
    let running = started(ctx, &k).and_then(|inner| {
        let rest = &inner[k.len() + 1..];
        rest.split(['.', '[']).next()?.parse::<usize>().ok()
    });
    let chosen = match running {
        Some(i) => Some(i),
        None => {
            let site = Site {
                scope: &key.scope,
                element: None,
                group: crate::unit::group_prefix(&key.step),
            };
            let mut chosen = None;
            for (i, b) in branches.iter().enumerate() {
                let Some(when) = &b.when else {
                    chosen = Some(i);
                    break;
                };
                let t = Template::Expr(when.clone());
                let scope = scope::build(ctx.def, ctx.state, &site, &[&t]);
                match when.eval_bool(&scope) {
                    Ok(true) => {
                        chosen = Some(i);
                        break;
                    }
                    Ok(false) => {}
                    Err(e) => {
                        return out.push(expression_error(k, &format!("switch[{i}].when"), &e))
                    }
                }
            }
            chosen
        }
    };
    let Some(i) = chosen.filter(|i| *i < branches.len()) else {
        let output = json!({"branch": null, "output": null});
        return out.push(Event::StepSucceeded { step: k, attempt: None, output });
    };
    let b = &branches[i];
    let prefix = format!("{}.{i}.", key.step);
    let field = format!("switch[{i}].output");
    let end = ListEnd { output: b.output.as_ref(), field: &field, last: true };
    if let Some(value) = run_list(ctx, key, &prefix, &b.steps, &end, out) {
        let output = json!({"branch": i, "output": value});
        out.push(Event::StepSucceeded { step: k, attempt: None, output });
    }
}
