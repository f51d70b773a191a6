//! The type check: a parsed [`Query`] against a [`Catalog`] to a [`Checked`] query whose
//! every predicate names a known attribute, an operator its type allows and values of its
//! type, converted to the values bound as SQL parameters.

use crate::ast::{CmpOp, Direction, Expr, Literal, LiteralValue, Predicate, Query, Test};
use crate::catalog::{AttrType, Catalog, Resolved, SearchType, SystemAttr, STATUS_NAMES};
use crate::error::{QueryError, Span};
use crate::literal::{datetime_ms, duration_ms};

/// A value bound as one SQL parameter. Values never enter the SQL text.
#[derive(Debug, Clone, PartialEq)]
pub enum SqlValue {
    /// `text`
    Text(String),
    /// `bigint` (integers, epoch milliseconds, durations in milliseconds).
    Int(i64),
    /// `double precision`
    Double(f64),
    /// `boolean`
    Bool(bool),
}

/// What a predicate reads.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Target {
    /// A column of `executions`.
    System(&'static SystemAttr),
    /// A declared search attribute (rows of `execution_search`).
    Search {
        /// Its name.
        name: String,
        /// Its type.
        ty: SearchType,
    },
}

impl Target {
    /// Whether the attribute can be absent (NULL column, or no search row).
    #[must_use]
    pub fn nullable(&self) -> bool {
        match self {
            Target::System(a) => a.nullable,
            Target::Search { .. } => true,
        }
    }
}

/// A checked test with its parameter values.
#[derive(Debug, Clone, PartialEq)]
pub enum CheckedTest {
    /// `op value`
    Compare(CmpOp, SqlValue),
    /// `[NOT] IN (values)`
    In {
        /// `NOT IN`.
        negated: bool,
        /// The values.
        values: Vec<SqlValue>,
    },
    /// `BETWEEN low AND high`
    Between(SqlValue, SqlValue),
    /// `STARTS_WITH prefix`
    StartsWith(String),
    /// `IS [NOT] NULL`
    IsNull {
        /// `IS NOT NULL`.
        negated: bool,
    },
}

/// A checked predicate.
#[derive(Debug, Clone, PartialEq)]
pub struct CheckedPredicate {
    /// The attribute.
    pub target: Target,
    /// The test.
    pub test: CheckedTest,
    /// Where it is written.
    pub span: Span,
}

/// A checked condition tree.
#[derive(Debug, Clone, PartialEq)]
pub enum Cond {
    /// All of these.
    And(Vec<Cond>),
    /// Any of these.
    Or(Vec<Cond>),
    /// Not this.
    Not(Box<Cond>),
    /// One predicate.
    Predicate(CheckedPredicate),
}

/// A checked `ORDER BY`.
#[derive(Debug, Clone, PartialEq)]
pub struct CheckedOrder {
    /// The sort attribute.
    pub target: Target,
    /// The direction.
    pub direction: Direction,
    /// Where the attribute is written.
    pub span: Span,
}

/// A query that passed the type check.
#[derive(Debug, Clone, PartialEq)]
pub struct Checked {
    /// The filter; `None` matches everything.
    pub filter: Option<Cond>,
    /// The order; `None` is the default.
    pub order: Option<CheckedOrder>,
}

/// Type-checks `query` (parsed from `input`, which error positions refer to).
///
/// # Errors
/// `INVALID_QUERY` at the attribute, operator or value that is wrong.
pub fn check(input: &str, query: &Query, catalog: &Catalog) -> Result<Checked, QueryError> {
    let c = Checker { input, catalog };
    let filter = query.filter.as_ref().map(|e| c.expr(e)).transpose()?;
    let order = match &query.order {
        None => None,
        Some(o) => {
            let target = c.target(&o.attribute.name, o.attribute.span)?;
            let ty = type_of(&target);
            if matches!(ty, AttrType::Search(SearchType::Text | SearchType::KeywordList)) {
                return Err(c.err(
                    o.attribute.span,
                    format!("{} ({}) is not sortable", o.attribute.name, ty.name()),
                ));
            }
            Some(CheckedOrder { target, direction: o.direction, span: o.attribute.span })
        }
    };
    Ok(Checked { filter, order })
}

fn type_of(target: &Target) -> AttrType {
    match target {
        Target::System(a) => a.ty,
        Target::Search { ty, .. } => AttrType::Search(*ty),
    }
}

/// Whether values of the type have an order (`<`, `BETWEEN`).
fn orderable(ty: AttrType) -> bool {
    !matches!(
        ty,
        AttrType::Status
            | AttrType::Search(SearchType::Bool | SearchType::Text | SearchType::KeywordList)
    )
}

struct Checker<'a> {
    input: &'a str,
    catalog: &'a Catalog,
}

impl Checker<'_> {
    fn err(&self, span: Span, message: impl Into<String>) -> QueryError {
        QueryError::at_span(self.input, span, message)
    }

    fn expr(&self, e: &Expr) -> Result<Cond, QueryError> {
        Ok(match e {
            Expr::And(parts) => {
                Cond::And(parts.iter().map(|p| self.expr(p)).collect::<Result<_, _>>()?)
            }
            Expr::Or(parts) => {
                Cond::Or(parts.iter().map(|p| self.expr(p)).collect::<Result<_, _>>()?)
            }
            Expr::Not(inner) => Cond::Not(Box::new(self.expr(inner)?)),
            Expr::Predicate(p) => Cond::Predicate(self.predicate(p)?),
        })
    }

    fn target(&self, name: &str, span: Span) -> Result<Target, QueryError> {
        match self.catalog.resolve(name) {
            Some(Resolved::System(a)) => Ok(Target::System(a)),
            Some(Resolved::Search(n, ty)) => Ok(Target::Search { name: n.to_string(), ty }),
            None => Err(self.err(
                span,
                format!("unknown attribute {name:?}; known: {}", self.catalog.names().join(", ")),
            )),
        }
    }

    fn predicate(&self, p: &Predicate) -> Result<CheckedPredicate, QueryError> {
        let name = &p.attribute.name;
        let target = self.target(name, p.attribute.span)?;
        let ty = type_of(&target);
        let test = match &p.test {
            Test::Compare(op, lit) => {
                if op.is_ordering() && !orderable(ty) {
                    return Err(self.err(
                        p.attribute.span,
                        format!("{name} ({}) takes only = and != (and IN)", ty.name()),
                    ));
                }
                CheckedTest::Compare(*op, self.value(name, ty, lit)?)
            }
            Test::In { negated, values } => CheckedTest::In {
                negated: *negated,
                values: values.iter().map(|l| self.value(name, ty, l)).collect::<Result<_, _>>()?,
            },
            Test::Between(low, high) => {
                if !orderable(ty) {
                    return Err(self.err(
                        p.attribute.span,
                        format!("{name} ({}) has no order: BETWEEN does not apply", ty.name()),
                    ));
                }
                CheckedTest::Between(self.value(name, ty, low)?, self.value(name, ty, high)?)
            }
            Test::StartsWith(lit) => {
                let text_like = matches!(
                    ty,
                    AttrType::Search(
                        SearchType::Keyword | SearchType::Text | SearchType::KeywordList
                    )
                );
                if !text_like {
                    return Err(self.err(
                        p.attribute.span,
                        format!(
                            "STARTS_WITH needs a keyword or text attribute; {name} is {}",
                            ty.name()
                        ),
                    ));
                }
                match self.value(name, ty, lit)? {
                    SqlValue::Text(prefix) => CheckedTest::StartsWith(prefix),
                    _ => return Err(self.err(lit.span, "STARTS_WITH takes a string")),
                }
            }
            Test::IsNull { negated } => {
                if !target.nullable() {
                    return Err(self.err(
                        p.attribute.span,
                        format!("{name} is never null: IS [NOT] NULL does not apply"),
                    ));
                }
                CheckedTest::IsNull { negated: *negated }
            }
        };
        Ok(CheckedPredicate { target, test, span: p.span })
    }

    /// A literal as a value of `ty`.
    fn value(&self, name: &str, ty: AttrType, lit: &Literal) -> Result<SqlValue, QueryError> {
        let wrong = |want: &str| {
            self.err(
                lit.span,
                format!("{name} is {}: expected {want}, got {}", ty.name(), lit.value.kind()),
            )
        };
        if let LiteralValue::String(s) = &lit.value {
            if s.contains('\0') {
                return Err(self.err(lit.span, "a string may not contain a NUL character"));
            }
        }
        Ok(match (ty, &lit.value) {
            (
                AttrType::Search(SearchType::Keyword | SearchType::Text | SearchType::KeywordList),
                LiteralValue::String(s),
            ) => SqlValue::Text(s.clone()),
            (
                AttrType::Search(SearchType::Keyword | SearchType::Text | SearchType::KeywordList),
                _,
            ) => return Err(wrong("a string")),
            (AttrType::Status, LiteralValue::String(s)) => {
                let upper = s.to_ascii_uppercase();
                if !STATUS_NAMES.contains(&upper.as_str()) {
                    return Err(self.err(
                        lit.span,
                        format!("{s:?} is not a status; one of {}", STATUS_NAMES.join(", ")),
                    ));
                }
                SqlValue::Text(upper)
            }
            (AttrType::Status, _) => return Err(wrong("a status name string")),
            (AttrType::Search(SearchType::Int), LiteralValue::Int(n)) => SqlValue::Int(*n),
            (AttrType::Search(SearchType::Int), _) => return Err(wrong("an integer")),
            (AttrType::Search(SearchType::Double), LiteralValue::Int(n)) => {
                #[allow(clippy::cast_precision_loss)] // a query literal, compared as a double
                SqlValue::Double(*n as f64)
            }
            (AttrType::Search(SearchType::Double), LiteralValue::Decimal(x)) => {
                SqlValue::Double(*x)
            }
            (AttrType::Search(SearchType::Double), _) => return Err(wrong("a number")),
            (AttrType::Search(SearchType::Bool), LiteralValue::Bool(b)) => SqlValue::Bool(*b),
            (AttrType::Search(SearchType::Bool), _) => return Err(wrong("true or false")),
            (AttrType::Search(SearchType::Datetime), LiteralValue::String(s)) => {
                SqlValue::Int(datetime_ms(s).ok_or_else(|| {
                    self.err(lit.span, format!("{s:?} is not a datetime (RFC 3339 or YYYY-MM-DD)"))
                })?)
            }
            (AttrType::Search(SearchType::Datetime), _) => {
                return Err(wrong("a quoted datetime ('2026-11-24' or RFC 3339)"))
            }
            (AttrType::Duration, LiteralValue::Int(n)) => SqlValue::Int(*n),
            (AttrType::Duration, LiteralValue::String(s)) => {
                SqlValue::Int(duration_ms(s).ok_or_else(|| {
                    self.err(
                        lit.span,
                        format!("{s:?} is not a duration ('250ms', '5s', '1h30m', '2d')"),
                    )
                })?)
            }
            (AttrType::Duration, _) => return Err(wrong("milliseconds or a duration string")),
        })
    }
}
