//! The diff of one body: steps matched by id, or by `renamed_from` (a step of the new
//! version naming a step of the old one that the new one lacks); the others are added or
//! removed. Each difference is judged against how the old step stands in the run
//! (`classify`); the module docs of `crate::migrate` list the rules.

use super::classify::Class;
use super::context::{duration, list, shown, shown_opt, Cx, Judge, Out};
use crate::change::ChangeKind;
use crate::unit::qualified_step;
use orbit_definition::{Body, RetryPolicy, Step, StepKind, TaskCall};
use std::collections::{BTreeSet, HashMap, HashSet};

/// Diffs `body`; returns the names of the tasks whose declaration the step diffs covered
/// (a `task` step calling the same task in both versions).
pub(crate) fn body(cx: &Cx<'_>, body: &Body, out: &mut Out) -> BTreeSet<String> {
    let old = cx.from.body(body);
    let new = cx.to.body(body);
    let old_index: HashMap<&str, usize> =
        old.iter().enumerate().map(|(i, s)| (s.id.as_str(), i)).collect();
    let new_ids: HashSet<&str> = new.iter().map(|s| s.id.as_str()).collect();
    let mut matched = vec![false; old.len()];
    let pairs: Vec<(Option<usize>, &Step)> = new
        .iter()
        .map(|s| {
            let by_id = old_index.get(s.id.as_str());
            let by_rename = || {
                let from = s.renamed_from.as_deref().filter(|o| !new_ids.contains(o))?;
                old_index.get(from)
            };
            let i = by_id.or_else(by_rename).copied();
            if let Some(i) = i {
                matched[i] = true;
            }
            (i, s)
        })
        .collect();
    let mut covered = BTreeSet::new();
    // Removed steps are listed where they stood: before the first new step matched to an
    // old step after them.
    let mut next_old = 0;
    for (i, step) in pairs {
        let Some(i) = i else {
            added(cx, body, step, out);
            continue;
        };
        while next_old < i {
            if !matched[next_old] {
                removed(cx, body, &old[next_old], out);
            }
            next_old += 1;
        }
        next_old = next_old.max(i + 1);
        pair(cx, body, &old[i], step, out, &mut covered);
    }
    for step in old.iter().skip(next_old).zip(&matched[next_old..]) {
        if let (s, false) = step {
            removed(cx, body, s, out);
        }
    }
    covered
}

fn added(cx: &Cx<'_>, body: &Body, step: &Step, out: &mut Out) {
    let name = qualified_step(body, &step.id);
    let detail = format!("added ({})", step.kind.keyword());
    match cx.units.taken(body, &step.id) {
        Some(unit) => out.push(
            ChangeKind::Added,
            &name,
            detail,
            false,
            format!(
                "unit `{unit}` of a step an earlier version removed is in this run: the id \
                 `{}` is taken for this run; choose another",
                step.id
            ),
        ),
        None => {
            out.push(ChangeKind::Added, &name, detail, true, "added: runs once its needs are met")
        }
    }
}

fn removed(cx: &Cx<'_>, body: &Body, step: &Step, out: &mut Out) {
    let name = qualified_step(body, &step.id);
    let detail = format!("removed ({})", step.kind.keyword());
    let why = cx.units.describe(body, &step.id);
    match cx.units.class(body, &step.id) {
        Class::Pending => out.push(ChangeKind::Removed, &name, detail, true, why),
        Class::Running => {
            let open = cx.units.open(body, &step.id);
            out.cancel.extend(open.iter().cloned());
            let units = open.iter().map(|k| format!("`{k}`")).collect::<Vec<_>>().join(", ");
            let reason = format!("{why}: cancelled by the migration, not compensated ({units})");
            out.push(ChangeKind::Removed, &name, detail, true, reason);
        }
        Class::Done => {
            let reason = format!(
                "{why}: its recorded events name `{id}`, which the new version lacks; if the \
                 step was renamed, declare `renamed_from: {id}` on the new step",
                id = step.id
            );
            out.push(ChangeKind::Removed, &name, detail, false, reason);
        }
    }
}

/// The differences of one matched step (`old` in the run, `new` in the next version).
fn pair(
    cx: &Cx<'_>,
    body: &Body,
    old: &Step,
    new: &Step,
    out: &mut Out,
    covered: &mut BTreeSet<String>,
) {
    let name = qualified_step(body, &old.id);
    let class = cx.units.class(body, &old.id);
    let why = cx.units.describe(body, &old.id);
    let s = Judge { body, id: &old.id, name: &name, class, why: &why };
    if old.id != new.id {
        renamed(cx, body, old, new, &s, out);
    }
    // A kind change says it all: the fields of the old kind are not compared.
    let same_kind = kind(cx, old, new, &s, out, covered);
    super::contracts::mapped(cx, &s, out);
    if same_kind && old.input != new.input {
        let detail = format!(
            "input {} -> {}",
            shown_opt(old.input.as_ref().map(orbit_definition::Template::to_json)),
            shown_opt(new.input.as_ref().map(orbit_definition::Template::to_json))
        );
        s.input(ChangeKind::InputChanged, detail, out);
    }
    let when = |st: &Step| st.when.as_ref().map(|e| e.source().to_string());
    if when(old) != when(new) {
        let detail = format!(
            "when {} -> {}",
            when(old).unwrap_or_else(|| "none".into()),
            when(new).unwrap_or_else(|| "none".into())
        );
        let reason = match class {
            Class::Pending => format!("{why}: evaluated when it becomes ready"),
            _ => format!("{why}: `when` was already evaluated"),
        };
        out.push(ChangeKind::WhenChanged, &name, detail, true, reason);
    }
    for_each(cx, body, old, new, &s, out);
    let needs = |st: &Step| st.needs.iter().cloned().collect::<BTreeSet<String>>();
    if needs(old) != needs(new) {
        let detail = format!("needs {} -> {}", list(&needs(old)), list(&needs(new)));
        let reason = match class {
            Class::Pending => format!("{why}: the new graph was checked at registration"),
            _ => format!("{why}: it already started"),
        };
        out.push(ChangeKind::NeedsChanged, &name, detail, true, reason);
    }
    policy(cx, old, new, &s, out);
}

fn renamed(cx: &Cx<'_>, body: &Body, old: &Step, new: &Step, s: &Judge<'_>, out: &mut Out) {
    let detail = format!("renamed to `{}` (renamed_from: {})", new.id, old.id);
    let (safe, reason) = match (cx.units.taken(body, &new.id), s.class) {
        (Some(unit), _) => (
            false,
            format!(
                "unit `{unit}` of an earlier version is in this run: the id `{}` is taken",
                new.id
            ),
        ),
        (None, Class::Running) => (
            false,
            format!(
                "{}: an attempt in flight carries the old unit key and idempotency key; \
                 migrate once it is done",
                s.why
            ),
        ),
        (None, Class::Pending) => (true, format!("{}: nothing to carry over", s.why)),
        (None, Class::Done) => (true, format!("{}: its units are renamed to `{}`", s.why, new.id)),
    };
    if safe {
        out.renames.insert(qualified_step(body, &old.id), qualified_step(body, &new.id));
    }
    out.push(ChangeKind::Renamed, s.name, detail, safe, reason);
}

/// The kind and what it calls or starts with; returns whether the kind is the same.
fn kind(
    cx: &Cx<'_>,
    old: &Step,
    new: &Step,
    s: &Judge<'_>,
    out: &mut Out,
    covered: &mut BTreeSet<String>,
) -> bool {
    let (a, b) = (&old.kind, &new.kind);
    if a.keyword() != b.keyword() {
        let detail = format!("kind `{}` -> `{}`", a.keyword(), b.keyword());
        s.identity(ChangeKind::KindChanged, detail, &format!("a {} step", a.keyword()), out);
        return false;
    }
    let template = |k: &StepKind| match k {
        StepKind::Compute { value } => Some(value.to_json()),
        StepKind::Until { at } => Some(at.to_json()),
        StepKind::Http { request } => Some(request.to_json()),
        StepKind::ContinueAsNew { input } => Some(input.to_json()),
        _ => None,
    };
    match (a, b) {
        (StepKind::Task { task: x }, StepKind::Task { task: y }) if x != y => {
            let detail = format!("task `{x}` -> `{y}`");
            s.identity(ChangeKind::TaskChanged, detail, &format!("task `{x}`"), out);
        }
        (StepKind::Task { task }, StepKind::Task { .. }) => {
            covered.insert(task.clone());
            super::contracts::task(cx, task, s, out);
        }
        (
            StepKind::Workflow { workflow: w1, version: v1 },
            StepKind::Workflow { workflow: w2, version: v2 },
        ) if (w1, v1) != (w2, v2) => {
            let show = |w: &str, v: &Option<String>| match v {
                Some(v) => format!("{w}@{v}"),
                None => w.to_string(),
            };
            let (x, y) = (show(w1, v1), show(w2, v2));
            s.identity(
                ChangeKind::TaskChanged,
                format!("workflow `{x}` -> `{y}`"),
                &format!("child workflow `{x}`"),
                out,
            );
        }
        (StepKind::Await { signal: x }, StepKind::Await { signal: y }) if x != y => {
            let detail = format!("await `{x}` -> `{y}`");
            s.identity(ChangeKind::TaskChanged, detail, &format!("a wait for `{x}`"), out);
        }
        // A group migrates as one step: any change inside it (its steps, their fields, its
        // output) is safe only before the group started. So do a switch and a race.
        (StepKind::Group { .. }, StepKind::Group { .. })
        | (StepKind::Switch { .. }, StepKind::Switch { .. })
        | (StepKind::Race { .. }, StepKind::Race { .. })
            if a != b =>
        {
            let detail = format!("{}: its steps or output changed", a.keyword());
            let old = format!("the {}'s old steps", a.keyword());
            s.identity(ChangeKind::KindChanged, detail, &old, out);
        }
        (StepKind::Repeat(_), StepKind::Repeat(_)) if a != b => {
            let detail =
                "repeat: its steps, until, max_iterations, output or continue_as_new changed"
                    .to_string();
            s.identity(ChangeKind::KindChanged, detail, "the repeat's old iterations", out);
        }
        (StepKind::Sleep { duration_ms: x }, StepKind::Sleep { duration_ms: y }) if x != y => {
            let detail = format!("sleep {} -> {}", duration(Some(*x)), duration(Some(*y)));
            s.input(ChangeKind::InputChanged, detail, out);
        }
        _ => {
            if let (Some(x), Some(y)) = (template(a), template(b)) {
                if x != y {
                    let detail = format!("{} {} -> {}", a.keyword(), shown(&x), shown(&y));
                    s.input(ChangeKind::InputChanged, detail, out);
                }
            }
        }
    }
    // Like a group: a failure branch that changed is safe only before the step started.
    if old.on_failure != new.on_failure {
        let detail = "on_failure: its steps or output changed".to_string();
        s.identity(ChangeKind::KindChanged, detail, "the old failure branch", out);
    }
    true
}

fn for_each(cx: &Cx<'_>, body: &Body, old: &Step, new: &Step, s: &Judge<'_>, out: &mut Out) {
    let list = |st: &Step| st.for_each.as_ref().map(|f| (f.items.to_json(), f.as_name.clone()));
    if list(old) == list(new) {
        return;
    }
    let show = |st: &Step| match list(st) {
        Some((items, as_name)) => format!("{} as {as_name}", shown(&items)),
        None => "none".into(),
    };
    let detail = format!("for_each {} -> {}", show(old), show(new));
    let (safe, reason) = match (s.class, cx.units.fanned_out(body, &old.id)) {
        (Class::Pending, _) => (true, format!("{}: evaluated when it becomes ready", s.why)),
        (Class::Running, _) => {
            (false, format!("{}: its units were started from the old list", s.why))
        }
        (Class::Done, Some(unit)) => {
            (false, format!("{}: the fan-out of `{unit}` was frozen from the old list", s.why))
        }
        (Class::Done, None) => (true, format!("{}: it already ran, without a fan-out", s.why)),
    };
    out.push(ChangeKind::ForEachChanged, s.name, detail, safe, reason);
}

/// Retry, timeouts, `max_concurrency`, flow control and `compensate`: safe, for the next
/// attempts; except
/// a `compensate` the run's wind-down still has to start and the new version drops.
fn policy(cx: &Cx<'_>, old: &Step, new: &Step, s: &Judge<'_>, out: &mut Out) {
    let next = "applies to the next attempts";
    let mut push = |detail: String, note: &str| {
        out.push(ChangeKind::PolicyChanged, s.name, detail, true, format!("{}: {note}", s.why));
    };
    if old.retry != new.retry {
        push(format!("retry {}", retry(&old.retry, &new.retry)), next);
    }
    for (field, x, y, note) in [
        ("timeout", old.timeout_ms, new.timeout_ms, next),
        (
            "queue_timeout",
            old.queue_timeout_ms,
            new.queue_timeout_ms,
            "applies to the attempts waiting in the queue and the next ones",
        ),
        ("heartbeat_timeout", old.heartbeat_timeout_ms, new.heartbeat_timeout_ms, next),
    ] {
        if x != y {
            push(format!("{field} {} -> {}", duration(x), duration(y)), note);
        }
    }
    let concurrency = |st: &Step| st.for_each.as_ref().and_then(|f| f.max_concurrency);
    if concurrency(old) != concurrency(new) {
        let show = |c: Option<u32>| c.map_or_else(|| "all".to_string(), |c| c.to_string());
        let detail =
            format!("max_concurrency {} -> {}", show(concurrency(old)), show(concurrency(new)));
        push(detail, "applies to the elements not started yet");
    }
    let flow = [
        ("priority", old.flow.priority != new.flow.priority),
        ("concurrency", old.flow.concurrency != new.flow.concurrency),
        ("rate_limit", old.flow.rate_limit != new.flow.rate_limit),
        ("fairness", old.flow.fairness != new.flow.fairness),
    ];
    let changed: Vec<&str> = flow.iter().filter(|(_, c)| *c).map(|(f, _)| *f).collect();
    if !changed.is_empty() {
        push(
            format!("{} changed", changed.join(", ")),
            "applies to units scheduled from now on; attempts already scheduled, and their \
             retries, keep the flow control they were recorded with",
        );
    }
    if old.compensate == new.compensate {
        return;
    }
    let detail = match (&old.compensate, &new.compensate) {
        (Some(a), Some(b)) if a.task == b.task => {
            format!("compensate of task `{}` changed (input, retry or timeout)", a.task)
        }
        (a, b) => format!("compensate {} -> {}", call(a.as_ref()), call(b.as_ref())),
    };
    let due = due_compensation(cx, &old.id).filter(|_| *s.body == Body::Main);
    match due.filter(|_| new.compensate.is_none()) {
        Some(unit) => out.push(
            ChangeKind::PolicyChanged,
            s.name,
            detail,
            false,
            format!(
                "the run is compensating and `{unit}` is still to be compensated; the new \
                 version has no `compensate` for it"
            ),
        ),
        None => out.push(
            ChangeKind::PolicyChanged,
            s.name,
            detail,
            true,
            format!("{}: applies to compensations not started yet", s.why),
        ),
    }
}

/// A unit of main step `id` in the wind-down's compensation list whose compensation has not
/// started.
fn due_compensation<'s>(cx: &'s Cx<'_>, id: &str) -> Option<&'s str> {
    let list = cx.state.winding.as_ref()?.compensation.as_ref()?;
    list.iter()
        .filter(|k| crate::unit::UnitKey::parse(k).is_some_and(|p| p.step == id))
        .find(|k| cx.state.unit(&format!("compensate:{k}")).is_none())
        .map(String::as_str)
}

fn call(c: Option<&TaskCall>) -> String {
    c.map_or_else(|| "none".into(), |c| format!("task `{}`", c.task))
}

/// The retry fields that differ: `max_attempts 3 -> 5, backoff 2 -> 1.5`.
fn retry(a: &RetryPolicy, b: &RetryPolicy) -> String {
    let mut parts = Vec::new();
    let mut field = |name: &str, x: String, y: String| {
        if x != y {
            parts.push(format!("{name} {x} -> {y}"));
        }
    };
    field("max_attempts", a.max_attempts.to_string(), b.max_attempts.to_string());
    field(
        "initial_interval",
        duration(Some(a.initial_interval_ms)),
        duration(Some(b.initial_interval_ms)),
    );
    field("backoff", a.backoff.to_string(), b.backoff.to_string());
    field("max_interval", duration(Some(a.max_interval_ms)), duration(Some(b.max_interval_ms)));
    field("non_retryable", list(&a.non_retryable), list(&b.non_retryable));
    field("max_redeliveries", a.max_redeliveries.to_string(), b.max_redeliveries.to_string());
    parts.join(", ")
}
