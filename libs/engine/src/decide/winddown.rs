//! Rule 6: winding down after failure, cancel or timeout — cancel in-flight work,
//! compensate succeeded units in reverse success order (one at a time), run the matching
//! `on` handlers, then record the terminal event with the compensation outcome.

use super::body::{schedule_body, schedule_task};
use super::units::is_body_work;
use super::Ctx;
use crate::event::{CompensationOutcome, Event};
use crate::scope::{self, Site};
use crate::state::{UnitStatus, Winding};
use crate::unit::{Scope as UnitScope, UnitKey};
use orbit_definition::{Outcome, Template};
use serde_json::Value;

pub(crate) fn round(ctx: &Ctx<'_>, out: &mut Vec<Event>) {
    let Some(w) = &ctx.state.winding else { return };
    for (key, _) in ctx.state.open_units() {
        if is_body_work(key) {
            out.push(Event::StepCancelled { step: key.clone() });
        }
    }
    if !out.is_empty() {
        return;
    }
    // Updates still running their steps get their reply now: an error, since their steps
    // were just cancelled and the run will not go on.
    for (seq, (name, _)) in &ctx.state.open_updates {
        out.push(crate::update::abandoned(*seq, name, w.outcome));
    }
    if !out.is_empty() {
        return;
    }
    if !compensate(ctx, w, out) {
        return;
    }
    let handlers = ctx.def.on.for_outcome(w.outcome);
    if !handlers.is_empty() {
        if !w.handlers_started {
            out.push(Event::HandlersStarted { outcome: w.outcome.as_str().into() });
            return;
        }
        if !schedule_body(ctx, &UnitScope::On(w.outcome), out) || !out.is_empty() {
            return;
        }
    }
    let compensation = w.compensation_outcome.unwrap_or(CompensationOutcome::None);
    out.push(match w.outcome {
        Outcome::Failure => Event::WorkflowFailed { error: w.error.clone(), compensation },
        Outcome::Cancel => {
            Event::WorkflowCancelled { reason: w.error.message.clone(), compensation }
        }
        Outcome::Timeout => Event::WorkflowTimedOut { compensation },
    });
}

/// Drives compensation; returns whether it is finished (or there was none).
fn compensate(ctx: &Ctx<'_>, w: &Winding, out: &mut Vec<Event>) -> bool {
    let Some(list) = &w.compensation else {
        let steps: Vec<String> = ctx
            .state
            .success_order
            .iter()
            .rev()
            .filter(|k| UnitKey::parse(k).is_some_and(|p| has_compensation(ctx, &p)))
            .cloned()
            .collect();
        if steps.is_empty() {
            return true;
        }
        out.push(Event::CompensationStarted { reason: w.outcome.as_str().into(), steps });
        return false;
    };
    if w.compensation_outcome.is_some() {
        return true;
    }
    let mut first_failure = None;
    for key in list {
        let Some(parsed) = UnitKey::parse(key) else { continue };
        let ck = parsed.compensation().to_string();
        match ctx.state.unit(&ck) {
            None => {
                start_compensation(ctx, &parsed, &ck, out);
                return false;
            }
            Some(u) if !u.status.is_resolved() => return false,
            Some(u) if u.status == UnitStatus::Failed && first_failure.is_none() => {
                first_failure = Some((ck, u.error.clone()));
            }
            Some(_) => {}
        }
    }
    out.push(match first_failure {
        Some((step, error)) => Event::CompensationFailed {
            step,
            error: error.unwrap_or_else(|| crate::TaskCode::Failed.fatal("")),
        },
        None => Event::CompensationCompleted {},
    });
    false
}

pub(super) fn has_compensation(ctx: &Ctx<'_>, key: &UnitKey) -> bool {
    let Some(step) = ctx.def.step(&key.step) else { return false };
    // A fan-out unit is compensated through its elements, each seeing its own element.
    step.compensate.is_some() && (step.for_each.is_none() || key.index.is_some())
}

fn start_compensation(ctx: &Ctx<'_>, unit: &UnitKey, ck: &str, out: &mut Vec<Event>) {
    let Some(step) = ctx.def.step(&unit.step) else { return };
    let Some(call) = &step.compensate else { return };
    let items = ctx.state.fanouts.get(&unit.parent().to_string());
    let element = match (&step.for_each, unit.index, items) {
        (Some(each), Some(i), Some(items)) => {
            items.get(i).map(|item| (each.as_name.as_str(), i, item))
        }
        _ => None,
    };
    // Inside a group, its input reads the group's steps first.
    let group = crate::unit::group_prefix(&unit.step);
    let site = Site { scope: &UnitScope::Main, element, group };
    let templates: Vec<&Template> = call.input.iter().collect();
    let scope = scope::build(ctx.def, ctx.state, &site, &templates);
    match call.input.as_ref().map_or(Ok(Value::Null), |t| t.render(&scope)) {
        // A compensation declares no flow control: it runs at the run's priority.
        Ok(input) => schedule_task(ctx, ck, Some(&call.task), input, super::flow::of_run(ctx), out),
        Err(e) => out.push(Event::StepFailed {
            step: ck.into(),
            error: crate::event::TaskError::fatal(
                e.code(),
                format!("step `{ck}` {}", e.in_field("compensate.input")),
            ),
        }),
    }
}
