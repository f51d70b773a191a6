//! Failure branches (`on_failure`) and races (issue 29), driven like groups
//! (`super::nested::list_outcome`).
//!
//! A failure branch runs once its step's unit recorded `StepFailureBranched` (see
//! `crate::catch`): its units are `<unit>.on_failure.<id>`, and when they are all
//! resolved the unit resolves — `StepFailureCaught` with the branch's output (its `output`
//! template, else its last step's output) and the original error, or `StepFailed` with the
//! branch's first failed step's error. Either way the unit is never compensated: it never
//! succeeded (`StepFailureCaught` stays out of `success_order`); the branch's own steps
//! are compensated like any group's.
//!
//! A race runs all its branches (units `<race>.<i>.<id>`). In each round the branches are
//! looked at in document order: the first whose list resolved without a failure wins —
//! what this round scheduled is dropped, every open unit under the race is cancelled
//! (`StepCancelled`: tasks get a cancel, timers and waits end, children are cancelled), and
//! the race succeeds with `{winner, output}`. Everything a round looks at is in the
//! history, so replay picks the same winner. When every branch failed, the race fails with
//! branch 0's error. Losing branches' steps that had already succeeded keep their
//! compensations (they run if the workflow later fails); cancelled units have none.

use super::nested::{list_outcome, ListEnd};
use super::Ctx;
use crate::event::Event;
use crate::unit::UnitKey;
use orbit_definition::{Branch, Step};
use serde_json::json;

/// Drives the failure branch of `step`'s unit `key` one round (the unit is open with
/// `Wait::OnFailure`; its `error` is the failure).
pub(super) fn on_failure_round(ctx: &Ctx<'_>, step: &Step, key: &UnitKey, out: &mut Vec<Event>) {
    let Some(branch) = &step.on_failure else { return };
    let k = key.to_string();
    let Some(error) = ctx.state.unit(&k).and_then(|u| u.error.clone()) else { return };
    let prefix = format!("{}.on_failure.", key.step);
    let end = ListEnd { output: branch.output.as_ref(), field: "on_failure.output", last: true };
    match list_outcome(ctx, key, &prefix, &branch.steps, &end, out) {
        None => {}
        Some(Ok(output)) => out.push(Event::StepFailureCaught { step: k, error, output }),
        Some(Err(error)) => out.push(Event::StepFailed { step: k, error }),
    }
}

/// Drives a race one round (see the module doc).
pub(super) fn race_round(ctx: &Ctx<'_>, branches: &[Branch], key: &UnitKey, out: &mut Vec<Event>) {
    let k = key.to_string();
    let before = out.len();
    let mut failures = Vec::new();
    for (i, b) in branches.iter().enumerate() {
        let prefix = format!("{}.{i}.", key.step);
        let field = format!("race[{i}].output");
        let end = ListEnd { output: b.output.as_ref(), field: &field, last: true };
        match list_outcome(ctx, key, &prefix, &b.steps, &end, out) {
            None => {}
            Some(Ok(value)) => {
                out.truncate(before);
                let inner = format!("{k}.");
                for (unit, _) in ctx.state.open_units() {
                    if unit.starts_with(&inner) {
                        out.push(Event::StepCancelled { step: unit.clone() });
                    }
                }
                let output = json!({"winner": i, "output": value});
                out.push(Event::StepSucceeded { step: k, attempt: None, output });
                return;
            }
            Some(Err(error)) => failures.push(error),
        }
    }
    if failures.len() == branches.len() {
        if let Some(mut error) = failures.into_iter().next() {
            error.message = format!("every branch of the race failed; branch 0: {}", error.message);
            out.push(Event::StepFailed { step: k, error });
        }
    }
}
