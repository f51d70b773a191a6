//! Hostile strings travel only as parameters: the SQL text never contains a byte of a
//! literal, whatever it holds; attribute names come from the catalog only.

use orbit_query::{compile, parse_and_check, Catalog, Dialect, SearchType, SqlValue};

const HOSTILE: &[&str] = &[
    "' OR 1=1 --",
    "'); DROP TABLE executions; --",
    "x\" OR \"1\"=\"1",
    "$1; SELECT pg_sleep(10)",
    "?1) OR (1=1",
    "\\'; --",
    "ünïcödé ∀ 😀 \u{202e}",
    "/* comment */",
    "a\nb\r\nc\t",
];

/// `s` as a query string literal (`'` doubled).
fn quoted(s: &str) -> String {
    format!("'{}'", s.replace('\'', "''"))
}

#[test]
fn hostile_values_are_parameters() {
    let catalog = Catalog::with_search([("customer", SearchType::Keyword)]);
    for value in HOSTILE {
        for attr in ["workflow", "customer"] {
            for form in ["{a} = {v}", "{a} IN ({v}, {v})", "{a} STARTS_WITH {v}", "NOT {a} != {v}"]
            {
                let q = form.replace("{a}", attr).replace("{v}", &quoted(value));
                let checked = parse_and_check(&q, &catalog).unwrap_or_else(|e| panic!("{q}: {e}"));
                for dialect in [Dialect::Postgres, Dialect::Sqlite] {
                    let sql = compile(&checked, dialect, 1);
                    assert!(
                        sql.params.contains(&SqlValue::Text((*value).to_string())),
                        "{q}: {:?}",
                        sql.params
                    );
                    for needle in [*value, "DROP", "1=1", "--", "pg_sleep", "comment", "ü"] {
                        assert!(
                            !sql.where_sql.contains(needle),
                            "{q} leaked {needle:?}: {}",
                            sql.where_sql
                        );
                    }
                    assert!(!sql.where_sql.contains('\''), "{}", sql.where_sql);
                }
            }
        }
    }
}

#[test]
fn hostile_attribute_names_are_refused() {
    let catalog = Catalog::system();
    for q in [
        "`workflow; DROP TABLE executions` = 'a'",
        "`1=1 OR workflow` = 'a'",
        "workflow = 'a' OR 1=1",
        "workflow = 'a'; DROP TABLE executions",
        "workflow = 'a' -- comment",
        "workflow = 'a\0'",
        "\0",
    ] {
        let e = parse_and_check(q, &catalog).expect_err(q);
        assert!(e.position <= q.len());
        assert_eq!(e.code.as_str(), "INVALID_QUERY");
    }
}

#[test]
fn the_sql_text_is_made_of_catalog_names_operators_and_placeholders() {
    let q = "workflow = 'a' AND (status IN ('FAILED') OR NOT duration BETWEEN 1 AND '5m') \
             AND parent IS NULL ORDER BY closed DESC";
    let checked = parse_and_check(q, &Catalog::system()).unwrap();
    let sql = compile(&checked, Dialect::Postgres, 1);
    let words: Vec<&str> = sql
        .where_sql
        .split(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
        .filter(|w| !w.is_empty())
        .collect();
    let allowed = [
        "workflow",
        "status",
        "closed_at",
        "created_at",
        "parent_id",
        "IN",
        "OR",
        "AND",
        "NOT",
        "BETWEEN",
        "IS",
        "NULL",
        "text",
        "bigint",
    ];
    for w in words {
        assert!(
            allowed.contains(&w) || w.chars().all(|c| c.is_ascii_digit()),
            "{w} in {}",
            sql.where_sql
        );
    }
}
