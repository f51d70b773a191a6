//! Orbit's API-level error codes and their one mapping to [`tonic::Status`].
//!
//! [`ErrorCode`] is closed: every error a server returns carries exactly one of these
//! stable strings, and each code maps to exactly one gRPC status code (see the semantics
//! document, "Error codes"). Task-level codes recorded in history (`TIMEOUT`,
//! `HTTP_ERROR`, ...) are not API errors and do not belong here.
//!
//! On the wire the code travels twice, so clients in every language can branch on it:
//! - in the `orbit-error-code` ASCII response metadata key, and
//! - in a `google.rpc.ErrorInfo` status detail (`reason` = code, `domain` = `orbit.dev`).
//!
//! Field violations additionally travel as a `google.rpc.BadRequest` detail.

use std::collections::{BTreeMap, HashMap};

pub use orbit_codes::{ErrorCode, UnknownErrorCode};

use tonic::metadata::{MetadataMap, MetadataValue};
use tonic::{Code, Status};
use tonic_types::{ErrorDetails, StatusExt};

/// The response metadata key that carries the Orbit error code.
pub const ERROR_CODE_METADATA_KEY: &str = "orbit-error-code";

/// The `google.rpc.ErrorInfo.domain` of every Orbit error.
pub const ERROR_DOMAIN: &str = "orbit.dev";

/// The `google.rpc.ErrorInfo.metadata` key holding the path of the first field violation.
pub const ERROR_INFO_PATH_KEY: &str = "path";

/// The `google.rpc.ErrorInfo.metadata` keys of an `INVALID_QUERY` error: the byte offset
/// in the query, and the 1-based line and column (in characters) it points at.
pub const ERROR_INFO_QUERY_KEYS: [&str; 3] = ["position", "line", "column"];

/// The longest status message sent, in bytes; longer ones are cut with "…".
///
/// The message travels in the `grpc-message` header and the violations in
/// `grpc-status-details-bin`; gRPC clients cap response metadata (8 KiB in gRPC core), and
/// a status over the cap reaches the client as `RESOURCE_EXHAUSTED` instead of the error.
/// These bounds keep every status well under it, whatever the input was.
pub const MAX_STATUS_MESSAGE_BYTES: usize = 1024;

/// The most field violations sent in one status (a definition with many problems lists
/// them all up to this, or up to [`MAX_STATUS_DETAILS_BYTES`]; past either, the last
/// violation says how many more were left out: reason [`MORE_VIOLATIONS`]).
pub const MAX_STATUS_VIOLATIONS: usize = 50;

/// The most bytes of field paths and descriptions sent in one status, over all
/// violations; each one is also cut to [`MAX_VIOLATION_TEXT_BYTES`].
pub const MAX_STATUS_DETAILS_BYTES: usize = 2560;

/// The reason of the last violation of a status whose violations did not all fit: its
/// description says how many were left out.
pub const MORE_VIOLATIONS: &str = "MORE_VIOLATIONS";

/// Bytes kept free in the details budget for the [`MORE_VIOLATIONS`] marker.
const MARKER_BYTES: usize = 64;

/// The longest path or description of one violation, in bytes.
pub const MAX_VIOLATION_TEXT_BYTES: usize = 256;

/// `text` cut to at most `max` bytes at a character boundary, marked with "…".
fn truncated(text: &str, max: usize) -> String {
    if text.len() <= max {
        return text.to_owned();
    }
    let mut end = max.saturating_sub('…'.len_utf8());
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}…", &text[..end])
}

/// As many violations as the bounds allow, in order; when some do not fit, the last one
/// sent is a [`MORE_VIOLATIONS`] marker counting the rest, so a client never mistakes a
/// cut list for the whole.
fn bounded_violations(all: &[FieldViolation]) -> Vec<tonic_types::FieldViolation> {
    let mut budget = MAX_STATUS_DETAILS_BYTES - MARKER_BYTES;
    let mut violations = Vec::new();
    for (i, v) in all.iter().enumerate() {
        let last_slot = violations.len() + 1 == MAX_STATUS_VIOLATIONS;
        let field = truncated(&v.path, MAX_VIOLATION_TEXT_BYTES);
        let description = truncated(&v.message, MAX_VIOLATION_TEXT_BYTES);
        let reason = truncated(&v.code, MAX_VIOLATION_TEXT_BYTES);
        let size = field.len() + description.len() + reason.len();
        let more = all.len() - i;
        // The first one is always sent; the last slot goes to the marker if any remain.
        if !violations.is_empty() && (size > budget || (last_slot && more > 1)) {
            violations.push(tonic_types::FieldViolation {
                field: String::new(),
                description: format!("{more} more violation(s) not shown"),
                reason: MORE_VIOLATIONS.to_owned(),
                localized_message: None,
            });
            break;
        }
        budget = budget.saturating_sub(size);
        violations.push(tonic_types::FieldViolation {
            field,
            description,
            reason,
            localized_message: None,
        });
    }
    violations
}

/// The one mapping of an Orbit code to the gRPC status code it is returned with (the enum
/// itself lives in `orbit-codes`, which knows nothing of gRPC).
pub trait GrpcCode {
    /// The gRPC status code this Orbit code is returned with.
    fn grpc_code(self) -> Code;
}

impl GrpcCode for ErrorCode {
    fn grpc_code(self) -> Code {
        match self {
            ErrorCode::InvalidArgument
            | ErrorCode::InvalidDefinition
            | ErrorCode::InvalidInput
            | ErrorCode::SignalPayloadInvalid
            | ErrorCode::QueryFailed
            | ErrorCode::InvalidQuery
            | ErrorCode::ExpressionLimit
            | ErrorCode::PayloadTooDeep => Code::InvalidArgument,
            ErrorCode::WorkflowNotFound
            | ErrorCode::ExecutionNotFound
            | ErrorCode::UnknownSignal
            | ErrorCode::UnknownQuery
            | ErrorCode::UnknownUpdate
            | ErrorCode::ScheduleNotFound
            | ErrorCode::BatchNotFound
            | ErrorCode::RateLimitNotFound
            | ErrorCode::UnknownToken => Code::NotFound,
            ErrorCode::DefinitionConflict
            | ErrorCode::ExecutionExists
            | ErrorCode::ScheduleExists
            | ErrorCode::RequestIdReused => Code::AlreadyExists,
            ErrorCode::ExecutionFinished
            | ErrorCode::UpdateRejected
            | ErrorCode::UpdateFailed
            | ErrorCode::ProtocolError
            | ErrorCode::ExecutionNotSuspended
            | ErrorCode::MigrationUnsafe
            | ErrorCode::ResetPointInvalid
            | ErrorCode::ExecutionPendingStart
            | ErrorCode::SearchAttributeConflict
            | ErrorCode::ExecutionNotFinished => Code::FailedPrecondition,
            ErrorCode::PayloadTooLarge | ErrorCode::ResourceExhausted => Code::ResourceExhausted,
            ErrorCode::Unauthenticated => Code::Unauthenticated,
            ErrorCode::PermissionDenied | ErrorCode::WorkerMismatch => Code::PermissionDenied,
            ErrorCode::Unavailable => Code::Unavailable,
            ErrorCode::DeadlineExceeded => Code::DeadlineExceeded,
            ErrorCode::StorageError => Code::Internal,
        }
    }
}

/// One offending field of a request or document, for example a definition path.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FieldViolation {
    /// Where the problem is, for example `steps[2].retry.max_attempts` or `input.amount`.
    pub path: String,
    /// A stable upper-snake-case reason, for example `UNKNOWN_STEP`.
    pub code: String,
    /// A human-readable description. Not meant to be parsed.
    pub message: String,
}

impl FieldViolation {
    /// Creates a violation.
    pub fn new(
        path: impl Into<String>,
        code: impl Into<String>,
        message: impl Into<String>,
    ) -> Self {
        Self { path: path.into(), code: code.into(), message: message.into() }
    }
}

/// An API error: a stable code, a message and optional field violations.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{code}: {message}")]
pub struct OrbitError {
    /// The stable code clients branch on.
    pub code: ErrorCode,
    /// A human-readable description. Not meant to be parsed.
    pub message: String,
    /// The offending fields, if the error concerns specific ones.
    pub details: Vec<FieldViolation>,
    /// Extra `google.rpc.ErrorInfo.metadata` entries (an `INVALID_QUERY` error carries
    /// [`ERROR_INFO_QUERY_KEYS`]).
    pub info: BTreeMap<String, String>,
}

impl OrbitError {
    /// Creates an error without field violations.
    pub fn new(code: ErrorCode, message: impl Into<String>) -> Self {
        Self { code, message: message.into(), details: Vec::new(), info: BTreeMap::new() }
    }

    /// An `INVALID_QUERY` error at a place of the request's `query` field: the position
    /// travels as [`ERROR_INFO_QUERY_KEYS`] and in the message, and the field violation
    /// names the field.
    pub fn invalid_query(message: &str, position: usize, line: usize, column: usize) -> Self {
        let text = format!("invalid query at line {line}, column {column}: {message}");
        let mut error = Self::new(ErrorCode::InvalidQuery, text).with_violation(
            FieldViolation::new("query", ErrorCode::InvalidQuery.as_str(), message),
        );
        for (key, value) in ERROR_INFO_QUERY_KEYS.iter().zip([position, line, column]) {
            error.info.insert((*key).to_owned(), value.to_string());
        }
        error
    }

    /// The (position, line, column) of an `INVALID_QUERY` error read back from a status.
    #[must_use]
    pub fn query_position(&self) -> Option<(usize, usize, usize)> {
        let get = |k: &str| self.info.get(k).and_then(|v| v.parse::<usize>().ok());
        Some((get("position")?, get("line")?, get("column")?))
    }

    /// Adds a field violation.
    #[must_use]
    pub fn with_violation(mut self, violation: FieldViolation) -> Self {
        self.details.push(violation);
        self
    }

    /// Adds field violations.
    #[must_use]
    pub fn with_violations(mut self, violations: impl IntoIterator<Item = FieldViolation>) -> Self {
        self.details.extend(violations);
        self
    }

    /// The gRPC status for this error: the mapped status code, the message, the code in
    /// the `orbit-error-code` metadata key, a `google.rpc.ErrorInfo` detail and, when
    /// there are field violations, a `google.rpc.BadRequest` detail.
    #[must_use]
    pub fn to_status(&self) -> Status {
        let mut info_metadata = HashMap::new();
        if let Some(first) = self.details.iter().find(|v| !v.path.is_empty()) {
            let path = truncated(&first.path, MAX_VIOLATION_TEXT_BYTES);
            info_metadata.insert(ERROR_INFO_PATH_KEY.to_owned(), path);
        }
        for (key, value) in &self.info {
            info_metadata.insert(key.clone(), truncated(value, MAX_VIOLATION_TEXT_BYTES));
        }
        let mut details =
            ErrorDetails::with_error_info(self.code.as_str(), ERROR_DOMAIN, info_metadata);
        if !self.details.is_empty() {
            details.set_bad_request(bounded_violations(&self.details));
        }
        let mut metadata = MetadataMap::new();
        metadata.insert(ERROR_CODE_METADATA_KEY, MetadataValue::from_static(self.code.as_str()));
        Status::with_error_details_and_metadata(
            self.code.grpc_code(),
            truncated(&self.message, MAX_STATUS_MESSAGE_BYTES),
            details,
            metadata,
        )
    }

    /// Reads an Orbit error back from a status, for clients and the CLI.
    ///
    /// The code comes from the `orbit-error-code` metadata key, or else from a
    /// `google.rpc.ErrorInfo` detail in the `orbit.dev` domain. Returns `None` when the
    /// status carries no Orbit code (a transport error, an unimplemented method, a
    /// status from a proxy): callers then handle the bare gRPC code.
    #[must_use]
    pub fn from_status(status: &Status) -> Option<Self> {
        let from_metadata = status
            .metadata()
            .get(ERROR_CODE_METADATA_KEY)
            .and_then(|v| v.to_str().ok())
            .and_then(|s| s.parse::<ErrorCode>().ok());
        let details = status.get_error_details();
        let code = from_metadata.or_else(|| {
            details
                .error_info()
                .filter(|info| info.domain == ERROR_DOMAIN)
                .and_then(|info| info.reason.parse().ok())
        })?;
        let violations = details
            .bad_request()
            .map(|bad| {
                bad.field_violations
                    .iter()
                    .map(|v| FieldViolation::new(&v.field, &v.reason, &v.description))
                    .collect()
            })
            .unwrap_or_default();
        let info = details
            .error_info()
            .filter(|info| info.domain == ERROR_DOMAIN)
            .map(|info| {
                info.metadata
                    .iter()
                    .filter(|(k, _)| k.as_str() != ERROR_INFO_PATH_KEY)
                    .map(|(k, v)| (k.clone(), v.clone()))
                    .collect()
            })
            .unwrap_or_default();
        Some(Self { code, message: status.message().to_owned(), details: violations, info })
    }
}

impl From<OrbitError> for Status {
    fn from(error: OrbitError) -> Self {
        error.to_status()
    }
}

impl From<&OrbitError> for Status {
    fn from(error: &OrbitError) -> Self {
        error.to_status()
    }
}
