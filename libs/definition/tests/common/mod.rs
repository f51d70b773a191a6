//! What the definition tests share: the refusals of a document, as (code, path), and a
//! lookup among them.

// Each test binary compiles this module and uses part of it.
#![allow(dead_code)]

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

/// Whether `errors` hold a refusal with `code` at `path`.
pub fn has(errors: &[(ErrorCode, String)], code: ErrorCode, path: &str) -> bool {
    errors.iter().any(|(c, p)| *c == code && p == path)
}
