//! Request field rules shared by every server that takes ids and payloads from a caller:
//! the public frontend and the internal owner API apply exactly the same ones, so an
//! internal port can never accept what the public one refuses.
//!
//! Each rule returns an [`OrbitError`] naming the offending field (a `google.rpc.BadRequest`
//! field violation rides along), ready for `to_status()`.

use crate::error::{ErrorCode, FieldViolation, OrbitError};
use serde_json::Value;

/// The longest id (execution, worker, request, name) accepted, in bytes.
pub const MAX_ID_BYTES: usize = 256;

/// The server-wide payload limit when none is configured (2 MiB, as `max_payload_bytes`).
pub const DEFAULT_MAX_PAYLOAD_BYTES: u64 = 2 * 1024 * 1024;

/// `INVALID_ARGUMENT` naming the offending request field.
#[must_use]
pub fn invalid(field: &str, message: impl Into<String>) -> OrbitError {
    let message = message.into();
    OrbitError::new(ErrorCode::InvalidArgument, format!("{field}: {message}"))
        .with_violation(FieldViolation::new(field, "INVALID_ARGUMENT", message))
}

/// A required, bounded id without control characters.
///
/// # Errors
/// `INVALID_ARGUMENT` when empty, longer than [`MAX_ID_BYTES`] or with control characters.
pub fn id<'a>(field: &str, value: &'a str) -> Result<&'a str, OrbitError> {
    if value.is_empty() {
        return Err(invalid(field, "is required"));
    }
    if value.len() > MAX_ID_BYTES {
        return Err(invalid(field, format!("is longer than {MAX_ID_BYTES} bytes")));
    }
    if value.chars().any(char::is_control) {
        return Err(invalid(field, "contains control characters"));
    }
    Ok(value)
}

/// A caller-chosen execution id for a start: an [`id`] without `/` (reserved for the ids
/// the server derives for child executions).
///
/// # Errors
/// As [`id`], and `INVALID_ARGUMENT` for a `/`.
pub fn new_execution_id<'a>(field: &str, value: &'a str) -> Result<&'a str, OrbitError> {
    let value = id(field, value)?;
    if value.contains('/') {
        return Err(invalid(field, "must not contain `/` (reserved for child executions)"));
    }
    Ok(value)
}

/// An optional id: empty means `None`.
///
/// # Errors
/// As [`id`] when not empty.
pub fn optional<'a>(field: &str, value: &'a str) -> Result<Option<&'a str>, OrbitError> {
    if value.is_empty() {
        Ok(None)
    } else {
        id(field, value).map(Some)
    }
}

/// `PAYLOAD_TOO_LARGE` when `value` serializes to more than `max_bytes`.
///
/// # Errors
/// `PAYLOAD_TOO_LARGE` naming the field and both sizes.
pub fn check_size(field: &str, value: &Value, max_bytes: u64) -> Result<(), OrbitError> {
    let size = serde_json::to_vec(value).map_or(0, |v| v.len() as u64);
    if size > max_bytes {
        return Err(OrbitError::new(
            ErrorCode::PayloadTooLarge,
            format!("{field} is {size} bytes (max_payload_bytes {max_bytes})"),
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn ids_are_bounded_and_children_reserved() {
        assert!(id("x", "").is_err());
        assert!(id("x", &"a".repeat(MAX_ID_BYTES + 1)).is_err());
        assert!(id("x", &"a".repeat(MAX_ID_BYTES)).is_ok());
        assert!(id("x", "a\nb").is_err());
        let e = new_execution_id("execution_id", "a/b").unwrap_err();
        assert_eq!(e.code, ErrorCode::InvalidArgument);
        assert!(e.message.starts_with("execution_id:"), "{}", e.message);
        assert_eq!(new_execution_id("execution_id", "order-1").unwrap(), "order-1");
        assert_eq!(optional("x", "").unwrap(), None);
    }

    #[test]
    fn sizes_are_checked() {
        assert!(check_size("input", &json!("abc"), 5).is_ok());
        let e = check_size("input", &json!("x".repeat(50)), 10).unwrap_err();
        assert_eq!(e.code, ErrorCode::PayloadTooLarge);
    }
}
