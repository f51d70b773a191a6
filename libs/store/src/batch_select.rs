//! The SQL of a batch's selection, the same on both backends: the `WHERE` condition on the
//! `executions` table that a [`BatchSelector`] means, with its ordered parameter values.
//!
//! Each part that is set is ANDed in: the workflow, the version, the statuses (an `IN`
//! list), the caller's workflow patterns (an `OR` of pattern matches; an empty list matches
//! nothing), the query (`orbit-query`'s compiled condition, its placeholders numbered after
//! these), and the walk's position (`execution_id > cursor`). Every value is a bound
//! parameter; the SQL text holds only column names, operators and placeholders.
//!
//! A pattern (`billing.*`: `*` is any run of characters, every other character itself, as
//! in `orbit-auth`) becomes `LIKE … ESCAPE '\'` on PostgreSQL (case-sensitive there) and
//! `GLOB` on SQLite (whose `LIKE` ignores ASCII case), with the other wildcard characters
//! of each escaped so they match themselves.

use crate::batch_job::BatchSelector;
use crate::error::{Result, StoreError};
use orbit_query::{Dialect, SqlValue};

/// A selection's condition and its parameters (the first numbered 1).
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Selection {
    /// The condition for `WHERE`.
    pub where_sql: String,
    /// The placeholders' values, in order.
    pub params: Vec<SqlValue>,
}

impl Selection {
    /// `SELECT execution_id … ORDER BY execution_id LIMIT limit`: the next page of the walk.
    pub(crate) fn page_sql(&self, limit: u32) -> String {
        format!(
            "SELECT execution_id FROM executions WHERE {} ORDER BY execution_id LIMIT {limit}",
            self.where_sql
        )
    }

    /// `SELECT COUNT(*) …`: the batch's total.
    pub(crate) fn count_sql(&self) -> String {
        format!("SELECT COUNT(*) FROM executions WHERE {}", self.where_sql)
    }
}

struct Writer {
    dialect: Dialect,
    params: Vec<SqlValue>,
}

impl Writer {
    fn text(&mut self, value: &str) -> String {
        self.params.push(SqlValue::Text(value.to_string()));
        let n = self.params.len();
        match self.dialect {
            Dialect::Postgres => format!("${n}::text"),
            Dialect::Sqlite => format!("?{n}"),
        }
    }
}

/// The selection of `s` after `after` (in execution-id order) for `dialect`.
///
/// # Errors
/// `s.query` no longer checks (a spec written by another version): `InvalidArgument`.
pub(crate) fn selection(
    s: &BatchSelector,
    catalog: &orbit_query::Catalog,
    after: Option<&str>,
    dialect: Dialect,
) -> Result<Selection> {
    let mut w = Writer { dialect, params: Vec::new() };
    let mut parts: Vec<String> = Vec::new();
    if !s.workflow.is_empty() {
        parts.push(format!("workflow = {}", w.text(&s.workflow)));
    }
    if let Some(version) = &s.version {
        parts.push(format!("version = {}", w.text(version)));
    }
    if !s.statuses.is_empty() {
        let list: Vec<String> = s.statuses.iter().map(|st| w.text(st)).collect();
        parts.push(format!("status IN ({})", list.join(", ")));
    }
    if let Some(patterns) = &s.workflows {
        let tests: Vec<String> = patterns
            .iter()
            .map(|p| match dialect {
                Dialect::Postgres => format!("workflow LIKE {} ESCAPE '\\'", w.text(&like(p))),
                Dialect::Sqlite => format!("workflow GLOB {}", w.text(&glob(p))),
            })
            .collect();
        parts.push(if tests.is_empty() {
            "1 = 0".to_string()
        } else {
            format!("({})", tests.join(" OR "))
        });
    }
    if let Some(after) = after {
        parts.push(format!("execution_id > {}", w.text(after)));
    }
    if let Some(text) = s.query.as_deref().filter(|q| !q.trim().is_empty()) {
        let checked = orbit_query::parse_and_check(text, catalog).map_err(|e| {
            StoreError::InvalidArgument(format!("a batch's query no longer checks: {e}"))
        })?;
        let compiled = orbit_query::compile(&checked, dialect, w.params.len() + 1);
        parts.push(format!("({})", compiled.where_sql));
        w.params.extend(compiled.params);
    }
    let where_sql = if parts.is_empty() { "1 = 1".to_string() } else { parts.join(" AND ") };
    Ok(Selection { where_sql, params: w.params })
}

/// Whether `s`'s query names a search attribute (it does not check against the system
/// attributes alone): then the store reads the declared ones for [`selection`].
pub(crate) fn needs_search(s: &BatchSelector) -> bool {
    s.query.as_deref().is_some_and(|text| {
        !text.trim().is_empty()
            && orbit_query::parse_and_check(text, &orbit_query::Catalog::system()).is_err()
    })
}

/// The catalog of `declared` search attributes (with the system ones).
pub(crate) fn catalog(declared: Vec<crate::SearchAttributeRow>) -> orbit_query::Catalog {
    orbit_query::Catalog::with_search(declared.into_iter().map(|r| (r.name, r.ty)))
}

/// A pattern as a PostgreSQL `LIKE` pattern with `\` as the escape.
fn like(pattern: &str) -> String {
    let mut out = String::with_capacity(pattern.len() + 4);
    for c in pattern.chars() {
        match c {
            '*' => out.push('%'),
            '%' | '_' | '\\' => {
                out.push('\\');
                out.push(c);
            }
            other => out.push(other),
        }
    }
    out
}

/// A pattern as a SQLite `GLOB` pattern (`?` and `[` in brackets match themselves).
fn glob(pattern: &str) -> String {
    let mut out = String::with_capacity(pattern.len() + 4);
    for c in pattern.chars() {
        match c {
            '?' => out.push_str("[?]"),
            '[' => out.push_str("[[]"),
            other => out.push(other),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn text(v: &SqlValue) -> &str {
        match v {
            SqlValue::Text(s) => s,
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn every_part_is_anded_and_every_value_is_a_parameter() {
        let s = BatchSelector {
            workflow: "billing".into(),
            version: Some("2".into()),
            statuses: vec!["RUNNING".into(), "FAILED".into()],
            query: Some("status = 'RUNNING' OR workflow = 'x''; DROP TABLE executions'".into()),
            workflows: Some(vec!["bill*".into()]),
        };
        let sel =
            selection(&s, &orbit_query::Catalog::system(), Some("e-5"), Dialect::Postgres).unwrap();
        assert!(sel.where_sql.starts_with(
            "workflow = $1::text AND version = $2::text AND status IN ($3::text, $4::text) \
             AND (workflow LIKE $5::text ESCAPE '\\') AND execution_id > $6::text AND ("
        ));
        assert!(!sel.where_sql.contains("DROP"), "{}", sel.where_sql);
        let values: Vec<&str> = sel.params.iter().map(text).collect();
        assert_eq!(values[..6], ["billing", "2", "RUNNING", "FAILED", "bill%", "e-5"]);
        assert_eq!(values.len(), 8);
        assert!(sel.where_sql.contains("$7::text") && sel.where_sql.contains("$8::text"));
        let lite = selection(&s, &orbit_query::Catalog::system(), None, Dialect::Sqlite).unwrap();
        assert!(lite.where_sql.contains("workflow GLOB ?5"), "{}", lite.where_sql);
        assert!(lite.where_sql.contains("?6") && !lite.where_sql.contains("?8"));
    }

    #[test]
    fn empty_parts_are_left_out_and_no_pattern_matches_nothing() {
        let everything = BatchSelector::default();
        assert_eq!(
            selection(&everything, &orbit_query::Catalog::system(), None, Dialect::Sqlite)
                .unwrap()
                .where_sql,
            "1 = 1"
        );
        let none = BatchSelector { workflows: Some(vec![]), ..BatchSelector::default() };
        assert_eq!(
            selection(&none, &orbit_query::Catalog::system(), None, Dialect::Postgres)
                .unwrap()
                .where_sql,
            "1 = 0"
        );
        let bad = BatchSelector { query: Some("status = ".into()), ..BatchSelector::default() };
        assert!(matches!(
            selection(&bad, &orbit_query::Catalog::system(), None, Dialect::Postgres),
            Err(StoreError::InvalidArgument(_))
        ));
    }

    #[test]
    fn pattern_wildcards_of_the_backends_match_themselves() {
        assert_eq!(like("a_b%c\\*"), "a\\_b\\%c\\\\%");
        assert_eq!(glob("a?[b]*"), "a[?][[]b]*");
    }
}
