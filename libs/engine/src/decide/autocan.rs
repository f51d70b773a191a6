//! A long loop continues as new by itself (issue 29): before a top-level repeat starts its
//! next iteration near the history limit, the run ends with `WorkflowContinuedAsNew`
//! carrying a resume state (`crate::event::Resume`), and the next run goes on with that iteration.
//!
//! The rule (docs/definitions.md "Long loops continue as new"), decided from the state
//! alone so replay and the simulator agree: a repeat of the main `steps` (not inside a
//! group, loop or branch) with `continue_as_new` (the default), under an effective
//! `max_history_events`, about to start iteration `n` (none of its units yet), that
//! recorded at least one iteration in this run, continues the run as new when the room left
//! (`max_history_events - event_count`) is below twice the largest iteration of this run
//! (`State::run_sizes`) plus [`RESUME_RESERVE_EVENTS`]. If any other work of the run is
//! open then (a unit anywhere, an update handler, a signal handler instance not finished,
//! events already decided this round), the iteration does not start: the loop waits for
//! that work, and continues as new once it is resolved.

use super::body::started;
use super::winddown::has_compensation;
use super::Ctx;
use crate::event::Event;
use crate::event::{CarriedStatus, CarriedUnit, Resume};
use crate::state::UnitStatus;
use crate::unit::{Scope as UnitScope, UnitKey};
use orbit_definition::Repeat;
use std::collections::BTreeSet;

/// Events a run keeps free beyond twice its largest iteration before a top-level repeat
/// continues it as new: room for what arrives besides the loop's own work (signals,
/// heartbeats with details, stale results) and for the run's last events.
pub const RESUME_RESERVE_EVENTS: u64 = 20;

/// Whether repeat `r` (unit `key`, about to run iteration `n`) must not start it now: the
/// run was continued as new (the event pushed), or it waits for other work to do so.
pub(super) fn continue_loop(
    ctx: &Ctx<'_>,
    r: &Repeat,
    key: &UnitKey,
    n: usize,
    out: &mut Vec<Event>,
) -> bool {
    if !r.continue_as_new || key.scope != UnitScope::Main || key.step.contains('.') {
        return false;
    }
    let Some(max) = ctx.limits.max_history_events else { return false };
    let k = key.to_string();
    let state = ctx.state;
    let first = state.resumed.as_ref().filter(|x| x.repeat == k).map_or(0, |x| x.iteration);
    // Only after an iteration of this run: a run always makes progress.
    if (n as u64) <= first {
        return false;
    }
    let Some(sizes) = state.run_sizes.get(&k) else { return false };
    let room = max.saturating_sub(state.event_count);
    if room >= sizes.largest.saturating_mul(2).saturating_add(RESUME_RESERVE_EVENTS) {
        return false;
    }
    if started(ctx, &format!("{k}[{n}]")).is_some() {
        return false;
    }
    if !out.is_empty() || !state.open.is_empty() || !state.open_updates.is_empty() {
        return true;
    }
    if state.handler_instances.iter().any(|(name, seq)| !handler_done(ctx, name, *seq)) {
        return true;
    }
    let resume = capture(ctx, &k, n);
    out.push(Event::WorkflowContinuedAsNew {
        next_run: state.run + 1,
        input: state.input.clone(),
        resume: Some(Box::new(resume)),
    });
    true
}

/// Whether every step of signal handler instance `name@seq` is resolved.
fn handler_done(ctx: &Ctx<'_>, name: &str, seq: u64) -> bool {
    let scope = UnitScope::OnSignal(name.to_string(), seq);
    ctx.def.body(&scope.body()).iter().all(|step| {
        let key = UnitKey::step(scope.clone(), &step.id).to_string();
        ctx.state.unit(&key).is_some_and(|u| u.status.is_resolved())
    })
}

/// The resume state of the run at repeat `k`'s iteration `n` (see `crate::event::Resume`).
fn capture(ctx: &Ctx<'_>, k: &str, n: usize) -> Resume {
    let state = ctx.state;
    let compensate: Vec<String> = state
        .success_order
        .iter()
        .filter(|c| {
            UnitKey::parse(c)
                .is_some_and(|p| p.scope == UnitScope::Main && has_compensation(ctx, &p))
        })
        .cloned()
        .collect();
    // The list runs around each unit to compensate, and the runs before them (`previous`).
    let mut runs = BTreeSet::new();
    let mut before = BTreeSet::new();
    for c in &compensate {
        for (i, _) in c.match_indices(']') {
            let run = &c[..=i];
            runs.insert(run.to_string());
            if let Some(p) = preceding(run) {
                before.insert(p);
            }
        }
    }
    let previous_key = format!("{k}[{}]", n.saturating_sub(1));
    let mut units = std::collections::BTreeMap::new();
    for (key, unit) in &state.units {
        let Some(parsed) = UnitKey::parse(key) else { continue };
        if parsed.scope != UnitScope::Main || parsed.compensate || *key == previous_key {
            continue;
        }
        let keep = !key.contains('[')
            || innermost_run(key).is_some_and(|r| runs.contains(r))
            || before.contains(key);
        let status = match unit.status {
            UnitStatus::Succeeded if unit.error.is_some() => CarriedStatus::Caught,
            UnitStatus::Succeeded => CarriedStatus::Succeeded,
            UnitStatus::Skipped => CarriedStatus::Skipped,
            UnitStatus::Failed => CarriedStatus::Failed,
            UnitStatus::Cancelled => CarriedStatus::Cancelled,
            _ => continue,
        };
        if keep {
            let output = unit.output.clone().unwrap_or_default();
            units.insert(key.clone(), CarriedUnit { status, output, error: unit.error.clone() });
        }
    }
    let fanouts = runs
        .iter()
        .filter_map(|r| r.rsplit_once('[').map(|(list, _)| list))
        .filter_map(|list| state.fanouts.get_key_value(list))
        .map(|(list, items)| (list.clone(), items.clone()))
        .collect();
    let previous = state.unit(&previous_key).and_then(|u| u.output.clone()).unwrap_or_default();
    Resume {
        repeat: k.to_string(),
        iteration: n as u64,
        previous,
        units,
        compensate,
        fanouts,
        search: state.search.clone(),
        search_steps: state.search_steps.clone(),
        search_started: state.search_started,
        started_at: state.timeout_from(),
    }
}

/// The innermost list run a key is in (`r[3].x` → `r[3]`, `a[2]` → `a[2]`).
fn innermost_run(key: &str) -> Option<&str> {
    key.rfind(']').map(|i| &key[..=i])
}

/// The run before a list run (`r[3]` → `r[2]`; none for run 0).
fn preceding(run: &str) -> Option<String> {
    let (list, index) = run.strip_suffix(']')?.rsplit_once('[')?;
    let i: usize = index.parse().ok()?;
    Some(format!("{list}[{}]", i.checked_sub(1)?))
}

#[cfg(test)]
mod tests {
    use super::{innermost_run, preceding};

    #[test]
    fn list_runs_are_read_from_keys() {
        assert_eq!(innermost_run("r[3].x"), Some("r[3]"));
        assert_eq!(innermost_run("g[1].h[2].y"), Some("g[1].h[2]"));
        assert_eq!(innermost_run("a"), None);
        assert_eq!(preceding("r[3]").as_deref(), Some("r[2]"));
        assert_eq!(preceding("g[1].h[0]"), None);
    }
}
