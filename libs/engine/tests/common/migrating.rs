//! What the migration tests share: the plan of execution `x` against a version, the
//! judged changes in a comparable form, and definitions by hash for `replay_defs`.

use orbit_definition::Definition;
use orbit_engine::migrate::{plan, ChangeKind, Plan};
use orbit_engine::sim::Sim;
use std::collections::BTreeMap;

/// The plan of execution `x` of `sim` against `to`.
pub fn plan_to(sim: &Sim, to: &Definition) -> Plan {
    let e = super::exec(sim, "x");
    plan(&e.def, to, &e.state)
}

/// Every change of `p` as (kind, step, safe).
pub fn judged(p: &Plan) -> Vec<(ChangeKind, String, bool)> {
    p.changes.iter().map(|c| (c.kind, c.step.clone(), c.safe)).collect()
}

/// `list` in [`judged`]'s form.
pub fn expect(list: &[(ChangeKind, &str, bool)]) -> Vec<(ChangeKind, String, bool)> {
    list.iter().map(|(k, s, safe)| (*k, (*s).to_string(), *safe)).collect()
}

/// The definitions by hash.
pub fn defs(list: &[&Definition]) -> BTreeMap<String, Definition> {
    list.iter().map(|d| (d.hash.clone(), (*d).clone())).collect()
}
