//! Why an expression failed: a CEL error or a limit, each with the task-level code a
//! step failing with it records.

/// Why an expression failed to compile or evaluate.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{message}")]
pub struct ExprError {
    /// What kind of failure.
    pub kind: ExprErrorKind,
    /// What went wrong, for people.
    pub message: String,
}

/// The kinds of [`ExprError`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ExprErrorKind {
    /// A syntax error, or a runtime error of CEL (unknown name, no such overload, ...).
    Invalid,
    /// Over a size limit at compile time or over the evaluation budget: see
    /// [`crate::limits`] and [`crate::cost`].
    Limit,
}

impl ExprError {
    /// An invalid expression or a CEL runtime error.
    #[must_use]
    pub fn new(message: impl Into<String>) -> ExprError {
        ExprError { kind: ExprErrorKind::Invalid, message: message.into() }
    }

    /// A limit exceeded.
    #[must_use]
    pub fn limit(message: impl Into<String>) -> ExprError {
        ExprError { kind: ExprErrorKind::Limit, message: message.into() }
    }

    /// Whether a limit was exceeded.
    #[must_use]
    pub fn is_limit(&self) -> bool {
        self.kind == ExprErrorKind::Limit
    }

    /// The task-level code a step failing with this error records: `EXPRESSION_LIMIT` for a
    /// limit, `EXPRESSION_ERROR` otherwise.
    #[must_use]
    pub fn code(&self) -> &'static str {
        match self.kind {
            ExprErrorKind::Invalid => "EXPRESSION_ERROR",
            ExprErrorKind::Limit => "EXPRESSION_LIMIT",
        }
    }

    /// The same kind with the message prefixed.
    #[must_use]
    pub fn context(self, prefix: &str) -> ExprError {
        ExprError { kind: self.kind, message: format!("{prefix}{}", self.message) }
    }

    /// The error of a template nested at `segment` (`.key` or `[i]`) of its parent: the
    /// message starts with the path to the failing expression, `.order.lines[1]: ...`.
    #[must_use]
    pub fn at(self, segment: &str) -> ExprError {
        let sep = if self.message.starts_with(['.', '[']) { "" } else { ": " };
        ExprError { kind: self.kind, message: format!("{segment}{sep}{}", self.message) }
    }

    /// The message with the field holding the expression in front: `input.total: ...` for
    /// an error at `.total` of the step's `input`, `when: ...` for a whole-field one.
    #[must_use]
    pub fn in_field(&self, field: &str) -> String {
        let sep = if self.message.starts_with(['.', '[']) { "" } else { ": " };
        format!("{field}{sep}{}", self.message)
    }
}
