//! Every error code maps to its documented gRPC code and survives a trip through a
//! `tonic::Status` (metadata and details).

use orbit_server_kit::error::{ERROR_CODE_METADATA_KEY, ERROR_DOMAIN};
use orbit_server_kit::{ErrorCode, FieldViolation, OrbitError};
use tonic::{Code, Status};
use tonic_types::StatusExt;

/// The table from the semantics document ("Error codes"), plus the codes of the
/// schedule and worker APIs.
const EXPECTED: &[(&str, Code)] = &[
    ("INVALID_ARGUMENT", Code::InvalidArgument),
    ("INVALID_DEFINITION", Code::InvalidArgument),
    ("INVALID_INPUT", Code::InvalidArgument),
    ("WORKFLOW_NOT_FOUND", Code::NotFound),
    ("EXECUTION_NOT_FOUND", Code::NotFound),
    ("UNKNOWN_SIGNAL", Code::NotFound),
    ("UNKNOWN_QUERY", Code::NotFound),
    ("DEFINITION_CONFLICT", Code::AlreadyExists),
    ("EXECUTION_EXISTS", Code::AlreadyExists),
    ("EXECUTION_FINISHED", Code::FailedPrecondition),
    ("EXECUTION_NOT_FINISHED", Code::FailedPrecondition),
    ("SIGNAL_PAYLOAD_INVALID", Code::InvalidArgument),
    ("QUERY_FAILED", Code::InvalidArgument),
    ("PAYLOAD_TOO_LARGE", Code::ResourceExhausted),
    ("RESOURCE_EXHAUSTED", Code::ResourceExhausted),
    ("UNAUTHENTICATED", Code::Unauthenticated),
    ("PERMISSION_DENIED", Code::PermissionDenied),
    ("UNAVAILABLE", Code::Unavailable),
    ("STORAGE_ERROR", Code::Internal),
    ("SCHEDULE_NOT_FOUND", Code::NotFound),
    ("SCHEDULE_EXISTS", Code::AlreadyExists),
    ("UNKNOWN_TOKEN", Code::NotFound),
    ("PROTOCOL_ERROR", Code::FailedPrecondition),
];

#[test]
fn every_code_maps_to_its_grpc_code() {
    assert_eq!(ErrorCode::ALL.len(), EXPECTED.len(), "table and enum disagree");
    for (text, grpc) in EXPECTED {
        let code: ErrorCode = text.parse().expect("known code");
        assert_eq!(code.as_str(), *text);
        assert_eq!(code.to_string(), *text);
        assert_eq!(code.grpc_code(), *grpc, "{text}");
    }
    assert!("TIMEOUT".parse::<ErrorCode>().is_err(), "task-level codes are not API codes");
}

#[test]
fn every_code_round_trips_through_status() {
    for &code in ErrorCode::ALL {
        let error = OrbitError::new(code, format!("{code} happened"));
        let status: Status = error.clone().into();
        assert_eq!(status.code(), code.grpc_code());
        assert_eq!(status.message(), format!("{code} happened"));
        assert_eq!(
            status.metadata().get(ERROR_CODE_METADATA_KEY).unwrap().to_str().unwrap(),
            code.as_str()
        );
        let info = status.get_details_error_info().expect("ErrorInfo detail");
        assert_eq!(info.reason, code.as_str());
        assert_eq!(info.domain, ERROR_DOMAIN);
        assert!(info.metadata.is_empty());
        assert!(status.get_details_bad_request().is_none());
        assert_eq!(OrbitError::from_status(&status), Some(error));
    }
}

#[test]
fn violations_travel_as_bad_request_and_path() {
    let error = OrbitError::new(ErrorCode::InvalidDefinition, "definition does not validate")
        .with_violation(FieldViolation::new("steps[1].task", "UNKNOWN_TASK", "no task `pay`"))
        .with_violation(FieldViolation::new("timeout", "INVALID_DURATION", "not a duration"));
    let status = error.to_status();
    assert_eq!(status.code(), Code::InvalidArgument);
    let info = status.get_details_error_info().unwrap();
    assert_eq!(info.metadata.get("path").map(String::as_str), Some("steps[1].task"));
    let bad = status.get_details_bad_request().expect("BadRequest detail");
    assert_eq!(bad.field_violations.len(), 2);
    assert_eq!(bad.field_violations[0].field, "steps[1].task");
    assert_eq!(bad.field_violations[0].reason, "UNKNOWN_TASK");
    assert_eq!(bad.field_violations[0].description, "no task `pay`");
    assert_eq!(OrbitError::from_status(&status), Some(error));
}

#[test]
fn error_info_alone_is_enough() {
    // A proxy may strip custom metadata but keep grpc-status-details-bin.
    let status = OrbitError::new(ErrorCode::ExecutionFinished, "closed").to_status();
    let bare =
        Status::with_details(status.code(), status.message(), status.details().to_vec().into());
    let back = OrbitError::from_status(&bare).unwrap();
    assert_eq!(back.code, ErrorCode::ExecutionFinished);
}

#[test]
fn statuses_without_an_orbit_code_are_not_orbit_errors() {
    assert_eq!(OrbitError::from_status(&Status::unimplemented("nope")), None);
    let mut status = Status::not_found("x");
    status.metadata_mut().insert(ERROR_CODE_METADATA_KEY, "NOT_A_CODE".parse().unwrap());
    assert_eq!(OrbitError::from_status(&status), None);
}
