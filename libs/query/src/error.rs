//! [`QueryError`]: every refusal of a query, with the stable code `INVALID_QUERY` and the
//! place in the query it points at (byte offset, 1-based line and column in characters).
//! Positions are always within the input (`position <= input.len()`, on a char boundary):
//! the fuzz target asserts it.

use orbit_codes::ErrorCode;
use std::fmt;

/// A byte range of the query text.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Span {
    /// First byte.
    pub start: usize,
    /// One past the last byte.
    pub end: usize,
}

impl Span {
    /// The span from `start` to `end`.
    #[must_use]
    pub fn new(start: usize, end: usize) -> Self {
        Span { start, end }
    }
}

/// A refused query.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub struct QueryError {
    /// Always [`ErrorCode::InvalidQuery`].
    pub code: ErrorCode,
    /// What is wrong and what to do, without the position.
    pub message: String,
    /// Byte offset in the query.
    pub position: usize,
    /// 1-based line of `position`.
    pub line: usize,
    /// 1-based column of `position`, in characters.
    pub column: usize,
}

impl QueryError {
    /// An error at byte `position` of `input` (clamped into the input, onto a char
    /// boundary).
    #[must_use]
    pub fn at(input: &str, position: usize, message: impl Into<String>) -> Self {
        let mut position = position.min(input.len());
        while !input.is_char_boundary(position) {
            position -= 1;
        }
        let before = &input[..position];
        let line = before.matches('\n').count() + 1;
        let line_start = before.rfind('\n').map_or(0, |i| i + 1);
        let column = before[line_start..].chars().count() + 1;
        QueryError {
            code: ErrorCode::InvalidQuery,
            message: message.into(),
            position,
            line,
            column,
        }
    }

    /// An error at the start of `span`.
    #[must_use]
    pub fn at_span(input: &str, span: Span, message: impl Into<String>) -> Self {
        QueryError::at(input, span.start, message)
    }
}

impl fmt::Display for QueryError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} (line {}, column {})", self.message, self.line, self.column)
    }
}
