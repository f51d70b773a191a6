//! Loops: `repeat: {steps, until, max_iterations, output?, continue_as_new?}` (issue 29).
//!
//! The iteration's list is read like a group's (`super::group::list`), with `iteration`
//! and `previous` in scope; `until` also sees `output` (the iteration's output) and reads
//! the iteration's steps, whose ids shadow outer ones. `max_iterations` is required and at
//! most [`MAX_REPEAT_ITERATIONS`]: no loop is unbounded. A repeat counts as one level of
//! nesting (see [`super::group::too_deep`]). `continue_as_new` (true or false, default
//! true) lets a repeat of the main `steps` continue the run as new near the history limit.

use crate::error::ErrorCode;
use crate::limits::MAX_REPEAT_ITERATIONS;
use crate::model::{Repeat, StepKind};
use crate::parse::exprs::Compiler;
use crate::parse::fields;
use crate::parse::group::{list, too_deep, Nest};
use crate::parse::reader::Obj;
use std::collections::BTreeSet;

const REPEAT_FIELDS: [&str; 5] = ["steps", "until", "max_iterations", "output", "continue_as_new"];

/// The names an iteration's expressions see besides the enclosing list's.
pub(crate) const ITERATION_VARS: [&str; 2] = ["iteration", "previous"];

/// Reads `repeat:` of a step.
pub(crate) fn repeat(obj: &mut Obj, nest: &Nest<'_>, c: &mut Compiler) -> Option<StepKind> {
    let mut r = obj.object("repeat", "`{steps, until, max_iterations, output?}`", c.errors)?;
    if too_deep(nest, r.path(), c) {
        for f in REPEAT_FIELDS {
            r.raw(f);
        }
        r.finish(c.errors, &REPEAT_FIELDS);
        return None;
    }
    let vars = nest.vars.with(&ITERATION_VARS);
    let inner = nest.with_vars(&vars);
    let (steps, output) = list(&mut r, "steps", &inner, c);
    let until = r.required("until", c.errors).and_then(|v| {
        let at = r.at("until");
        let mut refs = Vec::new();
        let until_vars = vars.with(&["output"]);
        let e = Compiler { errors: &mut *c.errors, refs: &mut refs }.single(
            v,
            &at,
            &until_vars,
            true,
            "`until`",
        );
        let ids: BTreeSet<&str> = steps.iter().map(|s| s.id.as_str()).collect();
        c.refs.extend(refs.into_iter().filter(|r| !ids.contains(r.id.as_str())));
        e
    });
    let max_iterations = max_iterations(&mut r, c);
    // Absent is true: only `false` opts out.
    let continue_as_new =
        !r.has("continue_as_new") || fields::flag(&mut r, "continue_as_new", c.errors);
    r.finish(c.errors, &REPEAT_FIELDS);
    Some(StepKind::Repeat(Box::new(Repeat {
        steps,
        until: until?,
        max_iterations: max_iterations?,
        output,
        continue_as_new,
    })))
}

/// `max_iterations`: required, 1..=[`MAX_REPEAT_ITERATIONS`].
fn max_iterations(r: &mut Obj, c: &mut Compiler) -> Option<u32> {
    if !r.has("max_iterations") {
        let message = format!(
            "a repeat needs `max_iterations` (1 to {MAX_REPEAT_ITERATIONS}): no loop is unbounded"
        );
        c.errors.push(&r.at("max_iterations"), ErrorCode::MissingField, message);
        return None;
    }
    let n = r.integer("max_iterations", 1, c.errors)?;
    match u32::try_from(n) {
        Ok(n) if n <= MAX_REPEAT_ITERATIONS => Some(n),
        _ => {
            let message = format!(
                "max_iterations {n} is over the limit of {MAX_REPEAT_ITERATIONS} \
                 (MAX_REPEAT_ITERATIONS); a longer loop continues as new"
            );
            c.errors.push(&r.at("max_iterations"), ErrorCode::DocumentLimit, message);
            None
        }
    }
}
