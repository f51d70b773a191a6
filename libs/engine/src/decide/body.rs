//! Running work: signal delivery, DAG scheduling of a body, fan-out, starting units, and
//! completion.

use super::Ctx;
use crate::event::{Event, TaskError};
use crate::scope::{self, Site};
use crate::state::{UnitStatus, Wait};
use crate::task_code::TaskCode;
use crate::unit::{child_execution_id, idempotency_key, Scope as UnitScope, UnitKey};
use orbit_definition::{ExprError, Step, StepKind, Template};
use serde_json::Value;
use std::collections::BTreeSet;

/// The round of a running (not winding) execution.
pub(crate) fn running_round(ctx: &Ctx<'_>, out: &mut Vec<Event>) {
    deliver_signals(ctx, out);
    if !out.is_empty() {
        return;
    }
    let main_done = schedule_body(ctx, &UnitScope::Main, out);
    if out.iter().any(|e| matches!(e, Event::WorkflowContinuedAsNew { .. })) {
        return;
    }
    let mut handlers_done = true;
    for (name, seq) in &ctx.state.handler_instances {
        handlers_done &= schedule_body(ctx, &UnitScope::OnSignal(name.clone(), *seq), out);
    }
    // Update handlers with steps: each completes (its reply decided) once its steps are
    // resolved; the run completes only after every accepted update has its reply.
    for (seq, (name, _)) in &ctx.state.open_updates {
        let before = out.len();
        if schedule_body(ctx, &UnitScope::Update(name.clone(), *seq), out) && out.len() == before {
            out.push(crate::update::complete(ctx.def, ctx.state, &ctx.limits, *seq, name));
        }
    }
    handlers_done &= ctx.state.open_updates.is_empty();
    if main_done && handlers_done && out.is_empty() {
        complete(ctx, out);
    }
}

fn complete(ctx: &Ctx<'_>, out: &mut Vec<Event>) {
    let Some(template) = &ctx.def.output else {
        out.push(Event::WorkflowCompleted { output: Value::Null });
        return;
    };
    let scope = scope::build(ctx.def, ctx.state, &Site::main(), &[template]);
    match template.render(&scope) {
        Ok(output) => match oversize(ctx, &output, "output") {
            Some(error) => out.push(Event::OutputFailed { error }),
            None => out.push(Event::WorkflowCompleted { output }),
        },
        Err(e) => out
            .push(Event::OutputFailed { error: TaskError::fatal(e.code(), e.in_field("output")) }),
    }
}

/// Rule 5: the oldest undelivered signal of a name goes to the oldest waiting `await` of
/// that name, or starts an `on_signal` instance; otherwise it stays buffered.
fn deliver_signals(ctx: &Ctx<'_>, out: &mut Vec<Event>) {
    let mut taken = BTreeSet::new();
    for signal in ctx.state.signals.iter().filter(|s| !s.delivered) {
        let waiter = ctx
            .state
            .open_units()
            .filter(|(k, u)| u.status == UnitStatus::Waiting && !taken.contains(*k))
            .filter_map(|(k, u)| match &u.wait {
                Some(Wait::Signal { name, since }) if *name == signal.name => Some((*since, k)),
                _ => None,
            })
            .min();
        if let Some((_, key)) = waiter {
            taken.insert(key.clone());
            out.push(Event::SignalDelivered {
                name: signal.name.clone(),
                seq: signal.seq,
                step: key.clone(),
            });
            out.push(Event::StepSucceeded {
                step: key.clone(),
                attempt: None,
                output: signal.payload.clone(),
            });
        } else if ctx.def.on_signal.contains_key(&signal.name) {
            out.push(Event::SignalDelivered {
                name: signal.name.clone(),
                seq: signal.seq,
                step: format!("on_signal:{}@{}", signal.name, signal.seq),
            });
        }
    }
}

/// Schedules what is ready in one body instance; returns whether every step is resolved.
/// Looks only at the steps that may act (see `body_memo`), in definition order.
pub(crate) fn schedule_body(ctx: &Ctx<'_>, scope: &UnitScope, out: &mut Vec<Event>) -> bool {
    schedule_list(ctx, scope, "", ctx.def.body(&scope.body()), out)
}

/// [`schedule_body`] for one list of a body instance: the body's own (`prefix` `""`), a
/// group's (`"g."`) or a switch branch's (`"sw.1."`). Groups and switches that run are
/// driven after the list's own pass (`super::nested`: each list has a memo of its own,
/// which the pass must not hold while asking for another).
pub(super) fn schedule_list(
    ctx: &Ctx<'_>,
    scope: &UnitScope,
    prefix: &str,
    steps: &[Step],
    out: &mut Vec<Event>,
) -> bool {
    let mut groups = Vec::new();
    let done = ctx.memo.body(scope, prefix, steps, |memo| {
        let mut next = memo.next_active(0);
        while let Some(i) = next {
            next = memo.next_active(i + 1);
            let step = &steps[i];
            let key = UnitKey::step(scope.clone(), &format!("{prefix}{}", step.id));
            let k = key.to_string();
            match ctx.state.unit(&k) {
                Some(u) if u.status.is_resolved() => {
                    memo.resolved(i);
                    next = memo.next_active(i + 1);
                    continue;
                }
                Some(u) => {
                    if u.wait == Some(Wait::Elements) && step.is_nested() {
                        // A `for_each` group's elements are nested lists (`super::loops`).
                        groups.push((i, key));
                    } else if u.wait == Some(Wait::Elements) {
                        fan_out_progress(ctx, step, &key, out);
                    } else if u.wait == Some(Wait::OnFailure) {
                        // Its failure branch runs, driven like a group (`super::branches`).
                        groups.push((i, key));
                    }
                    continue;
                }
                None => {}
            }
            let mut blocked = None;
            let mut ready = true;
            for dep in &step.deps {
                let dep_key = UnitKey::step(scope.clone(), &format!("{prefix}{dep}")).to_string();
                match ctx.state.unit(&dep_key).map(|u| u.status) {
                    Some(UnitStatus::Succeeded | UnitStatus::Skipped) => {}
                    Some(UnitStatus::Failed | UnitStatus::Cancelled) => blocked = Some(dep),
                    _ => ready = false,
                }
            }
            if let Some(dep) = blocked {
                out.push(Event::StepSkipped {
                    step: k,
                    reason: format!("dependency `{dep}` did not succeed"),
                });
            } else if !ready {
                memo.waiting(i);
            } else if step.is_nested() && step.for_each.is_none() {
                // A group or switch has no unit of its own until it resolves: it runs once
                // one of its steps has a unit, or its `when` holds.
                if started(ctx, &k).is_some() || when_holds(ctx, step, &key, out) {
                    groups.push((i, key));
                }
            } else {
                start_step(ctx, step, &key, out);
                if matches!(step.kind, StepKind::ContinueAsNew { .. })
                    && out.iter().any(|e| matches!(e, Event::WorkflowContinuedAsNew { .. }))
                {
                    return None;
                }
            }
        }
        Some(memo.all_resolved())
    });
    let Some(done) = done else { return false };
    for (i, key) in groups {
        (ctx.nested_round)(ctx, &steps[i], &key, out);
        // A repeat continued the run as new (`super::autocan`): nothing follows its end.
        if matches!(out.last(), Some(Event::WorkflowContinuedAsNew { .. })) {
            return false;
        }
    }
    done
}

/// Whether a step's `when` holds (true without one); when it does not, records why (the
/// step skipped, or failed by the expression).
fn when_holds(ctx: &Ctx<'_>, step: &Step, key: &UnitKey, out: &mut Vec<Event>) -> bool {
    let Some(when) = &step.when else { return true };
    let k = key.to_string();
    let site =
        Site { scope: &key.scope, element: None, group: crate::unit::group_prefix(&key.step) };
    let t = Template::Expr(when.clone());
    let scope = scope::build(ctx.def, ctx.state, &site, &[&t]);
    match when.eval_bool(&scope) {
        Ok(true) => true,
        Ok(false) => {
            out.push(Event::StepSkipped { step: k, reason: "`when` was false".into() });
            false
        }
        Err(e) => {
            out.push(expression_error(k, "when", &e));
            false
        }
    }
}

/// Rule 1: `when`, `for_each`, then the unit itself.
fn start_step(ctx: &Ctx<'_>, step: &Step, key: &UnitKey, out: &mut Vec<Event>) {
    let group = crate::unit::group_prefix(&key.step);
    let site = Site { scope: &key.scope, element: None, group };
    let k = key.to_string();
    if !when_holds(ctx, step, key, out) {
        return;
    }
    let Some(each) = &step.for_each else {
        start_unit(ctx, step, key, &site, out);
        return;
    };
    let scope = scope::build(ctx.def, ctx.state, &site, &[&each.items]);
    match each.items.render(&scope) {
        Ok(Value::Array(items)) => match ctx.limits.max_fan_out {
            Some(max) if items.len() as u64 > max => out.push(Event::StepFailed {
                step: k,
                error: TaskCode::LimitExceeded
                    .fatal(format!("for_each has {} items (max_fan_out {max})", items.len())),
            }),
            _ => {
                // The frozen list is recorded in `StepFanOut`: it is a payload too.
                let list = Value::Array(items);
                if let Some(error) = oversize(ctx, &list, "for_each items") {
                    out.push(Event::StepFailed { step: k, error });
                } else if let Value::Array(items) = list {
                    out.push(Event::StepFanOut { step: k, items });
                }
            }
        },
        Ok(other) => out.push(expression_failed(
            k,
            "for_each",
            &format!("expected a list, got {}", orbit_definition::expr::kind_of(&other)),
        )),
        Err(e) => out.push(expression_error(k, "for_each", &e)),
    }
}

/// The step fails with the error's code: `EXPRESSION_LIMIT` over a budget, else
/// `EXPRESSION_ERROR`. The message names the unit and the field holding the expression
/// (`step `charge` input.total: ${{ ... }}: ...`): the run's error carries it as is, and
/// a reader of `ExecutionResult.error` must find the expression without the history.
pub(super) fn expression_error(step: String, field: &str, e: &ExprError) -> Event {
    let error = expression_failure(&step, field, e);
    Event::StepFailed { step, error }
}

/// The error of [`expression_error`].
pub(super) fn expression_failure(step: &str, field: &str, e: &ExprError) -> TaskError {
    TaskError::fatal(e.code(), format!("step `{step}` {}", e.in_field(field)))
}

fn expression_failed(step: String, field: &str, message: &str) -> Event {
    let message = format!("step `{step}` {field}: {message}");
    Event::StepFailed { step, error: TaskCode::ExpressionError.fatal(message) }
}

/// The document field a unit's rendered template comes from.
fn template_field(kind: &StepKind) -> &'static str {
    match kind {
        StepKind::Compute { .. } => "compute",
        StepKind::Until { .. } => "until",
        StepKind::Http { .. } => "http",
        StepKind::ContinueAsNew { .. } => "continue_as_new.input",
        _ => "input",
    }
}

/// Starts elements up to `max_concurrency`; resolves the fan-out unit when all are done or
/// one failed. Reads the counts `State::apply` keeps (`State::elements`), so a round costs
/// the elements it starts, not the length of the list.
fn fan_out_progress(ctx: &Ctx<'_>, step: &Step, key: &UnitKey, out: &mut Vec<Event>) {
    let k = key.to_string();
    let items = ctx.state.fanouts.get(&k).map_or(&[][..], Vec::as_slice);
    let Some(each) = &step.for_each else { return };
    let cap = each.max_concurrency.map_or(usize::MAX, |c| c as usize);
    let progress = progress(ctx, key, &k, items.len(), cap);
    if let Some(i) = progress.failed {
        let u = ctx.state.unit(&key.element(i).to_string());
        let mut error =
            u.and_then(|u| u.error.clone()).unwrap_or_else(|| TaskCode::Failed.fatal(""));
        error.message = format!("element {i}: {}", error.message);
        out.push(Event::StepFailed { step: k, error });
        return;
    }
    if progress.in_flight == 0 && progress.pending.is_empty() {
        let outputs = (0..items.len())
            .map(|i| ctx.state.unit(&key.element(i).to_string()).and_then(|u| u.output.clone()))
            .map(|o| o.unwrap_or(Value::Null))
            .collect();
        out.push(Event::StepSucceeded { step: k, attempt: None, output: Value::Array(outputs) });
        return;
    }
    for i in progress.pending.into_iter().take(cap.saturating_sub(progress.in_flight)) {
        let unit = key.element(i);
        let element = Some((each.as_name.as_str(), i, &items[i]));
        let site = Site { scope: &key.scope, element, group: crate::unit::group_prefix(&key.step) };
        start_unit(ctx, step, &unit, &site, out);
    }
}

/// Where a fan-out's elements stand: the first failed one, how many run, and the first
/// not-started ones (up to `cap`; empty only when none is left).
struct Progress {
    failed: Option<usize>,
    in_flight: usize,
    pending: Vec<usize>,
}

fn progress(ctx: &Ctx<'_>, key: &UnitKey, k: &str, len: usize, cap: usize) -> Progress {
    let counts = ctx.state.elements.get(k);
    match counts {
        // The usual history: elements started in order, none past the list.
        Some(e) if !e.is_prefix() || e.end > len => {}
        _ => {
            let e = counts.cloned().unwrap_or_default();
            return Progress {
                failed: e.failed.first().copied(),
                in_flight: e.present - e.resolved - e.failed.len(),
                pending: (e.present..len).take(cap.max(1)).collect(),
            };
        }
    }
    // Any other history: element by element.
    let mut p = Progress { failed: None, in_flight: 0, pending: Vec::new() };
    for i in 0..len {
        match ctx.state.unit(&key.element(i).to_string()) {
            Some(u) if u.status == UnitStatus::Failed => {
                p.failed = Some(i);
                return p;
            }
            Some(u) if u.status.is_resolved() => {}
            Some(_) => p.in_flight += 1,
            None => p.pending.push(i),
        }
    }
    p
}

/// The templates a unit of this step renders when it starts.
fn unit_templates(step: &Step) -> Vec<&Template> {
    let mut ts: Vec<&Template> = step.input.iter().collect();
    match &step.kind {
        StepKind::Compute { value } => ts.push(value),
        StepKind::Until { at } => ts.push(at),
        StepKind::Http { request } => ts.push(request),
        StepKind::ContinueAsNew { input } => ts.push(input),
        _ => {}
    }
    ts
}

/// Starts one unit (a step, or one element of it).
pub(crate) fn start_unit(
    ctx: &Ctx<'_>,
    step: &Step,
    key: &UnitKey,
    site: &Site<'_>,
    out: &mut Vec<Event>,
) {
    let k = key.to_string();
    let scope = scope::build(ctx.def, ctx.state, site, &unit_templates(step));
    let render = |t: Option<&Template>| t.map_or(Ok(Value::Null), |t| t.render(&scope));
    let rendered = match &step.kind {
        StepKind::Compute { value } => render(Some(value)),
        StepKind::Until { at } => render(Some(at)),
        StepKind::Http { request } => render(Some(request)),
        StepKind::ContinueAsNew { input } => render(Some(input)),
        _ => render(step.input.as_ref()),
    };
    let value = match rendered {
        Ok(v) => v,
        Err(e) => return out.push(expression_error(k, template_field(&step.kind), &e)),
    };
    // A child's or the next run's input is recorded (and sent) as is: check it here.
    if matches!(step.kind, StepKind::Workflow { .. } | StepKind::ContinueAsNew { .. }) {
        if let Some(error) = oversize(ctx, &value, "input") {
            return out.push(Event::StepFailed { step: k, error });
        }
    }
    match &step.kind {
        StepKind::Task { task } => match super::flow::of_step(ctx, step, &k, site) {
            Ok(flow) => schedule_task(ctx, &k, Some(task), value, flow, out),
            Err(failed) => out.push(*failed),
        },
        // Run by the server's built-in adapter, never queued: nothing to control.
        StepKind::Http { .. } => schedule_task(ctx, &k, None, value, None, out),
        StepKind::Compute { .. } => match oversize(ctx, &value, "compute value") {
            Some(error) => out.push(Event::StepFailed { step: k, error }),
            None => out.push(Event::StepSucceeded { step: k, attempt: None, output: value }),
        },
        StepKind::Sleep { duration_ms } => {
            let at = ctx.now.saturating_add(*duration_ms);
            out.push(timer_started(ctx, k, at, out));
        }
        StepKind::Until { .. } => match timestamp_ms(&value) {
            Some(at) => out.push(timer_started(ctx, k, at, out)),
            None => out.push(expression_failed(k, "until", &format!("not a timestamp: {value}"))),
        },
        StepKind::Await { signal } => out.push(Event::AwaitStarted {
            step: k,
            signal: signal.clone(),
            timeout_at: step.timeout_ms.map(|t| ctx.now.saturating_add(t)),
        }),
        StepKind::Workflow { workflow, version } => out.push(Event::ChildStarted {
            child_id: child_execution_id(&ctx.state.execution_id, ctx.state.run, &k),
            step: k,
            workflow: workflow.clone(),
            version: version.clone(),
            input: value,
        }),
        StepKind::ContinueAsNew { .. } => {
            for (uk, _) in ctx.state.open_units() {
                out.push(Event::StepCancelled { step: uk.clone() });
            }
            let next_run = ctx.state.run + 1;
            out.push(Event::WorkflowContinuedAsNew { next_run, input: value, resume: None });
        }
        // Driven by `schedule_list`, never started as a unit.
        StepKind::Group { .. }
        | StepKind::Switch { .. }
        | StepKind::Race { .. }
        | StepKind::Repeat(_) => {}
    }
}

/// Schedules a task attempt 1 after checking the task's input contract and size, with the
/// flow control evaluated for it (`super::flow`).
pub(crate) fn schedule_task(
    ctx: &Ctx<'_>,
    k: &str,
    task: Option<&String>,
    input: Value,
    flow: Option<crate::flow::Flow>,
    out: &mut Vec<Event>,
) {
    let contract = task.and_then(|t| ctx.def.tasks.get(t)).and_then(|c| c.input.as_ref());
    let input = match contract.map(|c| c.apply(input.clone())) {
        None => input,
        Some(Ok(v)) => v,
        Some(Err(violations)) => {
            let message = violations.iter().map(ToString::to_string).collect::<Vec<_>>().join("; ");
            return out.push(Event::StepFailed {
                step: k.into(),
                error: TaskCode::InputContractViolation.fatal(message),
            });
        }
    };
    if let Some(error) = oversize(ctx, &input, "input") {
        return out.push(Event::StepFailed { step: k.into(), error });
    }
    out.push(Event::StepScheduled {
        step: k.into(),
        attempt: 1,
        input,
        idempotency_key: idempotency_key(&ctx.state.execution_id, ctx.state.run, k),
        redelivery: false,
        flow,
    });
}

/// `PAYLOAD_TOO_LARGE` (over the effective `max_payload_bytes`) or `PAYLOAD_TOO_DEEP` (nested
/// deeper than the depth limit) for a value about to be recorded; `what` names it in the
/// message (`input`, `output`, `compute value`, ...).
pub(crate) fn oversize(ctx: &Ctx<'_>, value: &Value, what: &str) -> Option<TaskError> {
    crate::command::payload_error(&ctx.limits, value, what)
}

/// `TimerStarted` for unit `k`, or its `LIMIT_EXCEEDED` failure when the run already
/// started `max_timers` timers (counting those started earlier in this round, `round`: steps
/// starting side by side each see the same state).
fn timer_started(ctx: &Ctx<'_>, k: String, at: u64, round: &[Event]) -> Event {
    if let Some(max) = ctx.limits.max_timers {
        let this_round = round.iter().filter(|e| matches!(e, Event::TimerStarted { .. })).count();
        let started = ctx.state.timers_started + this_round as u64;
        if started >= max {
            let message = format!("the run already started {started} timers (max_timers {max})");
            return Event::StepFailed { step: k, error: TaskCode::LimitExceeded.fatal(message) };
        }
    }
    Event::TimerStarted { step: k, fire_at: at }
}

/// An RFC 3339 string or epoch milliseconds.
fn timestamp_ms(v: &Value) -> Option<u64> {
    match v {
        Value::Number(n) => n.as_u64(),
        Value::String(s) => chrono::DateTime::parse_from_rfc3339(s)
            .ok()
            .and_then(|t| u64::try_from(t.timestamp_millis()).ok()),
        _ => None,
    }
}

/// The first unit key under nested unit `k` (`k.` + anything, or `k[` + anything for the
/// runs of a repeat), if one of its steps has a unit yet (its first pass gives one to
/// every step without dependencies in the list, at least one).
pub(super) fn started<'s>(ctx: &'s Ctx<'_>, k: &str) -> Option<&'s str> {
    [format!("{k}."), format!("{k}[")].into_iter().find_map(|inner| {
        let (key, _) = ctx.state.units.range(inner.clone()..).next()?;
        key.starts_with(&inner).then_some(key.as_str())
    })
}
