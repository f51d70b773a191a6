//! A history as (event type, unit) pairs, and the lookups the language tests assert with:
//! where an event of a unit stands, whether it is there, how often, which units have one.

use orbit_api::v1 as pb;

/// (type, unit) of every event.
pub fn kinds(h: &[pb::HistoryEvent]) -> Vec<(String, String)> {
    h.iter().map(|e| (e.event_type.clone(), e.step.clone())).collect()
}

/// The index of the first `kind` event of `unit`; panics with the history when there is none.
pub fn position(h: &[(String, String)], kind: &str, unit: &str) -> usize {
    h.iter()
        .position(|(t, s)| t == kind && s == unit)
        .unwrap_or_else(|| panic!("no {kind}({unit}) in {h:?}"))
}

/// Whether `unit` has a `kind` event.
pub fn has(h: &[(String, String)], kind: &str, unit: &str) -> bool {
    h.iter().any(|(t, s)| t == kind && s == unit)
}

/// How many `kind` events `unit` has.
pub fn count(h: &[(String, String)], kind: &str, unit: &str) -> usize {
    h.iter().filter(|(t, s)| t == kind && s == unit).count()
}

/// The units of every `kind` event, in history order.
pub fn units(h: &[(String, String)], kind: &str) -> Vec<String> {
    h.iter().filter(|(t, _)| t == kind).map(|(_, s)| s.clone()).collect()
}
