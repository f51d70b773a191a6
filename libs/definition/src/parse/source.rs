//! Document text → JSON value: JSON or YAML, one model.
//!
//! Text that opens with `{` or `[` is tried as JSON first so JSON mistakes get JSON's
//! precise messages; everything else (and JSON-looking text that is really YAML flow
//! style) is read as YAML through `serde_norway`'s own value type, so that what JSON cannot
//! hold is refused here with a path instead of silently converted: non-string keys, tags,
//! and non-finite numbers. Anchors, aliases and `<<` merge keys are resolved.
//!
//! A declared [`Format`] skips the detection: JSON is then read strictly as JSON (no YAML
//! fallback), YAML always as YAML. JSON objects with a duplicate key are refused with the
//! key's path, as YAML mappings are (serde_json alone would keep the last one silently).

use crate::error::{DefinitionError, ErrorCode};
use crate::parse::reader::{field_path, index_path};
use serde::de::{DeserializeSeed, Deserializer, MapAccess, SeqAccess, Visitor};
use serde_json::{Map, Number, Value};
use serde_norway::Value as Yaml;
use std::cell::RefCell;
use std::fmt;

/// The syntax of a document.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Format {
    /// Text opening with `{` or `[` is tried as JSON first, everything else is YAML.
    #[default]
    Detect,
    /// YAML (JSON text is valid YAML too).
    Yaml,
    /// Strict JSON.
    Json,
}

/// Reads a document's text into JSON.
pub(crate) fn read(text: &str, format: Format) -> Result<Value, DefinitionError> {
    let trimmed = text.trim_start();
    let json_first = match format {
        Format::Json => return read_json(text).map_err(|e| e.into_error()),
        Format::Yaml => false,
        Format::Detect => trimmed.starts_with('{') || trimmed.starts_with('['),
    };
    let json_error = if json_first {
        match read_json(text) {
            Ok(v) => return Ok(v),
            // A duplicate key is not a reason to try YAML, which refuses it too.
            Err(e @ JsonError::Duplicate(..)) => return Err(e.into_error()),
            Err(JsonError::Syntax(e)) => Some(e),
        }
    } else {
        None
    };
    let mut yaml: Yaml = match serde_norway::from_str(text) {
        Ok(y) => y,
        // For text that looked like JSON, JSON's message is the useful one.
        Err(e) => {
            return Err(parse_error(json_error.map_or_else(|| yaml_message(&e), |j| j.to_string())))
        }
    };
    yaml.apply_merge().map_err(|e| parse_error(format!("invalid `<<` merge: {e}")))?;
    to_json(&yaml, "")
}

enum JsonError {
    Syntax(serde_json::Error),
    Duplicate(String, String),
}

impl JsonError {
    fn into_error(self) -> DefinitionError {
        match self {
            JsonError::Syntax(e) => parse_error(e.to_string()),
            JsonError::Duplicate(path, message) => {
                DefinitionError::new(path, ErrorCode::ParseError, message)
            }
        }
    }
}

/// Strict JSON for any reader of JSON text (the console's gateway reads request bodies with
/// it): a duplicate key is refused with its path (`a.b: duplicate key ...`), as the
/// definition parser refuses it, instead of the last one silently winning.
///
/// # Errors
/// The text is not JSON, or an object repeats a key.
pub fn strict_json(text: &str) -> Result<Value, String> {
    read_json(text).map_err(|e| match e {
        JsonError::Syntax(e) => e.to_string(),
        JsonError::Duplicate(path, message) if path.is_empty() => message,
        JsonError::Duplicate(path, message) => format!("{path}: {message}"),
    })
}

/// Strict JSON, refusing duplicate keys. serde_json bounds the nesting (128 levels).
fn read_json(text: &str) -> Result<Value, JsonError> {
    let duplicate = RefCell::new(None);
    let mut de = serde_json::Deserializer::from_str(text);
    let value = Node { path: String::new(), duplicate: &duplicate }
        .deserialize(&mut de)
        .and_then(|v| de.end().map(|()| v));
    match (value, duplicate.into_inner()) {
        (_, Some((path, key))) => {
            Err(JsonError::Duplicate(path, format!("duplicate key `{key}` in a JSON object")))
        }
        (Ok(v), None) => Ok(v),
        (Err(e), None) => Err(JsonError::Syntax(e)),
    }
}

/// A JSON value at `path`; records the first duplicate key found.
struct Node<'d> {
    path: String,
    duplicate: &'d RefCell<Option<(String, String)>>,
}

impl<'de> DeserializeSeed<'de> for Node<'_> {
    type Value = Value;

    fn deserialize<D: Deserializer<'de>>(self, deserializer: D) -> Result<Value, D::Error> {
        deserializer.deserialize_any(self)
    }
}

impl<'de> Visitor<'de> for Node<'_> {
    type Value = Value;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a JSON value")
    }
    fn visit_bool<E>(self, v: bool) -> Result<Value, E> {
        Ok(Value::Bool(v))
    }
    fn visit_i64<E>(self, v: i64) -> Result<Value, E> {
        Ok(Value::from(v))
    }
    fn visit_u64<E>(self, v: u64) -> Result<Value, E> {
        Ok(Value::from(v))
    }
    fn visit_f64<E: serde::de::Error>(self, v: f64) -> Result<Value, E> {
        Number::from_f64(v).map(Value::Number).ok_or_else(|| E::custom("a non-finite number"))
    }
    fn visit_str<E>(self, v: &str) -> Result<Value, E> {
        Ok(Value::String(v.to_string()))
    }
    fn visit_string<E>(self, v: String) -> Result<Value, E> {
        Ok(Value::String(v))
    }
    fn visit_unit<E>(self) -> Result<Value, E> {
        Ok(Value::Null)
    }
    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Value, A::Error> {
        let mut items = Vec::new();
        loop {
            let path = index_path(&self.path, items.len());
            match seq.next_element_seed(Node { path, duplicate: self.duplicate })? {
                Some(v) => items.push(v),
                None => return Ok(Value::Array(items)),
            }
        }
    }
    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Value, A::Error> {
        let mut out = Map::new();
        while let Some(key) = map.next_key::<String>()? {
            let path = field_path(&self.path, &key);
            if out.contains_key(&key) {
                *self.duplicate.borrow_mut() = Some((path, key));
                return Err(serde::de::Error::custom("duplicate key"));
            }
            let value = map.next_value_seed(Node { path, duplicate: self.duplicate })?;
            out.insert(key, value);
        }
        Ok(Value::Object(out))
    }
}

fn parse_error(message: String) -> DefinitionError {
    DefinitionError::new("", ErrorCode::ParseError, message)
}

/// serde_norway's message, with the position spelled out when it has one.
fn yaml_message(e: &serde_norway::Error) -> String {
    let text = e.to_string();
    match e.location() {
        Some(loc) if !text.contains("line ") => {
            format!("{text} at line {} column {}", loc.line(), loc.column())
        }
        _ => text,
    }
}

// Recursive over the YAML tree, whose nesting serde_norway bounds (128 levels) while
// reading it.
fn to_json(yaml: &Yaml, path: &str) -> Result<Value, DefinitionError> {
    let err = |message: String| DefinitionError::new(path, ErrorCode::ParseError, message);
    Ok(match yaml {
        Yaml::Null => Value::Null,
        Yaml::Bool(b) => Value::Bool(*b),
        Yaml::Number(n) => {
            if let Some(u) = n.as_u64() {
                Value::from(u)
            } else if let Some(i) = n.as_i64() {
                Value::from(i)
            } else {
                let f = n.as_f64().unwrap_or(f64::NAN);
                Value::Number(
                    Number::from_f64(f).ok_or_else(|| err(format!("{n} has no JSON form")))?,
                )
            }
        }
        Yaml::String(s) => Value::String(s.clone()),
        Yaml::Sequence(items) => Value::Array(
            items
                .iter()
                .enumerate()
                .map(|(i, v)| to_json(v, &index_path(path, i)))
                .collect::<Result<_, _>>()?,
        ),
        Yaml::Mapping(map) => {
            let mut out = Map::new();
            for (k, v) in map {
                let Yaml::String(key) = k else {
                    return Err(err(format!(
                        "mapping key {} is not a string; quote it",
                        serde_norway::to_string(k)
                            .map_or_else(|_| "?".into(), |s| s.trim().to_string())
                    )));
                };
                out.insert(key.clone(), to_json(v, &field_path(path, key))?);
            }
            Value::Object(out)
        }
        Yaml::Tagged(t) => {
            return Err(err(format!("YAML tags such as `{}` are not supported", t.tag)))
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn read_d(text: &str) -> Result<Value, DefinitionError> {
        read(text, Format::Detect)
    }

    #[test]
    fn json_duplicate_keys_are_refused_with_their_path() {
        let e = read_d(r#"{"a": {"b": [1, {"c": 1, "c": 2}]}}"#).unwrap_err();
        assert_eq!((e.code, e.path.as_str()), (ErrorCode::ParseError, "a.b[1].c"), "{e}");
        assert!(e.message.contains("duplicate key `c`"), "{e}");
        let e = read(r#"{"x": 1, "x": 1}"#, Format::Json).unwrap_err();
        assert_eq!(e.path, "x");
        assert_eq!(
            read_d(r#"{"a": [1.5, null, true, "s"]}"#).unwrap(),
            json!({"a": [1.5, null, true, "s"]})
        );
    }

    #[test]
    fn a_declared_format_is_honoured() {
        let yaml = "name: x\nsteps: []\n";
        assert_eq!(read(yaml, Format::Json).unwrap_err().code, ErrorCode::ParseError);
        assert_eq!(read(yaml, Format::Yaml).unwrap(), json!({"name": "x", "steps": []}));
        // Flow-style YAML that is not JSON: fine as YAML or detected, refused as JSON.
        assert!(read("{name: x}", Format::Json).is_err());
        assert!(read("{name: x}", Format::Yaml).is_ok());
        assert_eq!(read(r#"{"a": 1}"#, Format::Json).unwrap(), json!({"a": 1}));
    }

    #[test]
    fn json_and_yaml_read_the_same() {
        let j = read_d(r#"{"name": "x", "steps": [{"id": "a", "sleep": "1s"}]}"#).unwrap();
        let y = read_d("name: x\nsteps:\n  - id: a\n    sleep: 1s\n").unwrap();
        assert_eq!(j, y);
        // Flow-style YAML that is not JSON still reads.
        assert_eq!(read_d("{name: x}").unwrap(), json!({"name": "x"}));
    }

    #[test]
    fn yaml_keeps_on_and_yes_as_strings() {
        // YAML 1.1 would make `on` a boolean key; the 1.2 core schema keeps it a string.
        assert_eq!(
            read_d("on: {failure: []}\nx: yes").unwrap(),
            json!({"on": {"failure": []}, "x": "yes"})
        );
    }

    #[test]
    fn what_json_cannot_hold_is_a_parse_error_with_a_path() {
        let e = read_d("steps:\n  - 1: x\n").unwrap_err();
        assert_eq!((e.code, e.path.as_str()), (ErrorCode::ParseError, "steps[0]"));
        assert!(e.message.contains("not a string"), "{e}");
        assert_eq!(read_d("a: !tag x").unwrap_err().path, "a");
        assert_eq!(read_d("a: .nan").unwrap_err().path, "a");
    }

    #[test]
    fn syntax_errors_carry_a_line() {
        let e = read_d("name: x\nsteps: [\n  - a\n").unwrap_err();
        assert!(e.message.contains("line"), "{e}");
        let e = read_d("{\"name\": \"x\",,}").unwrap_err();
        assert!(e.message.contains("line 1"), "{e}");
    }

    #[test]
    fn anchors_and_merge_keys_resolve() {
        let v = read_d("base: &b {x: 1}\nother:\n  <<: *b\n  y: 2\n").unwrap();
        assert_eq!(v["other"], json!({"x": 1, "y": 2}));
    }
}
