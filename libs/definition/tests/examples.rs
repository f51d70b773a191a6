//! Every example definition parses, normalises to a document that parses back to the same
//! definition, and keeps its hash across formatting.

use orbit_definition::{canonical_json, parse, parse_value, to_document, Definition};
use std::path::PathBuf;

fn examples() -> Vec<(String, String)> {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../examples/definitions");
    let mut out: Vec<(String, String)> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .map(|entry| entry.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "yaml"))
        .map(|p| {
            (
                p.file_name().unwrap().to_string_lossy().into_owned(),
                std::fs::read_to_string(&p).unwrap(),
            )
        })
        .collect();
    out.sort();
    out
}

fn parsed(name: &str, text: &str) -> Definition {
    parse(text).unwrap_or_else(|e| panic!("{name}:\n{e}"))
}

#[test]
fn every_example_parses() {
    let all = examples();
    let names: Vec<&str> = all.iter().map(|(n, _)| n.as_str()).collect();
    for expected in [
        "order-saga.yaml",
        "fan-out.yaml",
        "parent.yaml",
        "child.yaml",
        "continue-as-new.yaml",
        "handlers.yaml",
        "query.yaml",
        "hello.yaml",
    ] {
        assert!(names.contains(&expected), "missing example {expected}");
    }
    for (name, text) in &all {
        let d = parsed(name, text);
        assert!(d.hash.starts_with("sha256:") && d.hash.len() == 71, "{name}: {}", d.hash);
        // The file name is the workflow name: the simulator registers them by name.
        assert_eq!(format!("{}.yaml", d.name), *name);
    }
}

#[test]
fn normalised_documents_parse_back_to_the_same_definition() {
    for (name, text) in examples() {
        let d = parsed(&name, &text);
        let doc = to_document(&d);
        let again =
            parse_value(&doc).unwrap_or_else(|e| panic!("{name} normalised:\n{e}\n{doc:#}"));
        assert_eq!(again, d, "{name}");
        // Through text too, as the server stores it.
        let text = serde_json::to_string_pretty(&doc).unwrap();
        assert_eq!(parse(&text).unwrap(), d, "{name} via JSON text");
        assert_eq!(to_document(&again), doc, "{name}: normalising is idempotent");
    }
}

#[test]
fn the_hash_ignores_format_and_key_order() {
    for (name, text) in examples() {
        let d = parsed(&name, &text);
        // The same document as compact JSON with every mapping's keys reversed.
        let value: serde_json::Value = serde_norway::from_str(&text).unwrap();
        let json = serde_json::to_string(&reverse_keys(value)).unwrap();
        let from_json = parse(&json).unwrap_or_else(|e| panic!("{name} as JSON:\n{e}"));
        assert_eq!(from_json.hash, d.hash, "{name}");
        assert_ne!(canonical_json(&to_document(&d)), json);
    }
}

#[test]
fn the_hash_changes_with_the_content() {
    let (_, text) = examples().into_iter().find(|(n, _)| n == "hello.yaml").unwrap();
    let d = parsed("hello", &text);
    let changed = parsed(
        "hello",
        &text.replace("version: \"1\"\ndescription", "version: \"2\"\ndescription"),
    );
    assert_ne!(d.hash, changed.hash);
    // Defaults written out or left implicit are the same definition.
    let explicit = text.replace(
        "    input: { name: \"${{ input.name }}\" }",
        "    input: { name: \"${{ input.name }}\" }\n    retry: { max_attempts: 3, initial_interval: 1s, backoff: 2, max_interval: 60s }",
    );
    assert_ne!(explicit, text);
    assert_eq!(parsed("hello", &explicit).hash, d.hash);
}

fn reverse_keys(v: serde_json::Value) -> serde_json::Value {
    match v {
        serde_json::Value::Object(map) => {
            let mut entries: Vec<_> = map.into_iter().collect();
            entries.reverse();
            serde_json::Value::Object(
                entries.into_iter().map(|(k, v)| (k, reverse_keys(v))).collect(),
            )
        }
        serde_json::Value::Array(items) => {
            serde_json::Value::Array(items.into_iter().map(reverse_keys).collect())
        }
        other => other,
    }
}

/// The expressions the examples' header comments promise results for, evaluated over the
/// state those comments describe.
#[test]
fn example_expressions_compute_what_their_comments_promise() {
    use orbit_definition::{Scope, StepKind};
    use serde_json::json;
    let get = |file: &str| {
        let (_, text) = examples().into_iter().find(|(n, _)| n == file).unwrap();
        parsed(file, &text)
    };
    let compute = |d: &Definition, id: &str, scope: &Scope| match &d.step(id).unwrap().kind {
        StepKind::Compute { value } => value.render(scope).unwrap(),
        other => panic!("{other:?}"),
    };
    let step = |output: serde_json::Value| json!({"status": "succeeded", "output": output});

    let saga = get("order-saga.yaml");
    let steps = json!({
        "charge": step(json!({"charge_id": "ch-o-1"})),
        "approval": step(json!({"by": "ops"})),
        "reserve": step(json!([{"reservation": "r-a"}, {"reservation": "r-b"}])),
    });
    let scope = Scope::new()
        .with("input", json!({"order_id": "o-1", "amount": 1500}))
        .with("steps", steps.clone());
    assert_eq!(
        compute(&saga, "receipt", &scope),
        json!({"order": "o-1", "charge_id": "ch-o-1", "approved_by": "ops", "reservations": ["r-a", "r-b"]})
    );
    let mut skipped = steps;
    skipped["approval"] = json!({"status": "skipped", "output": null});
    let scope = Scope::new()
        .with("input", json!({"order_id": "o-1", "amount": 500}))
        .with("steps", skipped);
    assert_eq!(compute(&saga, "receipt", &scope)["approved_by"], json!("auto"));
    assert!(!saga.step("approval").unwrap().when.as_ref().unwrap().eval_bool(&scope).unwrap());

    let fan = get("fan-out.yaml");
    let outputs: Vec<_> = [2, 4, 6, 8, 10].iter().map(|v| json!({"value": v})).collect();
    let scope = Scope::new().with("steps", json!({"double": step(json!(outputs))}));
    assert_eq!(
        compute(&fan, "total", &scope),
        json!({"doubled": [2, 4, 6, 8, 10], "count": 5, "sum": 30})
    );

    let counter = get("continue-as-new.yaml");
    let scope = Scope::new().with("input", json!({"count": 2, "limit": 3}));
    assert_eq!(compute(&counter, "next", &scope), json!(3));
    let scope = scope.with("steps", json!({"next": step(json!(3))}));
    assert!(!counter.step("again").unwrap().when.as_ref().unwrap().eval_bool(&scope).unwrap());
    assert_eq!(compute(&counter, "done", &scope), json!({"count": 3}));

    let query = get("query.yaml");
    let waiting = json!({
        "pick": step(json!([{"reserved": "a"}, {"reserved": "b"}])),
        "pack": {"status": "waiting", "output": null},
        "charge": {"status": "pending", "output": null},
    });
    let scope = Scope::new().with("steps", waiting);
    assert_eq!(query.queries["done"].eval(&scope).unwrap(), json!(1));
    assert_eq!(query.queries["total"].eval(&scope).unwrap(), json!(3));
    assert_eq!(query.queries["charged"].eval(&scope).unwrap(), json!(false));
}
