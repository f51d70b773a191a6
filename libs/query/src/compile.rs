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
//!
//! On SQLite one predicate is written `execution_id IN (SELECT s.execution_id FROM
//! execution_search s WHERE ...)` instead: the *driver*, a test that every match must pass
//! (reached from the top through `AND`s only) and that is selective by its form — the first
//! `=`, `IN` or `STARTS_WITH` on a keyword, text or keyword-list attribute, else the first
//! `=`, `IN` or `BETWEEN` on an int, double or datetime one (never a bool, nor an open range
//! like `amount > 10`, which usually matches most executions). SQLite never turns a correlated
//! `EXISTS` into a join, so without it a query whose only selective part is a search
//! attribute scans every execution; with it the planner starts from the attribute's index
//! (`execution_search_kw`) and looks each execution up by id. Only one predicate is written
//! so: SQLite materializes an `IN` list it does not drive from, and a second, unselective
//! one (`amount > 10`) would be read whole. PostgreSQL plans `EXISTS` as a semi-join from
//! either side by its statistics, so it keeps `EXISTS` everywhere.

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
    let driver = match dialect {
        Dialect::Sqlite => checked.filter.as_ref().and_then(driver),
        Dialect::Postgres => None,
    };
    let mut w = Writer { dialect, first_param, params: Vec::new(), driver };
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

/// The SQLite driver of `cond` (see the module docs): a predicate every match passes,
/// selective by its form — an equality-like test on a keyword, text or keyword-list
/// attribute first, else an equality, `IN` or `BETWEEN` on an int, double or datetime one.
fn driver(cond: &Cond) -> Option<&CheckedPredicate> {
    candidates(cond, true).or_else(|| candidates(cond, false))
}

/// The first predicate of `cond`'s top-level `AND`s that may drive, of the keyword tier
/// (`kw`) or of the scalar tier.
fn candidates(cond: &Cond, kw: bool) -> Option<&CheckedPredicate> {
    match cond {
        Cond::Predicate(p) => {
            let Target::Search { ty, .. } = &p.target else { return None };
            let drives = match ty {
                SearchType::Keyword | SearchType::Text | SearchType::KeywordList => {
                    kw && matches!(
                        p.test,
                        CheckedTest::Compare(CmpOp::Eq, _)
                            | CheckedTest::In { negated: false, .. }
                            | CheckedTest::StartsWith(_)
                    )
                }
                SearchType::Int | SearchType::Double | SearchType::Datetime => {
                    !kw && matches!(
                        p.test,
                        CheckedTest::Compare(CmpOp::Eq, _)
                            | CheckedTest::In { negated: false, .. }
                            | CheckedTest::Between(..)
                    )
                }
                SearchType::Bool => false,
            };
            drives.then_some(p)
        }
        Cond::And(parts) => parts.iter().find_map(|c| candidates(c, kw)),
        Cond::Or(_) | Cond::Not(_) => None,
    }
}

struct Writer<'q> {
    dialect: Dialect,
    first_param: usize,
    params: Vec<SqlValue>,
    /// The predicate written as an `IN` list (SQLite only).
    driver: Option<&'q CheckedPredicate>,
}

impl Writer<'_> {
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
            Target::Search { name, ty }
                if !neg && self.driver.is_some_and(|d| std::ptr::eq(d, p)) =>
            {
                let name = self.param(SqlValue::Text(name.clone()));
                let column = format!("s.{}", search_column(*ty));
                let test = self.test(&column, &p.test, false);
                format!(
                    "executions.execution_id IN (SELECT s.execution_id FROM execution_search s \
                     WHERE s.name = {name} AND {test})"
                )
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
