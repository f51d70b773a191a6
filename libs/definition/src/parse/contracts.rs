//! Contracts where a document declares them: the execution `input`, `tasks`, `signals`.

use crate::contract::Contract;
use crate::error::ErrorCode;
use crate::model::TaskContract;
use crate::parse::names::{check_key, check_reserved, is_name, is_version};
use crate::parse::reader::{field_path, wrong_type, Errors, Obj};
use serde_json::Value;
use std::collections::BTreeMap;

/// Compiles a schema; each violation becomes `INVALID_SCHEMA` at `path` plus its place
/// inside the schema (`input.properties.amount.type`).
pub(crate) fn contract(schema: &Value, path: &str, errors: &mut Errors) -> Option<Contract> {
    match Contract::compile(schema) {
        Ok(c) => Some(c),
        Err(violations) => {
            for v in violations {
                // The validator reports JSON pointers; the subset check dotted paths.
                let inner = if v.path.starts_with('/') { v.path.replace('/', ".") } else { v.path };
                errors.push(&format!("{path}{inner}"), ErrorCode::InvalidSchema, v.message);
            }
            None
        }
    }
}

/// A version: a string, or a YAML/JSON number written without quotes (`version: 1`),
/// stringified. Records `INVALID_VALUE` / `INVALID_TYPE` and returns `None` when bad.
pub(crate) fn version(value: &Value, path: &str, errors: &mut Errors) -> Option<String> {
    let text = match value {
        Value::String(s) => s.clone(),
        Value::Number(n) => n.to_string(),
        other => {
            wrong_type(errors, path, "a version string", other);
            return None;
        }
    };
    if is_version(&text) {
        Some(text)
    } else {
        errors.push(
            path,
            ErrorCode::InvalidValue,
            format!("version `{text}` must match [A-Za-z0-9_.+-]+"),
        );
        None
    }
}

/// `tasks: {NAME: {version?, input?, output?, language?}}`; a null entry takes the defaults.
pub(crate) fn tasks(
    value: &Value,
    path: &str,
    errors: &mut Errors,
) -> BTreeMap<String, TaskContract> {
    let mut out = BTreeMap::new();
    let Some(mut obj) = Obj::new(value, path, "task contracts by name", errors) else {
        return out;
    };
    for name in obj.keys() {
        let at = obj.at(&name);
        check_key("task", &name, &at, errors);
        check_reserved("task", &name, true, &at, errors);
        let mut task =
            TaskContract { version: "1".into(), input: None, output: None, language: None };
        let entry = obj.raw(&name).unwrap_or(&Value::Null);
        if !entry.is_null() {
            if let Some(mut t) = Obj::new(entry, &at, "a task contract", errors) {
                if let Some(v) = t.get("version") {
                    task.version = version(v, &t.at("version"), errors).unwrap_or_default();
                }
                task.input = t.get("input").and_then(|s| contract(s, &t.at("input"), errors));
                task.output = t.get("output").and_then(|s| contract(s, &t.at("output"), errors));
                task.language = t.string("language", errors).map(str::to_string);
                if let Some(lang) = &task.language {
                    if !is_name(lang) {
                        let message = format!("language `{lang}` must match [A-Za-z0-9_.-]+");
                        errors.push(&t.at("language"), ErrorCode::InvalidValue, message);
                    }
                }
                t.finish(errors, &["version", "input", "output", "language"]);
            }
        }
        out.insert(name, task);
    }
    obj.finish(errors, &[]);
    out
}

/// `signals: {NAME: schema or null}`.
pub(crate) fn signals(
    value: &Value,
    path: &str,
    errors: &mut Errors,
) -> BTreeMap<String, Option<Contract>> {
    let mut out = BTreeMap::new();
    let Value::Object(map) = value else {
        wrong_type(errors, path, "signal payload contracts by name (a mapping)", value);
        return out;
    };
    for (name, schema) in map {
        let at = field_path(path, name);
        check_key("signal", name, &at, errors);
        let compiled = if schema.is_null() { None } else { contract(schema, &at, errors) };
        out.insert(name.clone(), compiled);
    }
    out
}
