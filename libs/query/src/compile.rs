//! A [`Checked`] query to parameterised SQL on the `executions` table, for PostgreSQL
//! (`$n::type`) or SQLite (`?n`). Every value is a bound parameter; the SQL text holds only
//! column names from the catalog, operators and placeholders.
//!
//! NOT is pushed down to the predicates (De Morgan), so each predicate is written in its
//! positive or negative form and SQL's NULL never leaks through a NOT: the negative form
//! of a test on a nullable attribute also holds when the attribute is absent
//! (`parent != 'a'` holds for a root execution, as `NOT parent = 'a'` does). `IS NULL`
//! and `IS NOT NULL` are each other's negation.
//!
//! Search attributes read `execution_search` (see the crate docs) through one `EXISTS`
//! per predicate; the negative form is `NOT EXISTS` (no value matches, or none is set).

use crate::ast::{CmpOp, Direction};
use crate::catalog::SearchType;
use crate::check::{Checked, CheckedPredicate, CheckedTest, Cond, SqlValue, Target};

/// The SQL dialect.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Dialect {
    /// `$n` placeholders with casts.
    Postgres,
    /// `?n` placeholders.
    Sqlite,
}

/// The compiled query.
#[derive(Debug, Clone, PartialEq)]
pub struct Sql {
    /// The condition for `WHERE` (`1 = 1` when the query has no filter).
    pub where_sql: String,
    /// The `ORDER BY` terms when the query orders (without the words `ORDER BY` and
    /// without a tie-breaker: the caller adds its keyset columns).
    pub order_sql: Option<String>,
    /// The values of the placeholders, the first numbered `first_param`.
    pub params: Vec<SqlValue>,
}

/// Compiles `checked`; placeholders are numbered from `first_param` (the caller's own
/// parameters come before).
#[must_use]
pub fn compile(checked: &Checked, dialect: Dialect, first_param: usize) -> Sql {
    let mut w = Writer { dialect, first_param, params: Vec::new() };
    let where_sql = match &checked.filter {
        Some(cond) => w.cond(cond, false),
        None => "1 = 1".to_string(),
    };
    let order_sql = checked.order.as_ref().map(|o| {
        let dir = match o.direction {
            Direction::Asc => "ASC",
            Direction::Desc => "DESC",
        };
        match &o.target {
            Target::System(a) if !a.nullable => format!("{} {dir}", a.column),
            Target::System(a) => format!("{} {dir} NULLS LAST", a.column),
            Target::Search { name, ty } => {
                let name = w.param(SqlValue::Text(name.clone()));
                format!(
                    "(SELECT s.{} FROM execution_search s WHERE s.execution_id = \
                     executions.execution_id AND s.name = {name}) {dir} NULLS LAST",
                    search_column(*ty)
                )
            }
        }
    });
    Sql { where_sql, order_sql, params: w.params }
}

/// The `execution_search` column that holds values of a type.
#[must_use]
pub fn search_column(ty: SearchType) -> &'static str {
    match ty {
        SearchType::Keyword | SearchType::Text | SearchType::KeywordList => "kw",
        SearchType::Int => "ival",
        SearchType::Double => "num",
        SearchType::Datetime => "ts",
        SearchType::Bool => "flag",
    }
}

struct Writer {
    dialect: Dialect,
    first_param: usize,
    params: Vec<SqlValue>,
}

impl Writer {
    /// Binds a value and returns its placeholder.
    fn param(&mut self, value: SqlValue) -> String {
        let n = self.first_param + self.params.len();
        let cast = match &value {
            SqlValue::Text(_) => "text",
            SqlValue::Int(_) => "bigint",
            SqlValue::Double(_) => "float8",
            SqlValue::Bool(_) => "boolean",
        };
        self.params.push(value);
        match self.dialect {
            Dialect::Postgres => format!("${n}::{cast}"),
            Dialect::Sqlite => format!("?{n}"),
        }
    }

    /// `cond`, negated when `neg`.
    fn cond(&mut self, cond: &Cond, neg: bool) -> String {
        match cond {
            Cond::Not(inner) => self.cond(inner, !neg),
            Cond::And(parts) | Cond::Or(parts) => {
                let and = matches!(cond, Cond::And(_)) != neg;
                let parts: Vec<String> = parts.iter().map(|p| self.cond(p, neg)).collect();
                format!("({})", parts.join(if and { " AND " } else { " OR " }))
            }
            Cond::Predicate(p) => self.predicate(p, neg),
        }
    }

    fn predicate(&mut self, p: &CheckedPredicate, neg: bool) -> String {
        // The written form's own negation (`!=`, `NOT IN`, `IS NOT NULL`) folds into `neg`.
        let neg = neg
            != match &p.test {
                CheckedTest::Compare(op, _) => *op == CmpOp::Ne,
                CheckedTest::In { negated, .. } | CheckedTest::IsNull { negated } => *negated,
                _ => false,
            };
        match &p.target {
            Target::System(a) => {
                let expr = a.column;
                if let CheckedTest::IsNull { .. } = p.test {
                    return format!("{expr} IS {}NULL", if neg { "NOT " } else { "" });
                }
                let test = self.test(expr, &p.test, neg);
                if neg && a.nullable {
                    format!("({expr} IS NULL OR {test})")
                } else {
                    test
                }
            }
            Target::Search { name, ty } => {
                let name = self.param(SqlValue::Text(name.clone()));
                let head = format!(
                    "EXISTS (SELECT 1 FROM execution_search s WHERE s.execution_id = \
                     executions.execution_id AND s.name = {name}"
                );
                if let CheckedTest::IsNull { .. } = p.test {
                    let not = if neg { "" } else { "NOT " };
                    return format!("{not}{head})");
                }
                let column = format!("s.{}", search_column(*ty));
                let test = self.test(&column, &p.test, false);
                let not = if neg { "NOT " } else { "" };
                format!("{not}{head} AND {test})")
            }
        }
    }

    /// The test on `expr` (never NULL-inclusive: the caller adds that), negated when
    /// `neg`; `!=` and `NOT IN` arrive as `=` / `IN` with `neg` already folded.
    fn test(&mut self, expr: &str, test: &CheckedTest, neg: bool) -> String {
        match test {
            CheckedTest::Compare(op, v) => {
                let op = match (op, neg) {
                    (CmpOp::Eq | CmpOp::Ne, false) => CmpOp::Eq,
                    (CmpOp::Eq | CmpOp::Ne, true) => CmpOp::Ne,
                    (op, false) => *op,
                    (CmpOp::Lt, true) => CmpOp::Ge,
                    (CmpOp::Le, true) => CmpOp::Gt,
                    (CmpOp::Gt, true) => CmpOp::Le,
                    (CmpOp::Ge, true) => CmpOp::Lt,
                };
                let p = self.param(v.clone());
                format!("{expr} {} {p}", op.sql())
            }
            CheckedTest::In { values, .. } => {
                let list: Vec<String> = values.iter().map(|v| self.param(v.clone())).collect();
                let not = if neg { "NOT " } else { "" };
                format!("{expr} {not}IN ({})", list.join(", "))
            }
            CheckedTest::Between(low, high) => {
                let (low, high) = (self.param(low.clone()), self.param(high.clone()));
                let not = if neg { "NOT " } else { "" };
                format!("{expr} {not}BETWEEN {low} AND {high}")
            }
            CheckedTest::StartsWith(prefix) => {
                let p = self.param(SqlValue::Text(prefix.clone()));
                let test = match self.dialect {
                    Dialect::Postgres => format!("starts_with({expr}, {p})"),
                    Dialect::Sqlite => format!("substr({expr}, 1, length({p})) = {p}"),
                };
                if neg {
                    format!("NOT ({test})")
                } else {
                    test
                }
            }
            CheckedTest::IsNull { .. } => {
                format!("{expr} IS {}NULL", if neg { "NOT " } else { "" })
            }
        }
    }
}
