//! Payload limits, in one place: how big and how deep a JSON payload is, the check every
//! producer of a value runs before anything is written, and the truncation marker reads put
//! in place of a stored value that is over the limits.
//!
//! A payload (an execution input, a task input or output, error details, heartbeat details,
//! a signal payload, a compute value, a query result, a workflow output) is a JSON value in
//! the domain and a `google.protobuf.Value` on the wire. Two limits apply to it:
//!
//! - **Size** ([`Measure::bytes`]): the larger of its compact JSON text and its protobuf
//!   encoding, against the effective `max_payload_bytes`. Counting the protobuf form too
//!   matters: a list of small numbers is ~5.5 times larger as `google.protobuf.Value` (11
//!   bytes per element against 2), so a JSON-only limit of 2 MiB would let through values
//!   that no 4 MiB gRPC message can carry.
//! - **Depth** ([`MAX_DEPTH`]): how many arrays and objects are nested (a scalar is depth 0,
//!   `[1]` and `{"a": 1}` depth 1). Protobuf decoders stop at a recursion limit (100 in
//!   prost, C++, Java and Python's upb), and every JSON level costs up to three protobuf
//!   levels (`Value` → `Struct` → map entry); see `docs/events.md` ("Payload limits") for
//!   the measured numbers.
//!
//! Everything here is iterative (an explicit stack), so a hostile value cannot overflow the
//! caller's stack, and pure (no IO): the engine, the server kit and the worker library all
//! use it.

mod measure;

pub use measure::{measure, Measure};

use serde_json::{json, Map, Value};

/// The deepest nesting of arrays and objects a payload may have. Chosen below protobuf's
/// decode recursion limit with margin, measured in `libs/server-kit/tests/payload_depth.rs`
/// (prost) and `sdks/python/tests/test_worker.py` (Python protobuf) for the deepest
/// message the server sends a value in.
pub const MAX_DEPTH: usize = 24;

/// The server's default `max_payload_bytes`: 2 MiB, half the default gRPC message size, so
/// one payload always fits a message with room for the rest of it.
pub const DEFAULT_MAX_PAYLOAD_BYTES: u64 = 2 * 1024 * 1024;

/// The key of the marker a read returns instead of a stored value over the limits:
/// `{"$orbit_truncated": {"bytes": N, "depth": D}}`.
pub const TRUNCATED_KEY: &str = "$orbit_truncated";

/// The code of a payload over `max_payload_bytes`.
pub const TOO_LARGE: &str = "PAYLOAD_TOO_LARGE";

/// The code of a payload nested deeper than [`MAX_DEPTH`].
pub const TOO_DEEP: &str = "PAYLOAD_TOO_DEEP";

/// Why a payload is refused.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Violation {
    /// Over `max_payload_bytes` ([`Measure::bytes`]).
    TooLarge {
        /// The payload's size.
        bytes: u64,
        /// The limit.
        max: u64,
    },
    /// Nested deeper than [`MAX_DEPTH`].
    TooDeep {
        /// The payload's nesting depth.
        depth: usize,
        /// Where, relative to the payload, the first too-deep array or object starts
        /// (for example `.a.b[0]`).
        path: String,
    },
}

impl Violation {
    /// The stable code: [`TOO_LARGE`] or [`TOO_DEEP`].
    #[must_use]
    pub fn code(&self) -> &'static str {
        match self {
            Violation::TooLarge { .. } => TOO_LARGE,
            Violation::TooDeep { .. } => TOO_DEEP,
        }
    }

    /// The offending path, prefixed with `what` (the payload's name: `input`, `output`,
    /// `payload`, `steps.s.output`).
    #[must_use]
    pub fn path(&self, what: &str) -> String {
        match self {
            Violation::TooLarge { .. } => what.to_string(),
            Violation::TooDeep { path, .. } => format!("{what}{path}"),
        }
    }

    /// A message for people, naming the payload as `what`.
    #[must_use]
    pub fn message(&self, what: &str) -> String {
        match self {
            Violation::TooLarge { bytes, max } => {
                format!("{what} is {bytes} bytes (max_payload_bytes {max})")
            }
            Violation::TooDeep { depth, .. } => format!(
                "{what} is nested {depth} levels deep, deeper than {MAX_DEPTH} at `{}`",
                self.path(what)
            ),
        }
    }
}

/// Checks a payload against the depth limit and, when given, `max_bytes`.
///
/// # Errors
/// [`Violation::TooDeep`] (checked first) or [`Violation::TooLarge`].
pub fn check(value: &Value, max_bytes: Option<u64>) -> Result<Measure, Violation> {
    let m = measure(value);
    if let Some(path) = &m.deep_path {
        return Err(Violation::TooDeep { depth: m.depth, path: path.clone() });
    }
    match max_bytes {
        Some(max) if m.bytes() > max => Err(Violation::TooLarge { bytes: m.bytes(), max }),
        _ => Ok(m),
    }
}

/// The truncation marker for a value of this measure.
#[must_use]
pub fn marker(m: &Measure) -> Value {
    json!({ TRUNCATED_KEY: { "bytes": m.json_bytes, "depth": m.depth } })
}

/// Whether `value` is a truncation marker.
#[must_use]
pub fn is_marker(value: &Value) -> bool {
    value.as_object().is_some_and(|o| o.len() == 1 && o.contains_key(TRUNCATED_KEY))
}

/// A stored value as a read may send it: unchanged when within the depth limit and
/// `max_bytes`, else the truncation marker. Rows written before the limits were enforced
/// (or with a larger limit) stay readable this way instead of breaking the response.
#[must_use]
pub fn fit(value: Value, max_bytes: u64) -> Value {
    match check(&value, Some(max_bytes)) {
        Ok(_) => value,
        Err(_) => marker(&measure(&value)),
    }
}

/// [`fit`] for every field of an event payload, and for `error.details` inside it (so a
/// too-large error keeps its code and message).
#[must_use]
pub fn fit_fields(fields: Map<String, Value>, max_bytes: u64) -> Map<String, Value> {
    fields
        .into_iter()
        .map(|(k, v)| {
            let v = match v {
                Value::Object(mut error) if k == "error" && error.contains_key("details") => {
                    if let Some(details) = error.remove("details") {
                        error.insert("details".into(), fit(details, max_bytes));
                    }
                    fit(Value::Object(error), max_bytes)
                }
                other => fit(other, max_bytes),
            };
            (k, v)
        })
        .collect()
}

#[cfg(test)]
mod tests;
