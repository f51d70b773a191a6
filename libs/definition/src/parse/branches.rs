//! Failure branches and races (issue 29): `on_failure: {steps, output?}` on a step, and the
//! step kind `race: [{steps, output?}, ...]`.
//!
//! Both are nested lists read like a group's (`crate::parse::group::list`: the enclosing
//! list's variables, ids unique within the list, `needs` naming its own steps, reads of
//! outer steps handed up to the step holding the list) and count toward the nesting limit.
//! A failure branch's expressions also see `failure`. A race needs at least
//! [`MIN_RACE_BRANCHES`] branches, and its step ids are unique across its branches (a
//! unit key names its branch, but a reader of the history should not have to).

use crate::error::ErrorCode;
use crate::model::{Branch, OnFailure, StepKind};
use crate::parse::exprs::Compiler;
use crate::parse::group::{list, too_deep, Nest, GROUP_FIELDS};
use crate::parse::reader::{field_path, index_path, wrong_type, Obj};
use serde_json::Value;
use std::collections::BTreeMap;

/// The fewest branches a race may have: one branch would be a group.
pub const MIN_RACE_BRANCHES: usize = 2;

/// Reads `on_failure:` of a step: `{steps, output?}`, whose expressions see `failure`.
pub(crate) fn on_failure(obj: &mut Obj, nest: &Nest<'_>, c: &mut Compiler) -> Option<OnFailure> {
    let mut f = obj.object("on_failure", "`{steps, output?}`", c.errors)?;
    if too_deep(nest, f.path(), c) {
        for field in GROUP_FIELDS {
            f.raw(field);
        }
        f.finish(c.errors, &GROUP_FIELDS);
        return None;
    }
    let vars = nest.vars.with(&["failure"]);
    let inner = nest.with_vars(&vars);
    let (steps, output) = list(&mut f, "steps", &inner, c);
    f.finish(c.errors, &GROUP_FIELDS);
    Some(OnFailure { steps, output })
}

/// Reads `race:` of a step: a list of at least [`MIN_RACE_BRANCHES`] `{steps, output?}`.
pub(crate) fn race(obj: &mut Obj, nest: &Nest<'_>, c: &mut Compiler) -> Option<StepKind> {
    let value = obj.get("race")?;
    let path = obj.at("race");
    let Value::Array(items) = value else {
        wrong_type(c.errors, &path, "a list of branches", value);
        return None;
    };
    if items.len() < MIN_RACE_BRANCHES {
        let message = format!(
            "a race needs at least {MIN_RACE_BRANCHES} branches (it has {}); one list of steps \
             is a `group`",
            items.len()
        );
        c.errors.push(&path, ErrorCode::InvalidValue, message);
        return None;
    }
    if too_deep(nest, &path, c) {
        return None;
    }
    let mut branches = Vec::new();
    // Step id -> the branch that has it first.
    let mut owners: BTreeMap<String, usize> = BTreeMap::new();
    for (i, item) in items.iter().enumerate() {
        let at = index_path(&path, i);
        let Some(mut b) = Obj::new(item, &at, "a branch", c.errors) else { continue };
        let (steps, output) = list(&mut b, "steps", nest, c);
        b.finish(c.errors, &GROUP_FIELDS);
        for (j, step) in steps.iter().enumerate() {
            if step.id.is_empty() {
                continue;
            }
            if let Some(first) = owners.get(&step.id) {
                let id_path = field_path(&index_path(&field_path(&at, "steps"), j), "id");
                let message = format!(
                    "step id `{}` is also in branch {first} of this race; ids are unique \
                     across a race's branches",
                    step.id
                );
                c.errors.push(&id_path, ErrorCode::DuplicateId, message);
            } else {
                owners.insert(step.id.clone(), i);
            }
        }
        branches.push(Branch { when: None, steps, output });
    }
    Some(StepKind::Race { branches })
}
