//! `continue_on_failure` and `on_failure`: a unit failing for good becomes a caught
//! failure, or starts its failure branch.
//!
//! Failures are decided in many places (retries exhausted, an expression, a limit, a
//! child's end, a fan-out's list), so the catch is one rewrite of the events those places
//! produce, applied where events leave the decider ([`crate::decide`]) and the command
//! handler ([`crate::command::accept`]): a `StepFailed` of a unit whose step has
//! `continue_on_failure` is recorded as `StepFailureCaught` instead, with the output
//! `{failed: true, error: {code, message}}` ([`orbit_definition::caught_output`]); one of
//! a unit whose step has `on_failure` is recorded as `StepFailureBranched` (the unit stays
//! open while the branch runs, `crate::decide::branches`) — unless the unit's branch has
//! already started: then the `StepFailed` is the branch's own failure, and stands.
//! Compensation units are never caught (a compensation failing is the wind-down's
//! business, whatever the step says).

use crate::event::Event;
use crate::state::{State, Wait};
use crate::unit::UnitKey;
use orbit_definition::{Definition, Step};

/// Rewrites, in place, the `StepFailed` events of units whose step catches failures.
pub(crate) fn rewrite(def: &Definition, state: &State, events: &mut [Event]) {
    for event in events.iter_mut() {
        let Event::StepFailed { step, error } = event else { continue };
        let Some(s) = step_of(def, step) else { continue };
        if s.continue_on_failure {
            let output = orbit_definition::caught_output(
                &error.code,
                &error.message,
                error.details.as_ref(),
            );
            *event = Event::StepFailureCaught {
                step: std::mem::take(step),
                error: error.clone(),
                output,
            };
        } else if s.on_failure.is_some() && !branched(state, step) {
            *event =
                Event::StepFailureBranched { step: std::mem::take(step), error: error.clone() };
        }
    }
}

/// The step of unit `key`, when the unit is a step's own (not a compensation). A fan-out
/// element (`s[2]`) is its step's: `continue_on_failure` catches each element on its own
/// (`on_failure` is refused with `for_each`).
fn step_of<'d>(def: &'d Definition, key: &str) -> Option<&'d Step> {
    let parsed = UnitKey::parse(key).filter(|k| !k.compensate)?;
    let step = def.find_step(&parsed.scope.body(), &parsed.step)?;
    (parsed.index.is_none() || step.on_failure.is_none()).then_some(step)
}

/// Whether unit `key`'s failure branch has started (its failure is the branch's).
fn branched(state: &State, key: &str) -> bool {
    state.unit(key).is_some_and(|u| u.wait == Some(Wait::OnFailure))
}
