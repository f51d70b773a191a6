//! How a client command fails, and the one mapping from a failure to the process exit code.
//!
//! Every command returns `Result<(), Failure>`; [`report`] prints the failure to stderr (and,
//! with `--output json`, as a JSON document on stdout) and [`exit_code`] turns it into the
//! exit status. The `exit_codes_help!` table (in `mod.rs`) is shown by `--help` and must stay in
//! step with [`exit_code`]; a unit test checks every Orbit error code against it.

use orbit_server_kit::error::{ErrorCode, OrbitError};
use serde_json::json;
use std::fmt::Write as _;
use tonic::{Code, Status};

use super::output::{print_json, Format};

/// Why a client command did not succeed.
#[derive(Debug)]
pub enum Failure {
    /// The arguments or local input are wrong; nothing was sent.
    Usage(String),
    /// The server cannot be reached at the address.
    Connect {
        /// The address that was dialled.
        address: String,
        /// What went wrong, from the transport.
        reason: String,
    },
    /// The server answered with an error status.
    Rpc(Status),
    /// The command worked but its subject did not succeed (an execution that ended badly, a
    /// replay divergence). The outcome was already printed as the command's result.
    Unsuccessful,
}

impl From<Status> for Failure {
    fn from(status: Status) -> Self {
        Failure::Rpc(status)
    }
}

/// The process exit code for a failure. The only place the mapping lives.
#[must_use]
pub fn exit_code(failure: &Failure) -> u8 {
    const UNSUCCESSFUL: u8 = 1;
    const USAGE: u8 = 2;
    const NOT_FOUND: u8 = 3;
    const SERVER: u8 = 4;
    const UNREACHABLE: u8 = 5;
    match failure {
        Failure::Unsuccessful => UNSUCCESSFUL,
        Failure::Usage(_) => USAGE,
        Failure::Connect { .. } => UNREACHABLE,
        Failure::Rpc(status) => match OrbitError::from_status(status).map(|e| e.code) {
            Some(
                ErrorCode::InvalidArgument
                | ErrorCode::InvalidDefinition
                | ErrorCode::InvalidInput
                | ErrorCode::InvalidQuery
                | ErrorCode::SignalPayloadInvalid
                | ErrorCode::PayloadTooLarge
                | ErrorCode::PayloadTooDeep,
            ) => USAGE,
            Some(
                ErrorCode::WorkflowNotFound
                | ErrorCode::ExecutionNotFound
                | ErrorCode::ScheduleNotFound
                | ErrorCode::BatchNotFound
                | ErrorCode::RateLimitNotFound
                | ErrorCode::UnknownSignal
                | ErrorCode::UnknownQuery
                | ErrorCode::UnknownUpdate
                | ErrorCode::UnknownToken,
            ) => NOT_FOUND,
            Some(ErrorCode::Unavailable) => UNREACHABLE,
            Some(
                ErrorCode::DefinitionConflict
                | ErrorCode::ExecutionExists
                | ErrorCode::RequestIdReused
                | ErrorCode::ExecutionFinished
                | ErrorCode::UpdateRejected
                | ErrorCode::UpdateFailed
                | ErrorCode::DeadlineExceeded
                | ErrorCode::ExecutionNotSuspended
                | ErrorCode::MigrationUnsafe
                | ErrorCode::ResetPointInvalid
                | ErrorCode::ExecutionNotFinished
                | ErrorCode::ExecutionPendingStart
                | ErrorCode::SearchAttributeConflict
                | ErrorCode::QueryFailed
                | ErrorCode::ExpressionLimit
                | ErrorCode::ResourceExhausted
                | ErrorCode::Unauthenticated
                | ErrorCode::PermissionDenied
                | ErrorCode::StorageError
                | ErrorCode::ScheduleExists
                | ErrorCode::ProtocolError
                | ErrorCode::WorkerMismatch,
            ) => SERVER,
            // No Orbit code: a proxy, an unimplemented method or the transport answered.
            None => match status.code() {
                Code::InvalidArgument | Code::OutOfRange => USAGE,
                Code::NotFound => NOT_FOUND,
                Code::Unavailable => UNREACHABLE,
                _ => SERVER,
            },
        },
    }
}

/// The `CODE` and message of a failure, as printed after `error: `.
fn code_and_message(failure: &Failure) -> (String, String, Vec<(String, String, String)>) {
    match failure {
        Failure::Usage(message) => ("INVALID_ARGUMENT".to_owned(), message.clone(), Vec::new()),
        Failure::Connect { address, reason } => (
            "UNAVAILABLE".to_owned(),
            format!("cannot connect to {address}: {reason} (is the server running? see --address)"),
            Vec::new(),
        ),
        Failure::Rpc(status) => match OrbitError::from_status(status) {
            Some(e) => (
                e.code.as_str().to_owned(),
                e.message,
                e.details.into_iter().map(|v| (v.path, v.code, v.message)).collect(),
            ),
            None => {
                let message = match (status.message(), status.code()) {
                    ("", Code::Unimplemented) => {
                        "the server does not serve this method (wrong address, or an older server?)"
                            .to_owned()
                    }
                    ("", _) => "(the server sent no message)".to_owned(),
                    (message, _) => message.to_owned(),
                };
                (grpc_code_name(status.code()).to_owned(), message, Vec::new())
            }
        },
        Failure::Unsuccessful => (String::new(), String::new(), Vec::new()),
    }
}

/// Prints a failure: `error: CODE: message` and one `  path: [CODE] message` line per field
/// violation on stderr; with `--output json` also `{"error": {...}}` on stdout.
pub fn report(failure: &Failure, format: Format) {
    if matches!(failure, Failure::Unsuccessful) {
        return;
    }
    let (code, message, violations) = code_and_message(failure);
    // With violations, the message's first line is the headline: a refused definition's
    // message goes on to list its problems, which the violation lines below show in full
    // (every one the server sent, with its code), so they are not printed twice.
    let headline = if violations.is_empty() { &message } else { first_line(&message) };
    let mut text = format!("error: {code}: {headline}\n");
    for (path, reason, description) in &violations {
        let path = if path.is_empty() { "(document)" } else { path };
        let _ = writeln!(text, "  {path}: [{reason}] {description}");
    }
    eprint!("{text}");
    if format == Format::Json {
        let violations: Vec<_> = violations
            .iter()
            .map(
                |(path, reason, message)| json!({"path": path, "code": reason, "message": message}),
            )
            .collect();
        print_json(&json!({
            "error": {"code": code, "message": message, "violations": violations,
                      "exit_code": exit_code(failure)}
        }));
    }
}

/// The text up to the first line break.
fn first_line(text: &str) -> &str {
    text.lines().next().unwrap_or("")
}

/// The canonical upper-snake-case name of a gRPC status code.
fn grpc_code_name(code: Code) -> &'static str {
    match code {
        Code::Ok => "OK",
        Code::Cancelled => "CANCELLED",
        Code::Unknown => "UNKNOWN",
        Code::InvalidArgument => "INVALID_ARGUMENT",
        Code::DeadlineExceeded => "DEADLINE_EXCEEDED",
        Code::NotFound => "NOT_FOUND",
        Code::AlreadyExists => "ALREADY_EXISTS",
        Code::PermissionDenied => "PERMISSION_DENIED",
        Code::ResourceExhausted => "RESOURCE_EXHAUSTED",
        Code::FailedPrecondition => "FAILED_PRECONDITION",
        Code::Aborted => "ABORTED",
        Code::OutOfRange => "OUT_OF_RANGE",
        Code::Unimplemented => "UNIMPLEMENTED",
        Code::Internal => "INTERNAL",
        Code::Unavailable => "UNAVAILABLE",
        Code::DataLoss => "DATA_LOSS",
        Code::Unauthenticated => "UNAUTHENTICATED",
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use orbit_server_kit::error::FieldViolation;

    fn code_of(code: ErrorCode) -> u8 {
        exit_code(&Failure::Rpc(OrbitError::new(code, "boom").to_status()))
    }

    #[test]
    fn local_failures_have_fixed_codes() {
        assert_eq!(exit_code(&Failure::Unsuccessful), 1);
        assert_eq!(exit_code(&Failure::Usage("bad".into())), 2);
        let connect = Failure::Connect { address: "http://x".into(), reason: "refused".into() };
        assert_eq!(exit_code(&connect), 5);
    }

    #[test]
    fn orbit_codes_map_by_family() {
        for &code in ErrorCode::ALL {
            let name = code.as_str();
            let expected = if name.starts_with("INVALID_")
                || name == "SIGNAL_PAYLOAD_INVALID"
                || name == "PAYLOAD_TOO_LARGE"
                || name == "PAYLOAD_TOO_DEEP"
            {
                2
            } else if name.ends_with("_NOT_FOUND") || name.starts_with("UNKNOWN_") {
                3
            } else if name == "UNAVAILABLE" {
                5
            } else {
                4
            };
            assert_eq!(code_of(code), expected, "{name}");
            // Every code is named in the help text, so the table cannot silently fall behind.
            assert!(exit_codes_help!().contains(name) || expected == 4, "{name} missing from help");
        }
    }

    #[test]
    fn bare_grpc_codes_fall_back() {
        assert_eq!(exit_code(&Failure::Rpc(Status::invalid_argument("x"))), 2);
        assert_eq!(exit_code(&Failure::Rpc(Status::not_found("x"))), 3);
        assert_eq!(exit_code(&Failure::Rpc(Status::internal("x"))), 4);
        assert_eq!(exit_code(&Failure::Rpc(Status::unimplemented("x"))), 4);
        assert_eq!(exit_code(&Failure::Rpc(Status::unavailable("x"))), 5);
    }

    #[test]
    fn violations_are_read_from_details() {
        let status = OrbitError::new(ErrorCode::InvalidDefinition, "2 problems")
            .with_violation(FieldViolation::new("steps[0].task", "UNKNOWN_TASK", "no such task"))
            .with_violation(FieldViolation::new("", "PARSE", "bad yaml"))
            .to_status();
        let (code, message, violations) = code_and_message(&Failure::Rpc(status));
        assert_eq!(code, "INVALID_DEFINITION");
        assert_eq!(message, "2 problems");
        assert_eq!(violations.len(), 2);
        assert_eq!(violations[0].0, "steps[0].task");
        assert_eq!(violations[0].1, "UNKNOWN_TASK");
    }

    #[test]
    fn bare_status_uses_grpc_code_name() {
        let (code, message, _) = code_and_message(&Failure::Rpc(Status::unimplemented("nope")));
        assert_eq!((code.as_str(), message.as_str()), ("UNIMPLEMENTED", "nope"));
    }
}
