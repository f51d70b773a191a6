//! Document text → JSON value: JSON or YAML, one model.
//!
//! Text that opens with `{` or `[` is tried as JSON first so JSON mistakes get JSON's
//! precise messages; everything else (and JSON-looking text that is really YAML flow
//! style) is read as YAML through `serde_norway`'s own value type, so that what JSON cannot
//! hold is refused here with a path instead of silently converted: non-string keys, tags,
//! and non-finite numbers. Anchors, aliases and `<<` merge keys are resolved.

use crate::error::{DefinitionError, ErrorCode};
use crate::parse::reader::{field_path, index_path};
use serde_json::{Map, Number, Value};
use serde_norway::Value as Yaml;

/// Reads a document's text into JSON.
pub(crate) fn read(text: &str) -> Result<Value, DefinitionError> {
    let trimmed = text.trim_start();
    let json_error = if trimmed.starts_with('{') || trimmed.starts_with('[') {
        match serde_json::from_str::<Value>(text) {
            Ok(v) => return Ok(v),
            Err(e) => Some(e),
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

    #[test]
    fn json_and_yaml_read_the_same() {
        let j = read(r#"{"name": "x", "steps": [{"id": "a", "sleep": "1s"}]}"#).unwrap();
        let y = read("name: x\nsteps:\n  - id: a\n    sleep: 1s\n").unwrap();
        assert_eq!(j, y);
        // Flow-style YAML that is not JSON still reads.
        assert_eq!(read("{name: x}").unwrap(), json!({"name": "x"}));
    }

    #[test]
    fn yaml_keeps_on_and_yes_as_strings() {
        // YAML 1.1 would make `on` a boolean key; the 1.2 core schema keeps it a string.
        assert_eq!(
            read("on: {failure: []}\nx: yes").unwrap(),
            json!({"on": {"failure": []}, "x": "yes"})
        );
    }

    #[test]
    fn what_json_cannot_hold_is_a_parse_error_with_a_path() {
        let e = read("steps:\n  - 1: x\n").unwrap_err();
        assert_eq!((e.code, e.path.as_str()), (ErrorCode::ParseError, "steps[0]"));
        assert!(e.message.contains("not a string"), "{e}");
        assert_eq!(read("a: !tag x").unwrap_err().path, "a");
        assert_eq!(read("a: .nan").unwrap_err().path, "a");
    }

    #[test]
    fn syntax_errors_carry_a_line() {
        let e = read("name: x\nsteps: [\n  - a\n").unwrap_err();
        assert!(e.message.contains("line"), "{e}");
        let e = read("{\"name\": \"x\",,}").unwrap_err();
        assert!(e.message.contains("line 1"), "{e}");
    }

    #[test]
    fn anchors_and_merge_keys_resolve() {
        let v = read("base: &b {x: 1}\nother:\n  <<: *b\n  y: 2\n").unwrap();
        assert_eq!(v["other"], json!({"x": 1, "y": 2}));
    }
}
