//! What the definition tests share: the refusals of a document, as (code, path).

use orbit_definition::{parse, ErrorCode};
use serde_json::Value;

/// Every refusal of `document` (which must be rejected), as (code, path).
pub fn errors_of(document: &Value) -> Vec<(ErrorCode, String)> {
    parse(&document.to_string())
        .expect_err("should be rejected")
        .into_iter()
        .map(|e| (e.code, e.path))
        .collect()
}
