//! Groups and switches: nested lists of steps run as one step (`group: {steps, output?}`,
//! `switch: [{when, steps, output?}, ..., {default, output?}]`).
//!
//! A nested list is read like any list (with the enclosing list's variables), checked with
//! [`graph::resolve_group`] among its own steps — ids unique within it, `needs` naming its
//! steps only — and every `steps.<id>` its steps (or its `output`) read that is not one of
//! them is handed up as a reference of the step holding it: reading an outer step orders
//! the whole group or switch after it, and an id known nowhere is reported where it is
//! read. Nested lists nest up to [`MAX_GROUP_DEPTH`].

use crate::error::ErrorCode;
use crate::expr::Template;
use crate::limits::MAX_GROUP_DEPTH;
use crate::model::{Body, Branch, Step, StepKind};
use crate::parse::exprs::{Compiler, StepRef, Vars};
use crate::parse::known::{Known, Parsed};
use crate::parse::reader::Errors;
use crate::parse::reader::{index_path, wrong_type, Obj};
use crate::parse::{fields, graph};
use serde_json::Value;
use std::collections::BTreeSet;

pub(crate) const GROUP_FIELDS: [&str; 2] = ["steps", "output"];
const BRANCH_FIELDS: [&str; 4] = ["when", "steps", "default", "output"];

/// Where nested lists are read: the body, how deep, and what their expressions see.
pub(crate) struct Nest<'a> {
    pub body: &'a Body,
    pub depth: usize,
    pub vars: &'a Vars,
    pub known: &'a Known,
    /// How a nested list is read: `steps::read_list`, handed down so that this file (and
    /// the constructs that nest lists) need not import the list reader that calls them.
    pub read: ReadList,
}

impl<'a> Nest<'a> {
    /// The same place, with `vars` (the enclosing list's variables and a construct's own,
    /// such as `failure` or `iteration`) for the nested list's expressions.
    pub fn with_vars<'b>(&self, vars: &'b Vars) -> Nest<'b>
    where
        'a: 'b,
    {
        Nest { body: self.body, depth: self.depth, vars, known: self.known, read: self.read }
    }
}

/// `steps::read_list`'s signature: a list's value, path, body, variables, declared names,
/// errors and depth.
pub(crate) type ReadList =
    fn(&Value, &str, &Body, &Vars, &Known, &mut Errors, usize) -> Vec<Parsed>;

/// Whether a nested list at `path` would be too deep (reported there).
pub(crate) fn too_deep(nest: &Nest<'_>, path: &str, c: &mut Compiler) -> bool {
    if nest.depth < MAX_GROUP_DEPTH {
        return false;
    }
    let message = format!(
        "groups, switches and repeats nest at most {MAX_GROUP_DEPTH} deep; this one is inside \
         {} others",
        nest.depth
    );
    c.errors.push(path, ErrorCode::DocumentLimit, message);
    true
}

/// Reads one nested list (`field` of `obj`: `steps` or `default`) and its optional
/// `output`; hands the reads of outer steps up to `c.refs`.
pub(crate) fn list(
    obj: &mut Obj,
    field: &str,
    nest: &Nest<'_>,
    c: &mut Compiler,
) -> (Vec<Step>, Option<Template>) {
    let path = obj.at(field);
    let steps = obj.required(field, c.errors);
    let empty = steps.and_then(Value::as_array).is_some_and(Vec::is_empty);
    if empty {
        c.errors.push(&path, ErrorCode::InvalidValue, "a nested list needs at least one step");
    }
    let depth = nest.depth + 1;
    let mut inner = steps.map_or_else(Vec::new, |v| {
        (nest.read)(v, &path, nest.body, nest.vars, nest.known, c.errors, depth)
    });
    let mut outer: Vec<StepRef> = Vec::new();
    graph::resolve_group(&mut inner, &mut outer, c.errors);
    let ids: BTreeSet<&str> = inner.iter().map(|p| p.step.id.as_str()).collect();
    let output = obj.get("output").and_then(|v| {
        let mut refs = Vec::new();
        let at = obj.at("output");
        let t =
            Compiler { errors: &mut *c.errors, refs: &mut refs }.template(v, &at, nest.vars, true);
        outer.extend(refs.into_iter().filter(|r| !ids.contains(r.id.as_str())));
        t
    });
    c.refs.extend(outer);
    (inner.into_iter().map(|p| p.step).collect(), output)
}

/// Reads `group:` of a step.
pub(crate) fn group(obj: &mut Obj, nest: &Nest<'_>, c: &mut Compiler) -> Option<StepKind> {
    let mut g = obj.object("group", "`{steps, output?}`", c.errors)?;
    if too_deep(nest, g.path(), c) {
        for f in GROUP_FIELDS {
            g.raw(f);
        }
        g.finish(c.errors, &GROUP_FIELDS);
        return None;
    }
    let (steps, output) = list(&mut g, "steps", nest, c);
    g.finish(c.errors, &GROUP_FIELDS);
    Some(StepKind::Group { steps, output })
}

/// Reads `switch:` of a step: a non-empty list of `{when, steps, output?}` branches, with
/// at most one `{default, output?}`, last.
pub(crate) fn switch(obj: &mut Obj, nest: &Nest<'_>, c: &mut Compiler) -> Option<StepKind> {
    let value = obj.get("switch")?;
    let path = obj.at("switch");
    let Value::Array(items) = value else {
        wrong_type(c.errors, &path, "a list of branches", value);
        return None;
    };
    if items.is_empty() {
        c.errors.push(&path, ErrorCode::InvalidValue, "a switch needs at least one branch");
        return None;
    }
    if too_deep(nest, &path, c) {
        return None;
    }
    let mut branches = Vec::new();
    for (i, item) in items.iter().enumerate() {
        let at = index_path(&path, i);
        let Some(mut b) = Obj::new(item, &at, "a branch", c.errors) else { continue };
        let default = b.has("default");
        if default && (b.has("when") || b.has("steps")) {
            let message = "a branch is either `{when, steps}` or `{default}`, not both";
            c.errors.push(&at, ErrorCode::InvalidValue, message);
        } else if default && i + 1 != items.len() {
            c.errors.push(&at, ErrorCode::InvalidValue, "the `default` branch must be the last");
        }
        let when = if default {
            None
        } else {
            if !b.has("when") {
                c.errors.push(
                    &at,
                    ErrorCode::MissingField,
                    "missing field `when` (or write `default`)",
                );
            }
            fields::when(&mut b, nest.vars, c)
        };
        let (steps, output) = list(&mut b, if default { "default" } else { "steps" }, nest, c);
        b.finish(c.errors, &BRANCH_FIELDS);
        branches.push(Branch { when, steps, output });
    }
    Some(StepKind::Switch { branches })
}
