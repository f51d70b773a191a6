//! The type check: attributes, operators and literals by type.

use orbit_query::{parse_and_check, Catalog, CheckedTest, Cond, SearchType, SqlValue, Target};

fn catalog() -> Catalog {
    Catalog::with_search([
        ("customer", SearchType::Keyword),
        ("note", SearchType::Text),
        ("amount", SearchType::Double),
        ("attempts", SearchType::Int),
        ("vip", SearchType::Bool),
        ("due", SearchType::Datetime),
        ("tags", SearchType::KeywordList),
    ])
}

fn test_of(q: &str) -> CheckedTest {
    match parse_and_check(q, &catalog()).unwrap().filter {
        Some(Cond::Predicate(p)) => p.test,
        other => panic!("{other:?}"),
    }
}

fn refused(q: &str) -> (usize, String) {
    let e = parse_and_check(q, &catalog()).expect_err(q);
    assert_eq!(e.code.as_str(), "INVALID_QUERY");
    assert!(e.position <= q.len());
    (e.position, e.message)
}

#[test]
fn system_attributes_take_their_types() {
    assert_eq!(
        test_of("status = 'failed'"),
        CheckedTest::Compare(orbit_query::CmpOp::Eq, SqlValue::Text("FAILED".into()))
    );
    assert_eq!(
        test_of("created > '1970-01-02'"),
        CheckedTest::Compare(orbit_query::CmpOp::Gt, SqlValue::Int(86_400_000))
    );
    assert_eq!(
        test_of("duration >= '5m'"),
        CheckedTest::Compare(orbit_query::CmpOp::Ge, SqlValue::Int(300_000))
    );
    assert_eq!(
        test_of("duration < 1500"),
        CheckedTest::Compare(orbit_query::CmpOp::Lt, SqlValue::Int(1500))
    );
    assert!(matches!(test_of("parent IS NULL"), CheckedTest::IsNull { negated: false }));
    assert!(matches!(test_of("workflow STARTS_WITH 'bill'"), CheckedTest::StartsWith(_)));
    assert!(matches!(
        test_of("closed BETWEEN '2026-01-01' AND '2026-01-02T00:00:00+02:00'"),
        CheckedTest::Between(SqlValue::Int(_), SqlValue::Int(_))
    ));
}

#[test]
fn search_attributes_take_their_types() {
    assert_eq!(
        test_of("amount > 10"),
        CheckedTest::Compare(orbit_query::CmpOp::Gt, SqlValue::Double(10.0))
    );
    assert_eq!(
        test_of("attempts = 3"),
        CheckedTest::Compare(orbit_query::CmpOp::Eq, SqlValue::Int(3))
    );
    assert_eq!(
        test_of("vip = true"),
        CheckedTest::Compare(orbit_query::CmpOp::Eq, SqlValue::Bool(true))
    );
    assert!(matches!(test_of("tags IN ('a', 'b')"), CheckedTest::In { .. }));
    assert!(matches!(test_of("due < '2026-11-24T00:00:00Z'"), CheckedTest::Compare(..)));
    let checked = parse_and_check("customer = 'acme' ORDER BY amount DESC", &catalog()).unwrap();
    assert!(matches!(checked.order.unwrap().target, Target::Search { ty: SearchType::Double, .. }));
}

#[test]
fn type_errors_are_refused_at_the_place() {
    let (pos, msg) = refused("created > 5");
    assert_eq!(pos, 10);
    assert!(msg.contains("datetime"), "{msg}");
    let (pos, msg) = refused("workflow = 'a' AND nope = 1");
    assert_eq!(pos, 19);
    assert!(msg.contains("unknown attribute") && msg.contains("workflow"), "{msg}");
    let (pos, msg) = refused("attempts STARTS_WITH '1'");
    assert_eq!(pos, 0);
    assert!(msg.contains("STARTS_WITH"), "{msg}");
    let (pos, _) = refused("status = 'DONE'");
    assert_eq!(pos, 9);
    let (_, msg) = refused("status < 'FAILED'");
    assert!(msg.contains("only = and !="), "{msg}");
    let (_, msg) = refused("workflow IS NULL");
    assert!(msg.contains("never null"), "{msg}");
    refused("attempts = 1.5");
    refused("amount = 'x'");
    refused("vip = 1");
    refused("vip BETWEEN true AND false");
    refused("tags > 'a'");
    refused("note < 'a'");
    refused("created > 'yesterday'");
    refused("duration > '5 minutes'");
    refused("customer = 1");
    refused("ORDER BY tags");
    refused("ORDER BY nope");
    // Orbit has no per-execution task queue.
    refused("task_queue = 'q'");
    refused("failed_step > 1");
    refused("error_code IS NULL OR error_code = TRUE");
    let (pos, msg) = refused("customer = 'a\0b'");
    assert_eq!(pos, 11);
    assert!(msg.contains("NUL"), "{msg}");
}

#[test]
fn system_names_shadow_declared_ones() {
    let c = Catalog::with_search([("workflow", SearchType::Int)]);
    let checked = parse_and_check("workflow = 'a'", &c).unwrap();
    let Some(Cond::Predicate(p)) = checked.filter else { panic!() };
    assert!(matches!(p.target, Target::System(a) if a.column == "workflow"));
}
