//! What a run's state says about each step of each body: *pending* (no unit in a live
//! instance), *running* (some unit of a live instance is open: scheduled, dispatched,
//! waiting, sleeping, a child running, a retry due, a fan-out in progress, a compensation
//! in flight) or *done* (every unit of the live instances resolved).
//!
//! Live instances: the main body; `on.<outcome>` while the run winds down with that
//! outcome (only then has it units); every started `on_signal` instance (the decider
//! schedules each of them against the current definition for as long as the run lasts);
//! update instances whose update is still open (a completed update's units are never looked
//! at again). Units of every instance still count as *taken* ids (see [`Units::taken`]).

use crate::state::{State, UnitStatus};
use crate::unit::{Scope, UnitKey};
use orbit_definition::Body;
use std::collections::HashMap;

/// How one step stands in the run.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Class {
    /// No unit in a live instance.
    Pending,
    /// Some unit of a live instance is open.
    Running,
    /// Every unit of the live instances is resolved.
    Done,
}

/// The unit keys of one step (all of its units: the step's own, elements, compensations).
#[derive(Debug, Default)]
struct StepUnits {
    /// Open units of live instances.
    live_open: Vec<String>,
    /// Resolved units of live instances.
    live_resolved: Vec<String>,
    /// Open units of any instance.
    open: Vec<String>,
    /// Every unit of any instance.
    all: Vec<String>,
}

/// The units of a run grouped by (body, step id).
pub(crate) struct Units<'a> {
    state: &'a State,
    steps: HashMap<(Body, String), StepUnits>,
}

impl<'a> Units<'a> {
    /// Groups the units of `state` (one pass over them).
    pub(crate) fn of(state: &'a State) -> Units<'a> {
        let mut steps: HashMap<(Body, String), StepUnits> = HashMap::new();
        for (key, unit) in &state.units {
            let Some(parsed) = UnitKey::parse(key) else { continue };
            let live = match &parsed.scope {
                Scope::Main | Scope::OnSignal(..) => true,
                Scope::On(o) => state.winding.as_ref().is_some_and(|w| w.outcome == *o),
                Scope::Update(_, seq) => state.open_updates.contains_key(seq),
            };
            // A step inside groups (`g.sub`, `g[2].sub`, `r[0].sub`) counts as a unit of its
            // outermost group (or loop).
            let top = parsed.step.split(['.', '[']).next().unwrap_or_default().to_string();
            let entry = steps.entry((parsed.scope.body(), top)).or_default();
            let open = !unit.status.is_resolved();
            entry.all.push(key.clone());
            if open {
                entry.open.push(key.clone());
            }
            match (live, open) {
                (true, true) => entry.live_open.push(key.clone()),
                (true, false) => entry.live_resolved.push(key.clone()),
                _ => {}
            }
        }
        Units { state, steps }
    }

    fn get(&self, body: &Body, id: &str) -> Option<&StepUnits> {
        self.steps.get(&(body.clone(), id.to_string()))
    }

    /// How the step stands.
    pub(crate) fn class(&self, body: &Body, id: &str) -> Class {
        match self.get(body, id) {
            Some(s) if !s.live_open.is_empty() => Class::Running,
            Some(s) if !s.live_resolved.is_empty() => Class::Done,
            _ => Class::Pending,
        }
    }

    /// `pending: not started yet`, `running: `b` is dispatched`, `done: `a` succeeded`
    /// (with how many other units there are): the start of every reason about the step.
    pub(crate) fn describe(&self, body: &Body, id: &str) -> String {
        let Some(s) = self.get(body, id) else { return "pending: not started yet".into() };
        let (word, keys, more) = match self.class(body, id) {
            Class::Pending => return "pending: not started yet".into(),
            Class::Running => ("running", &s.live_open, "open"),
            Class::Done => ("done", &s.live_resolved, "resolved"),
        };
        // The step's own unit rather than its compensation, when there is one.
        let key = keys.iter().find(|k| !k.starts_with("compensate:")).or(keys.first());
        let Some(key) = key else { return format!("{word}: no unit") };
        let status = self.state.unit(key).map_or("gone", |u| status_words(u.status));
        let others = match keys.len() - 1 {
            0 => String::new(),
            1 => format!(" (and 1 more {more} unit)"),
            n => format!(" (and {n} more {more} units)"),
        };
        format!("{word}: `{key}` {status}{others}")
    }

    /// Open units of the step, any instance (what removing it cancels).
    pub(crate) fn open(&self, body: &Body, id: &str) -> &[String] {
        self.get(body, id).map_or(&[], |s| s.open.as_slice())
    }

    /// Resolved units of the step's live instances.
    pub(crate) fn resolved(&self, body: &Body, id: &str) -> &[String] {
        self.get(body, id).map_or(&[], |s| s.live_resolved.as_slice())
    }

    /// A unit of any instance with this step id, if any: the id is taken in this run (a
    /// step of an earlier version left it), so a new step cannot take it.
    pub(crate) fn taken(&self, body: &Body, id: &str) -> Option<&str> {
        self.get(body, id).and_then(|s| s.all.first()).map(String::as_str)
    }

    /// Whether the step's `for_each` list was frozen (`StepFanOut`) in a live instance.
    pub(crate) fn fanned_out(&self, body: &Body, id: &str) -> Option<&str> {
        let s = self.get(body, id)?;
        s.live_open
            .iter()
            .chain(&s.live_resolved)
            .find(|k| self.state.fanouts.contains_key(*k))
            .map(String::as_str)
    }
}

fn status_words(status: UnitStatus) -> &'static str {
    match status {
        UnitStatus::Scheduled => "is scheduled",
        UnitStatus::Dispatched => "is dispatched",
        UnitStatus::AttemptFailed => "had an attempt fail",
        UnitStatus::RetryWait => "waits to retry",
        UnitStatus::Uncertain => "lost its worker",
        UnitStatus::Waiting => "is waiting",
        UnitStatus::Succeeded => "succeeded",
        UnitStatus::Failed => "failed",
        UnitStatus::Skipped => "was skipped",
        UnitStatus::Cancelled => "was cancelled",
    }
}
