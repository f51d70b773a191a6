//! Edge validation: request fields are checked and converted to domain values here, once,
//! before a handler touches the store or the owner.

use crate::error::{bad_payload, err, invalid, ApiResult};
use orbit_server_kit::payload::{check_limits, proto_to_json};
use orbit_server_kit::validate as rules;
use orbit_server_kit::ErrorCode;
use serde_json::Value;

/// A required, bounded id without control characters (the shared rule, also applied by the
/// owner's internal API).
pub(crate) fn id<'a>(field: &str, value: &'a str) -> ApiResult<&'a str> {
    rules::id(field, value).map_err(|e| e.to_status())
}

/// A caller-chosen execution id for a start: an [`id`] without `/` (reserved for children).
pub(crate) fn new_execution_id(value: &str) -> ApiResult<&str> {
    rules::new_execution_id("execution_id", value).map_err(|e| e.to_status())
}

/// A required name (workflow, signal, query).
pub(crate) fn name<'a>(field: &str, value: &'a str) -> ApiResult<&'a str> {
    id(field, value)
}

/// An optional id: empty means `None`.
pub(crate) fn optional<'a>(field: &str, value: &'a str) -> ApiResult<Option<&'a str>> {
    if value.is_empty() {
        Ok(None)
    } else {
        id(field, value).map(Some)
    }
}

/// A wire payload as JSON (unset is `null`), within the payload limits.
pub(crate) fn payload(
    field: &str,
    value: Option<prost_types::Value>,
    max_bytes: u64,
) -> ApiResult<Value> {
    let json = value.map(proto_to_json).transpose().map_err(|e| bad_payload(field, &e))?;
    let json = json.unwrap_or(Value::Null);
    check_size(field, &json, max_bytes)?;
    Ok(json)
}

/// `PAYLOAD_TOO_LARGE` over `max_bytes`, `PAYLOAD_TOO_DEEP` nested deeper than the depth
/// limit (`orbit_payload`), with the offending path as a field violation.
pub(crate) fn check_size(field: &str, value: &Value, max_bytes: u64) -> ApiResult<()> {
    check_limits(field, value, max_bytes).map_err(|e| e.to_status())
}

/// `n` random bytes in hex: generated execution ids (16 bytes) and session ids.
pub(crate) fn random_hex(n: usize) -> ApiResult<String> {
    let mut bytes = vec![0u8; n];
    getrandom::fill(&mut bytes)
        .map_err(|e| err(ErrorCode::Unavailable, format!("no randomness for an id: {e}")))?;
    Ok(hex::encode(bytes))
}

/// A page size: 0 → `default`, capped at `max`.
pub(crate) fn page_size(requested: u32, default: u32, max: u32) -> usize {
    let n = if requested == 0 { default } else { requested.min(max) };
    n as usize
}

/// A numeric page token (an offset or a seq): empty → `None`.
pub(crate) fn numeric_token(token: &str) -> ApiResult<Option<u64>> {
    if token.is_empty() {
        return Ok(None);
    }
    token
        .parse::<u64>()
        .map(Some)
        .map_err(|_| invalid("page_token", "is not a token this server issued"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use orbit_server_kit::payload::json_to_proto;
    use serde_json::json;

    #[test]
    fn ids_are_bounded_and_children_reserved() {
        assert!(id("x", "").is_err());
        assert!(id("x", &"a".repeat(257)).is_err());
        assert!(id("x", "a\nb").is_err());
        assert!(new_execution_id("a/b").is_err());
        assert_eq!(new_execution_id("order-1").unwrap(), "order-1");
        assert_eq!(optional("x", "").unwrap(), None);
    }

    #[test]
    fn payloads_are_converted_and_size_checked() {
        assert_eq!(payload("input", None, 10).unwrap(), Value::Null);
        let v = json!({"a": [1, 2, 3]});
        assert_eq!(payload("input", Some(json_to_proto(v.clone())), 100).unwrap(), v);
        let too_big = payload("input", Some(json_to_proto(json!("x".repeat(50)))), 10);
        let status = too_big.unwrap_err();
        assert_eq!(status.code(), tonic::Code::ResourceExhausted);
    }

    #[test]
    fn page_sizes_and_tokens() {
        assert_eq!(page_size(0, 100, 1000), 100);
        assert_eq!(page_size(5000, 100, 1000), 1000);
        assert_eq!(numeric_token("").unwrap(), None);
        assert_eq!(numeric_token("42").unwrap(), Some(42));
        assert!(numeric_token("x").is_err());
    }
}
