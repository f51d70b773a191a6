//! Steps: one body (a list of steps) at a time, each step's kind and the fields that kind
//! allows.
//!
//! Which fields a step may carry depends on its kind (see [`applies`]); a field that exists
//! but not for this kind is reported as `UNKNOWN_FIELD` with a message saying where it does
//! apply, the same way the document's JSON Schema reports it to editors.

use crate::error::ErrorCode;
use crate::expr::Template;
use crate::model::{Body, RetryPolicy, Step, StepKind};
use crate::parse::exprs::{Compiler, Vars};
pub(crate) use crate::parse::known::{Known, Parsed};
use crate::parse::reader::{index_path, is_identifier, wrong_type, Errors, Obj};
use crate::parse::{branches, fields, flow, group, kinds, names, repeat};
use serde_json::Value;
use std::collections::BTreeSet;

/// Every field a step may have, for "did you mean" hints.
const STEP_FIELDS: [&str; 34] = [
    "id",
    "continue_on_failure",
    "on_failure",
    "renamed_from",
    "needs",
    "when",
    "input",
    "timeout",
    "queue_timeout",
    "heartbeat_timeout",
    "retry",
    "compensate",
    "for_each",
    "as",
    "max_concurrency",
    "priority",
    "concurrency",
    "rate_limit",
    "fairness",
    "on",
    "sticky",
    "search",
    "task",
    "compute",
    "sleep",
    "until",
    "await",
    "workflow",
    "http",
    "continue_as_new",
    "group",
    "switch",
    "race",
    "repeat",
];

/// Whether `field` applies to a step of `kind` in `body` (with `for_each` or not).
fn applies(field: &str, kind: &str, body: &Body, fan_out: bool) -> Result<(), String> {
    let (ok, kinds) = match field {
        "input" => (matches!(kind, "task" | "workflow"), "task and workflow steps"),
        "timeout" => (
            matches!(kind, "task" | "await" | "workflow" | "http"),
            "task, await, workflow and http steps",
        ),
        "queue_timeout" | "heartbeat_timeout" | "priority" | "concurrency" | "rate_limit"
        | "fairness" | "on" | "sticky" => (kind == "task", "task steps"),
        "retry" => (matches!(kind, "task" | "http"), "task and http steps"),
        "for_each" => (
            matches!(kind, "task" | "compute" | "workflow" | "http" | "group"),
            "task, compute, workflow, http and group steps",
        ),
        "as" | "max_concurrency" => {
            return if fan_out {
                Ok(())
            } else {
                Err(format!("`{field}` only applies with `for_each`"))
            };
        }
        "compensate" if matches!(body, Body::On(_)) => {
            return Err(
                "`compensate` is not valid in `on` handlers, which run after compensation".into()
            );
        }
        "compensate" if matches!(body, Body::Update(_)) => {
            return Err("`compensate` is not valid in update handlers, which are never \
                        compensated"
                .into());
        }
        "compensate" => (
            !matches!(kind, "continue_as_new" | "group" | "switch" | "race" | "repeat"),
            "every step kind but continue_as_new, group, switch, race and repeat (their own \
             steps may have one)",
        ),
        "on_failure" if fan_out => {
            return Err("`on_failure` is not valid with `for_each` (use `continue_on_failure`, \
                        which catches each element on its own)"
                .into());
        }
        "on_failure" => (
            !matches!(kind, "continue_as_new" | "group" | "switch" | "race" | "repeat"),
            "every step kind but continue_as_new, group, switch, race and repeat (their own \
             steps may have one)",
        ),
        "continue_on_failure" => (kind != "continue_as_new", "every step kind but continue_as_new"),
        "search" if *body != Body::Main => {
            return Err("`search` is only valid on steps of the main `steps`".into());
        }
        _ => return Ok(()),
    };
    if ok {
        Ok(())
    } else {
        let article = if kind.starts_with(['a', 'e', 'i', 'o', 'u']) { "an" } else { "a" };
        Err(format!("`{field}` is not valid on {article} {kind} step; it applies to {kinds}"))
    }
}

/// Reads a body: a list of steps. The main body must not be empty.
pub(crate) fn read_body(
    value: &Value,
    path: &str,
    body: &Body,
    known: &Known,
    errors: &mut Errors,
) -> Vec<Parsed> {
    let Value::Array(items) = value else {
        wrong_type(errors, path, "a list of steps", value);
        return Vec::new();
    };
    if items.is_empty() && *body == Body::Main {
        errors.push(path, ErrorCode::InvalidValue, "a workflow needs at least one step");
    }
    let vars = match body {
        Body::Main => Vars::default(),
        Body::On(_) => Vars::default().with(&["failure"]),
        Body::OnSignal(_) => Vars::default().with(&["event"]),
        Body::Update(_) => Vars::default().with(&["args"]),
    };
    read_list(value, path, body, &vars, known, errors, 0)
}

/// Reads a list of steps of `body`, `depth` groups deep (0: the body itself), whose
/// expressions see `vars`.
pub(crate) fn read_list(
    value: &Value,
    path: &str,
    body: &Body,
    vars: &Vars,
    known: &Known,
    errors: &mut Errors,
    depth: usize,
) -> Vec<Parsed> {
    let Value::Array(items) = value else {
        wrong_type(errors, path, "a list of steps", value);
        return Vec::new();
    };
    items
        .iter()
        .enumerate()
        .filter_map(|(i, v)| {
            let place = Place { body, depth };
            read_step(v, &index_path(path, i), &place, vars, known, errors)
        })
        .collect()
}

/// Where a step is: its body, and how many groups deep.
struct Place<'a> {
    body: &'a Body,
    depth: usize,
}

fn read_step(
    value: &Value,
    path: &str,
    place: &Place<'_>,
    outer: &Vars,
    known: &Known,
    errors: &mut Errors,
) -> Option<Parsed> {
    let body = place.body;
    let mut obj = Obj::new(value, path, "a step", errors)?;
    let id = obj.required_string("id", errors).unwrap_or_default().to_string();
    if obj.get("id").is_some_and(Value::is_string) {
        names::check_step_id(&id, &obj.at("id"), errors);
    }
    // Checked against the other steps of the body in `graph::resolve`.
    let renamed_from = obj.string("renamed_from", errors).map(str::to_string);
    if let Some(old) = renamed_from.as_deref().filter(|old| !is_identifier(old)) {
        let message = format!(
            "`renamed_from: {old}` must be a step id of the previous version \
             ([A-Za-z_][A-Za-z0-9_]*)"
        );
        errors.push(&obj.at("renamed_from"), ErrorCode::InvalidId, message);
    }
    let present: Vec<&str> = kinds::KINDS.into_iter().filter(|k| obj.has(k)).collect();
    let kind = match present.as_slice() {
        [] => {
            let message =
                format!("step has no kind; write exactly one of {}", kinds::KINDS.join(", "));
            errors.push(path, ErrorCode::StepKind, message);
            // Without a kind no field can be judged; report only what no step has, and keep
            // the id so that steps reading this one are not reported too.
            for field in STEP_FIELDS {
                obj.raw(field);
            }
            obj.finish(errors, &STEP_FIELDS);
            let mut step = placeholder(id);
            step.renamed_from = renamed_from;
            return Some(Parsed {
                step,
                path: path.to_string(),
                needs: Vec::new(),
                refs: Vec::new(),
            });
        }
        [one] => *one,
        [first, rest @ ..] => {
            let message =
                format!("step has several kinds ({}); write exactly one", present.join(", "));
            errors.push(path, ErrorCode::StepKind, message);
            rest.iter().for_each(|k| {
                obj.raw(k);
            });
            first
        }
    };
    if kind == "continue_as_new" && (*body != Body::Main || place.depth > 0) {
        let message = if place.depth > 0 {
            "`continue_as_new` is not valid inside a group or switch; it is only valid in the \
             main `steps`"
        } else {
            "`continue_as_new` is only valid in the main `steps`"
        };
        errors.push(&obj.at(kind), ErrorCode::InvalidValue, message);
    }

    let fan_out = obj.peek("for_each").is_some() && applies("for_each", kind, body, false).is_ok();
    let needs = fields::needs(&mut obj, errors);
    let mut refs = Vec::new();
    let mut c = Compiler { errors: &mut *errors, refs: &mut refs };
    let when = fields::when(&mut obj, outer, &mut c);
    let for_each = if fan_out { fields::for_each(&mut obj, outer, &mut c) } else { None };
    let as_name = for_each.as_ref().map_or("item", |f| f.as_name.as_str());
    // Per-element fields see the element and its index.
    let inner = if fan_out { outer.with(&[as_name, "index"]) } else { outer.clone() };
    let ok = |f: &str| applies(f, kind, body, fan_out).is_ok();

    // A `for_each` group's steps run once per element: they see it (and `index`).
    let nest = group::Nest { body, depth: place.depth, vars: &inner, known, read: read_list };
    let kind_value = match kind {
        "group" => group::group(&mut obj, &nest, &mut c),
        "switch" => group::switch(&mut obj, &nest, &mut c),
        "race" => branches::race(&mut obj, &nest, &mut c),
        "repeat" => repeat::repeat(&mut obj, &nest, &mut c),
        _ => kinds::read(kind, &mut obj, known, &inner, outer, &mut c),
    };
    let input = if ok("input") {
        obj.get("input").and_then(|v| c.template(v, &obj.at("input"), &inner, true))
    } else {
        None
    };
    let step_duration = |obj: &mut Obj, f: &str, c: &mut Compiler| {
        if ok(f) {
            fields::duration(obj, f, true, c.errors)
        } else {
            None
        }
    };
    let timeout_ms = step_duration(&mut obj, "timeout", &mut c);
    let queue_timeout_ms = step_duration(&mut obj, "queue_timeout", &mut c);
    let heartbeat_timeout_ms = step_duration(&mut obj, "heartbeat_timeout", &mut c);
    let retry =
        if ok("retry") { fields::retry(&mut obj, c.errors) } else { RetryPolicy::default() };
    let compensate =
        if ok("compensate") { fields::compensate(&mut obj, known, &inner, &mut c) } else { None };
    let continue_on_failure =
        ok("continue_on_failure") && fields::flag(&mut obj, "continue_on_failure", c.errors);
    let on_failure =
        if ok("on_failure") { branches::on_failure(&mut obj, &nest, &mut c) } else { None };
    if continue_on_failure && on_failure.is_some() {
        let message = "a step has `on_failure` or `continue_on_failure: true`, not both \
                       (`continue_on_failure` is a failure branch whose output is the error)";
        c.errors.push(&obj.at("on_failure"), ErrorCode::InvalidValue, message);
    }
    // Checked together: `applies` gives the flow fields the same kinds.
    let flow = if flow::FIELDS.iter().all(|f| ok(f)) {
        flow::step(&mut obj, &inner, &mut c)
    } else {
        crate::flow::StepFlow::default()
    };

    let search = if ok("search") && place.depth > 0 {
        if obj.get("search").is_some() {
            let message = "`search` is only valid on steps of the main `steps`, not inside a \
                           group or switch (set the attributes on the group's step instead)";
            errors.push(&obj.at("search"), ErrorCode::UnknownField, message);
        }
        std::collections::BTreeMap::new()
    } else if ok("search") {
        crate::parse::search::values(&mut obj, &known.search, Some(&id), &mut refs, errors)
    } else {
        std::collections::BTreeMap::new()
    };

    obj.finish_with(errors, &STEP_FIELDS, |f| {
        let misplaced = STEP_FIELDS.contains(&f) && !kinds::KINDS.contains(&f);
        misplaced.then(|| applies(f, kind, body, fan_out).err()).flatten()
    });

    let mut step = placeholder(id);
    if let Some(kind) = kind_value {
        step.kind = kind;
    }
    step.needs = needs.iter().map(|(n, _)| n.clone()).collect();
    step.when = when;
    step.input = input;
    step.timeout_ms = timeout_ms;
    step.queue_timeout_ms = queue_timeout_ms;
    step.heartbeat_timeout_ms = heartbeat_timeout_ms;
    step.retry = retry;
    step.compensate = compensate;
    step.for_each = for_each;
    step.renamed_from = renamed_from;
    step.flow = flow;
    step.search = search;
    step.continue_on_failure = continue_on_failure;
    step.on_failure = on_failure;
    Some(Parsed { step, path: path.to_string(), needs, refs })
}

/// A step with only its id, standing in where the rest could not be read (the definition
/// is rejected then, but the id still counts for references).
fn placeholder(id: String) -> Step {
    Step {
        id,
        kind: StepKind::Compute { value: Template::Literal(Value::Null) },
        needs: Vec::new(),
        deps: BTreeSet::new(),
        when: None,
        input: None,
        timeout_ms: None,
        queue_timeout_ms: None,
        heartbeat_timeout_ms: None,
        retry: RetryPolicy::default(),
        compensate: None,
        for_each: None,
        renamed_from: None,
        flow: crate::flow::StepFlow::default(),
        search: std::collections::BTreeMap::new(),
        continue_on_failure: false,
        on_failure: None,
    }
}
