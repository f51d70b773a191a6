//! Orbit's API-level error codes, pure: the closed [`ErrorCode`] enum, its stable strings,
//! parsing and serde (as the string).
//!
//! It lives below every other Orbit crate so the one enum travels from the engine (a refused
//! command, `CommandError`) through the store (`StoreError::code`), the inbox replies and the
//! owner (`OwnerError`) to the wire, where `orbit-server-kit` maps each code to exactly one
//! gRPC status. No code is ever a string between crates. Task-level codes recorded in
//! history (`TIMEOUT`, `HTTP_ERROR`, ...) are not API errors and do not belong here.

use std::fmt;
use std::str::FromStr;

/// Defines the closed enum, its stable strings and its list of every variant in one place,
/// so the three can never disagree.
macro_rules! error_codes {
    ($($(#[$doc:meta])* $variant:ident => $text:literal,)+) => {
        /// A stable Orbit API error code. Closed: the server never returns another.
        #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
        pub enum ErrorCode {
            $($(#[$doc])* $variant,)+
        }

        impl ErrorCode {
            /// Every code, in declaration order.
            pub const ALL: &'static [ErrorCode] = &[$(ErrorCode::$variant,)+];

            /// The stable upper-snake-case string, as sent on the wire.
            #[must_use]
            pub const fn as_str(self) -> &'static str {
                match self {
                    $(ErrorCode::$variant => $text,)+
                }
            }
        }

        impl FromStr for ErrorCode {
            type Err = UnknownErrorCode;

            fn from_str(s: &str) -> Result<Self, Self::Err> {
                match s {
                    $($text => Ok(ErrorCode::$variant),)+
                    other => Err(UnknownErrorCode(other.to_owned())),
                }
            }
        }
    };
}

error_codes! {
    /// A request field is malformed or missing.
    InvalidArgument => "INVALID_ARGUMENT",
    /// A workflow definition does not parse or validate.
    InvalidDefinition => "INVALID_DEFINITION",
    /// An execution input does not match the workflow's input schema.
    InvalidInput => "INVALID_INPUT",
    /// No workflow with that name (and version) is registered.
    WorkflowNotFound => "WORKFLOW_NOT_FOUND",
    /// No execution (or run) with that id exists.
    ExecutionNotFound => "EXECUTION_NOT_FOUND",
    /// The workflow declares no such signal.
    UnknownSignal => "UNKNOWN_SIGNAL",
    /// The workflow declares no such query.
    UnknownQuery => "UNKNOWN_QUERY",
    /// The workflow declares no such update.
    UnknownUpdate => "UNKNOWN_UPDATE",
    /// An update's validator did not accept it; nothing was recorded.
    UpdateRejected => "UPDATE_REJECTED",
    /// An accepted update's handler steps failed (or the run wound down before they
    /// finished); its `UpdateCompleted` records the error and a retry answers it again.
    UpdateFailed => "UPDATE_FAILED",
    /// The (name, version) is registered with a different definition hash.
    DefinitionConflict => "DEFINITION_CONFLICT",
    /// The execution id exists for a different workflow.
    ExecutionExists => "EXECUTION_EXISTS",
    /// The execution is closed and cannot take the request.
    ExecutionFinished => "EXECUTION_FINISHED",
    /// The request needs a finished execution (deleting one) and it, or a descendant, is
    /// still open.
    ExecutionNotFinished => "EXECUTION_NOT_FINISHED",
    /// A signal payload does not match the signal's schema.
    SignalPayloadInvalid => "SIGNAL_PAYLOAD_INVALID",
    /// A query expression failed to evaluate.
    QueryFailed => "QUERY_FAILED",
    /// A list query (`ListExecutionsRequest.query`) does not parse or type-check; the
    /// error details carry its position (offset, line, column).
    InvalidQuery => "INVALID_QUERY",
    /// An expression's evaluation is over its budget of steps or bytes (see
    /// `docs/definitions.md`, "Limits").
    ExpressionLimit => "EXPRESSION_LIMIT",
    /// A payload is over `max_payload_bytes`.
    PayloadTooLarge => "PAYLOAD_TOO_LARGE",
    /// A payload nests arrays and objects deeper than the depth limit (below protobuf's
    /// decode recursion limit; see `orbit_payload::MAX_DEPTH`).
    PayloadTooDeep => "PAYLOAD_TOO_DEEP",
    /// A server limit is reached, for example `max_active_executions`.
    ResourceExhausted => "RESOURCE_EXHAUSTED",
    /// The request carries no valid credentials.
    Unauthenticated => "UNAUTHENTICATED",
    /// The caller's identity may not perform the request.
    PermissionDenied => "PERMISSION_DENIED",
    /// No live owner, or the database is down; retry later.
    Unavailable => "UNAVAILABLE",
    /// The caller's deadline passed before the answer was ready; the request goes on (an
    /// accepted update still completes) and a retry with the same request id answers it.
    DeadlineExceeded => "DEADLINE_EXCEEDED",
    /// The store failed in a way the caller cannot fix.
    StorageError => "STORAGE_ERROR",
    /// No schedule with that id exists.
    ScheduleNotFound => "SCHEDULE_NOT_FOUND",
    /// The schedule id exists with a different spec.
    ScheduleExists => "SCHEDULE_EXISTS",
    /// A task token does not decode to a known delivery.
    UnknownToken => "UNKNOWN_TOKEN",
    /// A worker stream was misused, for example a result before `Hello`.
    ProtocolError => "PROTOCOL_ERROR",
    /// A task result from a caller other than the worker the attempt was dispatched to (or
    /// from an anonymous unary call); nothing was recorded.
    WorkerMismatch => "WORKER_MISMATCH",
    /// `ResumeExecution` of an execution that is not SUSPENDED (nothing changed).
    ExecutionNotSuspended => "EXECUTION_NOT_SUSPENDED",
    /// A `request_id` already used for this execution and kind of command with another
    /// name or payload; nothing was recorded (a retry must repeat the request exactly).
    RequestIdReused => "REQUEST_ID_REUSED",
    /// `MigrateExecution` to a version whose step graph differs from the execution's in a
    /// way that is unsafe for its state (the details list each difference); nothing was
    /// recorded.
    MigrationUnsafe => "MIGRATION_UNSAFE",
    /// `ResetExecution` or `ForkExecution` to a point the run cannot go on from: a step
    /// that never started in that run, or a seq at which the run had closed or was winding
    /// down; nothing was recorded.
    ResetPointInvalid => "RESET_POINT_INVALID",
    /// No batch with that id exists (`DescribeBatch`, `ListBatchItems`, `CancelBatch`).
    BatchNotFound => "BATCH_NOT_FOUND",
    /// No server-wide rate limit with that name exists (`DeleteRateLimit`).
    RateLimitNotFound => "RATE_LIMIT_NOT_FOUND",
    /// The execution id is reserved by a debounced start (`dedupe: {keep: last}`) that has
    /// not fired yet: the execution is created at the fire time the message names.
    ExecutionPendingStart => "EXECUTION_PENDING_START",
    /// A definition declares a search attribute under a name another registered workflow
    /// declares with another type (one type per name server-wide); the message names it.
    SearchAttributeConflict => "SEARCH_ATTRIBUTE_CONFLICT",
}

impl fmt::Display for ErrorCode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A string that is not one of the [`ErrorCode`]s.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("unknown Orbit error code {0:?}")]
pub struct UnknownErrorCode(pub String);

impl serde::Serialize for ErrorCode {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(self.as_str())
    }
}

impl<'de> serde::Deserialize<'de> for ErrorCode {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let text = <std::borrow::Cow<'de, str>>::deserialize(d)?;
        text.parse().map_err(serde::de::Error::custom)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_code_round_trips_through_its_string_and_serde() {
        for &code in ErrorCode::ALL {
            assert_eq!(code.as_str().parse::<ErrorCode>(), Ok(code));
            let json = serde_json::to_string(&code).unwrap();
            assert_eq!(json, format!("\"{}\"", code.as_str()));
            assert_eq!(serde_json::from_str::<ErrorCode>(&json).unwrap(), code);
        }
    }

    #[test]
    fn an_unknown_string_is_an_error_never_a_default() {
        assert_eq!(
            "STORAGE_EROR".parse::<ErrorCode>(),
            Err(UnknownErrorCode("STORAGE_EROR".into()))
        );
        assert!(serde_json::from_str::<ErrorCode>("\"NOPE\"").is_err());
    }
}
