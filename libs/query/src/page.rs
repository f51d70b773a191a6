//! Keyset paging in any order: [`compile_page`] writes a query's filter ANDed with "after
//! the last row of the previous page" and the full `ORDER BY` (the sort attribute, then
//! `execution_id` as the tie-breaker, both in the query's direction).
//!
//! NULLs sort last in both directions (an open execution's `closed` comes after every
//! closed one, ascending or descending), so the keyset after a row is:
//!
//! | last row's value | `ASC` | `DESC` |
//! |---|---|---|
//! | `v` | `(c, id) > (v, last) OR c IS NULL` | `(c, id) < (v, last) OR c IS NULL` |
//! | NULL | `c IS NULL AND id > last` | `c IS NULL AND id < last` |
//!
//! (`OR c IS NULL` only for a nullable attribute). The row-value comparison lets both
//! backends walk an index on (`c`, `execution_id`).

use crate::ast::Direction;
use crate::check::{Checked, SqlValue, Target};
use crate::compile::{compile, Dialect, Sql};

/// The sort value of a page's last row, carried by the page token.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SortValue {
    /// The attribute is absent (NULL).
    Null,
    /// A text value (keywords, status names).
    Text(String),
    /// An integer value (times and durations in milliseconds).
    Int(i64),
}

/// Where the previous page ended: its last row's sort value and id.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Keyset {
    /// The sort value.
    pub value: SortValue,
    /// The execution id (the tie-breaker).
    pub execution_id: String,
}

/// `checked` (which must order: `checked.order` is `Some`) compiled for one page after
/// `after`: `where_sql` is the filter ANDed with the keyset, `order_sql` the whole order
/// with the `execution_id` tie-breaker. Placeholders are numbered from `first_param`.
/// Without an order it is [`compile`] with `execution_id DESC` as the order.
#[must_use]
pub fn compile_page(
    checked: &Checked,
    dialect: Dialect,
    first_param: usize,
    after: Option<&Keyset>,
) -> Sql {
    let mut sql = compile(checked, dialect, first_param);
    let Some(order) = &checked.order else {
        sql.order_sql = Some("execution_id DESC".into());
        return sql;
    };
    let (dir, after_op) = match order.direction {
        Direction::Asc => ("ASC", ">"),
        Direction::Desc => ("DESC", "<"),
    };
    let (column, nullable) = match &order.target {
        Target::System(a) => (a.column.to_string(), a.nullable),
        // Search attributes sort by the compiled subquery, always nullable.
        Target::Search { .. } => {
            let term = sql.order_sql.clone().unwrap_or_default();
            let end = term.rfind(&format!(" {dir} NULLS LAST")).unwrap_or(term.len());
            (term[..end].to_string(), true)
        }
    };
    let nulls = if nullable { " NULLS LAST" } else { "" };
    sql.order_sql = Some(format!("{column} {dir}{nulls}, execution_id {dir}"));
    let Some(after) = after else { return sql };
    let mut next = first_param + sql.params.len();
    let mut bind = |value: SqlValue, params: &mut Vec<SqlValue>| {
        let cast = match &value {
            SqlValue::Int(_) => "bigint",
            _ => "text",
        };
        params.push(value);
        let p = match dialect {
            Dialect::Postgres => format!("${next}::{cast}"),
            Dialect::Sqlite => format!("?{next}"),
        };
        next += 1;
        p
    };
    let value = match &after.value {
        SortValue::Null => None,
        SortValue::Text(s) => Some(SqlValue::Text(s.clone())),
        SortValue::Int(n) => Some(SqlValue::Int(*n)),
    };
    let keyset = match value {
        None => {
            let id = bind(SqlValue::Text(after.execution_id.clone()), &mut sql.params);
            format!("({column} IS NULL AND execution_id {after_op} {id})")
        }
        Some(value) => {
            let v = bind(value, &mut sql.params);
            let id = bind(SqlValue::Text(after.execution_id.clone()), &mut sql.params);
            let rows = format!("({column}, execution_id) {after_op} ({v}, {id})");
            if nullable {
                format!("({rows} OR {column} IS NULL)")
            } else {
                rows
            }
        }
    };
    sql.where_sql = format!("{} AND {keyset}", sql.where_sql);
    sql
}
