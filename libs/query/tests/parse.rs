//! The parser: the grammar's forms, keywords in any case, literals, and errors that point
//! at the offending place.

use orbit_query::{
    parse, CmpOp, Direction, Expr, LiteralValue, Test, MAX_DEPTH, MAX_PREDICATES, MAX_QUERY_BYTES,
};

fn pred(e: &Expr) -> (&str, &Test) {
    match e {
        Expr::Predicate(p) => (p.attribute.name.as_str(), &p.test),
        other => panic!("not a predicate: {other:?}"),
    }
}

#[test]
fn comparisons_and_literals() {
    for (text, op) in [
        ("a = 1", CmpOp::Eq),
        ("a != 1", CmpOp::Ne),
        ("a <> 1", CmpOp::Ne),
        ("a < 1", CmpOp::Lt),
        ("a <= 1", CmpOp::Le),
        ("a > 1", CmpOp::Gt),
        ("a >= 1", CmpOp::Ge),
    ] {
        let q = parse(text).unwrap();
        let (name, test) = pred(q.filter.as_ref().unwrap());
        assert_eq!(name, "a");
        assert!(matches!(test, Test::Compare(o, _) if *o == op), "{text}");
    }
    let lit = |text: &str| match pred(parse(text).unwrap().filter.as_ref().unwrap()).1 {
        Test::Compare(_, l) => l.value.clone(),
        other => panic!("{other:?}"),
    };
    assert_eq!(lit("a = 'it''s'"), LiteralValue::String("it's".into()));
    assert_eq!(lit("a = ''"), LiteralValue::String(String::new()));
    assert_eq!(lit("a = -42"), LiteralValue::Int(-42));
    assert_eq!(lit("a = 2.5"), LiteralValue::Decimal(2.5));
    assert_eq!(lit("a = TRUE"), LiteralValue::Bool(true));
    assert_eq!(lit("a = false"), LiteralValue::Bool(false));
    assert_eq!(lit("a = 'ünï 😀'"), LiteralValue::String("ünï 😀".into()));
}

#[test]
fn keywords_are_case_insensitive_and_precedence_is_not_and_or() {
    let q = parse("a = 1 or B = 2 AnD not c = 3").unwrap();
    let Some(Expr::Or(parts)) = &q.filter else { panic!("{q:?}") };
    assert_eq!(parts.len(), 2);
    let Expr::And(and) = &parts[1] else { panic!("{parts:?}") };
    assert!(matches!(&and[1], Expr::Not(_)));
    // Parentheses override.
    let q = parse("(a = 1 OR b = 2) AND c = 3").unwrap();
    let Some(Expr::And(parts)) = &q.filter else { panic!("{q:?}") };
    assert!(matches!(&parts[0], Expr::Or(_)));
    // NOT NOT is two negations.
    let q = parse("NOT NOT a = 1").unwrap();
    assert!(matches!(&q.filter, Some(Expr::Not(inner)) if matches!(**inner, Expr::Not(_))));
}

#[test]
fn in_between_starts_with_is_null() {
    let q = parse("a IN ('x', 'y') AND b NOT IN (1) AND c BETWEEN 1 AND 5 AND d STARTS_WITH 'p' AND e IS NULL AND f is not null").unwrap();
    let Some(Expr::And(parts)) = &q.filter else { panic!("{q:?}") };
    assert_eq!(parts.len(), 6);
    assert!(matches!(pred(&parts[0]).1, Test::In { negated: false, values } if values.len() == 2));
    assert!(matches!(pred(&parts[1]).1, Test::In { negated: true, .. }));
    assert!(matches!(pred(&parts[2]).1, Test::Between(..)));
    assert!(matches!(pred(&parts[3]).1, Test::StartsWith(_)));
    assert!(matches!(pred(&parts[4]).1, Test::IsNull { negated: false }));
    assert!(matches!(pred(&parts[5]).1, Test::IsNull { negated: true }));
}

#[test]
fn order_by_and_backquoted_names() {
    let q = parse("ORDER BY created").unwrap();
    assert!(q.filter.is_none());
    let o = q.order.unwrap();
    assert_eq!((o.attribute.name.as_str(), o.direction), ("created", Direction::Asc));
    let q = parse("`odd name` = 'x' order by `a``b` desc").unwrap();
    assert_eq!(pred(q.filter.as_ref().unwrap()).0, "odd name");
    let o = q.order.unwrap();
    assert_eq!((o.attribute.name.as_str(), o.direction), ("a`b", Direction::Desc));
    // A keyword is not an attribute unless backquoted.
    assert!(parse("and = 1").is_err());
    assert!(parse("`and` = 1").is_ok());
    // Keywords need a word boundary: `order_id` and `notes` are attributes.
    assert!(parse("order_id = 1 AND notes = 'n'").is_ok());
    assert!(parse("").unwrap().filter.is_none());
    assert!(parse("   ").unwrap().filter.is_none());
}

#[test]
fn syntax_errors_point_at_the_place() {
    let e = parse("workflow = ").unwrap_err();
    assert_eq!(e.code.as_str(), "INVALID_QUERY");
    assert_eq!((e.position, e.line, e.column), (11, 1, 12));
    assert!(e.message.contains("a value"), "{}", e.message);
    let e = parse("a = 1 AND\n  b == 2").unwrap_err();
    assert_eq!((e.line, e.column), (2, 6), "{e}");
    let e = parse("a = 'unterminated").unwrap_err();
    assert_eq!(e.position, 4, "{e}");
    let e = parse("é = 1 AND ü").unwrap_err();
    assert_eq!(e.position, 0, "non-ASCII is not an identifier: {e}");
    let e = parse("a = 99999999999999999999").unwrap_err();
    assert_eq!(e.position, 4);
    assert!(e.message.contains("64-bit"), "{e}");
    assert!(parse("a = 1 ORDER BY").is_err());
    assert!(parse("a = 1 ORDER BY b c").is_err());
    assert!(parse("a IN ()").is_err());
    assert!(parse("(a = 1").is_err());
}

#[test]
fn limits_are_named() {
    let long = format!("a = '{}'", "x".repeat(MAX_QUERY_BYTES));
    let e = parse(&long).unwrap_err();
    assert!(e.message.contains("MAX_QUERY_BYTES"), "{e}");
    assert_eq!(e.position, MAX_QUERY_BYTES);

    let deep = format!("{}a = 1{}", "(".repeat(MAX_DEPTH + 1), ")".repeat(MAX_DEPTH + 1));
    let e = parse(&deep).unwrap_err();
    assert!(e.message.contains("MAX_DEPTH"), "{e}");
    assert_eq!(e.position, MAX_DEPTH);
    let ok = format!("{}a = 1{}", "(".repeat(MAX_DEPTH), ")".repeat(MAX_DEPTH));
    assert!(parse(&ok).is_ok());
    // Parentheses inside strings do not count.
    assert!(parse(&format!("a = '{}'", "(".repeat(100))).is_ok());

    let many = vec!["a = 1"; MAX_PREDICATES + 1].join(" OR ");
    let e = parse(&many).unwrap_err();
    assert!(e.message.contains("MAX_PREDICATES"), "{e}");
    assert_eq!(e.position, MAX_PREDICATES * "a = 1 OR ".len());
    assert!(parse(&vec!["a = 1"; MAX_PREDICATES].join(" OR ")).is_ok());
    // A long NOT chain is no recursion.
    assert!(parse(&format!("{}a = 1", "NOT ".repeat(900))).is_ok());
}
