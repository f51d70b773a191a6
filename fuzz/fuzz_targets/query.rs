//! Arbitrary text as an execution list query (`ListExecutionsRequest.query`): parsed,
//! type-checked against the system attributes and one declared search attribute of each
//! type, and compiled for both SQL dialects. Errors are fine when they point inside the
//! input (position on a char boundary, line and column from 1); a query that compiles
//! binds exactly as many values as its SQL has placeholders. Panics, stack overflows and
//! timeouts are findings.
#![no_main]

use libfuzzer_sys::fuzz_target;
use orbit_query::{compile, parse_and_check, Catalog, Dialect, SearchType};
use std::sync::OnceLock;

fn catalog() -> &'static Catalog {
    static CATALOG: OnceLock<Catalog> = OnceLock::new();
    CATALOG.get_or_init(|| {
        Catalog::with_search([
            ("customer", SearchType::Keyword),
            ("note", SearchType::Text),
            ("attempts", SearchType::Int),
            ("amount", SearchType::Double),
            ("vip", SearchType::Bool),
            ("due", SearchType::Datetime),
            ("tags", SearchType::KeywordList),
        ])
    })
}

fuzz_target!(|data: &[u8]| {
    let Ok(input) = std::str::from_utf8(data) else { return };
    match parse_and_check(input, catalog()) {
        Err(e) => {
            assert!(e.position <= input.len(), "position {} past {}", e.position, input.len());
            assert!(input.is_char_boundary(e.position));
            assert!(e.line >= 1 && e.column >= 1);
        }
        Ok(checked) => {
            let sql = compile(&checked, Dialect::Postgres, 1);
            let n = sql.params.len();
            let text = format!("{} {}", sql.where_sql, sql.order_sql.unwrap_or_default());
            assert!(!text.contains('\''), "a literal in the SQL text: {text}");
            assert_eq!(text.contains(&format!("${n}::")), n > 0, "{text}");
            assert!(!text.contains(&format!("${}::", n + 1)), "{text}");
            let lite = compile(&checked, Dialect::Sqlite, 1);
            assert_eq!(lite.params, sql.params);
        }
    }
});
