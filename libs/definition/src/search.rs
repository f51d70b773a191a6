//! Search attributes (issue 28 item 1; docs/definitions.md, "Search attributes"): the
//! declared types, the typed values an execution records, and the pure conversion of an
//! evaluated CEL value into the declared type.
//!
//! A definition declares `search_attributes: {name: type}` and sets them from templates at
//! start (`search:`) and when a main-body step completes (a step's `search:`). The engine
//! records each upsert as one `SearchAttributesUpserted` event with [`SearchValue`]s; the
//! store projects them into `execution_search` (`orbit-query` compiles predicates on it).
//!
//! A value that does not fit its declared type is not recorded: the event names it among
//! its errors, with [`coerce`]'s message, and the execution goes on. `null` unsets the
//! attribute. Bounds are constants named in the messages that enforce them.

pub use orbit_query::SearchType;
use serde::{Deserialize, Serialize};
use serde_json::Value;

/// The most search attributes one definition declares.
pub const MAX_SEARCH_ATTRIBUTES: usize = 32;

/// The longest attribute name, bytes.
pub const MAX_SEARCH_NAME_BYTES: usize = 64;

/// The longest keyword or text value (and keyword list element), bytes.
pub const MAX_SEARCH_STRING_BYTES: usize = 2048;

/// The most elements of one `keyword_list` value.
pub const MAX_KEYWORD_LIST_LEN: usize = 100;

/// Names a search attribute may not take: the system attributes of the list query language
/// (`orbit_query::SYSTEM_ATTRIBUTES`) and those it will answer once the store holds them.
#[must_use]
pub fn is_system_attribute(name: &str) -> bool {
    const LATER: [&str; 3] = ["task_queue", "failed_step", "error_code"];
    orbit_query::SYSTEM_ATTRIBUTES.iter().any(|a| a.name == name) || LATER.contains(&name)
}

/// One recorded value of a search attribute, typed.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", content = "value", rename_all = "snake_case")]
pub enum SearchValue {
    /// A `keyword`.
    Keyword(String),
    /// A `text`.
    Text(String),
    /// An `int`.
    Int(i64),
    /// A `double` (finite).
    Double(f64),
    /// A `bool`.
    Bool(bool),
    /// A `datetime`, epoch milliseconds.
    Datetime(i64),
    /// A `keyword_list`.
    KeywordList(Vec<String>),
    /// The attribute is unset (the template gave `null`).
    Unset,
}

/// An evaluated template's value as `ty`: `Ok(SearchValue::Unset)` for `null`.
///
/// # Errors
/// A message saying what was expected and what came, or which bound was crossed.
pub fn coerce(ty: SearchType, value: &Value) -> Result<SearchValue, String> {
    if value.is_null() {
        return Ok(SearchValue::Unset);
    }
    let wrong = || {
        let expected = match ty {
            SearchType::Keyword | SearchType::Text => "a string",
            SearchType::Int => "an integer",
            SearchType::Double => "a number",
            SearchType::Bool => "a boolean",
            SearchType::Datetime => "an RFC 3339 time, a date (YYYY-MM-DD) or epoch milliseconds",
            SearchType::KeywordList => "a list of strings",
        };
        format!("an attribute of type `{}` takes {expected}, got {}", ty.as_str(), kind(value))
    };
    let string = |s: &str| {
        if s.len() > MAX_SEARCH_STRING_BYTES {
            Err(format!(
                "the value is {} bytes; the limit is {MAX_SEARCH_STRING_BYTES} \
                 (MAX_SEARCH_STRING_BYTES)",
                s.len()
            ))
        } else {
            Ok(s.to_string())
        }
    };
    Ok(match (ty, value) {
        (SearchType::Keyword, Value::String(s)) => SearchValue::Keyword(string(s)?),
        (SearchType::Text, Value::String(s)) => SearchValue::Text(string(s)?),
        (SearchType::Int, Value::Number(n)) => SearchValue::Int(n.as_i64().ok_or_else(wrong)?),
        (SearchType::Double, Value::Number(n)) => {
            SearchValue::Double(n.as_f64().filter(|f| f.is_finite()).ok_or_else(wrong)?)
        }
        (SearchType::Bool, Value::Bool(b)) => SearchValue::Bool(*b),
        (SearchType::Datetime, Value::Number(n)) => {
            SearchValue::Datetime(n.as_i64().ok_or_else(wrong)?)
        }
        (SearchType::Datetime, Value::String(s)) => {
            SearchValue::Datetime(orbit_query::datetime_ms(s).ok_or_else(wrong)?)
        }
        (SearchType::KeywordList, Value::Array(items)) => {
            if items.len() > MAX_KEYWORD_LIST_LEN {
                return Err(format!(
                    "the list has {} elements; the limit is {MAX_KEYWORD_LIST_LEN} \
                     (MAX_KEYWORD_LIST_LEN)",
                    items.len()
                ));
            }
            let mut out = Vec::with_capacity(items.len());
            for item in items {
                let Value::String(s) = item else { return Err(wrong()) };
                out.push(string(s)?);
            }
            SearchValue::KeywordList(out)
        }
        _ => return Err(wrong()),
    })
}

fn kind(value: &Value) -> &'static str {
    match value {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(n) if n.is_i64() || n.is_u64() => "an integer",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "a list",
        Value::Object(_) => "an object",
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn values_fit_their_declared_type_or_say_why_not() {
        use SearchType as T;
        use SearchValue as V;
        assert_eq!(coerce(T::Keyword, &json!("acme")), Ok(V::Keyword("acme".into())));
        assert_eq!(coerce(T::Text, &json!("a b")), Ok(V::Text("a b".into())));
        assert_eq!(coerce(T::Int, &json!(-3)), Ok(V::Int(-3)));
        assert_eq!(coerce(T::Double, &json!(2)), Ok(V::Double(2.0)));
        assert_eq!(coerce(T::Double, &json!(12.5)), Ok(V::Double(12.5)));
        assert_eq!(coerce(T::Bool, &json!(true)), Ok(V::Bool(true)));
        assert_eq!(
            coerce(T::Datetime, &json!(1_700_000_000_000_i64)),
            Ok(V::Datetime(1_700_000_000_000))
        );
        assert_eq!(coerce(T::Datetime, &json!("1970-01-02")), Ok(V::Datetime(86_400_000)));
        assert_eq!(
            coerce(T::KeywordList, &json!(["a", "b"])),
            Ok(V::KeywordList(vec!["a".into(), "b".into()]))
        );
        assert_eq!(coerce(T::Int, &Value::Null), Ok(V::Unset));
        let e = coerce(T::Int, &json!("7")).unwrap_err();
        assert_eq!(e, "an attribute of type `int` takes an integer, got a string");
        assert!(coerce(T::Int, &json!(1.5)).is_err());
        assert!(coerce(T::Keyword, &json!(5)).unwrap_err().contains("got an integer"));
        assert!(coerce(T::Datetime, &json!("tuesday")).is_err());
        assert!(coerce(T::KeywordList, &json!(["a", 1])).is_err());
        let long = "x".repeat(MAX_SEARCH_STRING_BYTES + 1);
        assert!(coerce(T::Keyword, &json!(long)).unwrap_err().contains("MAX_SEARCH_STRING_BYTES"));
        let many: Vec<String> = (0..=MAX_KEYWORD_LIST_LEN).map(|i| i.to_string()).collect();
        assert!(coerce(T::KeywordList, &json!(many)).unwrap_err().contains("MAX_KEYWORD_LIST_LEN"));
    }

    #[test]
    fn values_serialize_tagged() {
        let v = SearchValue::Int(5);
        assert_eq!(serde_json::to_value(&v).unwrap(), json!({"type": "int", "value": 5}));
        let u: SearchValue = serde_json::from_value(json!({"type": "unset"})).unwrap();
        assert_eq!(u, SearchValue::Unset);
        assert!(is_system_attribute("workflow") && is_system_attribute("failed_step"));
        assert!(!is_system_attribute("customer"));
    }
}
