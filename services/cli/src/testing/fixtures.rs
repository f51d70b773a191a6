//! The fixtures file of `orbit test`: the start input, what every task answers, the signals,
//! updates and cancellation with the time they arrive, and what the run must end with.
//!
//! Parsed by hand from a YAML (or JSON) value rather than with serde derives, so every
//! problem names the exact path in the file (`tasks.payments.charge[1].fail.code`) and an
//! unknown key is an error instead of being silently ignored (a typo like `outptu` would
//! otherwise turn a fixture into a different test). The format is documented in
//! docs/testing.md.

use orbit_definition::{parse_duration, Definition};
use serde_json::{Map, Value};
use std::collections::BTreeMap;

/// A fixture problem: where in the file and what is wrong.
#[derive(Debug, Clone, PartialEq)]
pub struct FixtureError {
    /// Dotted path in the fixtures document (`(document)` for the whole file).
    pub path: String,
    /// What is wrong there.
    pub message: String,
}

type Res<T> = Result<T, FixtureError>;

fn err<T>(path: &str, message: impl Into<String>) -> Res<T> {
    let path = if path.is_empty() { "(document)".to_owned() } else { path.to_owned() };
    Err(FixtureError { path, message: message.into() })
}

/// What one simulated attempt does.
#[derive(Debug, Clone, PartialEq)]
pub enum Answer {
    /// Succeeds with this output.
    Output(Value),
    /// Fails with this error.
    Fail { code: String, message: String, retryable: bool, details: Option<Value> },
    /// Never answers (the attempt timeout, if any, fails it).
    Hang,
}

/// An [`Answer`] and how long the worker takes to give it (none: the simulator's 10 ms).
#[derive(Debug, Clone, PartialEq)]
pub struct Outcome {
    /// The answer.
    pub answer: Answer,
    /// Milliseconds from dispatch to the answer.
    pub delay_ms: Option<u64>,
}

/// Something sent to the execution at a time after its start.
#[derive(Debug, Clone, PartialEq)]
pub enum Input {
    /// A signal with its payload.
    Signal { name: String, payload: Value },
    /// An update with its argument and optional idempotency id.
    Update { name: String, args: Value, update_id: Option<String> },
    /// A cancellation request.
    Cancel { reason: String },
}

/// What the run must end with; every field is optional.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Expect {
    /// The status of the execution's latest run (`COMPLETED`, `FAILED`, ...).
    pub status: Option<String>,
    /// The output, compared as JSON.
    pub output: Option<Value>,
    /// The error code of a failed run.
    pub error_code: Option<String>,
    /// Patterns `Type` or `Type unit` the history must contain in this order.
    pub events: Vec<String>,
    /// The code the start must be refused with (`INVALID_INPUT`, ...).
    pub start_error: Option<String>,
}

/// A whole fixtures file.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Fixtures {
    /// The execution id (default `test`).
    pub execution_id: String,
    /// The start input (default `{}`).
    pub input: Value,
    /// Other definition files (children), relative to the fixtures file.
    pub workflows: Vec<String>,
    /// Per task name: answers in call order; the last one repeats.
    pub tasks: BTreeMap<String, Vec<Outcome>>,
    /// Per unit key or step id: answers by attempt number; the last one repeats.
    pub steps: BTreeMap<String, Vec<Outcome>>,
    /// Signals, updates and cancellation, with their time after the start in milliseconds, in
    /// file order (sorted by time, stably, when run).
    pub inputs: Vec<(u64, Input)>,
    /// The expectations.
    pub expect: Expect,
}

/// Parses a fixtures document (YAML or JSON).
///
/// # Errors
/// The first problem found, with its path.
pub fn parse(text: &str) -> Res<Fixtures> {
    let doc: Value = match serde_norway::from_str(text) {
        Ok(v) => v,
        Err(e) => return err("", format!("not valid YAML: {e}")),
    };
    let doc = match doc {
        Value::Null => Map::new(),
        Value::Object(m) => m,
        _ => return err("", "must be a mapping"),
    };
    known(
        &doc,
        "",
        &[
            "execution_id",
            "input",
            "workflows",
            "tasks",
            "steps",
            "signals",
            "updates",
            "cancel",
            "expect",
        ],
    )?;
    let mut f = Fixtures {
        execution_id: "test".into(),
        input: Value::Object(Map::new()),
        ..Fixtures::default()
    };
    if let Some(v) = doc.get("execution_id") {
        f.execution_id = string(v, "execution_id")?;
        if f.execution_id.is_empty() {
            return err("execution_id", "must not be empty");
        }
    }
    if let Some(v) = doc.get("input") {
        f.input = v.clone();
    }
    if let Some(v) = doc.get("workflows") {
        for (i, w) in list(v, "workflows")?.iter().enumerate() {
            f.workflows.push(string(w, &format!("workflows[{i}]"))?);
        }
    }
    f.tasks = outcome_table(doc.get("tasks"), "tasks")?;
    f.steps = outcome_table(doc.get("steps"), "steps")?;
    if let Some(v) = doc.get("signals") {
        for (i, s) in list(v, "signals")?.iter().enumerate() {
            f.inputs.push(signal(s, &format!("signals[{i}]"))?);
        }
    }
    if let Some(v) = doc.get("updates") {
        for (i, u) in list(v, "updates")?.iter().enumerate() {
            f.inputs.push(update(u, &format!("updates[{i}]"))?);
        }
    }
    if let Some(v) = doc.get("cancel") {
        let m = mapping(v, "cancel")?;
        known(m, "cancel", &["at", "reason"])?;
        let reason = m.get("reason").map(|r| string(r, "cancel.reason")).transpose()?;
        let reason = reason.unwrap_or_else(|| "cancelled by the test".into());
        f.inputs.push((at(m, "cancel")?, Input::Cancel { reason }));
    }
    if let Some(v) = doc.get("expect") {
        f.expect = expect(v)?;
    }
    Ok(f)
}

/// Checks the names the fixtures use against the definitions they run: a `tasks:` key must
/// be a declared task, a `steps:` key must end in a step id (its unit prefix and element
/// index aside), a signal or update must be declared by the tested workflow. A misspelt name would
/// otherwise script nothing and the test would quietly test something else.
///
/// # Errors
/// The first unknown name, with its path.
pub fn check_names(f: &Fixtures, main: &Definition, others: &[Definition]) -> Res<()> {
    let defs = || std::iter::once(main).chain(others);
    for name in f.tasks.keys() {
        if !defs().any(|d| d.tasks.contains_key(name)) {
            let declared: Vec<&str> =
                defs().flat_map(|d| d.tasks.keys()).map(String::as_str).collect();
            let msg =
                format!("no task `{name}` in the definitions; declared: {}", declared.join(", "));
            return err(&join("tasks", name), msg);
        }
    }
    let mut ids = std::collections::BTreeSet::new();
    for d in defs() {
        let bodies = [&d.steps, &d.on.failure, &d.on.cancel, &d.on.timeout];
        let steps = bodies.into_iter().chain(d.on_signal.values()).flatten();
        ids.extend(steps.map(|s| s.id.as_str()));
    }
    for key in f.steps.keys() {
        let last = key.rsplit(':').next().unwrap_or(key);
        let id = last.split('[').next().unwrap_or(last);
        if !ids.contains(id) {
            let msg = format!(
                "no step `{id}` in the definitions; a key is a unit key (`reserve[1]`, \
                 `compensate:charge`, `on:failure:alert`) or a step id"
            );
            return err(&join("steps", key), msg);
        }
    }
    // Inputs are in file order per kind (signals, then updates): the index within a kind
    // is the index in its list.
    let signals = f.inputs.iter().filter_map(|(_, i)| match i {
        Input::Signal { name, .. } => Some(name),
        _ => None,
    });
    declared(main, "signal", signals, |n| main.signals.contains_key(n), main.signals.keys())?;
    let updates = f.inputs.iter().filter_map(|(_, i)| match i {
        Input::Update { name, .. } => Some(name),
        _ => None,
    });
    declared(main, "update", updates, |n| main.updates.contains_key(n), main.updates.keys())?;
    Ok(())
}

/// Every name the fixtures send as a `kind` (`signal`, `update`) is one `main` declares;
/// else the error at `<kind>s[i].name` lists the declared ones.
fn declared<'a>(
    main: &Definition,
    kind: &str,
    sent: impl Iterator<Item = &'a String>,
    is_declared: impl Fn(&str) -> bool,
    all: impl Iterator<Item = &'a String> + Clone,
) -> Res<()> {
    for (i, name) in sent.enumerate() {
        if !is_declared(name) {
            let list: Vec<&str> = all.clone().map(String::as_str).collect();
            let msg = format!(
                "`{}` declares no {kind} `{name}`; declared: {}",
                main.name,
                list.join(", ")
            );
            return err(&format!("{kind}s[{i}].name"), msg);
        }
    }
    Ok(())
}

fn join(path: &str, key: &str) -> String {
    if path.is_empty() {
        key.to_owned()
    } else {
        format!("{path}.{key}")
    }
}

fn known(m: &Map<String, Value>, path: &str, keys: &[&str]) -> Res<()> {
    match m.keys().find(|k| !keys.contains(&k.as_str())) {
        Some(k) => {
            err(&join(path, k), format!("unknown key; expected one of: {}", keys.join(", ")))
        }
        None => Ok(()),
    }
}

fn mapping<'a>(v: &'a Value, path: &str) -> Res<&'a Map<String, Value>> {
    v.as_object().map_or_else(|| err(path, "must be a mapping"), Ok)
}

fn list<'a>(v: &'a Value, path: &str) -> Res<&'a Vec<Value>> {
    v.as_array().map_or_else(|| err(path, "must be a list"), Ok)
}

fn string(v: &Value, path: &str) -> Res<String> {
    v.as_str().map_or_else(|| err(path, "must be a string"), |s| Ok(s.to_owned()))
}

fn duration(v: &Value, path: &str) -> Res<u64> {
    let text = match v {
        Value::String(s) => s.clone(),
        Value::Number(n) if n.is_u64() => n.to_string(),
        _ => return err(path, "must be a duration such as `500ms`, `30s` or `1h`"),
    };
    parse_duration(&text).or_else(|e| err(path, e))
}

fn at(m: &Map<String, Value>, path: &str) -> Res<u64> {
    m.get("at").map_or(Ok(0), |v| duration(v, &join(path, "at")))
}

fn signal(v: &Value, path: &str) -> Res<(u64, Input)> {
    let m = mapping(v, path)?;
    known(m, path, &["name", "payload", "at"])?;
    let name = match m.get("name") {
        Some(n) => string(n, &join(path, "name"))?,
        None => return err(path, "needs `name`"),
    };
    let payload = m.get("payload").cloned().unwrap_or(Value::Null);
    Ok((at(m, path)?, Input::Signal { name, payload }))
}

fn update(v: &Value, path: &str) -> Res<(u64, Input)> {
    let m = mapping(v, path)?;
    known(m, path, &["name", "input", "update_id", "at"])?;
    let name = match m.get("name") {
        Some(n) => string(n, &join(path, "name"))?,
        None => return err(path, "needs `name`"),
    };
    let args = m.get("input").cloned().unwrap_or(Value::Null);
    let update_id = m.get("update_id").map(|u| string(u, &join(path, "update_id"))).transpose()?;
    Ok((at(m, path)?, Input::Update { name, args, update_id }))
}

fn outcome_table(v: Option<&Value>, path: &str) -> Res<BTreeMap<String, Vec<Outcome>>> {
    let mut table = BTreeMap::new();
    let Some(v) = v else { return Ok(table) };
    for (key, entry) in mapping(v, path)? {
        let here = join(path, key);
        // One outcome may be written without the list around it.
        let outcomes = match entry {
            Value::Array(items) if items.is_empty() => return err(&here, "needs an outcome"),
            Value::Array(items) => items
                .iter()
                .enumerate()
                .map(|(i, o)| outcome(o, &format!("{here}[{i}]")))
                .collect::<Res<Vec<_>>>()?,
            other => vec![outcome(other, &here)?],
        };
        table.insert(key.clone(), outcomes);
    }
    Ok(table)
}

fn outcome(v: &Value, path: &str) -> Res<Outcome> {
    let m = mapping(v, path)?;
    known(m, path, &["output", "fail", "hang", "delay"])?;
    let kinds = ["output", "fail", "hang"].iter().filter(|k| m.contains_key(**k)).count();
    if kinds != 1 {
        return err(path, "needs exactly one of `output`, `fail` or `hang`");
    }
    let delay_ms = m.get("delay").map(|d| duration(d, &join(path, "delay"))).transpose()?;
    let answer = if let Some(o) = m.get("output") {
        Answer::Output(o.clone())
    } else if let Some(f) = m.get("fail") {
        let here = join(path, "fail");
        let f = mapping(f, &here)?;
        known(f, &here, &["code", "message", "retryable", "details"])?;
        let code = match f.get("code") {
            Some(c) => string(c, &join(&here, "code"))?,
            None => return err(&here, "needs `code`"),
        };
        let message = f.get("message").map(|m| string(m, &join(&here, "message"))).transpose()?;
        let retryable = match f.get("retryable") {
            None => true,
            Some(Value::Bool(b)) => *b,
            Some(_) => return err(&join(&here, "retryable"), "must be true or false"),
        };
        let details = f.get("details").cloned();
        Answer::Fail { code, message: message.unwrap_or_default(), retryable, details }
    } else {
        if m.get("hang") != Some(&Value::Bool(true)) {
            return err(&join(path, "hang"), "must be true");
        }
        if delay_ms.is_some() {
            return err(&join(path, "delay"), "a hanging task never answers; drop `delay`");
        }
        Answer::Hang
    };
    Ok(Outcome { answer, delay_ms })
}

fn expect(v: &Value) -> Res<Expect> {
    let m = mapping(v, "expect")?;
    known(m, "expect", &["status", "output", "error", "events", "start_error"])?;
    let mut e = Expect::default();
    if let Some(s) = m.get("status") {
        let status = string(s, "expect.status")?.to_ascii_uppercase();
        if orbit_engine::Status::parse(&status).is_none() {
            return err(
                "expect.status",
                format!(
                    "unknown status `{status}`; expected one of RUNNING, COMPENSATING, COMPLETED, \
                     FAILED, CANCELLED, TIMED_OUT, CONTINUED_AS_NEW"
                ),
            );
        }
        e.status = Some(status);
    }
    e.output = m.get("output").cloned();
    if let Some(x) = m.get("error") {
        let x = mapping(x, "expect.error")?;
        known(x, "expect.error", &["code"])?;
        e.error_code = match x.get("code") {
            Some(c) => Some(string(c, "expect.error.code")?),
            None => return err("expect.error", "needs `code`"),
        };
    }
    if let Some(x) = m.get("events") {
        for (i, p) in list(x, "expect.events")?.iter().enumerate() {
            e.events.push(string(p, &format!("expect.events[{i}]"))?);
        }
    }
    if let Some(x) = m.get("start_error") {
        e.start_error = Some(string(x, "expect.start_error")?);
    }
    Ok(e)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn a_full_file_parses() {
        let f = parse(
            "input: {a: 1}\ntasks:\n  t: [{fail: {code: X, retryable: false}}, {output: 2, delay: 1s}]\n\
             steps:\n  s: {hang: true}\nsignals: [{name: go, at: 5s}]\ncancel: {at: 1m}\n\
             expect: {status: completed, error: {code: X}, events: [StepFailed s]}\n",
        )
        .unwrap();
        assert_eq!(f.execution_id, "test");
        assert_eq!(f.input, json!({"a": 1}));
        assert_eq!(
            f.tasks["t"][1],
            Outcome { answer: Answer::Output(json!(2)), delay_ms: Some(1000) }
        );
        assert!(matches!(&f.tasks["t"][0].answer, Answer::Fail { retryable: false, .. }));
        assert_eq!(f.steps["s"][0].answer, Answer::Hang);
        assert_eq!(f.inputs.len(), 2);
        assert_eq!(f.inputs[1].0, 60_000);
        assert_eq!(f.expect.status.as_deref(), Some("COMPLETED"));
    }

    #[test]
    fn updates_parse_with_their_argument_id_and_time() {
        let f = parse(
            "updates:\n  - {name: reserve, input: {sku: a}, update_id: u1, at: 2s}\n  - {name: wait}\n",
        )
        .unwrap();
        assert_eq!(
            f.inputs,
            vec![
                (
                    2000,
                    Input::Update {
                        name: "reserve".into(),
                        args: json!({"sku": "a"}),
                        update_id: Some("u1".into())
                    }
                ),
                (0, Input::Update { name: "wait".into(), args: Value::Null, update_id: None }),
            ]
        );
    }

    #[test]
    fn problems_name_their_path() {
        let cases = [
            ("tasks:\n  t: [{outptu: 1}]\n", "tasks.t[0].outptu"),
            ("tasks:\n  t: [{output: 1, fail: {code: X}}]\n", "tasks.t[0]"),
            ("tasks:\n  t: {fail: {message: m}}\n", "tasks.t.fail"),
            ("signals: [{name: a, at: soon}]\n", "signals[0].at"),
            ("updates: [{name: a, args: 1}]\n", "updates[0].args"),
            ("updates: [{input: 1}]\n", "updates[0]"),
            ("updates: [{name: a, update_id: 7}]\n", "updates[0].update_id"),
            ("expect: {status: DONE}\n", "expect.status"),
            ("bogus: 1\n", "bogus"),
            ("[1, 2]\n", "(document)"),
        ];
        for (text, path) in cases {
            let e = parse(text).unwrap_err();
            assert_eq!(e.path, path, "{text}: {e:?}");
        }
    }
}
