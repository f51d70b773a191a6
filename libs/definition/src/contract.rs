//! Contracts: a JSON Schema subset checked by the `jsonschema` crate, with defaults applied.
//!
//! Allowed keywords: `type` (a name or a list, `"null"` for nullable), `properties`,
//! `required`, `items`, `enum`, `const`, `default`, `minimum`, `maximum`, `minLength`,
//! `maxLength`, `minItems`, `maxItems`, `additionalProperties`, `pattern`, `format`,
//! `title`, `description`. Anything else is rejected at registration, so a typo such as
//! `requird` cannot silently accept everything.

use serde_json::Value;
use std::fmt;
use std::sync::Arc;

const TYPES: &[&str] = &["null", "boolean", "object", "array", "number", "integer", "string"];

/// A compiled contract.
#[derive(Clone)]
pub struct Contract {
    schema: Value,
    validator: Arc<jsonschema::Validator>,
}

/// One problem found in a schema or in a value checked against one.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Violation {
    /// Where: a path inside the schema (`.properties.amount.type`) or inside the value
    /// (`/items/0/sku`, JSON pointer as the validator reports it).
    pub path: String,
    /// What is wrong.
    pub message: String,
}

impl fmt::Display for Violation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.path.is_empty() {
            write!(f, "{}", self.message)
        } else {
            write!(f, "{}: {}", self.path, self.message)
        }
    }
}

impl Contract {
    /// Checks the schema against the subset and compiles it.
    ///
    /// # Errors
    /// Every unsupported keyword or malformed value, with its path inside the schema.
    pub fn compile(schema: &Value) -> Result<Contract, Vec<Violation>> {
        let mut errors = Vec::new();
        check_schema(schema, "", &mut errors);
        if !errors.is_empty() {
            return Err(errors);
        }
        let validator = jsonschema::validator_for(schema).map_err(|e| {
            vec![Violation { path: e.schema_path().to_string(), message: e.to_string() }]
        })?;
        Ok(Contract { schema: schema.clone(), validator: Arc::new(validator) })
    }

    /// The schema as written.
    #[must_use]
    pub fn schema(&self) -> &Value {
        &self.schema
    }

    /// Applies defaults, then validates.
    ///
    /// # Errors
    /// Every violation, with the JSON pointer of the offending value.
    pub fn apply(&self, mut value: Value) -> Result<Value, Vec<Violation>> {
        apply_defaults(&self.schema, &mut value);
        let errors: Vec<Violation> = self
            .validator
            .iter_errors(&value)
            .map(|e| Violation { path: e.instance_path().to_string(), message: e.to_string() })
            .collect();
        if errors.is_empty() {
            Ok(value)
        } else {
            Err(errors)
        }
    }
}

impl fmt::Debug for Contract {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Contract({})", self.schema)
    }
}

impl PartialEq for Contract {
    fn eq(&self, other: &Self) -> bool {
        self.schema == other.schema
    }
}

/// Fills `default`s of missing object properties, recursing into objects and arrays.
// Recursive over the schema (part of a document, whose depth `parse` bounds), not over
// the value beyond it.
fn apply_defaults(schema: &Value, value: &mut Value) {
    if value.is_null() {
        if let Some(d) = schema.get("default") {
            *value = d.clone();
        }
    }
    match value {
        Value::Object(obj) => {
            if let Some(Value::Object(props)) = schema.get("properties") {
                for (name, prop) in props {
                    if !obj.contains_key(name) {
                        if let Some(d) = prop.get("default") {
                            obj.insert(name.clone(), d.clone());
                        }
                    }
                    if let Some(child) = obj.get_mut(name) {
                        apply_defaults(prop, child);
                    }
                }
            }
        }
        Value::Array(items) => {
            if let Some(item_schema) = schema.get("items") {
                items.iter_mut().for_each(|i| apply_defaults(item_schema, i));
            }
        }
        _ => {}
    }
}

// Recursive over the schema, a part of a document whose depth `parse` bounds.
fn check_schema(schema: &Value, path: &str, errors: &mut Vec<Violation>) {
    let mut err = |p: String, m: &str| errors.push(Violation { path: p, message: m.to_string() });
    let Value::Object(map) = schema else {
        if !schema.is_boolean() {
            err(path.to_string(), "a schema must be an object");
        }
        return;
    };
    let mut nested: Vec<(&Value, String)> = Vec::new();
    for (key, v) in map {
        let at = format!("{path}.{key}");
        let problem = match key.as_str() {
            "type" => check_type(v),
            "properties" => match v {
                Value::Object(props) => {
                    nested.extend(props.iter().map(|(name, sub)| (sub, format!("{at}.{name}"))));
                    None
                }
                _ => Some("must be an object of schemas".to_string()),
            },
            "items" | "additionalProperties" => {
                nested.push((v, at.clone()));
                None
            }
            "required" => (!v.as_array().is_some_and(|a| a.iter().all(Value::is_string)))
                .then(|| "must be a list of property names".to_string()),
            "enum" => v
                .as_array()
                .is_none_or(|a| a.is_empty())
                .then(|| "must be a non-empty list".to_string()),
            "minimum" | "maximum" => (!v.is_number()).then(|| "must be a number".to_string()),
            "minLength" | "maxLength" | "minItems" | "maxItems" => {
                v.as_u64().is_none().then(|| "must be a non-negative integer".to_string())
            }
            "pattern" | "format" | "title" | "description" => {
                (!v.is_string()).then(|| "must be a string".to_string())
            }
            "const" | "default" => None,
            _ => Some(format!("unsupported schema keyword `{key}`")),
        };
        if let Some(message) = problem {
            err(at, &message);
        }
    }
    if let (Some(Value::Array(req)), Some(Value::Object(props))) =
        (map.get("required"), map.get("properties"))
    {
        if map.get("additionalProperties") == Some(&Value::Bool(false)) {
            for name in req.iter().filter_map(Value::as_str).filter(|n| !props.contains_key(*n)) {
                err(
                    format!("{path}.required"),
                    &format!("`{name}` is required but additionalProperties is false"),
                );
            }
        }
    }
    for (sub, at) in nested {
        check_schema(sub, &at, errors);
    }
}

fn check_type(v: &Value) -> Option<String> {
    let names: Vec<&Value> = match v {
        Value::Array(list) if !list.is_empty() => list.iter().collect(),
        Value::String(_) => vec![v],
        _ => return Some("must be a type name or a non-empty list of them".into()),
    };
    names
        .into_iter()
        .find(|n| !n.as_str().is_some_and(|t| TYPES.contains(&t)))
        .map(|n| format!("unknown type {n}; expected one of {}", TYPES.join(", ")))
}
