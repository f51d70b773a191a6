//! The dispatcher of nested steps: one round of a running group, switch, race, loop, or a
//! step's failure branch, by kind.
//!
//! The list scheduler (`super::body`) reaches it through [`Ctx::nested_round`], which the
//! facade sets to [`round`]: the constructs call the scheduler for their own lists, and the
//! scheduler does not import them back (CODE_STYLE.md, layering).

use super::{branches, loops, nested, Ctx};
use crate::event::Event;
use crate::unit::UnitKey;
use orbit_definition::{Step, StepKind};

/// Drives a running nested `step` (unit `key`) one round.
pub(super) fn round(ctx: &Ctx<'_>, step: &Step, key: &UnitKey, out: &mut Vec<Event>) {
    match &step.kind {
        StepKind::Group { steps, output } if step.for_each.is_some() => {
            loops::each_round(ctx, step, steps, output.as_ref(), key, out);
        }
        StepKind::Repeat(r) => loops::repeat_round(ctx, r, key, out),
        StepKind::Group { steps, output } => {
            nested::group_round(ctx, steps, output.as_ref(), key, out);
        }
        StepKind::Switch { branches } => nested::switch_round(ctx, branches, key, out),
        StepKind::Race { branches } => branches::race_round(ctx, branches, key, out),
        // A step of any other kind is driven here only while its failure branch runs.
        _ => branches::on_failure_round(ctx, step, key, out),
    }
}
