//! Folding a resumed run's `WorkflowCreated.resume` (a top-level repeat continued the run
//! as new near the history limit, `crate::event::Resume`), measuring a top-level list's
//! runs for the decider's threshold (`State::run_sizes`), and when the workflow timeout
//! counts from (the execution's first run's start, carried over the chain).
//!
//! The carried units enter resolved, with their outputs and errors; the compensation order
//! is the carried one, which this run's successes extend; the repeat's iteration
//! `iteration - 1` enters as its record (`r[n-1]`, the `previous` output), and the repeat's
//! iteration count starts at `iteration` (`State::elements`), so the decider goes on with
//! that iteration. Nothing carried is open, so no index but the repeat's count changes.

use super::{Elements, State, Unit, UnitStatus};
use crate::event::{CarriedStatus, Resume};
use serde::Serialize;

/// The repeat a resumed run continues (from its `WorkflowCreated.resume`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Resumed {
    /// The repeat's unit key.
    pub repeat: String,
    /// The iteration the run started with.
    pub iteration: u64,
    /// When the execution's first run started (the workflow timeout's start).
    pub started_at: Option<u64>,
}

/// How a top-level list's runs (a repeat's iterations) have used the run's history: what
/// the decider compares with the room left (`State::run_sizes`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct RunSizes {
    /// `event_count` when the last run was recorded.
    pub last_mark: u64,
    /// The most events between two records (or the run's start and the first record).
    pub largest: u64,
}

impl State {
    pub(super) fn resume(&mut self, r: &Resume) {
        for (key, carried) in &r.units {
            let (status, caught) = match carried.status {
                CarriedStatus::Succeeded => (UnitStatus::Succeeded, false),
                CarriedStatus::Caught => (UnitStatus::Succeeded, true),
                CarriedStatus::Skipped => (UnitStatus::Skipped, false),
                CarriedStatus::Failed => (UnitStatus::Failed, false),
                CarriedStatus::Cancelled => (UnitStatus::Cancelled, false),
            };
            let mut unit = Unit::new(status);
            unit.output = (status == UnitStatus::Succeeded).then(|| carried.output.clone());
            unit.error = carried.error.clone().filter(|_| caught || status == UnitStatus::Failed);
            self.units.insert(key.clone(), unit);
        }
        self.success_order.clone_from(&r.compensate);
        self.fanouts.extend(r.fanouts.iter().map(|(k, v)| (k.clone(), v.clone())));
        self.search.clone_from(&r.search);
        self.search_steps.clone_from(&r.search_steps);
        self.search_started = r.search_started;
        let n = usize::try_from(r.iteration).unwrap_or(usize::MAX);
        if let Some(last) = n.checked_sub(1) {
            let mut previous = Unit::new(UnitStatus::Succeeded);
            previous.output = Some(r.previous.clone());
            self.units.insert(format!("{}[{last}]", r.repeat), previous);
        }
        let count = Elements { present: n, end: n, resolved: n, ..Elements::default() };
        self.elements.insert(r.repeat.clone(), count);
        self.resumed = Some(Resumed {
            repeat: r.repeat.clone(),
            iteration: r.iteration,
            started_at: r.started_at,
        });
    }

    /// When the workflow timeout counts from: the execution's first run's start for a run
    /// a repeat continued as new (`State::resumed`), else this run's `WorkflowStarted`.
    #[must_use]
    pub fn timeout_from(&self) -> Option<u64> {
        match &self.resumed {
            Some(r) if r.started_at.is_some() && self.started_at.is_some() => r.started_at,
            _ => self.started_at,
        }
    }

    /// Folds `WorkflowStarted` at `ts` (the first one counts).
    pub(super) fn started(&mut self, ts: u64) {
        if self.started_at.is_none() {
            self.events_at_start = self.event_count;
        }
        self.started_at.get_or_insert(ts);
    }

    /// Measures the run of a top-level list just recorded (`StepSucceeded` of `key`): a
    /// key `id[n]` (no group path, no scope) counts the events since the list's previous
    /// record, or since the run started for its first one in this run.
    pub(super) fn measure_run(&mut self, key: &str) {
        if !key.ends_with(']') {
            return;
        }
        let Some(list) = key.strip_suffix(']').and_then(|k| k.rsplit_once('[')).map(|(l, _)| l)
        else {
            return;
        };
        if list.contains(['.', ':', '[', ']']) {
            return;
        }
        let start = self.events_at_start;
        let sizes = self.run_sizes.entry(list.to_string()).or_default();
        let from = if sizes.last_mark == 0 { start } else { sizes.last_mark };
        sizes.largest = sizes.largest.max(self.event_count.saturating_sub(from));
        sizes.last_mark = self.event_count;
    }
}
