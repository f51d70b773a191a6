//! What the rounds of one `advance_within` remember about one body instance, so that
//! scheduling a body costs the steps that can act, not every step of the body each round
//! (a 10,000-step `needs` chain decides one step a round: looking at all of them each
//! round made the pass quadratic).
//!
//! A step can only produce events in a round when it has no unit yet and every `needs` is
//! resolved (it starts or is skipped), or when its unit is open (a fan-out starts elements
//! or resolves). So the memo keeps the steps still *active*: not resolved, and not known to
//! wait for an unresolved dependency. A step found waiting leaves the active set until one
//! of its dependencies resolves (`Memo::observe` sees that in the round's events); a
//! resolved step leaves it for good. The events of a round are exactly those of a look at
//! every step: the steps left out would have produced none, and the active ones are looked
//! at in definition order.

use orbit_definition::Step;
use std::collections::{BTreeSet, HashMap};

/// The memo of one body instance (see the module docs).
pub(crate) struct BodyMemo {
    /// Step id → index in the body.
    index: HashMap<String, usize>,
    /// Per step: the steps whose `needs` name it.
    dependents: Vec<Vec<usize>>,
    /// Per step: known resolved.
    resolved: Vec<bool>,
    /// How many are known resolved.
    resolved_count: usize,
    /// Steps that may act this round, in definition order.
    active: BTreeSet<usize>,
}

impl BodyMemo {
    pub(crate) fn new(steps: &[Step]) -> BodyMemo {
        let index: HashMap<String, usize> =
            steps.iter().enumerate().map(|(i, s)| (s.id.clone(), i)).collect();
        let mut dependents = vec![Vec::new(); steps.len()];
        for (i, step) in steps.iter().enumerate() {
            for dep in &step.deps {
                if let Some(&d) = index.get(dep) {
                    dependents[d].push(i);
                }
            }
        }
        BodyMemo {
            index,
            dependents,
            resolved: vec![false; steps.len()],
            resolved_count: 0,
            active: (0..steps.len()).collect(),
        }
    }

    /// The first step at index `from` or later that may act.
    pub(crate) fn next_active(&self, from: usize) -> Option<usize> {
        self.active.range(from..).next().copied()
    }

    /// Whether every step of the body is known resolved.
    pub(crate) fn all_resolved(&self) -> bool {
        self.resolved_count == self.resolved.len()
    }

    /// Step `i` is resolved: never looked at again; the steps needing it may act.
    pub(crate) fn resolved(&mut self, i: usize) {
        if std::mem::replace(&mut self.resolved[i], true) {
            return;
        }
        self.resolved_count += 1;
        self.active.remove(&i);
        for &d in &self.dependents[i] {
            if !self.resolved[d] {
                self.active.insert(d);
            }
        }
    }

    /// The step with this id resolved (from a round's events).
    pub(crate) fn resolved_step(&mut self, id: &str) {
        if let Some(&i) = self.index.get(id) {
            self.resolved(i);
        }
    }

    /// Step `i` has no unit and waits for an unresolved dependency: nothing to do until one
    /// of its dependencies resolves.
    pub(crate) fn waiting(&mut self, i: usize) {
        self.active.remove(&i);
    }
}
