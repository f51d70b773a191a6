//! The workflow-level fields of a document and the assembly of the [`Definition`].

use crate::error::ErrorCode;
use crate::expr::{Expr, Template};
use crate::limits::MAX_STEPS;
use crate::model::{Body, Definition, Handlers, Limits, Outcome, Step, Update};
use crate::parse::contracts::{contract, signals, tasks, version};
use crate::parse::exprs::{Compiler, StepRef, Vars};
use crate::parse::fields::duration;
use crate::parse::graph;
use crate::parse::migrations;
use crate::parse::names::{check_key, check_reserved, is_name};
use crate::parse::reader::{a_kind, wrong_type, Errors, Obj};
use crate::parse::steps::{read_body, Known, Parsed};
use serde_json::Value;
use std::collections::{BTreeMap, BTreeSet};

const FIELDS: [&str; 25] = [
    "$schema",
    "name",
    "version",
    "description",
    "timeout",
    "retention",
    "limits",
    "priority",
    "fairness",
    "worker_labels",
    "sticky",
    "dedupe",
    "concurrency",
    "search_attributes",
    "search",
    "input",
    "tasks",
    "signals",
    "queries",
    "updates",
    "steps",
    "output",
    "on",
    "on_signal",
    "migrations",
];

/// Reads a whole document. Returns a definition whenever the document is a mapping; it is
/// only meaningful if no error was recorded.
pub(crate) fn read(document: &Value, errors: &mut Errors) -> Option<Definition> {
    if !document.is_object() {
        let message = format!("a workflow definition must be a mapping, got {}", a_kind(document));
        errors.push("", ErrorCode::ParseError, message);
        return None;
    }
    if let Some((path, count)) = too_many_steps(document).filter(|_| !crate::expr::is_stored()) {
        let message =
            format!("the definition has {count} steps; the limit is {MAX_STEPS} over every body");
        errors.push(path, ErrorCode::DocumentLimit, message);
        return None;
    }
    let mut obj = Obj::new(document, "", "a workflow definition", errors)?;
    // Editors point `$schema` at the document's JSON Schema; it is not part of the model.
    obj.string("$schema", errors);

    let name = obj.required_string("name", errors).unwrap_or_default().to_string();
    if obj.get("name").is_some_and(Value::is_string) && !is_name(&name) {
        let message = format!("workflow name `{name}` must match [A-Za-z0-9_.-]+");
        errors.push("name", ErrorCode::InvalidValue, message);
    }
    check_reserved("workflow", &name, false, "name", errors);
    let version = obj.required("version", errors).and_then(|v| version(v, "version", errors));
    let description = obj.string("description", errors).map(str::to_string);
    let timeout_ms = duration(&mut obj, "timeout", true, errors);
    let retention_ms = duration(&mut obj, "retention", true, errors);
    let limits =
        obj.object("limits", "limits", errors).map(|l| limits(l, errors)).unwrap_or_default();
    let priority = crate::parse::flow::workflow_priority(&mut obj, errors);
    let fairness = crate::parse::flow::workflow_fairness(&mut obj, errors);
    let (worker_labels, sticky) = crate::parse::flow::workflow_workers(&mut obj, errors);
    let dedupe = crate::parse::dedupe::workflow_dedupe(&mut obj, errors);
    let concurrency = crate::parse::flow::workflow_concurrency(&mut obj, errors);
    let input = obj.get("input").and_then(|s| contract(s, "input", errors));
    let tasks = obj.get("tasks").map(|t| tasks(t, "tasks", errors)).unwrap_or_default();
    let signals = obj.get("signals").map(|s| signals(s, "signals", errors)).unwrap_or_default();
    let search_attributes = crate::parse::search::declared(&mut obj, errors);
    let known = Known {
        tasks: tasks.keys().cloned().collect(),
        signals: signals.keys().cloned().collect(),
        search: search_attributes.clone(),
    };

    let mut top_refs = Vec::new();
    let search =
        crate::parse::search::values(&mut obj, &search_attributes, None, &mut top_refs, errors);
    let queries =
        obj.object("queries", "queries by name", errors).map(|q| queries(q, &mut top_refs, errors));
    let mut updates = obj
        .object("updates", "update handlers by name", errors)
        .map(|u| updates(u, &known, &mut top_refs, errors))
        .unwrap_or_default();
    let mut main = obj
        .required("steps", errors)
        .map(|s| read_body(s, "steps", &Body::Main, &known, errors))
        .unwrap_or_default();
    let output = obj.get("output").and_then(|o| {
        Compiler { errors: &mut *errors, refs: &mut top_refs }.template(
            o,
            "output",
            &Vars::default(),
            false,
        )
    });
    let mut on: BTreeMap<Outcome, Vec<Parsed>> = BTreeMap::new();
    if let Some(mut o) = obj.object("on", "handlers by outcome", errors) {
        for outcome in [Outcome::Failure, Outcome::Cancel, Outcome::Timeout] {
            if let Some(v) = o.get(outcome.as_str()) {
                let body =
                    read_body(v, &o.at(outcome.as_str()), &Body::On(outcome), &known, errors);
                on.insert(outcome, body);
            }
        }
        o.finish(errors, &["failure", "cancel", "timeout"]);
    }
    let mut on_signal: BTreeMap<String, Vec<Parsed>> = BTreeMap::new();
    if let Some(mut o) = obj.object("on_signal", "handlers by signal name", errors) {
        for signal in o.keys() {
            let at = o.at(&signal);
            known.check_signal(&signal, &at, errors);
            let v = o.raw(&signal).unwrap_or(&Value::Null);
            let body = read_body(v, &at, &Body::OnSignal(signal.clone()), &known, errors);
            on_signal.insert(signal, body);
        }
    }
    let migrations = obj
        .get("migrations")
        .map(|m| migrations::read(m, "migrations", &main, errors))
        .unwrap_or_default();
    obj.finish(errors, &FIELDS);

    let main_ids: BTreeSet<String> =
        main.iter().map(|p| p.step.id.clone()).filter(|id| !id.is_empty()).collect();
    graph::resolve(&mut main, None, errors);
    for body in on.values_mut().chain(on_signal.values_mut()) {
        graph::resolve(body, Some(&main_ids), errors);
    }
    graph::check_refs(&top_refs, &main_ids, errors);
    for handler in updates.values_mut() {
        graph::resolve(&mut handler.steps, Some(&main_ids), errors);
        let mut ids = main_ids.clone();
        ids.extend(handler.steps.iter().map(|p| p.step.id.clone()));
        graph::check_refs(&handler.reply_refs, &ids, errors);
    }

    let steps = |body: Vec<Parsed>| body.into_iter().map(|p| p.step).collect::<Vec<Step>>();
    let mut take = |o: Outcome| steps(on.remove(&o).unwrap_or_default());
    let handlers = Handlers {
        failure: take(Outcome::Failure),
        cancel: take(Outcome::Cancel),
        timeout: take(Outcome::Timeout),
    };
    Some(Definition {
        name,
        version: version.unwrap_or_default(),
        description,
        timeout_ms,
        retention_ms,
        limits,
        priority,
        fairness,
        worker_labels,
        sticky,
        dedupe,
        concurrency,
        search_attributes,
        search,
        input,
        tasks,
        signals,
        queries: queries.unwrap_or_default(),
        updates: updates
            .into_iter()
            .map(|(name, h)| (name, Update { steps: steps(h.steps), ..h.update }))
            .collect(),
        steps: steps(main),
        // `output: null` means the same as no output; keep one form so the hash agrees.
        output: output.filter(|t| *t != Template::Literal(Value::Null)),
        on: handlers,
        on_signal: on_signal.into_iter().map(|(k, v)| (k, steps(v))).collect(),
        migrations,
        hash: String::new(),
    })
}

/// The step count over every body, with the path of the largest body, when over
/// [`MAX_STEPS`]. Checked before anything is read: reading a step compiles expressions.
fn too_many_steps(document: &Value) -> Option<(&'static str, usize)> {
    let len = |v: Option<&Value>| count_steps(v, 0);
    let main = len(document.get("steps"));
    let nested = |key: &str| {
        document
            .get(key)
            .and_then(Value::as_object)
            .map_or(0, |m| m.values().map(|v| len(Some(v))).sum())
    };
    let handlers = document
        .get("updates")
        .and_then(Value::as_object)
        .map_or(0, |m| m.values().map(|h| len(h.get("steps"))).sum());
    let count = main + nested("on") + nested("on_signal") + handlers;
    (count > MAX_STEPS).then(|| (if main * 2 >= count { "steps" } else { "" }, count))
}

/// The steps of a list and of the groups, switches, repeats, races and failure branches in it
/// (down to one level past the nesting limit, which is reported where the nested list is read).
fn count_steps(list: Option<&Value>, depth: usize) -> usize {
    let Some(items) = list.and_then(Value::as_array) else { return 0 };
    let nested = if depth > crate::limits::MAX_GROUP_DEPTH {
        0
    } else {
        let branches = |s: &Value| -> usize {
            let Some(bs) = s.get("switch").and_then(Value::as_array) else { return 0 };
            bs.iter()
                .map(|b| {
                    count_steps(b.get("steps"), depth + 1)
                        + count_steps(b.get("default"), depth + 1)
                })
                .sum()
        };
        // Race branches and failure branches: `{steps}` objects.
        let lists = |s: &Value| -> usize {
            let races = s
                .get("race")
                .and_then(Value::as_array)
                .map_or(0, |bs| bs.iter().map(|b| count_steps(b.get("steps"), depth + 1)).sum());
            races + count_steps(s.get("on_failure").and_then(|f| f.get("steps")), depth + 1)
        };
        items
            .iter()
            .map(|s| {
                count_steps(s.get("group").and_then(|g| g.get("steps")), depth + 1)
                    + count_steps(s.get("repeat").and_then(|r| r.get("steps")), depth + 1)
                    + branches(s)
                    + lists(s)
            })
            .sum()
    };
    items.len() + nested
}

fn limits(mut l: Obj, errors: &mut Errors) -> Limits {
    let limits = Limits {
        max_fan_out: l.integer("max_fan_out", 1, errors),
        max_history_events: l.integer("max_history_events", 1, errors),
        max_payload_bytes: l.integer("max_payload_bytes", 1, errors),
        max_timers: l.integer("max_timers", 1, errors),
    };
    l.finish(errors, &["max_fan_out", "max_history_events", "max_payload_bytes", "max_timers"]);
    limits
}

/// `queries: {NAME: ${{ expr }}}`, read over the execution state (no dependencies).
fn queries(mut q: Obj, refs: &mut Vec<StepRef>, errors: &mut Errors) -> BTreeMap<String, Expr> {
    let mut out = BTreeMap::new();
    for name in q.keys() {
        let at = q.at(&name);
        check_key("query", &name, &at, errors);
        let Some(v) = q.raw(&name) else { continue };
        if v.is_null() {
            wrong_type(errors, &at, "one `${{ ... }}` expression", v);
            continue;
        }
        let mut c = Compiler { errors: &mut *errors, refs: &mut *refs };
        if let Some(e) = c.single(v, &at, &Vars::default(), false, "a query") {
            out.insert(name, e);
        }
    }
    q.finish(errors, &[]);
    out
}

/// An update handler as read: its body still to be resolved against the main ids, and the
/// references of its reply (which may read the handler's own steps as well as main steps).
struct ParsedUpdate {
    update: Update,
    steps: Vec<Parsed>,
    reply_refs: Vec<StepRef>,
}

/// `updates: {NAME: {input: schema, validator: ${{ bool }}, steps: [...], reply: ${{ expr }}}}`;
/// the expressions see the state (as queries do) and `args`, the update's argument. The
/// validator reads main steps only (it runs before anything is written); the reply of a
/// handler with steps may also read those steps.
fn updates(
    mut u: Obj,
    known: &Known,
    refs: &mut Vec<StepRef>,
    errors: &mut Errors,
) -> BTreeMap<String, ParsedUpdate> {
    let mut out = BTreeMap::new();
    for name in u.keys() {
        let at = u.at(&name);
        check_key("update", &name, &at, errors);
        let Some(mut h) = u.object(&name, "an update handler", errors) else { continue };
        let input = h.get("input").and_then(|s| contract(s, &h.at("input"), errors));
        let vars = Vars::default().with(&["args"]);
        let mut reply_refs = Vec::new();
        let expr =
            |h: &mut Obj, field: &str, what: &str, refs: &mut Vec<StepRef>, errors: &mut Errors| {
                let v = h.raw(field)?.clone();
                Compiler { errors, refs }.single(&v, &h.at(field), &vars, false, what)
            };
        let validator = expr(&mut h, "validator", "an update validator", refs, errors);
        let reply = expr(&mut h, "reply", "an update reply", &mut reply_refs, errors);
        let steps = match h.raw("steps") {
            Some(v) => {
                read_body(&v.clone(), &h.at("steps"), &Body::Update(name.clone()), known, errors)
            }
            None => Vec::new(),
        };
        h.finish(errors, &["input", "validator", "steps", "reply"]);
        let update = Update { input, validator, reply, steps: Vec::new() };
        out.insert(name, ParsedUpdate { update, steps, reply_refs });
    }
    u.finish(errors, &[]);
    out
}
