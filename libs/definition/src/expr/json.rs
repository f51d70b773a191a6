//! JSON ↔ CEL values (the number mapping is in the parent module's doc).

use super::ExprError;
use cel::objects::{Key, Map as CelMap};
use cel::Value as Cel;
use serde_json::{Number, Value};
use std::collections::HashMap;
use std::sync::Arc;

/// The largest integer a JSON double carries exactly.
const MAX_SAFE_INT: f64 = 9_007_199_254_740_992.0;

/// JSON → CEL: numbers become doubles (see the module doc).
///
/// Recursive over the value: [`Expr::eval`] checks it is at most
/// [`limits::MAX_VALUE_DEPTH`] deep first; other callers must bound it too.
#[must_use]
pub fn to_cel(v: &Value) -> Cel {
    match v {
        Value::Null => Cel::Null,
        Value::Bool(b) => Cel::Bool(*b),
        #[allow(clippy::cast_precision_loss)]
        Value::Number(n) => {
            Cel::Float(n.as_f64().unwrap_or_else(|| n.as_i64().unwrap_or(0) as f64))
        }
        Value::String(s) => Cel::String(Arc::new(s.clone())),
        Value::Array(items) => Cel::List(Arc::new(items.iter().map(to_cel).collect())),
        Value::Object(fields) => {
            let map: HashMap<Key, Cel> =
                fields.iter().map(|(k, v)| (Key::String(Arc::new(k.clone())), to_cel(v))).collect();
            Cel::Map(CelMap { map: Arc::new(map) })
        }
    }
}

/// CEL → JSON: whole doubles within ±2^53 become integers (see the module doc).
///
/// Recursive over the value: one an evaluation produced is at most as deep as its inputs
/// plus its tree (both bounded, see [`crate::limits`]).
///
/// # Errors
/// Values without a JSON form (types, functions, non-finite doubles).
pub fn from_cel(v: &Cel) -> Result<Value, ExprError> {
    Ok(match v {
        Cel::Null => Value::Null,
        Cel::Bool(b) => Value::Bool(*b),
        Cel::Int(i) => Value::from(*i),
        Cel::UInt(u) => Value::from(*u),
        Cel::Float(f) => double_to_json(*f)?,
        Cel::String(s) => Value::String(s.to_string()),
        Cel::List(items) => Value::Array(items.iter().map(from_cel).collect::<Result<_, _>>()?),
        Cel::Map(map) => {
            let mut entries: Vec<(String, Value)> = map
                .map
                .iter()
                .map(|(k, v)| Ok((key_string(k), from_cel(v)?)))
                .collect::<Result<_, ExprError>>()?;
            entries.sort_by(|a, b| a.0.cmp(&b.0));
            Value::Object(entries.into_iter().collect())
        }
        other => other.json().map_err(|e| ExprError::new(e.to_string()))?,
    })
}

fn key_string(k: &Key) -> String {
    match k {
        Key::String(s) => s.to_string(),
        Key::Int(i) => i.to_string(),
        Key::Uint(u) => u.to_string(),
        Key::Bool(b) => b.to_string(),
    }
}

#[allow(clippy::cast_possible_truncation, clippy::float_cmp)]
fn double_to_json(f: f64) -> Result<Value, ExprError> {
    if !f.is_finite() {
        return Err(ExprError::new(format!("{f} has no JSON form")));
    }
    if f.fract() == 0.0 && f.abs() <= MAX_SAFE_INT {
        return Ok(Value::from(f as i64));
    }
    Number::from_f64(f)
        .map(Value::Number)
        .ok_or_else(|| ExprError::new(format!("{f} has no JSON form")))
}

/// A short name of a JSON value's type, for messages.
#[must_use]
pub fn kind_of(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "boolean",
        Value::Number(_) => "number",
        Value::String(_) => "string",
        Value::Array(_) => "array",
        Value::Object(_) => "object",
    }
}
