//! Normalisation and identity: the model back to a document, its canonical JSON and hash.
//!
//! [`to_document`] writes the normalised document: defaults filled in (retry policies,
//! task versions, `as: item`), durations in canonical form (`1m30s`), expressions in
//! `${{ }}`, a migration hint's `from` as a list, empty collections left out. Parsing it
//! gives back the same definition, so the normalised document is what the server stores
//! and shows.
//!
//! [`canonical_json`] sorts keys at every level, writes no whitespace, and writes whole
//! floating-point numbers as integers (`2.0` → `2`, as JCS/RFC 8785 does), so the hash
//! does not depend on key order, YAML vs JSON, or how a number was spelt.

use crate::duration::format_duration;
use crate::flow::{Fairness, Labels, Priority, RateLimitKind, StepFlow, Sticky, Weight};
use crate::model::{Definition, ForEach, MigrationHint, RetryPolicy, Step, StepKind, TaskCall};
use serde_json::{json, Map, Value};
use sha2::{Digest, Sha256};
use std::fmt::Write;

/// The normalised document of a definition; `parse_value(&to_document(d)) == d`.
#[must_use]
pub fn to_document(d: &Definition) -> Value {
    let mut doc = Map::new();
    doc.insert("name".into(), json!(d.name));
    doc.insert("version".into(), json!(d.version));
    put(&mut doc, "description", d.description.as_ref().map(|s| json!(s)));
    put(&mut doc, "timeout", d.timeout_ms.map(duration));
    put(&mut doc, "retention", d.retention_ms.map(duration));
    let mut limits = Map::new();
    put(&mut limits, "max_fan_out", d.limits.max_fan_out.map(Value::from));
    put(&mut limits, "max_history_events", d.limits.max_history_events.map(Value::from));
    put(&mut limits, "max_payload_bytes", d.limits.max_payload_bytes.map(Value::from));
    put(&mut limits, "max_timers", d.limits.max_timers.map(Value::from));
    put_map(&mut doc, "limits", limits);
    put(&mut doc, "priority", d.priority.map(Value::from));
    put(&mut doc, "fairness", d.fairness.as_ref().map(fairness));
    put(&mut doc, "worker_labels", d.worker_labels.as_ref().map(labels));
    put(&mut doc, "sticky", d.sticky.map(sticky));
    put(&mut doc, "dedupe", d.dedupe.as_ref().map(dedupe));
    let keys: Vec<Value> = d
        .concurrency
        .iter()
        .map(|c| json!({"key": c.key.to_json(), "limit": c.limit, "on_limit": c.on_limit.as_str()}))
        .collect();
    put(&mut doc, "concurrency", (!keys.is_empty()).then_some(Value::Array(keys)));
    let declared = d.search_attributes.iter().map(|(n, t)| (n.clone(), json!(t.as_str())));
    put_map(&mut doc, "search_attributes", declared.collect());
    put_map(&mut doc, "search", search(&d.search));
    put(&mut doc, "input", d.input.as_ref().map(|c| c.schema().clone()));
    let tasks = d.tasks.iter().map(|(name, t)| {
        let mut task = Map::new();
        task.insert("version".into(), json!(t.version));
        put(&mut task, "language", t.language.as_ref().map(|l| json!(l)));
        put(&mut task, "input", t.input.as_ref().map(|c| c.schema().clone()));
        put(&mut task, "output", t.output.as_ref().map(|c| c.schema().clone()));
        (name.clone(), Value::Object(task))
    });
    put_map(&mut doc, "tasks", tasks.collect());
    let signals = d
        .signals
        .iter()
        .map(|(name, c)| (name.clone(), c.as_ref().map_or(Value::Null, |c| c.schema().clone())));
    put_map(&mut doc, "signals", signals.collect());
    let queries = d.queries.iter().map(|(name, e)| (name.clone(), expr(e.source())));
    put_map(&mut doc, "queries", queries.collect());
    let updates = d.updates.iter().map(|(name, u)| {
        let mut handler = Map::new();
        put(&mut handler, "input", u.input.as_ref().map(|c| c.schema().clone()));
        put(&mut handler, "validator", u.validator.as_ref().map(|e| expr(e.source())));
        put(&mut handler, "reply", u.reply.as_ref().map(|e| expr(e.source())));
        if !u.steps.is_empty() {
            handler.insert("steps".into(), body(&u.steps));
        }
        (name.clone(), Value::Object(handler))
    });
    put_map(&mut doc, "updates", updates.collect());
    doc.insert("steps".into(), body(&d.steps));
    put(&mut doc, "output", d.output.as_ref().map(crate::expr::Template::to_json));
    let mut on = Map::new();
    for (outcome, steps) in
        [("failure", &d.on.failure), ("cancel", &d.on.cancel), ("timeout", &d.on.timeout)]
    {
        if !steps.is_empty() {
            on.insert(outcome.into(), body(steps));
        }
    }
    put_map(&mut doc, "on", on);
    let handlers = d.on_signal.iter().map(|(name, steps)| (name.clone(), body(steps)));
    put_map(&mut doc, "on_signal", handlers.collect());
    if !d.migrations.is_empty() {
        doc.insert("migrations".into(), Value::Array(d.migrations.iter().map(migration).collect()));
    }
    Value::Object(doc)
}

/// Keys sorted at every level, no whitespace, whole floats as integers.
#[must_use]
pub fn canonical_json(value: &Value) -> String {
    let mut out = String::new();
    write_canonical(value, &mut out);
    out
}

/// `sha256:<hex>` of the canonical JSON of the normalised document.
#[must_use]
pub fn definition_hash(d: &Definition) -> String {
    let digest = Sha256::digest(canonical_json(&to_document(d)).as_bytes());
    format!("sha256:{}", hex::encode(digest))
}

// Recursive over a normalised document, whose depth `parse` bounds (`limits`).
fn write_canonical(value: &Value, out: &mut String) {
    match value {
        Value::Object(map) => {
            let mut keys: Vec<&String> = map.keys().collect();
            keys.sort();
            out.push('{');
            for (i, k) in keys.into_iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                out.push_str(&Value::String(k.clone()).to_string());
                out.push(':');
                write_canonical(&map[k], out);
            }
            out.push('}');
        }
        Value::Array(items) => {
            out.push('[');
            for (i, item) in items.iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                write_canonical(item, out);
            }
            out.push(']');
        }
        Value::Number(n) => match n.as_f64() {
            // Whole doubles within the exactly representable range print as integers.
            #[allow(clippy::cast_possible_truncation)]
            Some(f) if !n.is_i64() && !n.is_u64() && f.fract() == 0.0 && f.abs() < 9.0e15 => {
                let _ = write!(out, "{}", f as i64);
            }
            _ => {
                let _ = write!(out, "{n}");
            }
        },
        other => out.push_str(&other.to_string()),
    }
}

fn put(map: &mut Map<String, Value>, key: &str, value: Option<Value>) {
    if let Some(v) = value {
        map.insert(key.into(), v);
    }
}

fn put_map(map: &mut Map<String, Value>, key: &str, inner: Map<String, Value>) {
    if !inner.is_empty() {
        map.insert(key.into(), Value::Object(inner));
    }
}

fn duration(ms: u64) -> Value {
    Value::String(format_duration(ms))
}

fn expr(source: &str) -> Value {
    Value::String(format!("${{{{ {source} }}}}"))
}

/// A nested list with its output (`{steps, output?}`: a failure branch, a race branch).
fn list(steps: &[Step], output: Option<&crate::expr::Template>) -> Value {
    let mut m = Map::new();
    m.insert("steps".into(), body(steps));
    put(&mut m, "output", output.map(crate::expr::Template::to_json));
    Value::Object(m)
}

fn body(steps: &[Step]) -> Value {
    Value::Array(steps.iter().map(step).collect())
}

fn step(s: &Step) -> Value {
    let mut m = Map::new();
    m.insert("id".into(), json!(s.id));
    put(&mut m, "renamed_from", s.renamed_from.as_ref().map(|r| json!(r)));
    let (keyword, payload) = kind(&s.kind);
    m.insert(keyword.into(), payload);
    if !s.needs.is_empty() {
        m.insert("needs".into(), json!(s.needs));
    }
    put(&mut m, "when", s.when.as_ref().map(|e| expr(e.source())));
    if let Some(ForEach { items, as_name, max_concurrency }) = &s.for_each {
        m.insert("for_each".into(), items.to_json());
        m.insert("as".into(), json!(as_name));
        put(&mut m, "max_concurrency", max_concurrency.map(Value::from));
    }
    put(&mut m, "input", s.input.as_ref().map(crate::expr::Template::to_json));
    put(&mut m, "timeout", s.timeout_ms.map(duration));
    put(&mut m, "queue_timeout", s.queue_timeout_ms.map(duration));
    put(&mut m, "heartbeat_timeout", s.heartbeat_timeout_ms.map(duration));
    // The policy is only part of the language for kinds that retry.
    if matches!(s.kind, StepKind::Task { .. } | StepKind::Http { .. }) {
        m.insert("retry".into(), retry(&s.retry));
    }
    put(&mut m, "compensate", s.compensate.as_ref().map(compensate));
    // Only when on: a step without it keeps the canonical form (and hash) it had before.
    if s.continue_on_failure {
        m.insert("continue_on_failure".into(), Value::Bool(true));
    }
    put(&mut m, "on_failure", s.on_failure.as_ref().map(|f| list(&f.steps, f.output.as_ref())));
    flow(&s.flow, &mut m);
    put_map(&mut m, "search", search(&s.search));
    Value::Object(m)
}

fn search(
    values: &std::collections::BTreeMap<String, crate::expr::Template>,
) -> Map<String, Value> {
    values.iter().map(|(n, t)| (n.clone(), t.to_json())).collect()
}

/// `priority`, `concurrency` (always the one object, never a list), `rate_limit` and
/// `fairness`, each only when declared: the canonical form of a step without them is what
/// it was before they existed.
fn flow(f: &StepFlow, m: &mut Map<String, Value>) {
    let priority = f.priority.as_ref().map(|p| match p {
        Priority::Fixed(n) => json!(n),
        Priority::Expr(e) => expr(e.source()),
    });
    put(m, "priority", priority);
    let concurrency = f.concurrency.as_ref().map(|c| {
        let mut o = Map::new();
        o.insert("key".into(), c.key.to_json());
        o.insert("limit".into(), json!(c.limit));
        put(&mut o, "group", c.group.as_ref().map(|g| json!(g)));
        Value::Object(o)
    });
    put(m, "concurrency", concurrency);
    let rate = f.rate_limit.as_ref().map(|r| {
        let mut o = Map::new();
        put(&mut o, "key", r.key.as_ref().map(crate::expr::Template::to_json));
        match &r.limit {
            RateLimitKind::Inline { limit, per_ms } => {
                o.insert("limit".into(), json!(limit));
                o.insert("per".into(), duration(*per_ms));
            }
            RateLimitKind::Named(name) => {
                o.insert("name".into(), json!(name));
            }
        }
        put(&mut o, "group", r.group.as_ref().map(|g| json!(g)));
        Value::Object(o)
    });
    put(m, "rate_limit", rate);
    put(m, "fairness", f.fairness.as_ref().map(fairness));
    put(m, "on", f.labels.as_ref().map(labels));
    put(m, "sticky", f.sticky.map(sticky));
}

/// `{name: value}`, values as their templates.
fn labels(l: &Labels) -> Value {
    Value::Object(l.iter().map(|(k, t)| (k.clone(), t.to_json())).collect())
}

/// `false`, or `{timeout}` (also for `sticky: true`, which is the default timeout).
fn sticky(s: Sticky) -> Value {
    match s {
        Sticky::Off => json!(false),
        Sticky::On { timeout_ms } => json!({ "timeout": duration(timeout_ms) }),
    }
}

/// `{key, window, keep}`: `keep` always written (`first` when the document left it out).
fn dedupe(d: &crate::dedupe::Dedupe) -> Value {
    json!({"key": d.key.to_json(), "window": duration(d.window_ms), "keep": d.keep.as_str()})
}

/// `{key, weight, group?}`: the weight always written (1 when the document left it out).
fn fairness(f: &Fairness) -> Value {
    let mut o = Map::new();
    o.insert("key".into(), f.key.to_json());
    let weight = match &f.weight {
        Weight::Fixed(n) => json!(n),
        Weight::Expr(e) => expr(e.source()),
    };
    o.insert("weight".into(), weight);
    put(&mut o, "group", f.group.as_ref().map(|g| json!(g)));
    Value::Object(o)
}

fn kind(k: &StepKind) -> (&'static str, Value) {
    let payload = match k {
        StepKind::Task { task } => json!(task),
        StepKind::Compute { value } => value.to_json(),
        StepKind::Sleep { duration_ms } => duration(*duration_ms),
        StepKind::Until { at } => at.to_json(),
        StepKind::Await { signal } => json!(signal),
        StepKind::Workflow { workflow, version } => match version {
            Some(v) => json!(format!("{workflow}@{v}")),
            None => json!(workflow),
        },
        StepKind::Http { request } => request.to_json(),
        StepKind::ContinueAsNew { input } => json!({ "input": input.to_json() }),
        StepKind::Group { steps, output } => {
            let mut g = Map::new();
            g.insert("steps".into(), body(steps));
            put(&mut g, "output", output.as_ref().map(crate::expr::Template::to_json));
            Value::Object(g)
        }
        StepKind::Race { branches } => {
            Value::Array(branches.iter().map(|b| list(&b.steps, b.output.as_ref())).collect())
        }
        StepKind::Repeat(r) => {
            let mut m = Map::new();
            m.insert("steps".into(), body(&r.steps));
            m.insert("until".into(), expr(r.until.source()));
            m.insert("max_iterations".into(), json!(r.max_iterations));
            put(&mut m, "output", r.output.as_ref().map(crate::expr::Template::to_json));
            // Only the opt-out is written: a document without it keeps its hash.
            if !r.continue_as_new {
                m.insert("continue_as_new".into(), json!(false));
            }
            Value::Object(m)
        }
        StepKind::Switch { branches } => Value::Array(
            branches
                .iter()
                .map(|b| {
                    let mut m = Map::new();
                    match &b.when {
                        Some(when) => {
                            m.insert("when".into(), expr(when.source()));
                            m.insert("steps".into(), body(&b.steps));
                        }
                        None => {
                            m.insert("default".into(), body(&b.steps));
                        }
                    }
                    put(&mut m, "output", b.output.as_ref().map(crate::expr::Template::to_json));
                    Value::Object(m)
                })
                .collect(),
        ),
    };
    (k.keyword(), payload)
}

/// `from` always as a list.
fn migration(h: &MigrationHint) -> Value {
    let outputs: Map<String, Value> =
        h.outputs.iter().map(|(id, t)| (id.clone(), t.to_json())).collect();
    json!({ "from": h.from, "outputs": outputs })
}

fn retry(r: &RetryPolicy) -> Value {
    let mut v = json!({
        "max_attempts": r.max_attempts,
        "initial_interval": format_duration(r.initial_interval_ms),
        "backoff": r.backoff,
        "max_interval": format_duration(r.max_interval_ms),
        "non_retryable": r.non_retryable,
    });
    // Only when set: the canonical form (and so the hash) of every definition written
    // before the field existed stays what it was.
    if r.max_redeliveries != crate::model::DEFAULT_MAX_REDELIVERIES {
        v["max_redeliveries"] = json!(r.max_redeliveries);
    }
    v
}

fn compensate(c: &TaskCall) -> Value {
    let mut m = Map::new();
    m.insert("task".into(), json!(c.task));
    put(&mut m, "input", c.input.as_ref().map(crate::expr::Template::to_json));
    m.insert("retry".into(), retry(&c.retry));
    put(&mut m, "timeout", c.timeout_ms.map(duration));
    Value::Object(m)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn canonical_json_sorts_keys_and_drops_whitespace() {
        let v = json!({"b": [1, {"d": 2.0, "c": "x\"y"}], "a": null, "é": 1.5});
        assert_eq!(canonical_json(&v), r#"{"a":null,"b":[1,{"c":"x\"y","d":2}],"é":1.5}"#);
    }

    #[test]
    fn whole_numbers_have_one_spelling() {
        assert_eq!(canonical_json(&json!(2.0)), canonical_json(&json!(2)));
        assert_eq!(canonical_json(&json!(-3.0)), "-3");
        assert_eq!(canonical_json(&json!(0.25)), "0.25");
        assert_eq!(canonical_json(&json!(u64::MAX)), u64::MAX.to_string());
    }
}
