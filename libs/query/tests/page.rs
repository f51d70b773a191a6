//! Keyset pages in any order (`compile_page`), the attributes a count groups by
//! (`group_by`), and the failure attributes.

use orbit_query::{
    compile_page, group_by, groupable_names, parse_and_check, Catalog, Dialect, Keyset, SortValue,
    SqlValue, MAX_GROUP_BY,
};

fn page(q: &str, dialect: Dialect, after: Option<&Keyset>) -> orbit_query::Sql {
    compile_page(&parse_and_check(q, &Catalog::system()).unwrap(), dialect, 8, after)
}

fn after(value: SortValue) -> Keyset {
    Keyset { value, execution_id: "e7".into() }
}

#[test]
fn a_first_page_orders_by_the_attribute_then_the_id() {
    let pg = page("workflow = 'a' ORDER BY closed DESC", Dialect::Postgres, None);
    assert_eq!(pg.where_sql, "workflow = $8::text");
    assert_eq!(pg.order_sql.as_deref(), Some("closed_at DESC NULLS LAST, execution_id DESC"));
    let lite = page("ORDER BY workflow", Dialect::Sqlite, None);
    assert_eq!(lite.where_sql, "1 = 1");
    assert_eq!(lite.order_sql.as_deref(), Some("workflow ASC, execution_id ASC"));
}

#[test]
fn the_keyset_continues_after_the_last_row_with_nulls_last() {
    // A non-nullable attribute: a row-value comparison alone.
    let pg = page(
        "ORDER BY workflow DESC",
        Dialect::Postgres,
        Some(&after(SortValue::Text("w".into()))),
    );
    assert_eq!(pg.where_sql, "1 = 1 AND (workflow, execution_id) < ($8::text, $9::text)");
    assert_eq!(pg.params, vec![SqlValue::Text("w".into()), SqlValue::Text("e7".into())]);
    // A nullable one: the NULLs come after every value, in both directions.
    let lite = page(
        "status = 'FAILED' ORDER BY closed ASC",
        Dialect::Sqlite,
        Some(&after(SortValue::Int(5))),
    );
    assert_eq!(
        lite.where_sql,
        "status = ?8 AND ((closed_at, execution_id) > (?9, ?10) OR closed_at IS NULL)"
    );
    assert_eq!(lite.params[1..], [SqlValue::Int(5), SqlValue::Text("e7".into())]);
    let desc = page("ORDER BY duration DESC", Dialect::Postgres, Some(&after(SortValue::Int(5))));
    assert_eq!(
        desc.where_sql,
        "1 = 1 AND (((closed_at - created_at), execution_id) < ($8::bigint, $9::text) \
         OR (closed_at - created_at) IS NULL)"
    );
    // Past the last value: among the NULLs, by id.
    let nulls = page("ORDER BY failed_step DESC", Dialect::Sqlite, Some(&after(SortValue::Null)));
    assert_eq!(nulls.where_sql, "1 = 1 AND (failed_step IS NULL AND execution_id < ?8)");
    assert_eq!(nulls.order_sql.as_deref(), Some("failed_step DESC NULLS LAST, execution_id DESC"));
}

#[test]
fn counts_group_by_bounded_keyword_and_status_attributes() {
    assert_eq!(
        groupable_names(),
        [
            "workflow",
            "version",
            "status",
            "schedule",
            "parent",
            "root",
            "failed_step",
            "error_code"
        ]
    );
    let attrs = group_by(&["status", "failed_step"]).unwrap();
    assert_eq!(attrs.iter().map(|a| a.column).collect::<Vec<_>>(), ["status", "failed_step"]);
    assert!(group_by::<&str>(&[]).unwrap().is_empty());
    for (names, want) in [
        (&["execution_id"][..], "cannot group by \"execution_id\""),
        (&["created"][..], "cannot group by \"created\""),
        (&["nope"][..], "groupable attributes: workflow"),
        (&["status", "status"][..], "\"status\" is named twice"),
        (&["status", "workflow", "version", "root"][..], "at most 3"),
    ] {
        let e = group_by(names).unwrap_err();
        assert!(e.contains(want), "{names:?}: {e}");
    }
    assert_eq!(MAX_GROUP_BY, 3);
}

#[test]
fn failure_attributes_are_nullable_keywords() {
    let q = "failed_step = 'charge' AND error_code STARTS_WITH 'CARD' AND NOT failed_step IN ('x')";
    let sql = page(q, Dialect::Sqlite, None);
    assert_eq!(
        sql.where_sql,
        "(failed_step = ?8 AND substr(error_code, 1, length(?9)) = ?9 \
         AND (failed_step IS NULL OR failed_step NOT IN (?10)))"
    );
    assert!(parse_and_check("error_code IS NULL ORDER BY error_code", &Catalog::system()).is_ok());
}
