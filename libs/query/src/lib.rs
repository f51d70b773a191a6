//! The execution list query language (issue 28 item 2), pure: no IO, no clock.
//!
//! ```text
//! workflow = 'billing' AND status IN ('FAILED', 'TIMED_OUT') AND created > '2026-11-24'
//!   AND NOT parent IS NOT NULL ORDER BY created DESC
//! ```
//!
//! Three stages, each its own file:
//! - [`parse`] (`parse.rs`, grammar `query.pest`, pest): text to the typed AST of `ast.rs`;
//! - [`check`] (`check.rs`) against a [`Catalog`] (`catalog.rs`): the system attributes of
//!   the `executions` table and the caller's declared search attributes, each with a type
//!   that decides its operators and literals; values become [`SqlValue`]s;
//! - [`compile`] (`compile.rs`): a `WHERE` condition, an `ORDER BY` term and the ordered
//!   parameter values, for PostgreSQL or SQLite. Values only ever travel as parameters;
//!   [`compile_page`] (`page.rs`) adds the keyset of a page in any order.
//!
//! [`group_by`] (`group.rs`) checks the attributes a count groups by.
//!
//! Every refusal is a [`QueryError`] with the code `INVALID_QUERY` and the position (byte
//! offset, line, column) it points at. Limits: [`MAX_QUERY_BYTES`], [`MAX_DEPTH`],
//! [`MAX_PREDICATES`].
//!
//! # Search attributes: the `execution_search` table
//!
//! Declared search attributes compile against this table, designed here and created by
//! the change that fills it (issue 28 item 1):
//!
//! ```sql
//! CREATE TABLE execution_search (
//!     execution_id TEXT NOT NULL,   -- executions.execution_id
//!     name TEXT NOT NULL,           -- the declared attribute name
//!     kw TEXT,                      -- keyword, text, keyword_list (one row per element)
//!     ival BIGINT,                  -- int
//!     num DOUBLE PRECISION,         -- double
//!     ts BIGINT,                    -- datetime, epoch milliseconds like executions.created_at
//!     flag BOOLEAN                  -- bool
//! );
//! CREATE INDEX execution_search_kw   ON execution_search (name, kw, execution_id);
//! CREATE INDEX execution_search_ival ON execution_search (name, ival, execution_id);
//! CREATE INDEX execution_search_num  ON execution_search (name, num, execution_id);
//! CREATE INDEX execution_search_ts   ON execution_search (name, ts, execution_id);
//! CREATE INDEX execution_search_id   ON execution_search (execution_id, name);
//! ```
//!
//! One row per attribute value; a `keyword_list` has one row per element. Each predicate is
//! `EXISTS (SELECT 1 FROM execution_search s WHERE s.execution_id =
//! executions.execution_id AND s.name = $n AND s.<column> <op> $m)`, so a predicate on a
//! list holds when one element satisfies it, and the negative forms (`!=`, `NOT IN`,
//! `NOT (...)`) are `NOT EXISTS` (no element matches, or the attribute is unset).
//! Datetimes are epoch milliseconds (`BIGINT`) on both backends, as every time column of
//! the store is. `ORDER BY` a search attribute sorts by a scalar subquery on the same rows.

mod ast;
mod catalog;
mod check;
mod compile;
mod error;
mod group;
mod literal;
mod page;
mod parse;

pub use ast::{
    Attribute, CmpOp, Direction, Expr, Literal, LiteralValue, OrderBy, Predicate, Query, Test,
};
pub use catalog::{
    AttrType, Catalog, Resolved, SearchType, SystemAttr, STATUS_NAMES, SYSTEM_ATTRIBUTES,
};
pub use check::{
    check, Checked, CheckedOrder, CheckedPredicate, CheckedTest, Cond, SqlValue, Target,
};
pub use compile::{compile, search_column, Dialect, Sql};
pub use error::{QueryError, Span};
pub use group::{group_by, groupable, groupable_names, MAX_GROUP_BY};
pub use literal::{datetime_ms, duration_ms};
pub use page::{compile_page, Keyset, SortValue};
pub use parse::parse;

/// The longest query, in bytes.
pub const MAX_QUERY_BYTES: usize = 4096;
/// The deepest nesting of parentheses.
pub const MAX_DEPTH: usize = 32;
/// The most predicates in one query.
pub const MAX_PREDICATES: usize = 100;

/// Parses and checks `input` against `catalog`.
///
/// # Errors
/// The first [`QueryError`] of [`parse`] or [`check`].
pub fn parse_and_check(input: &str, catalog: &Catalog) -> Result<Checked, QueryError> {
    let query = parse(input)?;
    check(input, &query, catalog)
}

impl Checked {
    /// Whether the query orders by something other than the default (newest first).
    #[must_use]
    pub fn orders(&self) -> bool {
        self.order.is_some()
    }
}
