//! A path-tracking reader of JSON objects that collects errors instead of stopping.
//!
//! Every field read is marked; [`Obj::finish`] reports the rest as `UNKNOWN_FIELD`, so a
//! typo such as `retyr:` is an error rather than a silently ignored line. Optional getters
//! treat an explicit `null` as absent (YAML writes an empty field as null). Getters return
//! `None` after recording a problem, so callers fall back and go on: one run reports every
//! problem in the document.

use crate::error::{DefinitionError, ErrorCode};
use crate::expr::kind_of;
use serde_json::{Map, Value};
use std::collections::BTreeSet;

/// Errors collected during one parse.
#[derive(Debug, Default)]
pub(crate) struct Errors(pub Vec<DefinitionError>);

impl Errors {
    pub fn push(&mut self, path: &str, code: ErrorCode, message: impl Into<String>) {
        self.0.push(DefinitionError::new(path, code, message));
    }

    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
}

/// Whether `s` is an identifier (`[A-Za-z_][A-Za-z0-9_]*`): the shape of step ids and of
/// path segments that need no quoting.
pub(crate) fn is_identifier(s: &str) -> bool {
    let mut chars = s.chars();
    chars.next().is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
        && chars.all(|c| c.is_ascii_alphanumeric() || c == '_')
}

/// `base.name`, or `base["name"]` when the name is not an identifier.
pub(crate) fn field_path(base: &str, name: &str) -> String {
    match (base.is_empty(), is_identifier(name)) {
        (true, true) => name.to_string(),
        (false, true) => format!("{base}.{name}"),
        (_, false) => format!("{base}[{}]", Value::String(name.to_string())),
    }
}

/// How many names a message lists before "and N more": messages travel in gRPC metadata.
const LISTED: usize = 20;

/// `a, b, c`, or the first [`LISTED`] names and "... and N more".
pub(crate) fn short_list<'n>(names: impl ExactSizeIterator<Item = &'n String>) -> String {
    let total = names.len();
    let shown: Vec<&str> = names.take(LISTED).map(String::as_str).collect();
    if total > LISTED {
        format!("{}, ... and {} more", shown.join(", "), total - LISTED)
    } else {
        shown.join(", ")
    }
}

/// `base[i]`.
pub(crate) fn index_path(base: &str, i: usize) -> String {
    format!("{base}[{i}]")
}

/// "an object", "a string", ... for messages.
pub(crate) fn a_kind(v: &Value) -> &'static str {
    match kind_of(v) {
        "array" => "an array",
        "object" => "an object",
        "null" => "null",
        "boolean" => "a boolean",
        "number" => "a number",
        _ => "a string",
    }
}

/// Records `INVALID_TYPE` for `value` at `path`.
pub(crate) fn wrong_type(errors: &mut Errors, path: &str, expected: &str, value: &Value) {
    errors.push(
        path,
        ErrorCode::InvalidType,
        format!("expected {expected}, got {}", a_kind(value)),
    );
}

/// One JSON object being read.
pub(crate) struct Obj<'a> {
    map: &'a Map<String, Value>,
    path: String,
    taken: BTreeSet<&'a str>,
}

impl<'a> Obj<'a> {
    /// Starts reading `value`, which must be an object (else `INVALID_TYPE`, naming `what`).
    pub fn new(value: &'a Value, path: &str, what: &str, errors: &mut Errors) -> Option<Obj<'a>> {
        match value {
            Value::Object(map) => Some(Obj { map, path: path.to_string(), taken: BTreeSet::new() }),
            other => {
                wrong_type(errors, path, &format!("{what} (a mapping)"), other);
                None
            }
        }
    }

    /// The object's own path.
    pub fn path(&self) -> &str {
        &self.path
    }

    /// The path of one of its fields.
    pub fn at(&self, field: &str) -> String {
        field_path(&self.path, field)
    }

    /// The field names, in document order.
    pub fn keys(&self) -> Vec<String> {
        self.map.keys().cloned().collect()
    }

    /// Whether the field is written (null included).
    pub fn has(&self, field: &str) -> bool {
        self.map.contains_key(field)
    }

    /// The field's value if written and not null, without marking it read.
    pub fn peek(&self, field: &str) -> Option<&'a Value> {
        self.map.get(field).filter(|v| !v.is_null())
    }

    /// The field's value, null included, marking it read.
    pub fn raw(&mut self, field: &str) -> Option<&'a Value> {
        let (key, value) = self.map.get_key_value(field)?;
        self.taken.insert(key.as_str());
        Some(value)
    }

    /// The field's value, marking it read; null reads as absent.
    pub fn get(&mut self, field: &str) -> Option<&'a Value> {
        self.raw(field).filter(|v| !v.is_null())
    }

    /// A field that must be present (else `MISSING_FIELD`).
    pub fn required(&mut self, field: &str, errors: &mut Errors) -> Option<&'a Value> {
        let value = self.raw(field);
        if value.is_none() {
            errors.push(&self.path, ErrorCode::MissingField, format!("missing field `{field}`"));
        }
        value
    }

    /// An optional string field.
    pub fn string(&mut self, field: &str, errors: &mut Errors) -> Option<&'a str> {
        let value = self.get(field)?;
        let s = value.as_str();
        if s.is_none() {
            wrong_type(errors, &self.at(field), "a string", value);
        }
        s
    }

    /// A required string field.
    pub fn required_string(&mut self, field: &str, errors: &mut Errors) -> Option<&'a str> {
        let value = self.required(field, errors)?;
        let s = value.as_str();
        if s.is_none() {
            wrong_type(errors, &self.at(field), "a string", value);
        }
        s
    }

    /// An optional integer field that must be at least `min` (`INVALID_VALUE` below it).
    pub fn integer(&mut self, field: &str, min: u64, errors: &mut Errors) -> Option<u64> {
        let value = self.get(field)?;
        let path = self.at(field);
        let Value::Number(n) = value else {
            wrong_type(errors, &path, "an integer", value);
            return None;
        };
        match n.as_u64() {
            Some(u) if u >= min => Some(u),
            _ => {
                let what = if n.as_f64().is_some_and(|f| f.fract() != 0.0) {
                    "a whole number"
                } else {
                    "too small"
                };
                errors.push(
                    &path,
                    ErrorCode::InvalidValue,
                    format!("{n} is {what}; expected an integer >= {min}"),
                );
                None
            }
        }
    }

    /// An optional object field (null reads as absent).
    pub fn object(&mut self, field: &str, what: &str, errors: &mut Errors) -> Option<Obj<'a>> {
        let path = self.at(field);
        self.get(field).and_then(|v| Obj::new(v, &path, what, errors))
    }

    /// Reports every field not read as `UNKNOWN_FIELD`, listing the expected ones.
    pub fn finish(self, errors: &mut Errors, expected: &[&str]) {
        self.finish_with(errors, expected, |_| None);
    }

    /// As [`Obj::finish`], with `hint` giving a better message for fields that exist but
    /// are misplaced (a field valid on other step kinds, say).
    pub fn finish_with(
        self,
        errors: &mut Errors,
        expected: &[&str],
        hint: impl Fn(&str) -> Option<String>,
    ) {
        for key in self.map.keys().filter(|k| !self.taken.contains(k.as_str())) {
            let message = hint(key).unwrap_or_else(|| {
                let mut m = format!("unknown field `{key}`");
                if let Some(near) = closest(key, expected) {
                    m.push_str(&format!("; did you mean `{near}`?"));
                } else if !expected.is_empty() {
                    m.push_str(&format!("; expected one of {}", expected.join(", ")));
                }
                m
            });
            errors.push(&field_path(&self.path, key), ErrorCode::UnknownField, message);
        }
    }
}

/// The expected name closest to a misspelt one, if it is close enough to be the intent.
fn closest<'e>(name: &str, expected: &[&'e str]) -> Option<&'e str> {
    expected
        .iter()
        .map(|e| (edit_distance(name, e), *e))
        .filter(|(d, e)| *d <= 2.max(e.len() / 4) && *d < e.len())
        .min()
        .map(|(_, e)| e)
}

fn edit_distance(a: &str, b: &str) -> usize {
    let b: Vec<char> = b.chars().collect();
    let mut row: Vec<usize> = (0..=b.len()).collect();
    for (i, ca) in a.chars().enumerate() {
        let mut prev = row[0];
        row[0] = i + 1;
        for (j, cb) in b.iter().enumerate() {
            let next = (prev + usize::from(ca != *cb)).min(row[j] + 1).min(row[j + 1] + 1);
            prev = row[j + 1];
            row[j + 1] = next;
        }
    }
    row[b.len()]
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn codes(errors: &Errors) -> Vec<(ErrorCode, &str)> {
        errors.0.iter().map(|e| (e.code, e.path.as_str())).collect()
    }

    #[test]
    fn paths_quote_keys_that_are_not_identifiers() {
        assert_eq!(field_path("", "steps"), "steps");
        assert_eq!(field_path("steps[2]", "retry"), "steps[2].retry");
        assert_eq!(field_path("tasks", "payments.charge"), r#"tasks["payments.charge"]"#);
        assert_eq!(field_path("", "$schema"), r#"["$schema"]"#);
        assert_eq!(index_path("on.failure", 0), "on.failure[0]");
    }

    #[test]
    fn reports_missing_unknown_and_mistyped_fields() {
        let doc = json!({"name": 3, "retyr": {}, "max": 0, "frac": 1.5, "desc": null});
        let mut errors = Errors::default();
        let mut obj = Obj::new(&doc, "steps[1]", "a step", &mut errors).unwrap();
        assert_eq!(obj.string("name", &mut errors), None);
        assert_eq!(obj.required("id", &mut errors), None);
        assert_eq!(obj.integer("max", 1, &mut errors), None);
        assert_eq!(obj.integer("frac", 1, &mut errors), None);
        assert_eq!(obj.string("desc", &mut errors), None);
        obj.finish(&mut errors, &["retry", "id"]);
        assert_eq!(
            codes(&errors),
            [
                (ErrorCode::InvalidType, "steps[1].name"),
                (ErrorCode::MissingField, "steps[1]"),
                (ErrorCode::InvalidValue, "steps[1].max"),
                (ErrorCode::InvalidValue, "steps[1].frac"),
                (ErrorCode::UnknownField, "steps[1].retyr"),
            ]
        );
        assert!(errors.0[4].message.contains("did you mean `retry`"), "{}", errors.0[4]);
        assert!(errors.0[3].message.contains("whole number"), "{}", errors.0[3]);
    }

    #[test]
    fn a_non_object_is_an_invalid_type() {
        let mut errors = Errors::default();
        assert!(Obj::new(&json!([1]), "limits", "limits", &mut errors).is_none());
        assert_eq!(codes(&errors), [(ErrorCode::InvalidType, "limits")]);
        assert!(errors.0[0].message.contains("got an array"));
    }

    #[test]
    fn identifiers() {
        assert!(is_identifier("charge_2") && is_identifier("_x"));
        assert!(!is_identifier("2x") && !is_identifier("a-b") && !is_identifier(""));
    }
}
