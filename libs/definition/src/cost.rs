//! A conservative bound on what evaluating an expression costs, computed before it runs
//! from the parsed tree and the actual sizes of the values in scope.
//!
//! The `cel` crate has no hook to count steps or cancel an evaluation, and a wall-time
//! limit would make the decider depend on the machine's speed (replays must agree). So
//! the budget is checked up front, deterministically: an evaluation whose bound exceeds
//! [`MAX_EVAL_STEPS`] or [`MAX_EVAL_BYTES`] is refused without running.
//!
//! Values are abstracted by a [`Shape`]: an upper bound on their deep size in bytes
//! (every value counts [`VALUE_BYTES`] plus its string bytes and members), on their
//! length (members of a list or map, bytes of a string), on each member, and for maps
//! with string keys on each field. Each node then gets a bound on its steps (one per
//! node visited, plus one per `VALUE_BYTES` a node copies, compares or scans), on the
//! bytes it allocates, and on its value's shape:
//!
//! - a comprehension (`all`, `exists`, `exists_one`, `map`, `filter`) runs its body once
//!   per member of its range: steps = range members × body steps (nested ones multiply);
//!   a `map`/`filter` result grows by the body's shape per member;
//! - `+` on strings and lists adds the sizes and costs them; `==`, `<`, `in` scan both
//!   sides; `_ ? _ : _` costs the dearer branch;
//! - every standard function produces at most the size of its arguments plus a constant
//!   (none of them amplifies); `matches` costs its text size times the pattern's states
//!   (the pattern's length times its counted repetitions; a pattern that is not a literal
//!   is charged as [`REGEX_DYNAMIC_STATES`]).
//!
//! Rejected although it might run cheaply: anything whose worst case (no short circuit,
//! every member as large as the largest) is over budget, and a comprehension whose
//! accumulator could grow other than by the `map`/`filter` append (macros never do that).
//! The recursion here follows the tree, whose depth is bounded at compile time
//! (`limits::MAX_AST_DEPTH`); the one over values follows [`crate::limits::MAX_VALUE_DEPTH`].

use crate::limits::MAX_VALUE_DEPTH;
use cel::common::ast::{operators, EntryExpr, Expr as Ast, IdedExpr, LiteralValue};
use serde_json::Value;
use std::collections::BTreeMap;
use std::rc::Rc;

/// The most steps one evaluation may take (about a second of a release build's time).
pub const MAX_EVAL_STEPS: u64 = 10_000_000;

/// The most bytes one evaluation may allocate, intermediate values included.
pub const MAX_EVAL_BYTES: u64 = 64 * 1024 * 1024;

/// What one value counts, beside its string bytes and its members.
pub const VALUE_BYTES: u64 = 32;

/// The cost of compiling a regular expression.
const REGEX_BASE: u64 = 10_000;

/// The states assumed for a pattern that is not a literal (the regex crate's compiled
/// size limit keeps real programs near or below this).
pub const REGEX_DYNAMIC_STATES: u64 = 1_000_000;

/// An upper bound on a value.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Shape {
    /// Deep size in bytes.
    bytes: u64,
    /// Members of a list or map, or bytes of a string.
    len: u64,
    /// Each member (list element, map key or value); `None`: bounded by `bytes` only.
    member: Option<Rc<Shape>>,
    /// Each field of a map with string keys, when known.
    fields: Option<Rc<BTreeMap<String, Shape>>>,
}

impl Shape {
    fn scalar() -> Shape {
        Shape { bytes: VALUE_BYTES, len: 0, member: None, fields: None }
    }

    fn string(len: u64) -> Shape {
        Shape { bytes: VALUE_BYTES.saturating_add(len), len, member: None, fields: None }
    }

    /// Anything at most `bytes` deep.
    fn top(bytes: u64) -> Shape {
        Shape { bytes, len: bytes, member: None, fields: None }
    }

    /// The shape of a JSON value; `None` when it nests deeper than [`MAX_VALUE_DEPTH`].
    pub(crate) fn of(value: &Value) -> Option<Shape> {
        Shape::of_at(value, 1)
    }

    fn of_at(value: &Value, depth: usize) -> Option<Shape> {
        if depth > MAX_VALUE_DEPTH {
            return None;
        }
        Some(match value {
            Value::Null | Value::Bool(_) | Value::Number(_) => Shape::scalar(),
            Value::String(s) => Shape::string(s.len() as u64),
            Value::Array(items) => {
                let mut shapes = Vec::with_capacity(items.len());
                for item in items {
                    shapes.push(Shape::of_at(item, depth + 1)?);
                }
                Shape::list(&shapes)
            }
            Value::Object(map) => {
                let mut fields = BTreeMap::new();
                for (k, v) in map {
                    fields.insert(k.clone(), Shape::of_at(v, depth + 1)?);
                }
                Shape::map(fields)
            }
        })
    }

    fn list(items: &[Shape]) -> Shape {
        let member = items.iter().cloned().reduce(|a, b| a.join(&b)).unwrap_or_else(Shape::scalar);
        Shape {
            bytes: items.iter().fold(VALUE_BYTES, |acc, s| acc.saturating_add(s.bytes)),
            len: items.len() as u64,
            member: Some(Rc::new(member)),
            fields: None,
        }
    }

    fn map(fields: BTreeMap<String, Shape>) -> Shape {
        let mut member = Shape::scalar();
        let mut bytes = VALUE_BYTES;
        for (k, v) in &fields {
            let key = Shape::string(k.len() as u64);
            bytes = bytes.saturating_add(key.bytes).saturating_add(v.bytes);
            member = member.join(&key).join(v);
        }
        Shape {
            bytes,
            len: fields.len() as u64,
            member: Some(Rc::new(member)),
            fields: Some(Rc::new(fields)),
        }
    }

    /// The least shape above both.
    fn join(&self, other: &Shape) -> Shape {
        let member = match (&self.member, &other.member) {
            (Some(a), Some(b)) if Rc::ptr_eq(a, b) => Some(a.clone()),
            (Some(a), Some(b)) => Some(Rc::new(a.join(b))),
            _ => None,
        };
        let fields = match (&self.fields, &other.fields) {
            (Some(a), Some(b)) if Rc::ptr_eq(a, b) => Some(a.clone()),
            (Some(a), Some(b)) => {
                let mut out = (**a).clone();
                for (k, v) in b.iter() {
                    let joined = out.get(k).map_or_else(|| v.clone(), |w| w.join(v));
                    out.insert(k.clone(), joined);
                }
                Some(Rc::new(out))
            }
            _ => None,
        };
        Shape { bytes: self.bytes.max(other.bytes), len: self.len.max(other.len), member, fields }
    }

    /// Any member (element, key or value).
    fn member(&self) -> Shape {
        self.member.as_deref().cloned().unwrap_or_else(|| Shape::top(self.bytes))
    }

    /// The value of field `name` (a missing one is a runtime error, which costs nothing).
    fn field(&self, name: &str) -> Shape {
        match &self.fields {
            Some(fields) => fields.get(name).cloned().unwrap_or_else(Shape::scalar),
            None => self.member(),
        }
    }

    /// `a + b` of two strings or lists (or numbers): one header, both contents.
    fn concat(&self, other: &Shape) -> Shape {
        let member = match (&self.member, &other.member) {
            (Some(a), Some(b)) => Some(Rc::new(a.join(b))),
            _ => None,
        };
        Shape {
            bytes: self
                .bytes
                .saturating_add(other.bytes)
                .saturating_sub(VALUE_BYTES)
                .max(VALUE_BYTES),
            len: self.len.saturating_add(other.len),
            member,
            fields: None,
        }
    }

    /// Steps to copy, compare or scan the value once.
    fn touch(&self) -> u64 {
        self.bytes / VALUE_BYTES + 1
    }
}

/// The bound of one node: its steps, its allocations and its value.
#[derive(Debug, Clone)]
pub(crate) struct Bound {
    pub steps: u64,
    pub alloc: u64,
    pub shape: Shape,
}

impl Bound {
    fn new(steps: u64, alloc: u64, shape: Shape) -> Bound {
        Bound { steps, alloc, shape }
    }

    fn unbounded() -> Bound {
        Bound::new(u64::MAX, u64::MAX, Shape::top(u64::MAX))
    }
}

/// Names in scope with their shapes; the last binding of a name wins.
pub(crate) type Env = Vec<(String, Shape)>;

/// Checks an evaluation of `e` over `env` against the budgets.
///
/// # Errors
/// Why it is over budget, for people.
pub(crate) fn check(e: &IdedExpr, env: &mut Env) -> Result<(), String> {
    let b = bound(e, env);
    // Converting the result to JSON scans and copies it once more.
    let steps = b.steps.saturating_add(b.shape.touch());
    let alloc = b.alloc.saturating_add(b.shape.bytes);
    if steps > MAX_EVAL_STEPS {
        return Err(format!(
            "expression could take up to {} steps over these values; the limit is {MAX_EVAL_STEPS}",
            show(steps)
        ));
    }
    if alloc > MAX_EVAL_BYTES {
        return Err(format!(
            "expression could allocate up to {} bytes over these values; the limit is {MAX_EVAL_BYTES}",
            show(alloc)
        ));
    }
    Ok(())
}

fn show(n: u64) -> String {
    if n == u64::MAX {
        "an unbounded number of".into()
    } else {
        n.to_string()
    }
}

fn lookup(env: &Env, name: &str) -> Shape {
    env.iter().rev().find(|(n, _)| n == name).map_or_else(Shape::scalar, |(_, s)| s.clone())
}

fn literal(l: &LiteralValue) -> Shape {
    match l {
        LiteralValue::String(s) => Shape::string(s.inner().len() as u64),
        LiteralValue::Bytes(b) => Shape::string(b.inner().len() as u64),
        _ => Shape::scalar(),
    }
}

fn string_literal(e: &IdedExpr) -> Option<&str> {
    match &e.expr {
        Ast::Literal(LiteralValue::String(s)) => Some(s.inner()),
        _ => None,
    }
}

/// The bound of one node over `env`.
pub(crate) fn bound(e: &IdedExpr, env: &mut Env) -> Bound {
    match &e.expr {
        Ast::Literal(l) => Bound::new(1, 0, literal(l)),
        Ast::Ident(name) => Bound::new(1, 0, lookup(env, name)),
        Ast::Select(sel) => {
            let o = bound(&sel.operand, env);
            let shape = if sel.test { Shape::scalar() } else { o.shape.field(&sel.field) };
            Bound::new(o.steps.saturating_add(1), o.alloc, shape)
        }
        Ast::List(list) => {
            let parts: Vec<Bound> = list.elements.iter().map(|x| bound(x, env)).collect();
            let shapes: Vec<Shape> = parts.iter().map(|p| p.shape.clone()).collect();
            let shape = Shape::list(&shapes);
            let (steps, alloc) = sum(&parts);
            Bound::new(
                steps.saturating_add(shape.touch()),
                alloc.saturating_add(shape.bytes),
                shape,
            )
        }
        Ast::Map(map) => {
            let mut parts = Vec::new();
            let mut fields = BTreeMap::new();
            let mut all_named = true;
            for entry in &map.entries {
                match &entry.expr {
                    EntryExpr::MapEntry(m) => {
                        let (k, v) = (bound(&m.key, env), bound(&m.value, env));
                        match string_literal(&m.key) {
                            Some(name) => {
                                fields.insert(name.to_string(), v.shape.clone());
                            }
                            None => all_named = false,
                        }
                        parts.push(k);
                        parts.push(v);
                    }
                    EntryExpr::StructField(f) => parts.push(bound(&f.value, env)),
                }
            }
            let shapes: Vec<Shape> = parts.iter().map(|p| p.shape.clone()).collect();
            let mut shape = Shape::list(&shapes);
            shape.len = map.entries.len() as u64;
            if all_named {
                shape.fields = Some(Rc::new(fields));
            }
            let (steps, alloc) = sum(&parts);
            Bound::new(
                steps.saturating_add(shape.touch()),
                alloc.saturating_add(shape.bytes),
                shape,
            )
        }
        Ast::Struct(st) => {
            let parts: Vec<Bound> = st
                .entries
                .iter()
                .flat_map(|entry| match &entry.expr {
                    EntryExpr::MapEntry(m) => vec![&m.key, &m.value],
                    EntryExpr::StructField(f) => vec![&f.value],
                })
                .map(|x| bound(x, env))
                .collect();
            let shapes: Vec<Shape> = parts.iter().map(|p| p.shape.clone()).collect();
            let shape = Shape::list(&shapes);
            let (steps, alloc) = sum(&parts);
            Bound::new(
                steps.saturating_add(shape.touch()),
                alloc.saturating_add(shape.bytes),
                shape,
            )
        }
        Ast::Comprehension(c) => comprehension(c, env),
        Ast::Call(call) => {
            let mut parts: Vec<Bound> = Vec::new();
            if let Some(t) = &call.target {
                parts.push(bound(t, env));
            }
            parts.extend(call.args.iter().map(|a| bound(a, env)));
            let args: Vec<&IdedExpr> =
                call.target.iter().map(|t| &**t).chain(call.args.iter()).collect();
            function(&call.func_name, &parts, &args)
        }
        Ast::Unspecified => Bound::new(1, 0, Shape::scalar()),
    }
}

fn sum(parts: &[Bound]) -> (u64, u64) {
    parts
        .iter()
        .fold((1u64, 0u64), |(s, a), p| (s.saturating_add(p.steps), a.saturating_add(p.alloc)))
}

/// A call, given the bounds of its target and arguments (in that order) and their trees.
fn function(name: &str, parts: &[Bound], args: &[&IdedExpr]) -> Bound {
    let (steps, alloc) = sum(parts);
    let touch_all = parts.iter().fold(0u64, |acc, p| acc.saturating_add(p.shape.touch()));
    match (name, parts) {
        (operators::CONDITIONAL, [c, t, f]) => {
            let steps = c.steps.saturating_add(t.steps.max(f.steps)).saturating_add(1);
            Bound::new(steps, c.alloc.saturating_add(t.alloc.max(f.alloc)), t.shape.join(&f.shape))
        }
        (operators::ADD, [a, b]) => {
            let shape = a.shape.concat(&b.shape);
            Bound::new(steps.saturating_add(touch_all), alloc.saturating_add(shape.bytes), shape)
        }
        (operators::INDEX | operators::OPT_INDEX | operators::OPT_SELECT, [a, _]) => {
            let shape = match args.get(1).and_then(|k| string_literal(k)) {
                Some(field) => a.shape.field(field),
                None => a.shape.member(),
            };
            Bound::new(steps.saturating_add(touch_all), alloc, shape)
        }
        (operators::IN, [needle, hay]) => {
            let scan = hay
                .shape
                .len
                .saturating_mul(needle.shape.touch())
                .saturating_add(hay.shape.touch());
            Bound::new(steps.saturating_add(scan), alloc, Shape::scalar())
        }
        ("matches", [text, pattern]) => {
            let states = args
                .get(1)
                .and_then(|p| string_literal(p))
                .map_or(REGEX_DYNAMIC_STATES, regex_states);
            let run = text.shape.len.saturating_add(1).saturating_mul(states);
            let steps = steps
                .saturating_add(REGEX_BASE)
                .saturating_add(run)
                .saturating_add(pattern.shape.touch());
            Bound::new(
                steps,
                alloc.saturating_add(states.saturating_mul(VALUE_BYTES)),
                Shape::scalar(),
            )
        }
        _ if returns_scalar(name) => {
            Bound::new(steps.saturating_add(touch_all), alloc, Shape::scalar())
        }
        // Every other standard function (`string`, `bytes`, `dyn`, optionals, ...) returns
        // at most what it was given plus a constant.
        _ => {
            let bytes =
                parts.iter().fold(2 * VALUE_BYTES, |acc, p| acc.saturating_add(p.shape.bytes));
            let shape = match parts {
                [only] if name == "dyn" => only.shape.clone(),
                _ => Shape::top(bytes),
            };
            Bound::new(steps.saturating_add(touch_all), alloc.saturating_add(bytes), shape)
        }
    }
}

fn returns_scalar(name: &str) -> bool {
    matches!(
        name,
        operators::LOGICAL_AND
            | operators::LOGICAL_OR
            | operators::LOGICAL_NOT
            | operators::NOT_STRICTLY_FALSE
            | operators::NEGATE
            | operators::SUBSTRACT
            | operators::MULTIPLY
            | operators::DIVIDE
            | operators::MODULO
            | operators::EQUALS
            | operators::NOT_EQUALS
            | operators::LESS
            | operators::LESS_EQUALS
            | operators::GREATER
            | operators::GREATER_EQUALS
            | "size"
            | "int"
            | "uint"
            | "double"
            | "bool"
            | "type"
            | "contains"
            | "startsWith"
            | "endsWith"
            | "duration"
            | "timestamp"
            | "hasValue"
    ) || name.starts_with("get")
}

/// States of a literal pattern: its length times every counted repetition (`{n}`,
/// `{n,m}`: the largest number), which the regex compiler unrolls.
fn regex_states(pattern: &str) -> u64 {
    let mut states = pattern.len() as u64 + 1;
    let mut rest = pattern;
    while let Some(open) = rest.find('{') {
        rest = &rest[open + 1..];
        let inner = rest.split('}').next().unwrap_or("");
        let most = inner.split(',').filter_map(|n| n.trim().parse::<u64>().ok()).max().unwrap_or(1);
        states = states.saturating_mul(most.max(1));
    }
    states
}

/// `range.macro(x, body)`: the body once per member of the range.
fn comprehension(c: &cel::common::ast::ComprehensionExpr, env: &mut Env) -> Bound {
    let range = bound(&c.iter_range, env);
    let init = bound(&c.accu_init, env);
    let n = range.shape.len;
    let item = range.shape.member();
    let scope = env.len();
    env.push((c.iter_var.clone(), item.clone()));
    if let Some(v2) = &c.iter_var2 {
        env.push((v2.clone(), item.clone()));
    }
    env.push((c.accu_var.clone(), init.shape.clone()));
    let cond = bound(&c.loop_cond, env);
    // Each iteration binds a copy of the member.
    let per_item = cond.steps.saturating_add(item.touch());
    let (per_steps, per_alloc, accu) = match append_step(c) {
        // `map` / `filter`: the accumulator (an empty list) grows by `[items]` per member.
        Some((guard, items)) if init.shape.len == 0 => {
            let g = guard.map(|g| bound(g, env));
            let it = bound(items, env);
            let (gs, ga) = g.map_or((0, 0), |g| (g.steps, g.alloc));
            let grown = Shape {
                bytes: VALUE_BYTES.saturating_add(n.saturating_mul(it.shape.bytes)),
                len: n.saturating_mul(it.shape.len),
                member: it.shape.member.clone(),
                fields: None,
            };
            (it.steps.saturating_add(gs), it.alloc.saturating_add(ga), grown)
        }
        _ => {
            let step = bound(&c.loop_step, env);
            // `all`, `exists`, `exists_one` keep a scalar: the step must not grow it.
            if step.shape.bytes > init.shape.bytes.max(VALUE_BYTES)
                || step.shape.len > init.shape.len
            {
                env.truncate(scope);
                return Bound::unbounded();
            }
            (step.steps, step.alloc, init.shape.clone())
        }
    };
    env.truncate(scope);
    env.push((c.accu_var.clone(), accu.clone()));
    let result = bound(&c.result, env);
    env.truncate(scope);
    let each_steps = per_item.saturating_add(per_steps);
    let each_alloc = per_alloc.saturating_add(item.bytes);
    let steps = range
        .steps
        .saturating_add(init.steps)
        .saturating_add(n.saturating_mul(each_steps))
        .saturating_add(result.steps)
        .saturating_add(1);
    let alloc = range
        .alloc
        .saturating_add(init.alloc)
        .saturating_add(n.saturating_mul(each_alloc))
        .saturating_add(accu.bytes)
        .saturating_add(result.alloc);
    Bound::new(steps, alloc, result.shape)
}

/// The `map`/`filter` loop step: `accu + [items]` or `guard ? accu + [items] : accu`.
fn append_step(c: &cel::common::ast::ComprehensionExpr) -> Option<(Option<&IdedExpr>, &IdedExpr)> {
    let accu = c.accu_var.as_str();
    match &c.loop_step.expr {
        Ast::Call(call) if call.func_name == operators::CONDITIONAL => match call.args.as_slice() {
            [guard, step, otherwise] if is_ident(otherwise, accu) => {
                appended(step, accu).map(|items| (Some(guard), items))
            }
            _ => None,
        },
        _ => appended(&c.loop_step, accu).map(|items| (None, items)),
    }
}

fn is_ident(e: &IdedExpr, name: &str) -> bool {
    matches!(&e.expr, Ast::Ident(n) if n == name)
}

/// `[items]` of `accu + [items]`.
fn appended<'e>(e: &'e IdedExpr, accu: &str) -> Option<&'e IdedExpr> {
    match &e.expr {
        Ast::Call(call) if call.func_name == operators::ADD && call.target.is_none() => {
            match call.args.as_slice() {
                [lhs, rhs] if is_ident(lhs, accu) && matches!(rhs.expr, Ast::List(_)) => Some(rhs),
                _ => None,
            }
        }
        _ => None,
    }
}

#[cfg(test)]
#[path = "cost_tests.rs"]
mod tests;
