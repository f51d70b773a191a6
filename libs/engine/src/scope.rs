//! Builds the names an expression sees (`input`, `steps`, `item`, `event`, `failure`,
//! `execution`, and inside loops `iteration` and `previous`: `crate::loops`) from the
//! state, binding only what the expression reads.

use crate::state::{State, UnitStatus};
use crate::unit::{enclosing, Scope as UnitScope, UnitKey};
use orbit_definition::{Definition, Scope, Template};
use serde_json::{json, Map, Value};
use std::collections::BTreeSet;

/// Where an expression is evaluated.
#[derive(Debug, Clone)]
pub struct Site<'a> {
    /// The body instance the expression belongs to.
    pub scope: &'a UnitScope,
    /// The `for_each` element and its binding name, inside fan-out elements.
    pub element: Option<(&'a str, usize, &'a Value)>,
    /// The group the expression is in, as a unit-key prefix (`""` outside groups, `"g."`
    /// in group `g`, `"g.h."` in its group `h`): `steps.<id>` reads the innermost list
    /// holding `id`.
    pub group: &'a str,
}

impl Site<'_> {
    /// The main body, outside any element.
    #[must_use]
    pub fn main() -> Site<'static> {
        Site { scope: &UnitScope::Main, element: None, group: "" }
    }
}

/// Formats epoch milliseconds as RFC 3339 (UTC, milliseconds).
#[must_use]
pub fn rfc3339(ms: u64) -> String {
    i64::try_from(ms)
        .ok()
        .and_then(chrono::DateTime::from_timestamp_millis)
        .map(|t| t.to_rfc3339_opts(chrono::SecondsFormat::Millis, true))
        .unwrap_or_default()
}

/// The scope for evaluating `templates` at `site`.
#[must_use]
pub fn build(def: &Definition, state: &State, site: &Site<'_>, templates: &[&Template]) -> Scope {
    let mut vars = BTreeSet::new();
    let mut refs = BTreeSet::new();
    for t in templates {
        vars.extend(t.variables());
        refs.extend(t.step_refs());
    }
    let mut scope = Scope::new();
    for var in &vars {
        let value = match var.as_str() {
            "input" => state.input.clone(),
            "steps" => steps_value(def, state, site, &refs),
            "execution" => json!({
                "id": state.execution_id,
                "workflow": state.workflow,
                "version": state.version,
                "run": state.run,
                "started_at": rfc3339(state.timeout_from().unwrap_or(state.created_at)),
            }),
            "index" => match site.element {
                Some((_, i, _)) => json!(i),
                None => {
                    match crate::loops::enclosing_var(def, state, site.scope, site.group, "index") {
                        Some(v) => v,
                        None => continue,
                    }
                }
            },
            "event" => match site.scope {
                UnitScope::OnSignal(_, seq) => state
                    .signals
                    .iter()
                    .find(|s| s.seq == *seq)
                    .map_or(Value::Null, |s| s.payload.clone()),
                _ => continue,
            },
            // Inside an update handler: the update's argument (the top-level reply and
            // validator get theirs from `crate::update`).
            "args" => match site.scope {
                UnitScope::Update(_, seq) => {
                    state.open_updates.get(seq).map_or(Value::Null, |(_, args)| args.clone())
                }
                _ => continue,
            },
            // Inside a failure branch, the failure of its step's unit (innermost first);
            // in `on` handlers, the run's.
            "failure" => match (branch_failure(state, site), &state.winding) {
                (Some(failure), _) => failure,
                (None, Some(w)) => json!({
                    "reason": w.outcome.as_str(),
                    "code": w.error.code,
                    "message": w.error.message,
                }),
                (None, None) => continue,
            },
            name => match site.element {
                Some((as_name, _, item)) if as_name == name => item.clone(),
                // A `for_each` group's element, a repeat's `iteration` and `previous`.
                _ => match crate::loops::enclosing_var(def, state, site.scope, site.group, name) {
                    Some(v) => v,
                    None => continue,
                },
            },
        };
        scope.set(var.clone(), value);
    }
    scope
}

/// Inside a failure branch (a group prefix ending `<step>.on_failure.`), the innermost
/// branch's failure: `{reason: "failure", step, code, message}`, plus `details` when the
/// error had them.
fn branch_failure(state: &State, site: &Site<'_>) -> Option<Value> {
    let step = enclosing(site.group).find_map(|p| p.strip_suffix(".on_failure."))?;
    let unit = UnitKey::step(site.scope.clone(), step).to_string();
    let error = state.unit(&unit)?.error.as_ref()?;
    let mut failure = json!({
        "reason": "failure",
        "step": unit,
        "code": error.code,
        "message": error.message,
    });
    if let (Some(d), Some(m)) = (&error.details, failure.as_object_mut()) {
        m.insert("details".into(), d.clone());
    }
    Some(failure)
}

/// `steps.<id>` → `{output, status}` for the referenced ids (every step in sight if none
/// is named statically). Ids of the site's groups, innermost first, then of its own body
/// shadow main-body ids.
fn steps_value(def: &Definition, state: &State, site: &Site<'_>, refs: &BTreeSet<String>) -> Value {
    let body_name = site.scope.body();
    let body = def.body(&body_name);
    let mut ids: BTreeSet<&str> = refs.iter().map(String::as_str).collect();
    if ids.is_empty() {
        ids = def.steps.iter().chain(body).map(|s| s.id.as_str()).collect();
        for p in enclosing(site.group) {
            ids.extend(def.list_at(&body_name, p).iter().map(|s| s.id.as_str()));
        }
    }
    let mut map = Map::new();
    for id in ids {
        let level = enclosing(site.group)
            .filter(|p| !p.is_empty())
            .find(|p| def.list_at(&body_name, p).iter().any(|s| s.id == id));
        let own = *site.scope != UnitScope::Main && body.iter().any(|s| s.id == id);
        let key = match level {
            Some(p) => UnitKey::step(site.scope.clone(), &format!("{p}{id}")),
            None if own => UnitKey::step(site.scope.clone(), id),
            None => UnitKey::step(UnitScope::Main, id),
        };
        let (status, output) = match state.unit(&key.to_string()) {
            Some(u) => (u.status.as_str(), u.output.clone().unwrap_or(Value::Null)),
            None => ("pending", Value::Null),
        };
        let output = if status == UnitStatus::Succeeded.as_str() { output } else { Value::Null };
        map.insert(id.to_string(), json!({ "status": status, "output": output }));
    }
    Value::Object(map)
}
