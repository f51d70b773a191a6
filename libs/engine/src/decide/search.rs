//! Search attribute upserts (issue 28 item 1; `orbit_definition::search`): the rounds that
//! decide `SearchAttributesUpserted`.
//!
//! Two moments, each decided once and recorded: the workflow's `search:` in the round after
//! `WorkflowStarted` (so `execution.started_at` is the start's), and a main step's `search:`
//! in the round after the step succeeded (before anything else the round would decide, so
//! the last step's values are in history before the run completes). The state says what was
//! decided (`State::search_started`, `State::search_steps`), so replaying the history
//! decides the same events. A workflow that declares no search attributes pays one map
//! emptiness check per round.
//!
//! A value that does not fit its declared type (or whose template fails) is not set: the
//! event names it in `errors` and the run goes on.

use super::Ctx;
use crate::event::Event;
use crate::scope::{build, Site};
use crate::state::UnitStatus;
use orbit_definition::{coerce, Template};
use std::collections::BTreeMap;

/// The round's upserts, or nothing.
pub(crate) fn round(ctx: &Ctx<'_>) -> Vec<Event> {
    let def = ctx.def;
    if def.search_attributes.is_empty() {
        return Vec::new();
    }
    if !ctx.state.search_started && !def.search.is_empty() {
        return vec![upsert(ctx, None, &def.search)];
    }
    def.steps
        .iter()
        .filter(|s| !s.search.is_empty() && !ctx.state.search_steps.contains(&s.id))
        .filter(|s| ctx.state.unit(&s.id).is_some_and(|u| u.status == UnitStatus::Succeeded))
        .map(|s| upsert(ctx, Some(&s.id), &s.search))
        .collect()
}

fn upsert(ctx: &Ctx<'_>, step: Option<&str>, templates: &BTreeMap<String, Template>) -> Event {
    let all: Vec<&Template> = templates.values().collect();
    let scope = build(ctx.def, ctx.state, &Site::main(), &all);
    let mut values = BTreeMap::new();
    let mut errors = BTreeMap::new();
    for (name, template) in templates {
        // Parsing checked that every key is declared.
        let Some(ty) = ctx.def.search_attributes.get(name) else { continue };
        let value = template
            .render(&scope)
            .map_err(|e| format!("the template failed: {e}"))
            .and_then(|v| coerce(*ty, &v));
        match value {
            Ok(v) => {
                values.insert(name.clone(), v);
            }
            Err(e) => {
                errors.insert(name.clone(), e);
            }
        }
    }
    Event::SearchAttributesUpserted { step: step.map(str::to_string), values, errors }
}
