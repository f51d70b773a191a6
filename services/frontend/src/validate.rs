//! Edge validation the server kit's rules (`orbit_server_kit::validate`, shared with the
//! owner's internal API, and `payload::check_limits`) do not cover: a wire payload
//! converted and checked in one go, the ids this frontend generates, and paging. Handlers
//! call the server kit's rules directly for ids and sizes; these answer in the same
//! terms ([`OrbitError`], the offending field named).

use orbit_server_kit::payload::{check_limits, proto_to_json};
use orbit_server_kit::validate::invalid;
use orbit_server_kit::{ErrorCode, OrbitError};
use serde_json::Value;

/// A wire payload as JSON (unset is `null`), within the payload limits
/// (`PAYLOAD_TOO_LARGE`, `PAYLOAD_TOO_DEEP`); a number JSON cannot hold is
/// `INVALID_ARGUMENT`.
pub(crate) fn payload(
    field: &str,
    value: Option<prost_types::Value>,
    max_bytes: u64,
) -> Result<Value, OrbitError> {
    let json = value.map(proto_to_json).transpose().map_err(|e| invalid(field, e.to_string()))?;
    let json = json.unwrap_or(Value::Null);
    check_limits(field, &json, max_bytes)?;
    Ok(json)
}

/// `n` random bytes in hex: generated execution ids (16 bytes) and session ids.
pub(crate) fn random_hex(n: usize) -> Result<String, OrbitError> {
    let mut bytes = vec![0u8; n];
    getrandom::fill(&mut bytes).map_err(|e| {
        OrbitError::new(ErrorCode::Unavailable, format!("no randomness for an id: {e}"))
    })?;
    Ok(hex::encode(bytes))
}

/// A page size: 0 → `default`, capped at `max`.
pub(crate) fn page_size(requested: u32, default: u32, max: u32) -> usize {
    let n = if requested == 0 { default } else { requested.min(max) };
    n as usize
}

/// A numeric page token (an offset or a seq): empty → `None`.
pub(crate) fn numeric_token(token: &str) -> Result<Option<u64>, OrbitError> {
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
    fn payloads_are_converted_and_limited() {
        assert_eq!(payload("input", None, 10).unwrap(), Value::Null);
        let v = json!({"a": [1, 2, 3]});
        assert_eq!(payload("input", Some(json_to_proto(v.clone())), 100).unwrap(), v);
        let too_big = payload("input", Some(json_to_proto(json!("x".repeat(50)))), 10);
        assert_eq!(too_big.unwrap_err().code, ErrorCode::PayloadTooLarge);
        let deep = (0..30).fold(json!(1), |v, _| json!([v]));
        let too_deep = payload("input", Some(json_to_proto(deep)), 10_000).unwrap_err();
        assert_eq!(too_deep.code, ErrorCode::PayloadTooDeep);
        let nan =
            prost_types::Value { kind: Some(prost_types::value::Kind::NumberValue(f64::NAN)) };
        let e = payload("input", Some(nan), 100).unwrap_err();
        assert_eq!((e.code, e.details[0].path.as_str()), (ErrorCode::InvalidArgument, "input"));
    }

    #[test]
    fn generated_ids_are_hex() {
        let id = random_hex(16).unwrap();
        assert_eq!(id.len(), 32);
        assert!(id.bytes().all(|b| b.is_ascii_hexdigit()));
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
