//! Folding `DefinitionMigrated`: the run moves to another version of its workflow.
//!
//! In order: the pinned version and hash change; every unit in `cancelled` is cancelled
//! exactly as a decided `StepCancelled` cancels it; then every unit key whose step (in its
//! body) is renamed gets the new id, in every part of the state that holds unit keys
//! (`units`, `fanouts`, `success_order`, `tokens`, the wind-down's compensation list), and
//! `open` and `elements` are rebuilt from the units (a resumed repeat's count from its
//! highest iteration, `crate::event::Resume`); last, the `outputs` a migration hint
//! mapped replace the recorded outputs of those (succeeded) units, by their keys after the
//! renames. Total like the rest of the fold: a rename that does not parse, moves to another
//! body, or targets a step that has units (or that another rename targets too) is left out,
//! so no unit is ever lost or merged; an output for a unit that is not there or did not
//! succeed is left out too.

use super::{State, UnitStatus};
use crate::unit::{parse_qualified_step, qualified_step, UnitKey};
use serde_json::Value;
use std::collections::{BTreeMap, BTreeSet};

impl State {
    pub(super) fn migrate(
        &mut self,
        version: &str,
        hash: &str,
        renames: &BTreeMap<String, String>,
        cancelled: &[String],
        outputs: &BTreeMap<String, Value>,
    ) {
        version.clone_into(&mut self.version);
        hash.clone_into(&mut self.definition_hash);
        for key in cancelled {
            let Some(u) = self.units.get_mut(key).filter(|u| !u.status.is_resolved()) else {
                continue;
            };
            let before = u.status;
            u.status = UnitStatus::Cancelled;
            u.token = None;
            u.fire_at = None;
            self.index(key, Some(before), Some(UnitStatus::Cancelled));
        }
        self.rename(renames);
        for (key, output) in outputs {
            if let Some(u) = self.units.get_mut(key).filter(|u| u.status == UnitStatus::Succeeded) {
                u.output = Some(output.clone());
            }
        }
    }

    fn rename(&mut self, renames: &BTreeMap<String, String>) {
        if renames.is_empty() {
            return;
        }
        let renames = usable(renames, &self.units);
        if renames.is_empty() {
            return;
        }
        let rename = |key: &str| renamed(key, &renames);
        let units = std::mem::take(&mut self.units);
        self.units = units.into_iter().map(|(k, u)| (rename(&k).unwrap_or(k), u)).collect();
        let fanouts = std::mem::take(&mut self.fanouts);
        self.fanouts = fanouts.into_iter().map(|(k, v)| (rename(&k).unwrap_or(k), v)).collect();
        for key in &mut self.success_order {
            if let Some(new) = rename(key) {
                *key = new;
            }
        }
        for key in self.tokens.values_mut() {
            if let Some(new) = rename(key) {
                *key = new;
            }
        }
        let compensation = self.winding.as_mut().and_then(|w| w.compensation.as_mut());
        for key in compensation.into_iter().flatten() {
            if let Some(new) = rename(key) {
                *key = new;
            }
        }
        self.open.clear();
        self.elements.clear();
        let statuses: Vec<(String, UnitStatus)> =
            self.units.iter().map(|(k, u)| (k.clone(), u.status)).collect();
        for (key, status) in statuses {
            self.index(&key, None, Some(status));
        }
        let sizes = std::mem::take(&mut self.run_sizes);
        self.run_sizes = sizes.into_iter().map(|(k, v)| (rename(&k).unwrap_or(k), v)).collect();
        // A resumed repeat's iterations before this run have no units but the last one:
        // its count is its highest iteration plus one (iterations are recorded in order).
        if let Some(r) = &mut self.resumed {
            if let Some(new) = rename(&r.repeat) {
                r.repeat = new;
            }
            if let Some(e) = self.elements.get_mut(&r.repeat) {
                e.resolved += e.end - e.present;
                e.present = e.end;
            }
        }
    }
}

/// The renames that move units without a clash: a rename onto a step that has units in the
/// run, or onto a step another rename also targets, is left out (never the case for a plan:
/// `crate::migrate` refuses a rename onto a taken id), so no unit is lost or merged.
fn usable(
    renames: &BTreeMap<String, String>,
    units: &BTreeMap<String, crate::state::Unit>,
) -> BTreeMap<String, String> {
    let present: BTreeSet<String> = units
        .keys()
        .filter_map(|k| UnitKey::parse(k))
        .map(|k| qualified_step(&k.scope.body(), top_step(&k.step)))
        .collect();
    let mut targets: BTreeMap<&str, usize> = BTreeMap::new();
    for to in renames.values() {
        *targets.entry(to.as_str()).or_default() += 1;
    }
    renames
        .iter()
        .filter(|(_, to)| !present.contains(*to) && targets.get(to.as_str()) == Some(&1))
        .map(|(from, to)| (from.clone(), to.clone()))
        .collect()
}

/// The step of its body a unit belongs to: the step itself, or for a step inside groups
/// (`g.sub`) or loops (`g[2].sub`, `r[0].sub`) the outermost one (`g`, `r`).
fn top_step(step: &str) -> &str {
    step.split(['.', '[']).next().unwrap_or(step)
}

/// The key `key` takes under `renames` (body-qualified step names), if its step (or, inside
/// groups, its outermost group) is renamed.
pub(crate) fn renamed(key: &str, renames: &BTreeMap<String, String>) -> Option<String> {
    let mut parsed = UnitKey::parse(key)?;
    let body = parsed.scope.body();
    let top = top_step(&parsed.step);
    let to = renames.get(&qualified_step(&body, top))?;
    let (to_body, id) = parse_qualified_step(to)?;
    if to_body != body || id == top {
        return None;
    }
    parsed.step = format!("{id}{}", &parsed.step[top.len()..]);
    Some(parsed.to_string())
}
