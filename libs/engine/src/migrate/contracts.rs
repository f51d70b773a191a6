//! Contracts across versions: the declaration of a task a step calls in both versions
//! (version, language, input and output contracts), and the workflow's input contract,
//! re-checked against what the run recorded (a step's outputs as a migration hint maps
//! them, when it does); and the judgement of a hint's mapping (`output_mapped`).

use super::classify::Class;
use super::context::{Cx, Judge, Out};
use super::hints::Mapping;
use crate::change::ChangeKind;
use crate::state::UnitStatus;
use orbit_definition::{Body, Contract, Violation};

/// The changes of the declaration of `task`, which step `s` calls in both versions.
pub(crate) fn task(cx: &Cx<'_>, task: &str, s: &Judge<'_>, out: &mut Out) {
    let (Some(a), Some(b)) = (cx.from.tasks.get(task), cx.to.tasks.get(task)) else { return };
    let routing = |what: &str, x: &str, y: &str, out: &mut Out| {
        let detail = format!("task `{task}` {what} {x} -> {y}");
        let (safe, reason) = match s.class {
            Class::Running => {
                (false, format!("{}: the attempt in flight was offered with {what} {x}", s.why))
            }
            _ => (true, format!("{}: applies to attempts scheduled from now on", s.why)),
        };
        out.push(ChangeKind::TaskChanged, s.name, detail, safe, reason);
    };
    if a.version != b.version {
        routing("version", &a.version, &b.version, out);
    }
    if a.language != b.language {
        let show = |l: &Option<String>| l.clone().unwrap_or_else(|| "any".into());
        routing("language", &show(&a.language), &show(&b.language), out);
    }
    if a.input != b.input {
        let detail =
            format!("input contract of task `{task}` {}", how(a.input.as_ref(), b.input.as_ref()));
        let reason = match s.class {
            Class::Pending => format!("{}: checked when it is scheduled", s.why),
            Class::Running => format!(
                "{}: the attempt in flight was checked against the old contract; its retries \
                 reuse that input",
                s.why
            ),
            Class::Done => format!("{}: it already ran", s.why),
        };
        out.push(ChangeKind::InputContractChanged, s.name, detail, true, reason);
    }
    if a.output != b.output {
        let detail = format!(
            "output contract of task `{task}` {}",
            how(a.output.as_ref(), b.output.as_ref())
        );
        let failing = b.output.as_ref().and_then(|c| failing_output(cx, s, c));
        // Outputs a migration hint maps are judged as mapped.
        let mapped = mapping(cx, s).is_some_and(|m| !m.outputs.is_empty());
        let which = if mapped { "mapped by the migrations hint" } else { "recorded" };
        let (safe, reason) = match (failing, s.class) {
            (Some((unit, v)), _) => {
                let what = if mapped {
                    format!("output of `{unit}` mapped by the migrations hint")
                } else {
                    format!("recorded output of `{unit}`")
                };
                (false, format!("{}: the {what} fails the new contract: {v}", s.why))
            }
            (None, Class::Pending) => (true, format!("{}: checked on its results", s.why)),
            (None, Class::Running) => (
                true,
                format!(
                    "{}: the outputs {which} pass it; results in flight are checked against it",
                    s.why
                ),
            ),
            (None, Class::Done) => (true, format!("{}: the outputs {which} pass it", s.why)),
        };
        out.push(ChangeKind::OutputContractChanged, s.name, detail, safe, reason);
    }
}

/// The first recorded task output of the step (its unit or its elements) that `contract`
/// refuses, with the violations.
fn failing_output(cx: &Cx<'_>, s: &Judge<'_>, contract: &Contract) -> Option<(String, String)> {
    cx.units.resolved(s.body, s.id).iter().find_map(|key| {
        let u = cx.state.unit(key)?;
        let task_output =
            u.status == UnitStatus::Succeeded && u.attempt > 0 && !key.starts_with("compensate:");
        let mapped = mapping(cx, s).and_then(|m| m.outputs.get(key));
        let output = mapped.or(u.output.as_ref()).cloned().filter(|_| task_output)?;
        contract.apply(output).err().map(|v| (key.clone(), violations(&v)))
    })
}

/// The migration hint's mapping of main-body step `s`, if the hint maps it.
fn mapping<'c>(cx: &'c Cx<'_>, s: &Judge<'_>) -> Option<&'c Mapping> {
    cx.hinted.steps.get(s.id).filter(|_| *s.body == Body::Main)
}

/// The `output_mapped` change of step `s`, when the migration hint maps it: unsafe when a
/// mapping failed to evaluate, is over the payload limits or fails the task's output
/// contract.
pub(crate) fn mapped(cx: &Cx<'_>, s: &Judge<'_>, out: &mut Out) {
    let Some(m) = mapping(cx, s) else { return };
    let detail = format!("output mapped by migrations hint {} (from `{}`)", m.path, m.pattern);
    let (safe, reason) = match (&m.failure, m.mapped) {
        (Some((unit, why)), _) => (false, format!("{}: `{unit}`: {why}", s.why)),
        (None, 0) => (true, format!("{}: no recorded output to map", s.why)),
        (None, n) => {
            let outputs = if n == 1 { "1 recorded output" } else { "recorded outputs" };
            let checked = m
                .contract_of
                .as_ref()
                .map_or(String::new(), |t| format!(", each within the output contract of `{t}`"));
            let count = if n == 1 { String::new() } else { format!("{n} ") };
            (true, format!("{}: {count}{outputs} replaced by the mapped ones{checked}", s.why))
        }
    };
    out.push(ChangeKind::OutputMapped, s.name, detail, safe, reason);
}

/// The workflow's `input` contract, checked against the run's recorded input.
pub(crate) fn workflow_input(cx: &Cx<'_>, out: &mut Out) {
    let (a, b) = (cx.from.input.as_ref(), cx.to.input.as_ref());
    if a == b {
        return;
    }
    let detail = format!("input contract {}", how(a, b));
    let (safe, reason) = match b.map(|c| c.apply(cx.state.input.clone())) {
        None => (true, "the new version accepts any input".to_string()),
        Some(Ok(_)) => (
            true,
            "the run's recorded input passes it (defaults it adds are not applied to it)"
                .to_string(),
        ),
        Some(Err(v)) => (false, format!("the run's recorded input fails it: {}", violations(&v))),
    };
    out.push(ChangeKind::InputContractChanged, "", detail, safe, reason);
}

/// `added`, `removed` or `changed`.
pub(crate) fn how<T>(a: Option<&T>, b: Option<&T>) -> &'static str {
    match (a, b) {
        (None, Some(_)) => "added",
        (Some(_), None) => "removed",
        _ => "changed",
    }
}

fn violations(v: &[Violation]) -> String {
    v.iter().map(ToString::to_string).collect::<Vec<_>>().join("; ")
}
