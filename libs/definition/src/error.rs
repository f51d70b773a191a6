//! Definition errors: every problem found in a document, each with the path of the offending
//! value and a stable code.
//!
//! At the API every one of these is reported under the single code `INVALID_DEFINITION`
//! (gRPC `INVALID_ARGUMENT`); the [`ErrorCode`] here refines it for people and tools and is
//! carried alongside (one entry per problem), so its strings are part of the contract and
//! never change meaning.
//!
//! Paths name the value the way a reader finds it in the document: `steps[2].retry.backoff`,
//! `on.failure[0].task`, `on_signal.note[0].input`, `tasks["payments.charge"].input.type`.
//! Map keys that are not identifiers are quoted. The document root has the empty path.

use std::fmt;

/// What kind of problem a [`DefinitionError`] is. Closed: adding a code is an API change.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum ErrorCode {
    /// The text is not YAML or JSON, is not a mapping, or has non-string keys.
    ParseError,
    /// A required field is absent.
    MissingField,
    /// A field that does not exist here (or not for this step kind).
    UnknownField,
    /// A value of the wrong JSON type.
    InvalidType,
    /// A value of the right type that is out of range or malformed.
    InvalidValue,
    /// A step id, or a key naming a task, signal or query, that is not well-formed.
    InvalidId,
    /// Two steps of one body share an id.
    DuplicateId,
    /// `needs` or `steps.<id>` names no step in scope.
    UnknownReference,
    /// A task step or `compensate.task` names no key of `tasks`.
    UnknownTask,
    /// An `await` step or an `on_signal` key names no key of `signals`.
    UnknownSignal,
    /// The dependencies of a body form a cycle.
    Cycle,
    /// A duration that is not a string such as `1m30s`, or zero where that means nothing.
    InvalidDuration,
    /// An expression that does not compile, has the wrong shape, or reads an unknown name.
    InvalidExpression,
    /// A contract that is not in the supported JSON Schema subset.
    InvalidSchema,
    /// A step with no kind, or with more than one.
    StepKind,
    /// An expression over a size limit (bytes, tokens, nesting, parsed nodes or depth).
    ExpressionLimit,
    /// A document over a size limit (bytes, nesting depth, number of steps).
    DocumentLimit,
    /// A workflow or task name under `orbit.`, reserved for built-ins (only `orbit.http`
    /// may be named, as a task).
    ReservedName,
}

impl ErrorCode {
    /// Every code, for documentation and exhaustive tests.
    pub const ALL: [ErrorCode; 18] = [
        ErrorCode::ParseError,
        ErrorCode::MissingField,
        ErrorCode::UnknownField,
        ErrorCode::InvalidType,
        ErrorCode::InvalidValue,
        ErrorCode::InvalidId,
        ErrorCode::DuplicateId,
        ErrorCode::UnknownReference,
        ErrorCode::UnknownTask,
        ErrorCode::UnknownSignal,
        ErrorCode::Cycle,
        ErrorCode::InvalidDuration,
        ErrorCode::InvalidExpression,
        ErrorCode::InvalidSchema,
        ErrorCode::StepKind,
        ErrorCode::ExpressionLimit,
        ErrorCode::DocumentLimit,
        ErrorCode::ReservedName,
    ];

    /// The stable SCREAMING_SNAKE string of the code.
    #[must_use]
    pub fn as_str(self) -> &'static str {
        match self {
            ErrorCode::ParseError => "PARSE_ERROR",
            ErrorCode::MissingField => "MISSING_FIELD",
            ErrorCode::UnknownField => "UNKNOWN_FIELD",
            ErrorCode::InvalidType => "INVALID_TYPE",
            ErrorCode::InvalidValue => "INVALID_VALUE",
            ErrorCode::InvalidId => "INVALID_ID",
            ErrorCode::DuplicateId => "DUPLICATE_ID",
            ErrorCode::UnknownReference => "UNKNOWN_REFERENCE",
            ErrorCode::UnknownTask => "UNKNOWN_TASK",
            ErrorCode::UnknownSignal => "UNKNOWN_SIGNAL",
            ErrorCode::Cycle => "CYCLE",
            ErrorCode::InvalidDuration => "INVALID_DURATION",
            ErrorCode::InvalidExpression => "INVALID_EXPRESSION",
            ErrorCode::InvalidSchema => "INVALID_SCHEMA",
            ErrorCode::StepKind => "STEP_KIND",
            ErrorCode::ExpressionLimit => "EXPRESSION_LIMIT",
            ErrorCode::DocumentLimit => "DOCUMENT_LIMIT",
            ErrorCode::ReservedName => "RESERVED_NAME",
        }
    }

    /// Parses the string form.
    #[must_use]
    pub fn parse(s: &str) -> Option<ErrorCode> {
        ErrorCode::ALL.into_iter().find(|c| c.as_str() == s)
    }
}

impl fmt::Display for ErrorCode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// One problem in a definition document.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub struct DefinitionError {
    /// Where, e.g. `steps[2].retry.backoff`; empty for the document itself.
    pub path: String,
    /// What kind of problem.
    pub code: ErrorCode,
    /// What is wrong, for people.
    pub message: String,
}

impl DefinitionError {
    /// A new error.
    #[must_use]
    pub fn new(path: impl Into<String>, code: ErrorCode, message: impl Into<String>) -> Self {
        DefinitionError { path: path.into(), code, message: message.into() }
    }
}

/// `{path}: {message}`, or the message alone for the document root (empty path).
impl fmt::Display for DefinitionError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.path.is_empty() {
            f.write_str(&self.message)
        } else {
            write!(f, "{}: {}", self.path, self.message)
        }
    }
}

/// Every problem found in a document (never empty when returned by `parse`).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct DefinitionErrors(pub Vec<DefinitionError>);

impl DefinitionErrors {
    /// The errors, in the order they were found (roughly document order).
    #[must_use]
    pub fn errors(&self) -> &[DefinitionError] {
        &self.0
    }

    /// Whether some error has this code and path.
    #[must_use]
    pub fn contains(&self, code: ErrorCode, path: &str) -> bool {
        self.0.iter().any(|e| e.code == code && e.path == path)
    }
}

impl From<DefinitionError> for DefinitionErrors {
    fn from(e: DefinitionError) -> Self {
        DefinitionErrors(vec![e])
    }
}

impl IntoIterator for DefinitionErrors {
    type Item = DefinitionError;
    type IntoIter = std::vec::IntoIter<DefinitionError>;

    fn into_iter(self) -> Self::IntoIter {
        self.0.into_iter()
    }
}

/// One error per line.
impl fmt::Display for DefinitionErrors {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, e) in self.0.iter().enumerate() {
            if i > 0 {
                f.write_str("\n")?;
            }
            write!(f, "{e}")?;
        }
        Ok(())
    }
}

impl std::error::Error for DefinitionErrors {}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn codes_round_trip_through_their_strings() {
        for code in ErrorCode::ALL {
            assert_eq!(ErrorCode::parse(code.as_str()), Some(code));
            assert!(code.as_str().chars().all(|c| c.is_ascii_uppercase() || c == '_'));
        }
    }

    #[test]
    fn display_is_one_error_per_line() {
        let errors = DefinitionErrors(vec![
            DefinitionError::new("steps[0].id", ErrorCode::InvalidId, "bad id"),
            DefinitionError::new("", ErrorCode::ParseError, "not a mapping"),
        ]);
        assert_eq!(errors.to_string(), "steps[0].id: bad id\nnot a mapping");
    }
}
