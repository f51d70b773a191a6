//! Arbitrary text as a CEL expression: compiled as a definition's `${{ }}` would be, then
//! evaluated (as a value and as a condition) over a fixed scope shaped like a step's
//! (`input`, `steps`, `item`, `index`). Errors are fine; panics, stack overflows, timeouts
//! and runaway memory are findings.
#![no_main]

use libfuzzer_sys::fuzz_target;
use orbit_definition::{Expr, Scope};
use serde_json::json;
use std::sync::OnceLock;

fn scope() -> &'static Scope {
    static SCOPE: OnceLock<Scope> = OnceLock::new();
    SCOPE.get_or_init(|| {
        Scope::new()
            .with(
                "input",
                json!({"n": 3, "s": "abc", "list": [1, 2, 3], "obj": {"a": 1, "b": [true, null]}}),
            )
            .with(
                "steps",
                json!({"a": {"output": {"x": 1.5, "y": "z"}}, "b": {"output": [1, "two"]}}),
            )
            .with("item", json!("it"))
            .with("index", json!(2))
    })
}

fuzz_target!(|data: &[u8]| {
    let Ok(source) = std::str::from_utf8(data) else { return };
    let Ok(expr) = Expr::compile(source) else { return };
    let _ = expr.eval(scope());
    let _ = expr.eval_bool(scope());
});
