//! What `orbit test` prints and checks: the histories of the simulated executions (human
//! lines or one JSON document), and the expectations of the fixtures compared with what
//! happened, each mismatch with a readable diff.

use super::fixtures::Expect;
use super::simulate::Simulated;
use orbit_engine::sim::SimExecution;
use orbit_engine::{Event, HistoryEvent};
use serde_json::{json, Value};
use std::fmt::Write as _;

/// How an execution ended (or stands): the latest run's status, output and error code.
pub struct Ending {
    /// `COMPLETED`, `FAILED`, ... (`RUNNING` when it waits for something that never comes).
    pub status: String,
    /// The output of a completed run.
    pub output: Option<Value>,
    /// The error of a failed run.
    pub error: Option<(String, String)>,
}

/// The ending of `exec`'s latest run.
#[must_use]
pub fn ending(exec: &SimExecution) -> Ending {
    let mut ending =
        Ending { status: exec.state.status().as_str().to_owned(), output: None, error: None };
    match exec.history.last().map(|e| &e.event) {
        Some(Event::WorkflowCompleted { output }) => ending.output = Some(output.clone()),
        Some(Event::WorkflowFailed { error, .. }) => {
            ending.error = Some((error.code.clone(), error.message.clone()));
        }
        _ => {}
    }
    ending
}

/// One expectation that did not hold.
pub struct Mismatch {
    /// Which expectation (`status`, `output`, `error.code`, `events`, `start_error`).
    pub what: &'static str,
    /// What the fixtures expected.
    pub expected: Value,
    /// What happened.
    pub actual: Value,
    /// Readable differences, one per line.
    pub diff: Vec<String>,
}

fn mismatch(what: &'static str, expected: Value, actual: Value, diff: Vec<String>) -> Mismatch {
    Mismatch { what, expected, actual, diff }
}

/// Every history of an execution, oldest run first.
fn runs(exec: &SimExecution) -> impl Iterator<Item = &Vec<HistoryEvent>> {
    exec.archived.iter().chain(std::iter::once(&exec.history))
}

/// `Type unit` (or `Type`) of an event, as `expect.events` patterns are written.
fn label(e: &HistoryEvent) -> String {
    match e.event.step() {
        Some(step) => format!("{} {step}", e.event.type_name()),
        None => e.event.type_name().to_owned(),
    }
}

/// Checks the expectations against the simulation of execution `id`.
#[must_use]
pub fn check(expect: &Expect, sim: &Simulated, id: &str) -> Vec<Mismatch> {
    let mut out = Vec::new();
    if let Some(e) = &sim.start_error {
        let code = e.code.as_str().to_owned();
        if expect.start_error.as_deref() != Some(code.as_str()) {
            let expected = expect.start_error.as_ref().map_or(json!("a start"), |c| json!(c));
            let diff = vec![format!("the start was refused: {code}: {}", e.message)];
            out.push(mismatch("start_error", expected, json!(code), diff));
        }
        return out;
    }
    if let Some(code) = &expect.start_error {
        out.push(mismatch("start_error", json!(code), json!("started"), Vec::new()));
    }
    let Some(exec) = sim.sim.execution(id) else { return out };
    let end = ending(exec);
    if let Some(status) = &expect.status {
        if *status != end.status {
            out.push(mismatch("status", json!(status), json!(end.status), Vec::new()));
        }
    }
    if let Some(expected) = &expect.output {
        let actual = end.output.clone().unwrap_or(Value::Null);
        if *expected != actual {
            let mut diff = Vec::new();
            json_diff(expected, &actual, "output", &mut diff);
            out.push(mismatch("output", expected.clone(), actual, diff));
        }
    }
    if let Some(code) = &expect.error_code {
        let actual = end.error.as_ref().map(|(c, _)| c.clone());
        if actual.as_deref() != Some(code.as_str()) {
            out.push(mismatch("error.code", json!(code), json!(actual), Vec::new()));
        }
    }
    if !expect.events.is_empty() {
        let labels: Vec<String> = runs(exec).flatten().map(label).collect();
        let mut at = 0;
        for pattern in &expect.events {
            // `Type` matches any event of that type, `Type unit` only that unit's.
            let found = labels[at..]
                .iter()
                .position(|l| l == pattern || l.split(' ').next() == Some(pattern.as_str()));
            match found {
                Some(i) => at += i + 1,
                None => {
                    let diff = vec![format!(
                        "`{pattern}` not found after event {at} (in order); the history has: {}",
                        labels.join(", ")
                    )];
                    let expected = json!(expect.events);
                    out.push(mismatch("events", expected, json!(labels), diff));
                    break;
                }
            }
        }
    }
    out
}

/// The differences between two JSON values, one line per differing path.
fn json_diff(expected: &Value, actual: &Value, path: &str, out: &mut Vec<String>) {
    match (expected, actual) {
        (Value::Object(e), Value::Object(a)) => {
            for (k, ev) in e {
                match a.get(k) {
                    Some(av) => json_diff(ev, av, &format!("{path}.{k}"), out),
                    None => out.push(format!("{path}.{k}: expected {ev}, missing")),
                }
            }
            for (k, av) in a.iter().filter(|(k, _)| !e.contains_key(*k)) {
                out.push(format!("{path}.{k}: not expected, got {av}"));
            }
        }
        (Value::Array(e), Value::Array(a)) => {
            for (i, (ev, av)) in e.iter().zip(a).enumerate() {
                json_diff(ev, av, &format!("{path}[{i}]"), out);
            }
            if e.len() != a.len() {
                out.push(format!("{path}: expected {} elements, got {}", e.len(), a.len()));
            }
        }
        (e, a) if e != a => out.push(format!("{path}: expected {e}, got {a}")),
        _ => {}
    }
}

/// The fields of an event besides its type and unit, as compact JSON.
fn details(e: &HistoryEvent) -> String {
    let mut v = serde_json::to_value(&e.event).unwrap_or(Value::Null);
    if let Value::Object(m) = &mut v {
        m.remove("type");
        m.remove("step");
    }
    match v {
        Value::Object(m) if m.is_empty() => String::new(),
        v => v.to_string(),
    }
}

/// The human report: every execution's history, the result, notes and mismatches.
#[must_use]
pub fn text(sim: &Simulated, id: &str, mismatches: &[Mismatch]) -> String {
    let mut out = String::new();
    if let Some(e) = &sim.start_error {
        let _ = writeln!(out, "start refused: {}: {}", e.code.as_str(), e.message);
    }
    // The tested execution first, then its children in id order.
    let execs = sim.sim.executions();
    let order = execs.get_key_value(id).into_iter().chain(execs.iter().filter(|(k, _)| *k != id));
    for (exec_id, exec) in order {
        let end = ending(exec);
        let _ = writeln!(
            out,
            "execution {exec_id} ({}@{}): {}",
            exec.def.name, exec.def.version, end.status
        );
        let count = exec.archived.len() + 1;
        for (n, run) in runs(exec).enumerate() {
            if count > 1 {
                let _ = writeln!(out, "  run {}", n + 1);
            }
            for e in run {
                let at = e.timestamp_ms.saturating_sub(sim.started_at);
                let step = e.event.step().unwrap_or("");
                let line = format!(
                    "  {:>4}  +{:<11} {:<24} {:<20} {}",
                    e.seq,
                    orbit_definition::format_duration(at),
                    e.event.type_name(),
                    step,
                    details(e)
                );
                let _ = writeln!(out, "{}", line.trim_end());
            }
        }
        if let Some(o) = &end.output {
            let _ = writeln!(out, "  output: {o}");
        }
        if let Some((code, message)) = &end.error {
            let _ = writeln!(out, "  error: {code}: {message}");
        }
    }
    for note in &sim.notes {
        let _ = writeln!(out, "note: {note}");
    }
    if !sim.rested {
        let _ = writeln!(out, "note: the simulation did not come to rest (an endless timer loop?)");
    }
    if mismatches.is_empty() {
        out.push_str("PASS\n");
        return out;
    }
    let _ = writeln!(out, "FAIL: {} expectation(s) not met", mismatches.len());
    for m in mismatches {
        let _ = writeln!(out, "  {}: expected {}, got {}", m.what, m.expected, m.actual);
        for line in &m.diff {
            let _ = writeln!(out, "    {line}");
        }
    }
    out
}

/// The JSON report: `passed`, the tested execution's ending, mismatches, notes and every
/// execution's histories (events as in `orbit execution history --output json`'s `event`).
#[must_use]
pub fn json(sim: &Simulated, id: &str, mismatches: &[Mismatch]) -> Value {
    let executions: serde_json::Map<String, Value> = sim
        .sim
        .executions()
        .iter()
        .map(|(k, exec)| {
            let end = ending(exec);
            let runs: Vec<Value> = runs(exec).map(|r| json!(r)).collect();
            let error = end.error.map(|(code, message)| json!({"code": code, "message": message}));
            let v = json!({
                "workflow": exec.def.name, "version": exec.def.version, "status": end.status,
                "output": end.output, "error": error, "runs": runs,
            });
            (k.clone(), v)
        })
        .collect();
    let tested = executions.get(id).cloned().unwrap_or(Value::Null);
    let start_error =
        sim.start_error.as_ref().map(|e| json!({"code": e.code.as_str(), "message": e.message}));
    let mismatches: Vec<Value> = mismatches
        .iter()
        .map(
            |m| json!({"what": m.what, "expected": m.expected, "actual": m.actual, "diff": m.diff}),
        )
        .collect();
    json!({
        "passed": mismatches.is_empty(),
        "execution_id": id,
        "status": tested.get("status"),
        "output": tested.get("output"),
        "error": tested.get("error"),
        "start_error": start_error,
        "mismatches": mismatches,
        "notes": sim.notes,
        "rested": sim.rested,
        "executions": executions,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::{fixtures, simulate};

    const DEF: &str = "name: w\nversion: '1'\ntasks: {t: {version: '1'}}\n\
                       steps:\n  - {id: s, task: t, retry: {max_attempts: 2, initial_interval: 1s}}\n\
                       output: ${{ steps.s.output }}\n";

    fn run(fixtures: &str) -> (Simulated, Vec<Mismatch>) {
        let def = orbit_definition::parse(DEF).unwrap();
        let f = fixtures::parse(fixtures).unwrap();
        let sim = simulate::simulate(&def, Vec::new(), &f);
        let mismatches = check(&f.expect, &sim, &f.execution_id);
        (sim, mismatches)
    }

    #[test]
    fn a_retried_failure_is_checked_by_code_and_events() {
        let (sim, m) = run(
            "tasks: {t: {fail: {code: NOPE}}}\n\
             expect: {status: FAILED, error: {code: NOPE}, events: [RetryScheduled s, StepFailed s]}\n",
        );
        assert!(m.is_empty(), "{}", text(&sim, "test", &m));
        let (_, m) = run("tasks: {t: {fail: {code: NOPE}}}\nexpect: {error: {code: OTHER}}\n");
        assert_eq!(m.len(), 1);
        assert_eq!((m[0].what, &m[0].actual), ("error.code", &json!("NOPE")));
    }

    #[test]
    fn json_diff_lists_every_differing_path() {
        let mut out = Vec::new();
        let expected = json!({"a": 1, "b": [1, 2], "c": {"d": true}});
        let actual = json!({"a": 2, "b": [1], "c": {"d": true}, "e": null});
        json_diff(&expected, &actual, "output", &mut out);
        assert_eq!(
            out,
            [
                "output.a: expected 1, got 2",
                "output.b: expected 2 elements, got 1",
                "output.e: not expected, got null",
            ]
        );
    }
}
