//! `continue_on_failure`: a unit failing for good becomes a caught failure.
//!
//! Failures are decided in many places (retries exhausted, an expression, a limit, a
//! child's end, a fan-out's list), so the catch is one rewrite of the events those places
//! produce, applied where events leave the decider ([`crate::decide`]) and the command
//! handler ([`crate::command::accept`]): a `StepFailed` of a unit whose step has
//! `continue_on_failure` is recorded as `StepFailureCaught` instead, with the output
//! `{failed: true, error: {code, message}}` ([`orbit_definition::caught_output`]).
//! Compensation units are never caught (a compensation failing is the wind-down's
//! business, whatever the step says).

use crate::event::Event;
use crate::unit::UnitKey;
use orbit_definition::Definition;

/// Rewrites, in place, the `StepFailed` events of units whose step catches failures.
pub(crate) fn rewrite(def: &Definition, events: &mut [Event]) {
    for event in events.iter_mut() {
        let Event::StepFailed { step, error } = event else { continue };
        if !catches(def, step) {
            continue;
        }
        let output =
            orbit_definition::caught_output(&error.code, &error.message, error.details.as_ref());
        *event =
            Event::StepFailureCaught { step: std::mem::take(step), error: error.clone(), output };
    }
}

/// Whether a failure of unit `key` is caught by its step's `continue_on_failure`.
fn catches(def: &Definition, key: &str) -> bool {
    let Some(parsed) = UnitKey::parse(key).filter(|k| !k.compensate) else { return false };
    def.find_step(&parsed.scope.body(), &parsed.step).is_some_and(|s| s.continue_on_failure)
}
