//! Migration hints: the target's first `migrations:` entry whose `from` matches the version
//! the run is on maps the recorded outputs of main-body task steps to the target's shape.
//!
//! Each mapping is evaluated here, once, when the migration is planned: over the run's
//! state read with the *old* definition (`steps.<old id>`, `input`, `execution`), with
//! `output` bound to the recorded output of each succeeded unit of the step (its own unit,
//! or each `for_each` element's; a finished fan-out's list is then rebuilt from its
//! elements' outputs, as the decider built it), within the expression budgets of
//! `orbit_definition::cost`. A result must fit the payload limits and the output contract
//! of the task the step calls in the target. The results are recorded in
//! `DefinitionMigrated::outputs`, so replay applies them and never evaluates anything.
//! A step the run has not started, or whose units are all still open, has nothing to map.

use super::classify::Units;
use crate::scope::{build, Site};
use crate::state::{State, UnitStatus};
use crate::unit::{Scope as UnitScope, UnitKey};
use orbit_definition::{Body, Definition, Step, StepKind, Template};
use serde_json::Value;
use std::collections::BTreeMap;

/// The name a mapping reads a unit's recorded output as (the definition's parser allows it
/// in `migrations[].outputs`).
const OUTPUT_VAR: &str = "output";

/// What the hint that applies to the run gave, per old main-body step id.
#[derive(Debug, Default)]
pub(crate) struct Hinted {
    /// Old step id -> its mapping.
    pub steps: BTreeMap<String, Mapping>,
}

/// The mapping of one step.
#[derive(Debug)]
pub(crate) struct Mapping {
    /// Where the mapping is written: `migrations[0].outputs.first`.
    pub path: String,
    /// The `from` pattern that matched the run's version.
    pub pattern: String,
    /// The task whose output contract the results were checked against, if it has one.
    pub contract_of: Option<String>,
    /// Mapped outputs by unit key as the run has them (old names), the rebuilt fan-out
    /// list included.
    pub outputs: BTreeMap<String, Value>,
    /// How many recorded task outputs were mapped (elements and the step's own unit).
    pub mapped: usize,
    /// The first unit whose mapping failed, and why.
    pub failure: Option<(String, String)>,
}

impl Hinted {
    /// Evaluates the hint of `to` that matches `from`'s version, if any.
    pub(crate) fn of(from: &Definition, to: &Definition, state: &State, units: &Units) -> Hinted {
        let mut hinted = Hinted::default();
        let Some((index, hint)) = to.migration_hint(&from.version) else { return hinted };
        let pattern = hint.matching(&from.version).unwrap_or_default().to_string();
        for (id, template) in &hint.outputs {
            // Registration checked that the id is a main step of `to`.
            let Some(step) = to.step(id) else { continue };
            let Some(old) = old_id(from, to, step) else { continue };
            let path = format!("migrations[{index}].outputs.{id}");
            let run = Run { from, to, state, units };
            let mapping = run.map(step, old, template, Mapping::new(path, &pattern));
            hinted.steps.insert(old.to_string(), mapping);
        }
        hinted
    }

    /// Every mapped output by unit key (old names); none when a mapping failed (the plan
    /// is unsafe then).
    pub(crate) fn outputs(&self) -> BTreeMap<String, Value> {
        if self.steps.values().any(|m| m.failure.is_some()) {
            return BTreeMap::new();
        }
        self.steps.values().flat_map(|m| m.outputs.clone()).collect()
    }
}

/// The id the step had in `from`, matched as the step diff matches it: the same id, else a
/// `renamed_from` naming a step `from` has and `to` lacks.
fn old_id<'d>(from: &Definition, to: &Definition, step: &'d Step) -> Option<&'d str> {
    if from.step(&step.id).is_some() {
        return Some(&step.id);
    }
    step.renamed_from.as_deref().filter(|o| from.step(o).is_some() && to.step(o).is_none())
}

impl Mapping {
    fn new(path: String, pattern: &str) -> Mapping {
        Mapping {
            path,
            pattern: pattern.to_string(),
            contract_of: None,
            outputs: BTreeMap::new(),
            mapped: 0,
            failure: None,
        }
    }
}

/// The two versions and the run a hint is evaluated against.
struct Run<'r> {
    from: &'r Definition,
    to: &'r Definition,
    state: &'r State,
    units: &'r Units<'r>,
}

impl Run<'_> {
    /// Maps the recorded outputs of `old` (the old id of `step`) through `template`.
    fn map(&self, step: &Step, old: &str, template: &Template, mut m: Mapping) -> Mapping {
        let Run { from, to, state, units } = *self;
        let contract_of = match &step.kind {
            StepKind::Task { task } => {
                to.tasks.get(task).and_then(|t| t.output.as_ref()).map(|_| task)
            }
            _ => None,
        };
        let contract = contract_of.and_then(|t| to.tasks.get(t)).and_then(|t| t.output.as_ref());
        let limit =
            to.limits.max_payload_bytes.map_or(orbit_payload::DEFAULT_MAX_PAYLOAD_BYTES, |b| {
                b.min(orbit_payload::DEFAULT_MAX_PAYLOAD_BYTES)
            });
        let mut scope = build(from, state, &Site::main(), &[template]);
        m.contract_of = contract_of.cloned();
        for key in units.resolved(&Body::Main, old) {
            let Some(u) = state.unit(key).filter(|u| u.status == UnitStatus::Succeeded) else {
                continue;
            };
            let Some(parsed) = UnitKey::parse(key) else { continue };
            // A task output: an element's, or the step's own unless it is a fan-out's list.
            let task_output =
                !parsed.compensate && (parsed.index.is_some() || !state.fanouts.contains_key(key));
            if !task_output {
                continue;
            }
            m.mapped += 1;
            scope.set(OUTPUT_VAR, u.output.clone().unwrap_or(Value::Null));
            let result = template
                .render(&scope)
                .map_err(|e| format!("the mapping fails ({}): {}", e.code(), e.in_field(&m.path)))
                .and_then(|v| match orbit_payload::check(&v, Some(limit)) {
                    Ok(_) => Ok(v),
                    Err(v) => Err(v.message("the mapped output")),
                })
                .and_then(|v| match contract {
                    Some(c) => c.apply(v).map_err(|v| {
                        let listed: Vec<String> = v.iter().map(ToString::to_string).collect();
                        format!(
                            "the mapped output fails the output contract of task `{}`: {}",
                            contract_of.map_or("", String::as_str),
                            listed.join("; ")
                        )
                    }),
                    None => Ok(v),
                });
            match result {
                Ok(v) => {
                    m.outputs.insert(key.clone(), v);
                }
                Err(why) => {
                    m.failure.get_or_insert((key.clone(), why));
                }
            }
        }
        // A finished fan-out's own output is the list of its elements' outputs.
        let own = UnitKey::step(UnitScope::Main, old);
        let own_key = own.to_string();
        let finished = state.unit(&own_key).is_some_and(|u| u.status == UnitStatus::Succeeded);
        if let Some(items) = state.fanouts.get(&own_key).filter(|_| finished && m.mapped > 0) {
            let list = (0..items.len())
                .map(|i| {
                    let key = own.element(i).to_string();
                    m.outputs
                        .get(&key)
                        .cloned()
                        .or_else(|| state.unit(&key).and_then(|u| u.output.clone()))
                        .unwrap_or(Value::Null)
                })
                .collect();
            m.outputs.insert(own_key, Value::Array(list));
        }
        m
    }
}
