//! The typed AST the parser produces: a filter tree of predicates on attributes, and an
//! optional `ORDER BY`. Every node keeps its [`Span`] so the checker can point at it.

use crate::error::Span;

/// A parsed query.
#[derive(Debug, Clone, PartialEq)]
pub struct Query {
    /// The filter; `None` matches every execution.
    pub filter: Option<Expr>,
    /// The requested order; `None` is the default (newest first).
    pub order: Option<OrderBy>,
}

/// A boolean expression.
#[derive(Debug, Clone, PartialEq)]
pub enum Expr {
    /// All of these (two or more).
    And(Vec<Expr>),
    /// Any of these (two or more).
    Or(Vec<Expr>),
    /// Not this.
    Not(Box<Expr>),
    /// One test on one attribute.
    Predicate(Predicate),
}

/// `attribute <test>`.
#[derive(Debug, Clone, PartialEq)]
pub struct Predicate {
    /// The attribute tested.
    pub attribute: Attribute,
    /// The test.
    pub test: Test,
    /// The whole predicate.
    pub span: Span,
}

/// An attribute name as written (backquotes removed, doubled backquotes unescaped).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Attribute {
    /// The name.
    pub name: String,
    /// Where it is written.
    pub span: Span,
}

/// A comparison operator.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CmpOp {
    /// `=`
    Eq,
    /// `!=` or `<>`
    Ne,
    /// `<`
    Lt,
    /// `<=`
    Le,
    /// `>`
    Gt,
    /// `>=`
    Ge,
}

impl CmpOp {
    /// The SQL operator.
    #[must_use]
    pub fn sql(self) -> &'static str {
        match self {
            CmpOp::Eq => "=",
            CmpOp::Ne => "<>",
            CmpOp::Lt => "<",
            CmpOp::Le => "<=",
            CmpOp::Gt => ">",
            CmpOp::Ge => ">=",
        }
    }

    /// Whether it orders values (not only equality).
    #[must_use]
    pub fn is_ordering(self) -> bool {
        !matches!(self, CmpOp::Eq | CmpOp::Ne)
    }
}

/// What a predicate tests.
#[derive(Debug, Clone, PartialEq)]
pub enum Test {
    /// `op value`
    Compare(CmpOp, Literal),
    /// `IN (values)`, or `NOT IN (values)` when `negated`.
    In {
        /// `NOT IN`.
        negated: bool,
        /// The values (at least one).
        values: Vec<Literal>,
    },
    /// `BETWEEN low AND high` (both inclusive).
    Between(Literal, Literal),
    /// `STARTS_WITH prefix`.
    StartsWith(Literal),
    /// `IS NULL`, or `IS NOT NULL` when `negated`.
    IsNull {
        /// `IS NOT NULL`.
        negated: bool,
    },
}

/// A literal as written.
#[derive(Debug, Clone, PartialEq)]
pub struct Literal {
    /// The value.
    pub value: LiteralValue,
    /// Where it is written.
    pub span: Span,
}

/// The value of a literal.
#[derive(Debug, Clone, PartialEq)]
pub enum LiteralValue {
    /// `'text'` (quotes removed, `''` unescaped).
    String(String),
    /// An integer.
    Int(i64),
    /// A number with a decimal point.
    Decimal(f64),
    /// `true` / `false`.
    Bool(bool),
}

impl LiteralValue {
    /// The kind, for error messages.
    #[must_use]
    pub fn kind(&self) -> &'static str {
        match self {
            LiteralValue::String(_) => "a string",
            LiteralValue::Int(_) => "an integer",
            LiteralValue::Decimal(_) => "a decimal number",
            LiteralValue::Bool(_) => "a boolean",
        }
    }
}

/// Sort direction.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Direction {
    /// Smallest first.
    Asc,
    /// Largest first.
    Desc,
}

/// `ORDER BY attribute [ASC|DESC]`.
#[derive(Debug, Clone, PartialEq)]
pub struct OrderBy {
    /// The sort attribute.
    pub attribute: Attribute,
    /// The direction (`ASC` when not written).
    pub direction: Direction,
}
