use super::*;
use proptest::prelude::*;
use serde_json::json;

/// Arrays nested `depth` deep around `leaf` (`depth` 0 is the leaf itself).
fn nested_lists(depth: usize, leaf: Value) -> Value {
    (0..depth).fold(leaf, |v, _| Value::Array(vec![v]))
}

/// Objects `{"k": ...}` nested `depth` deep around `leaf`.
fn nested_objects(depth: usize, leaf: Value) -> Value {
    (0..depth).fold(leaf, |v, _| json!({ "k": v }))
}

fn arb_json() -> impl Strategy<Value = Value> {
    let leaf = prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::Bool),
        any::<i64>().prop_map(|i| json!(i)),
        any::<f64>().prop_filter("finite", |f| f.is_finite()).prop_map(|f| json!(f)),
        "\\PC*".prop_map(Value::String),
        "[\\x00-\\x7f]{0,12}".prop_map(Value::String),
    ];
    leaf.prop_recursive(6, 96, 8, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..8).prop_map(Value::Array),
            prop::collection::btree_map("[\\x00-\\x7f]{0,6}|\\PC{0,4}", inner, 0..8)
                .prop_map(|m| Value::Object(m.into_iter().collect())),
        ]
    })
}

/// The recursive definition of depth, for comparison.
fn depth_of(v: &Value) -> usize {
    match v {
        Value::Array(items) => 1 + items.iter().map(depth_of).max().unwrap_or(0),
        Value::Object(map) => 1 + map.values().map(depth_of).max().unwrap_or(0),
        _ => 0,
    }
}

proptest! {
    #[test]
    fn json_bytes_are_serde_jsons(v in arb_json()) {
        let m = measure(&v);
        prop_assert_eq!(m.json_bytes, serde_json::to_vec(&v).unwrap().len() as u64);
        prop_assert_eq!(m.depth, depth_of(&v));
        prop_assert_eq!(m.deep_path.is_some(), m.depth > MAX_DEPTH);
    }
}

#[test]
fn depth_counts_arrays_and_objects() {
    assert_eq!(measure(&json!(1)).depth, 0);
    assert_eq!(measure(&json!([])).depth, 1);
    assert_eq!(measure(&json!({"a": [1, {"b": {}}]})).depth, 4);
    assert!(check(&nested_lists(MAX_DEPTH, json!(1)), None).is_ok());
    assert!(check(&nested_objects(MAX_DEPTH, json!(1)), None).is_ok());
}

#[test]
fn too_deep_names_the_path_of_the_first_deep_container() {
    let v = json!({"a": {"b c": [nested_objects(MAX_DEPTH, json!(1))]}});
    let violation = check(&v, None).unwrap_err();
    assert_eq!(violation.code(), TOO_DEEP);
    let Violation::TooDeep { depth, path } = &violation else { panic!("{violation:?}") };
    assert_eq!(*depth, MAX_DEPTH + 3);
    // Levels: the root, `a`, `b c`, `[0]`, then `.k`s up to level MAX_DEPTH + 1.
    let expected = format!(".a[\"b c\"][0]{}", ".k".repeat(MAX_DEPTH - 3));
    assert_eq!(path, &expected);
    assert!(violation.message("input").contains(&format!("input{expected}")));
}

#[test]
fn a_very_deep_value_is_measured_without_recursion() {
    // Far beyond any recursive walk's stack on a small thread.
    let deep = nested_lists(200_000, json!(null));
    let m = std::thread::Builder::new()
        .stack_size(64 * 1024)
        .spawn(move || {
            let m = measure(&deep);
            // Dropping a serde_json value is recursive: take it apart by hand.
            let mut v = deep;
            while let Value::Array(mut items) = v {
                v = items.pop().unwrap_or(Value::Null);
            }
            m
        })
        .unwrap()
        .join()
        .unwrap();
    assert_eq!(m.depth, 200_000);
    // The path stops at the first container past the limit.
    assert_eq!(m.deep_path.unwrap(), "[0]".repeat(MAX_DEPTH));
}

#[test]
fn size_is_the_larger_of_json_and_protobuf() {
    // Small numbers: 2 JSON bytes, 11 protobuf bytes each.
    let numbers = Value::Array(vec![json!(1); 1000]);
    let m = measure(&numbers);
    assert_eq!(m.json_bytes, 2 * 1000 + 1);
    assert!(m.wire_bytes > 10 * 1000, "{m:?}");
    assert_eq!(m.bytes(), m.wire_bytes);
    let v = check(&numbers, Some(5_000)).unwrap_err();
    assert_eq!(v, Violation::TooLarge { bytes: m.wire_bytes, max: 5_000 });
    assert_eq!(v.code(), TOO_LARGE);
    assert_eq!(v.path("output"), "output");
    // Escaped strings: JSON is the larger.
    let quotes = json!("\"".repeat(100));
    assert_eq!(measure(&quotes).bytes(), 202);
}

#[test]
fn fit_replaces_values_over_the_limits_with_the_marker() {
    let ok = json!({"a": [1, 2]});
    assert_eq!(fit(ok.clone(), 1000), ok);
    let big = json!("x".repeat(100));
    let marked = fit(big, 50);
    assert!(is_marker(&marked));
    assert_eq!(marked, json!({"$orbit_truncated": {"bytes": 102, "depth": 0}}));
    let deep = fit(nested_lists(MAX_DEPTH + 1, json!(1)), 1 << 20);
    assert_eq!(deep[TRUNCATED_KEY]["depth"], json!(MAX_DEPTH + 1));
}

#[test]
fn fit_fields_keeps_an_errors_code_and_message() {
    let fields = json!({
        "step": "s",
        "output": "y".repeat(300),
        "error": {"code": "BAD", "message": "m", "details": "z".repeat(300)},
    });
    let Value::Object(fields) = fields else { unreachable!() };
    let out = fit_fields(fields, 200);
    assert_eq!(out["step"], json!("s"));
    assert!(is_marker(&out["output"]));
    assert_eq!(out["error"]["code"], json!("BAD"));
    assert!(is_marker(&out["error"]["details"]));
}
