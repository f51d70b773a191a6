//! Lists that run more than once (issue 29): a `for_each` group (once per element) and a
//! repeat (until its condition holds).
//!
//! Each run of the list is scheduled like a group's (`super::nested::run_list`) under its
//! own prefix: element `i` of group `g` has units `g[i].<id>`, iteration `n` of repeat `r`
//! has units `r[n].<id>`. A run has no unit of its own until it resolves; then its output is
//! recorded as unit `g[i]` / `r[n]` (`StepSucceeded`), so the history shows every element
//! and iteration and a replay finds where the loop stands from the units alone.
//!
//! - `for_each` group: the list is frozen by `StepFanOut` (as for a task); at most
//!   `max_concurrency` elements run at once, started in order; a failed element (its
//!   `StepFailed g[i]`, which `continue_on_failure` catches on its own) fails the step;
//!   once every element is resolved the step succeeds with the list of their outputs.
//! - repeat: iteration `n` (0-based; `n` = the iterations recorded so far) runs; once its
//!   steps are resolved, its output is rendered, `until` evaluated over it, and `r[n]`
//!   recorded. `until` true: the repeat succeeds with that output; false after
//!   `max_iterations` iterations: it fails with `LIMIT_EXCEEDED`; else iteration n+1 starts
//!   in the next round (or, near the history limit, the run continues as new with it:
//!   `super::autocan`). A failed step fails the repeat at once.

use super::body::expression_error;
use super::body::started;
use super::nested::{run_list, ListEnd};
use super::Ctx;
use crate::event::Event;
use crate::scope::{self, Site};
use crate::state::UnitStatus;
use crate::task_code::TaskCode;
use crate::unit::UnitKey;
use orbit_definition::{Repeat, Step, Template};
use serde_json::Value;

/// Drives a `for_each` group `step` (fan-out unit `key`, its list frozen) one round.
pub(super) fn each_round(
    ctx: &Ctx<'_>,
    step: &Step,
    steps: &[Step],
    output: Option<&Template>,
    key: &UnitKey,
    out: &mut Vec<Event>,
) {
    let Some(each) = &step.for_each else { return };
    let k = key.to_string();
    let len = ctx.state.fanouts.get(&k).map_or(0, Vec::len);
    let cap = each.max_concurrency.map_or(usize::MAX, |c| c as usize);
    // Element units exist only once an element resolved: the counts say how many did and
    // which failed; a prefix of resolved elements need not be looked at again.
    let counts = ctx.state.elements.get(&k);
    if let Some(&i) = counts.and_then(|e| e.failed.first()) {
        return fail_element(ctx, key, i, out);
    }
    let from = counts.filter(|e| e.is_prefix()).map_or(0, |e| e.present);
    let mut running = Vec::new();
    let mut pending = Vec::new();
    for i in from..len {
        let element = key.element(i).to_string();
        if ctx.state.unit(&element).is_some() {
            continue;
        }
        if started(ctx, &element).is_some() {
            running.push(i);
        } else if pending.len() < cap.min(len) {
            pending.push(i);
        } else {
            // Elements start in index order: none past here has started yet.
            break;
        }
    }
    if running.is_empty() && pending.is_empty() {
        let outputs = (0..len)
            .map(|i| ctx.state.unit(&key.element(i).to_string()).and_then(|u| u.output.clone()))
            .map(|o| o.unwrap_or(Value::Null))
            .collect();
        out.push(Event::StepSucceeded { step: k, attempt: None, output: Value::Array(outputs) });
        return;
    }
    let free = cap.saturating_sub(running.len());
    let end = ListEnd { output, field: "group.output", last: false };
    for i in running.into_iter().chain(pending.into_iter().take(free)) {
        let element = key.element(i);
        let prefix = format!("{}[{i}].", key.step);
        if let Some(value) = run_list(ctx, &element, &prefix, steps, &end, out) {
            let step = element.to_string();
            out.push(Event::StepSucceeded { step, attempt: None, output: value });
        }
    }
}

/// Fails fan-out unit `key` with the error of its failed element `i`.
fn fail_element(ctx: &Ctx<'_>, key: &UnitKey, i: usize, out: &mut Vec<Event>) {
    let u = ctx.state.unit(&key.element(i).to_string()).filter(|u| u.status == UnitStatus::Failed);
    let mut error = u.and_then(|u| u.error.clone()).unwrap_or_else(|| TaskCode::Failed.fatal(""));
    error.message = format!("element {i}: {}", error.message);
    out.push(Event::StepFailed { step: key.to_string(), error });
}

/// Drives a repeat (unit `key`) one round: the current iteration, and after it either the
/// next one, the repeat's success or its failure.
pub(super) fn repeat_round(ctx: &Ctx<'_>, r: &Repeat, key: &UnitKey, out: &mut Vec<Event>) {
    let k = key.to_string();
    // Iterations are recorded in order, one after another: the count is the current one.
    let n = ctx.state.elements.get(&k).map_or(0, |e| e.present);
    // Near the history limit a top-level repeat continues the run as new instead.
    if super::autocan::continue_loop(ctx, r, key, n, out) {
        return;
    }
    let prefix = format!("{}[{n}].", key.step);
    let end = ListEnd { output: r.output.as_ref(), field: "repeat.output", last: true };
    let Some(value) = run_list(ctx, key, &prefix, &r.steps, &end, out) else { return };
    let site = Site { scope: &key.scope, element: None, group: &prefix };
    let until = Template::Expr(r.until.clone());
    let mut scope = scope::build(ctx.def, ctx.state, &site, &[&until]);
    scope.set("output", value.clone());
    let done = match r.until.eval_bool(&scope) {
        Ok(done) => done,
        Err(e) => return out.push(expression_error(k, "repeat.until", &e)),
    };
    let iteration = key.element(n).to_string();
    out.push(Event::StepSucceeded { step: iteration, attempt: None, output: value.clone() });
    let max = r.max_iterations;
    if done {
        out.push(Event::StepSucceeded { step: k, attempt: None, output: value });
    } else if n + 1 >= max as usize {
        let message = format!("`until` did not hold after {max} iterations (max_iterations {max})");
        out.push(Event::StepFailed { step: k, error: TaskCode::LimitExceeded.fatal(message) });
    }
}
