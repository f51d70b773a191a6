//! Replays the fuzz inputs kept in the repository (`fuzz/corpus/<target>/` seeds and
//! `fuzz/artifacts/<target>/` crash repros, see scripts/fuzz.sh) through the same checks as
//! the `definition` and `expression` fuzz targets, so a crash the fuzzer found once stays
//! fixed in a plain `cargo test`. Inputs of known bugs still being fixed elsewhere wait in
//! `fuzz/pending/` (not replayed; see docs/fuzzing.md).

use orbit_definition::{canonical_json, parse, to_document, Expr, Scope};
use serde_json::json;
use std::path::PathBuf;

/// Every file of `fuzz/corpus/<target>` and `fuzz/artifacts/<target>`.
fn inputs(target: &str) -> Vec<(PathBuf, Vec<u8>)> {
    let fuzz = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../fuzz");
    let mut out = Vec::new();
    for dir in ["corpus", "artifacts"] {
        let Ok(entries) = std::fs::read_dir(fuzz.join(dir).join(target)) else { continue };
        for entry in entries.flatten() {
            let path = entry.path();
            if path.is_file() {
                let bytes = std::fs::read(&path).expect("read a fuzz input");
                out.push((path, bytes));
            }
        }
    }
    out.sort();
    out
}

#[test]
fn definition_inputs_parse_or_fail_cleanly_and_round_trip() {
    let inputs = inputs("definition");
    assert!(inputs.len() >= 10, "the seed corpus is there: {}", inputs.len());
    for (path, bytes) in inputs {
        let Ok(text) = std::str::from_utf8(&bytes) else { continue };
        if text.trim().is_empty() {
            continue;
        }
        if let Ok(def) = parse(text) {
            let stored = canonical_json(&to_document(&def));
            let again = parse(&stored)
                .unwrap_or_else(|e| panic!("{}: the canonical form fails: {e:?}", path.display()));
            assert_eq!(again.hash, def.hash, "{}: the hash survives storing", path.display());
        }
    }
}

#[test]
fn expression_inputs_compile_and_evaluate_or_fail_cleanly() {
    let scope = Scope::new()
        .with(
            "input",
            json!({"n": 3, "s": "abc", "list": [1, 2, 3], "obj": {"a": 1, "b": [true, null]}}),
        )
        .with("steps", json!({"a": {"output": {"x": 1.5, "y": "z"}}, "b": {"output": [1, "two"]}}))
        .with("item", json!("it"))
        .with("index", json!(2));
    let inputs = inputs("expression");
    assert!(inputs.len() >= 10, "the seed corpus is there: {}", inputs.len());
    let mut evaluated = 0;
    for (_, bytes) in inputs {
        let Ok(source) = std::str::from_utf8(&bytes) else { continue };
        let Ok(expr) = Expr::compile(source) else { continue };
        if expr.eval(&scope).is_ok() {
            evaluated += 1;
        }
        let _ = expr.eval_bool(&scope);
    }
    assert!(evaluated > 0, "some seeds evaluate");
}
