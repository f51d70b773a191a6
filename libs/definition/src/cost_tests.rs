//! The cost bound is sound: what an evaluation produces never exceeds the bound on its
//! shape, and runaway evaluations are refused before they run.

use super::*;
use crate::expr::{Expr, Scope};
use proptest::prelude::*;
use serde_json::json;

/// What a value weighs in the [`Shape`] model.
fn weight(v: &Value) -> u64 {
    match v {
        Value::Null | Value::Bool(_) | Value::Number(_) => VALUE_BYTES,
        Value::String(s) => VALUE_BYTES + s.len() as u64,
        Value::Array(items) => VALUE_BYTES + items.iter().map(weight).sum::<u64>(),
        Value::Object(m) => {
            VALUE_BYTES
                + m.iter().map(|(k, v)| VALUE_BYTES + k.len() as u64 + weight(v)).sum::<u64>()
        }
    }
}

fn bound_of(src: &str, input: &Value) -> Bound {
    let program = cel::Program::compile(src).unwrap();
    let mut env = vec![("input".to_string(), Shape::of(input).unwrap())];
    bound(program.expression(), &mut env)
}

/// Evaluates for real and checks the result against the bound.
fn assert_sound(src: &str, input: &Value) -> Bound {
    let b = bound_of(src, input);
    let out = Expr::compile(src).unwrap().eval(&Scope::new().with("input", input.clone()));
    let out = out.unwrap_or_else(|e| panic!("{src}: {e}"));
    assert!(
        weight(&out) <= b.shape.bytes,
        "{src}: result {out} weighs {} > bound {:?}",
        weight(&out),
        b.shape
    );
    if let Value::Array(items) = &out {
        assert!(
            items.len() as u64 <= b.shape.len,
            "{src}: {} items > {}",
            items.len(),
            b.shape.len
        );
    }
    b
}

const EXPRS: [&str; 14] = [
    "input.L.map(x, [x, x])",
    "input.L.map(x, input.L.map(y, x + y))",
    "input.L.filter(x, x.size() > 1)",
    "input.L.map(x, x.size() > 0, x + '!')",
    "input.L + input.L + input.L",
    "input.L.map(x, x + x + x)",
    "input.L.exists_one(x, x == 'a')",
    "input.L.all(a, input.L.all(b, a + b != ''))",
    "{'a': input.L, 'b': input.L.map(x, {'k': x})}.b.map(e, e.k)",
    "input.M.k + input.M.k",
    "[input.M, input.M].map(m, m.k)",
    "input.L.size() > 0 ? input.L[0] + input.L[0] : 'none'",
    "input.L.map(x, string(x) + 'x').filter(y, y in input.L)",
    "input.M.map(k, input.M[k] + k)",
];

#[test]
fn results_never_exceed_their_bound() {
    let input = json!({"L": ["a", "bb", "ccc", ""], "M": {"k": "value", "z": "zz"}});
    for src in EXPRS {
        assert_sound(src, &input);
    }
}

#[test]
fn nested_comprehensions_multiply() {
    let l: Vec<Value> = (0..10).map(|i| json!(i)).collect();
    let b = bound_of("input.L.all(a, input.L.all(b, input.L.all(c, true)))", &json!({"L": l}));
    assert!(b.steps >= 1_000, "{} steps for 10^3 iterations", b.steps);
    let l: Vec<Value> = (0..1_000).map(|i| json!(i)).collect();
    let scope = Scope::new().with("input", json!({"L": l}));
    let e = Expr::compile("input.L.all(a, input.L.all(b, input.L.all(c, true)))").unwrap();
    let err = e.eval(&scope).unwrap_err();
    assert!(err.is_limit() && err.code() == "EXPRESSION_LIMIT", "{err}");
    assert!(err.message.contains("steps"), "{err}");
    // Building strings: the bytes budget or the steps budget refuses it.
    let strings = Expr::compile("input.L.map(a, input.L.map(b, input.L.map(c, 'x')))").unwrap();
    assert!(strings.eval(&scope).unwrap_err().is_limit());
}

#[test]
fn concatenation_adds_sizes() {
    let s = "x".repeat(1_000);
    let b = assert_sound("input.S + input.S + input.S", &json!({"S": s}));
    assert!(b.shape.len >= 3_000);
    // Doubling in a comprehension body over 24 members grows a list past the budget only
    // through its members: the bound follows the body, not 2^n.
    let l: Vec<Value> = (0..24).map(|i| json!(i)).collect();
    assert_sound("input.L.map(x, [x] + [x])", &json!({"L": l}));
}

#[test]
fn real_workloads_fit() {
    let items: Vec<Value> =
        (0..10_000).map(|i| json!({"sku": format!("sku-{i}"), "qty": i % 7})).collect();
    let input = json!({"items": items, "amount": 1500});
    let scope = Scope::new().with("input", input.clone());
    for src in [
        "input.items.map(x, x.sku)",
        "input.items.filter(x, x.qty > 3).size()",
        "input.items.exists(x, x.sku == 'sku-9999')",
        "input.amount * 1.2 > 1000.0",
    ] {
        Expr::compile(src).unwrap().eval(&scope).unwrap_or_else(|e| panic!("{src}: {e}"));
    }
    let b = bound_of("input.items.map(x, x.sku)", &input);
    assert!(b.steps < MAX_EVAL_STEPS / 10, "{} steps", b.steps);
}

#[test]
fn dynamic_regexes_are_charged_their_worst_case() {
    let input = json!({"s": "a".repeat(100), "p": "a+"});
    assert!(bound_of("input.s.matches('^a+$')", &input).steps < MAX_EVAL_STEPS);
    assert!(regex_states("a{1000}{1000}") >= 1_000_000);
    let b = bound_of("input.s.matches(input.p)", &input);
    assert!(b.steps >= 100 * REGEX_DYNAMIC_STATES);
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(48))]

    #[test]
    fn random_inputs_stay_within_the_bound(
        l in prop::collection::vec("[a-c]{0,4}", 0..12),
        k in "[a-z]{0,6}",
    ) {
        let input = json!({"L": l, "M": {"k": k, "z": "zz"}});
        for src in EXPRS {
            assert_sound(src, &input);
        }
    }
}
