//! `migrations:`: hints for migrating running executions of earlier versions to this one.
//!
//! ```yaml
//! migrations:
//!   - from: "1.*"                       # or a list; a version, `*` any run of characters
//!     outputs:                          # main-body task step of this version -> template
//!       first: "${{ {'value': output} }}"
//! ```
//!
//! Checked here: the shape, each `from` pattern, that each `outputs` key is a task step of
//! the main body (`UNKNOWN_REFERENCE`, `INVALID_VALUE`), and each template (it compiles,
//! within the expression limits, reading only `output`, `input`, `steps` and `execution`).
//! `steps.<id>` in a template reads the *old* run's steps, which this version need not
//! have, so those ids are not checked against this document.

use crate::error::ErrorCode;
use crate::model::{MigrationHint, StepKind};
use crate::parse::exprs::{Compiler, Vars};
use crate::parse::names::is_version_pattern;
use crate::parse::reader::{index_path, short_list, wrong_type, Errors, Obj};
use crate::parse::steps::Parsed;
use serde_json::Value;
use std::collections::BTreeMap;

/// The name a mapping reads the unit's recorded output as.
pub(crate) const OUTPUT_VAR: &str = "output";

/// Reads `migrations` at `path`; `main` is the main body as read.
pub(crate) fn read(
    value: &Value,
    path: &str,
    main: &[Parsed],
    errors: &mut Errors,
) -> Vec<MigrationHint> {
    let Value::Array(items) = value else {
        wrong_type(errors, path, "a list of migration hints", value);
        return Vec::new();
    };
    let steps: BTreeMap<&str, &StepKind> =
        main.iter().map(|p| (p.step.id.as_str(), &p.step.kind)).collect();
    items
        .iter()
        .enumerate()
        .filter_map(|(i, v)| hint(v, &index_path(path, i), &steps, errors))
        .collect()
}

fn hint(
    value: &Value,
    path: &str,
    steps: &BTreeMap<&str, &StepKind>,
    errors: &mut Errors,
) -> Option<MigrationHint> {
    let mut obj = Obj::new(value, path, "a migration hint", errors)?;
    let from = obj.required("from", errors).map(|v| patterns(v, &obj.at("from"), errors));
    let outputs =
        obj.required("outputs", errors).map(|v| outputs(v, &obj.at("outputs"), steps, errors));
    obj.finish(errors, &["from", "outputs"]);
    Some(MigrationHint { from: from?, outputs: outputs? })
}

/// `from`: one pattern or a non-empty list of them (numbers stringified, as `version` is).
fn patterns(value: &Value, path: &str, errors: &mut Errors) -> Vec<String> {
    let one = |v: &Value, at: &str, errors: &mut Errors| {
        let text = match v {
            Value::String(s) => s.clone(),
            Value::Number(n) => n.to_string(),
            other => {
                wrong_type(errors, at, "a version pattern", other);
                return None;
            }
        };
        if is_version_pattern(&text) {
            return Some(text);
        }
        let message = format!(
            "`{text}` is not a version pattern: write a version (`1.2`) or one with `*` for any \
             run of characters (`1.*`), characters [A-Za-z0-9_.+-*]"
        );
        errors.push(at, ErrorCode::InvalidValue, message);
        None
    };
    match value {
        Value::Array(items) if items.is_empty() => {
            errors.push(path, ErrorCode::InvalidValue, "`from` lists no version pattern");
            Vec::new()
        }
        Value::Array(items) => items
            .iter()
            .enumerate()
            .filter_map(|(i, v)| one(v, &index_path(path, i), errors))
            .collect(),
        other => one(other, path, errors).into_iter().collect(),
    }
}

/// `outputs: {STEP: TEMPLATE}`, each step a main-body task step of this version.
fn outputs(
    value: &Value,
    path: &str,
    steps: &BTreeMap<&str, &StepKind>,
    errors: &mut Errors,
) -> BTreeMap<String, crate::expr::Template> {
    let mut out = BTreeMap::new();
    let Some(mut obj) = Obj::new(value, path, "output mappings by step id", errors) else {
        return out;
    };
    if obj.keys().is_empty() {
        errors.push(path, ErrorCode::InvalidValue, "`outputs` maps no step");
    }
    let vars = Vars::default().with(&[OUTPUT_VAR]);
    for id in obj.keys() {
        let at = obj.at(&id);
        let Some(v) = obj.raw(&id) else { continue };
        match steps.get(id.as_str()) {
            None => {
                let ids: Vec<String> = steps.keys().map(|s| (*s).to_string()).collect();
                let message = format!(
                    "`{id}` is not a step of this version's `steps` (steps: {}); a hint maps \
                     the output of a step of the version it migrates to",
                    short_list(ids.iter())
                );
                errors.push(&at, ErrorCode::UnknownReference, message);
            }
            Some(StepKind::Task { .. }) => {}
            Some(kind) => {
                let message = format!(
                    "step `{id}` is a {} step; only the outputs of task steps can be mapped",
                    kind.keyword()
                );
                errors.push(&at, ErrorCode::InvalidValue, message);
            }
        }
        // The old run's step ids: not this document's, so the references are not checked.
        let mut refs = Vec::new();
        if let Some(t) =
            (Compiler { errors: &mut *errors, refs: &mut refs }).template(v, &at, &vars, false)
        {
            out.insert(id, t);
        }
    }
    obj.finish(errors, &[]);
    out
}
