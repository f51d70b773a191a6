//! Workflow-level differences: settings, task declarations no step diff covered, signals,
//! queries, update handler declarations and the output template. All are read later (at
//! the next attempt, signal, query, update or at completion), so they are safe, except
//! removing what the run still waits on: a signal an open `await` waits for, an update
//! handler an accepted update waits for its reply from.

use super::context::{duration, shown_opt, Cx, Out};
use super::contracts::how;
use crate::change::ChangeKind;
use crate::state::Wait;
use orbit_definition::Template;
use std::collections::{BTreeMap, BTreeSet};

/// `description`, `timeout`, `retention`, `priority`, `fairness`, `limits`.
pub(crate) fn settings(cx: &Cx<'_>, out: &mut Out) {
    let (a, b) = (cx.from, cx.to);
    let mut push = |detail: String, reason: &str| {
        out.push(ChangeKind::SettingsChanged, "", detail, true, reason);
    };
    if a.description != b.description {
        push("description changed".into(), "for people only");
    }
    if a.timeout_ms != b.timeout_ms {
        push(
            format!("timeout {} -> {}", duration(a.timeout_ms), duration(b.timeout_ms)),
            "counts from the run's start: a timeout already past winds the run down at once",
        );
    }
    if a.retention_ms != b.retention_ms {
        push(
            format!("retention {} -> {}", duration(a.retention_ms), duration(b.retention_ms)),
            "applies when the execution closes",
        );
    }
    if a.priority != b.priority {
        let show = |p: Option<u8>| p.map_or_else(|| "none".to_string(), |p| p.to_string());
        push(
            format!("priority {} -> {}", show(a.priority), show(b.priority)),
            "applies to attempts scheduled from now on",
        );
    }
    if a.fairness != b.fairness {
        let detail = match (&a.fairness, &b.fairness) {
            (None, Some(_)) => "fairness added",
            (Some(_), None) => "fairness removed",
            _ => "fairness changed",
        };
        push(
            detail.into(),
            "applies to units scheduled from now on; attempts already scheduled keep their key",
        );
    }
    let limits = [
        ("max_fan_out", a.limits.max_fan_out, b.limits.max_fan_out),
        ("max_history_events", a.limits.max_history_events, b.limits.max_history_events),
        ("max_payload_bytes", a.limits.max_payload_bytes, b.limits.max_payload_bytes),
        ("max_timers", a.limits.max_timers, b.limits.max_timers),
    ];
    for (name, x, y) in limits {
        if x != y {
            let show = |v: Option<u64>| v.map_or_else(|| "server".to_string(), |v| v.to_string());
            push(
                format!("limits.{name} {} -> {}", show(x), show(y)),
                "applies from the next decision (a limit already passed ends the run)",
            );
        }
    }
}

/// Task declarations that differ and that no step diff covered (tasks called only by
/// compensations, by added steps, or by none).
pub(crate) fn tasks(cx: &Cx<'_>, covered: &BTreeSet<String>, out: &mut Out) {
    let names: BTreeSet<&String> = cx.from.tasks.keys().chain(cx.to.tasks.keys()).collect();
    for name in names.into_iter().filter(|n| !covered.contains(*n)) {
        let (a, b) = (cx.from.tasks.get(name), cx.to.tasks.get(name));
        if a != b {
            let detail = format!("task `{name}` declaration {}", how(a, b));
            let reason = "applies to attempts scheduled from now on";
            out.push(ChangeKind::TaskChanged, "", detail, true, reason);
        }
    }
}

/// Signal declarations; `cancelled` are the units the migration cancels.
pub(crate) fn signals(cx: &Cx<'_>, out: &mut Out) {
    let names: BTreeSet<&String> = cx.from.signals.keys().chain(cx.to.signals.keys()).collect();
    for name in names {
        let (a, b) = (cx.from.signals.get(name), cx.to.signals.get(name));
        let detail = format!("signal `{name}` {}", how(a, b));
        let (safe, reason) = match (a, b) {
            (None, Some(_)) => (true, "accepted from now on".to_string()),
            (Some(_), None) => removed_signal(cx, name, &out.cancel),
            (Some(x), Some(y)) if x != y => {
                (true, "its payload contract applies to signals received from now on".into())
            }
            _ => continue,
        };
        out.push(ChangeKind::SignalChanged, "", detail, safe, reason);
    }
}

fn removed_signal(cx: &Cx<'_>, name: &str, cancelled: &BTreeSet<String>) -> (bool, String) {
    let waiter = cx.state.open_units().find(|(k, u)| {
        !cancelled.contains(*k)
            && matches!(&u.wait, Some(Wait::Signal { name: n, .. }) if n == name)
    });
    if let Some((key, _)) = waiter {
        return (false, format!("running: `{key}` waits for it"));
    }
    let buffered = cx.state.signals.iter().filter(|s| !s.delivered && s.name == name).count();
    let reason = match buffered {
        0 => "nothing waits for it; new ones are refused".to_string(),
        n => format!("nothing waits for it; {n} buffered stay undelivered; new ones are refused"),
    };
    (true, reason)
}

/// Query entries.
pub(crate) fn queries(cx: &Cx<'_>, out: &mut Out) {
    let names: BTreeSet<&String> = cx.from.queries.keys().chain(cx.to.queries.keys()).collect();
    for name in names {
        let (a, b) = (cx.from.queries.get(name), cx.to.queries.get(name));
        if a.map(|e| e.source()) != b.map(|e| e.source()) {
            let detail = format!("query `{name}` {}", how(a, b));
            out.push(ChangeKind::QueryChanged, "", detail, true, "evaluated when asked");
        }
    }
}

/// The update handler names of both versions, in order.
pub(crate) fn update_names(cx: &Cx<'_>) -> BTreeSet<String> {
    cx.from.updates.keys().chain(cx.to.updates.keys()).cloned().collect()
}

/// The declaration of update handler `name` (not its steps).
pub(crate) fn update(cx: &Cx<'_>, name: &str, out: &mut Out) {
    let (a, b) = (cx.from.updates.get(name), cx.to.updates.get(name));
    let open: BTreeMap<u64, &str> = cx
        .state
        .open_updates
        .iter()
        .filter(|(_, (n, _))| n == name)
        .map(|(seq, (n, _))| (*seq, n.as_str()))
        .collect();
    let (x, y) = match (a, b) {
        (None, Some(_)) => {
            let detail = format!("update `{name}` added");
            out.push(ChangeKind::UpdateChanged, "", detail, true, "accepted from now on");
            return;
        }
        (Some(_), None) => {
            let detail = format!("update `{name}` removed");
            match open.keys().next() {
                Some(seq) => out.push(
                    ChangeKind::UpdateChanged,
                    "",
                    detail,
                    false,
                    format!(
                        "running: the update accepted at seq {seq} waits for its reply from it"
                    ),
                ),
                None => out.push(
                    ChangeKind::UpdateChanged,
                    "",
                    detail,
                    true,
                    "no update of it is open; new ones are refused",
                ),
            }
            return;
        }
        (Some(x), Some(y)) => (x, y),
        (None, None) => return,
    };
    if x.input != y.input {
        let detail =
            format!("update `{name}` input contract {}", how(x.input.as_ref(), y.input.as_ref()));
        out.push(ChangeKind::UpdateChanged, "", detail, true, "checked on updates from now on");
    }
    let source = |e: Option<&orbit_definition::Expr>| e.map(|e| e.source().to_string());
    if source(x.validator.as_ref()) != source(y.validator.as_ref()) {
        let detail = format!(
            "update `{name}` validator {}",
            how(x.validator.as_ref(), y.validator.as_ref())
        );
        out.push(ChangeKind::UpdateChanged, "", detail, true, "checked on updates from now on");
    }
    if source(x.reply.as_ref()) != source(y.reply.as_ref()) {
        let detail = format!("update `{name}` reply {}", how(x.reply.as_ref(), y.reply.as_ref()));
        let reason = if open.is_empty() {
            "evaluated when an update completes"
        } else {
            "evaluated when an update completes, the open ones too"
        };
        out.push(ChangeKind::UpdateChanged, "", detail, true, reason);
    }
}

/// The `output` template.
pub(crate) fn output(cx: &Cx<'_>, out: &mut Out) {
    let (a, b) = (cx.from.output.as_ref(), cx.to.output.as_ref());
    if a != b {
        let detail = format!(
            "output {} -> {}",
            shown_opt(a.map(Template::to_json)),
            shown_opt(b.map(Template::to_json))
        );
        out.push(ChangeKind::OutputChanged, "", detail, true, "evaluated when the run completes");
    }
}
