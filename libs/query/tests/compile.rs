//! Golden SQL for both dialects: placeholders numbered from the caller's first, NOT pushed
//! down with NULL-inclusive negative forms, search attributes as EXISTS subqueries.

use orbit_query::{compile, parse_and_check, Catalog, Dialect, SearchType, Sql, SqlValue};

fn catalog() -> Catalog {
    Catalog::with_search([
        ("customer", SearchType::Keyword),
        ("amount", SearchType::Double),
        ("tags", SearchType::KeywordList),
        ("vip", SearchType::Bool),
    ])
}

fn sql(q: &str, dialect: Dialect) -> Sql {
    compile(&parse_and_check(q, &catalog()).unwrap(), dialect, 3)
}

fn t(s: &str) -> SqlValue {
    SqlValue::Text(s.into())
}

#[test]
fn system_predicates() {
    let q = "workflow = 'billing' AND status IN ('failed', 'TIMED_OUT') AND created > '1970-01-02'";
    let pg = sql(q, Dialect::Postgres);
    assert_eq!(
        pg.where_sql,
        "(workflow = $3::text AND status IN ($4::text, $5::text) AND created_at > $6::bigint)"
    );
    assert_eq!(
        pg.params,
        vec![t("billing"), t("FAILED"), t("TIMED_OUT"), SqlValue::Int(86_400_000)]
    );
    let lite = sql(q, Dialect::Sqlite);
    assert_eq!(lite.where_sql, "(workflow = ?3 AND status IN (?4, ?5) AND created_at > ?6)");
    assert_eq!(lite.params, pg.params);
    assert_eq!(pg.order_sql, None);
}

#[test]
fn not_is_pushed_down_and_nullable_negations_include_null() {
    let pg = sql("NOT (parent = 'p' OR duration > 1000) AND workflow != 'w'", Dialect::Postgres);
    assert_eq!(
        pg.where_sql,
        "(((parent_id IS NULL OR parent_id <> $3::text) AND ((closed_at - created_at) IS NULL OR \
         (closed_at - created_at) <= $4::bigint)) AND workflow <> $5::text)"
    );
    let lite = sql("parent != 'p' OR schedule NOT IN ('a') OR NOT closed IS NULL", Dialect::Sqlite);
    assert_eq!(
        lite.where_sql,
        "((parent_id IS NULL OR parent_id <> ?3) OR (schedule_id IS NULL OR schedule_id NOT IN (?4)) \
         OR closed_at IS NOT NULL)"
    );
    let lite = sql("NOT workflow BETWEEN 'a' AND 'b'", Dialect::Sqlite);
    assert_eq!(lite.where_sql, "workflow NOT BETWEEN ?3 AND ?4");
}

#[test]
fn starts_with_per_dialect() {
    assert_eq!(
        sql("workflow STARTS_WITH 'bill'", Dialect::Postgres).where_sql,
        "starts_with(workflow, $3::text)"
    );
    assert_eq!(
        sql("NOT workflow STARTS_WITH 'bill'", Dialect::Sqlite).where_sql,
        "NOT (substr(workflow, 1, length(?3)) = ?3)"
    );
}

#[test]
fn search_attributes_are_exists_subqueries() {
    let pg = sql("customer = 'acme' AND amount >= 10 AND tags != 'x'", Dialect::Postgres);
    let head = "SELECT 1 FROM execution_search s WHERE s.execution_id = executions.execution_id";
    assert_eq!(
        pg.where_sql,
        format!(
            "(EXISTS ({head} AND s.name = $3::text AND s.kw = $4::text) AND EXISTS ({head} AND \
             s.name = $5::text AND s.num >= $6::float8) AND NOT EXISTS ({head} AND s.name = \
             $7::text AND s.kw = $8::text))"
        )
    );
    assert_eq!(
        pg.params,
        vec![t("customer"), t("acme"), t("amount"), SqlValue::Double(10.0), t("tags"), t("x")]
    );
    let lite = sql("vip IS NULL OR NOT customer IS NULL", Dialect::Sqlite);
    assert_eq!(
        lite.where_sql,
        format!("(NOT EXISTS ({head} AND s.name = ?3) OR EXISTS ({head} AND s.name = ?4))")
    );
}

#[test]
fn sqlite_drives_from_one_equality_on_a_keyword_attribute() {
    let head = "SELECT 1 FROM execution_search s WHERE s.execution_id = executions.execution_id";
    let lite = sql("amount >= 10 AND customer = 'acme' AND tags = 'x'", Dialect::Sqlite);
    assert_eq!(
        lite.where_sql,
        format!(
            "(EXISTS ({head} AND s.name = ?3 AND s.num >= ?4) AND executions.execution_id IN \
             (SELECT s.execution_id FROM execution_search s WHERE s.name = ?5 AND s.kw = ?6) \
             AND EXISTS ({head} AND s.name = ?7 AND s.kw = ?8))"
        ),
        "the first keyword equality drives; the others stay EXISTS"
    );
    assert_eq!(
        lite.params,
        vec![t("amount"), SqlValue::Double(10.0), t("customer"), t("acme"), t("tags"), t("x")]
    );
    // Without a keyword equality, a bounded test on a scalar attribute drives.
    let scalar = sql("vip = TRUE AND amount > 5 AND amount BETWEEN 1 AND 2", Dialect::Sqlite);
    assert_eq!(
        scalar.where_sql,
        format!(
            "(EXISTS ({head} AND s.name = ?3 AND s.flag = ?4) AND EXISTS ({head} AND s.name = \
             ?5 AND s.num > ?6) AND executions.execution_id IN (SELECT s.execution_id FROM \
             execution_search s WHERE s.name = ?7 AND s.num BETWEEN ?8 AND ?9))"
        )
    );
    // Not every match passes it (OR, NOT), or it is not selective by its form: no driver.
    for q in [
        "customer = 'a' OR status = 'FAILED'",
        "NOT customer = 'a'",
        "customer != 'a'",
        "amount > 1",
        "customer IS NOT NULL",
        "vip = TRUE",
    ] {
        let where_sql = sql(q, Dialect::Sqlite).where_sql;
        assert!(!where_sql.contains(" IN (SELECT"), "{q}: {where_sql}");
    }
    // PostgreSQL plans EXISTS as a semi-join itself.
    let pg = sql("customer = 'acme'", Dialect::Postgres).where_sql;
    assert!(pg.starts_with("EXISTS ("), "{pg}");
}

#[test]
fn order_by() {
    let pg = sql("ORDER BY created DESC", Dialect::Postgres);
    assert_eq!(
        (pg.where_sql.as_str(), pg.order_sql.as_deref()),
        ("1 = 1", Some("created_at DESC"))
    );
    assert_eq!(
        sql("ORDER BY closed", Dialect::Sqlite).order_sql.as_deref(),
        Some("closed_at ASC NULLS LAST")
    );
    let lite = sql("workflow = 'w' ORDER BY amount DESC", Dialect::Sqlite);
    assert_eq!(
        lite.order_sql.as_deref(),
        Some(
            "(SELECT s.num FROM execution_search s WHERE s.execution_id = executions.execution_id \
             AND s.name = ?4) DESC NULLS LAST"
        )
    );
    assert_eq!(lite.params, vec![t("w"), t("amount")]);
}
