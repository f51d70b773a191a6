//! Debounce and singleton starts (`dedupe:`, issue 27 item 6; docs/flow-control.md,
//! "Debounce and singleton starts"): the workflow-level declaration and the pure evaluation
//! of its key over a start's input.
//!
//! The frontend evaluates the key of every start of a workflow that declares `dedupe:`
//! (without an explicit `execution_id`) and claims the key in the store; this module knows
//! nothing of the store. Bounds are constants named in the refusals that enforce them.

use crate::expr::{Scope, Template};
use serde_json::Value;

/// The shortest `window`, milliseconds (1 s).
pub const MIN_DEDUPE_WINDOW_MS: u64 = 1_000;

/// The longest `window`, milliseconds (24 h).
pub const MAX_DEDUPE_WINDOW_MS: u64 = 86_400_000;

/// The longest evaluated key, bytes.
pub const MAX_DEDUPE_KEY_BYTES: usize = 256;

/// `keep: last` pushes the fire time to now + window on each start, but never past the
/// first start + this many windows (Inngest's debounce has the same bound, its `timeout`):
/// a key started more often than once per window still runs.
pub const MAX_DEBOUNCE_WINDOWS: u64 = 10;

/// Which start of a window the execution is made from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Keep {
    /// Singleton / throttle: the first start creates the execution at once; the others of
    /// its window return it.
    First,
    /// Debounce: the execution is created once the key has had no start for `window`,
    /// with the last start's input.
    Last,
}

impl Keep {
    /// `first` or `last`, as written and as stored.
    #[must_use]
    pub fn as_str(self) -> &'static str {
        match self {
            Keep::First => "first",
            Keep::Last => "last",
        }
    }
}

/// `dedupe: {key, window, keep?}`.
#[derive(Debug, Clone, PartialEq)]
pub struct Dedupe {
    /// A string template over `input` only; a number or boolean counts as its JSON text.
    pub key: Template,
    /// The window, milliseconds, within `MIN_DEDUPE_WINDOW_MS..=MAX_DEDUPE_WINDOW_MS`.
    pub window_ms: u64,
    /// `first` when not written.
    pub keep: Keep,
}

impl Dedupe {
    /// The longest a `keep: last` start may wait after the first start of its key.
    #[must_use]
    pub fn max_delay_ms(&self) -> u64 {
        self.window_ms.saturating_mul(MAX_DEBOUNCE_WINDOWS)
    }

    /// The key of a start with this input.
    ///
    /// # Errors
    /// A message for the caller (the start is refused): the expression failed, gave
    /// something other than a string, number or boolean, or is longer than
    /// [`MAX_DEDUPE_KEY_BYTES`].
    pub fn key_of(&self, input: &Value) -> Result<String, String> {
        let scope = Scope::new().with("input", input.clone());
        let key = match self.key.render(&scope).map_err(|e| e.to_string())? {
            Value::String(s) => s,
            v @ (Value::Number(_) | Value::Bool(_)) => v.to_string(),
            other => {
                let kind = match other {
                    Value::Null => "null",
                    Value::Array(_) => "a list",
                    _ => "an object",
                };
                return Err(format!(
                    "the dedupe key evaluated to {kind}; it must be a string, number or boolean"
                ));
            }
        };
        if key.len() > MAX_DEDUPE_KEY_BYTES {
            return Err(format!(
                "the dedupe key is {} bytes; the limit is {MAX_DEDUPE_KEY_BYTES}",
                key.len()
            ));
        }
        Ok(key)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn dedupe(key: &str) -> Dedupe {
        Dedupe { key: Template::compile(&json!(key)).unwrap(), window_ms: 2_000, keep: Keep::Last }
    }

    #[test]
    fn keys_are_strings_numbers_or_booleans() {
        let d = dedupe("${{ input.account }}");
        assert_eq!(d.key_of(&json!({"account": "a-1"})), Ok("a-1".into()));
        assert_eq!(d.key_of(&json!({"account": 7})), Ok("7".into()));
        assert_eq!(d.key_of(&json!({"account": true})), Ok("true".into()));
        assert!(d.key_of(&json!({"account": [1]})).unwrap_err().contains("a list"));
        assert!(d.key_of(&json!({"account": null})).unwrap_err().contains("null"));
        assert!(d.key_of(&json!({})).is_err());
        let long = "x".repeat(MAX_DEDUPE_KEY_BYTES + 1);
        assert!(d.key_of(&json!({"account": long})).unwrap_err().contains("256"));
        let text = dedupe("acct-${{ input.account }}");
        assert_eq!(text.key_of(&json!({"account": 3})), Ok("acct-3".into()));
        assert_eq!(d.max_delay_ms(), 20_000);
        assert_eq!((Keep::First.as_str(), Keep::Last.as_str()), ("first", "last"));
    }
}
