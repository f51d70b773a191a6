//! Every error code maps to its documented gRPC code and survives a trip through a
//! `tonic::Status` (metadata and details).

use orbit_server_kit::error::{ERROR_CODE_METADATA_KEY, ERROR_DOMAIN};
use orbit_server_kit::{ErrorCode, FieldViolation, GrpcCode, OrbitError};
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
    ("UNKNOWN_UPDATE", Code::NotFound),
    ("UPDATE_REJECTED", Code::FailedPrecondition),
    ("UPDATE_FAILED", Code::FailedPrecondition),
    ("DEADLINE_EXCEEDED", Code::DeadlineExceeded),
    ("DEFINITION_CONFLICT", Code::AlreadyExists),
    ("EXECUTION_EXISTS", Code::AlreadyExists),
    ("EXECUTION_FINISHED", Code::FailedPrecondition),
    ("EXECUTION_NOT_FINISHED", Code::FailedPrecondition),
    ("SIGNAL_PAYLOAD_INVALID", Code::InvalidArgument),
    ("QUERY_FAILED", Code::InvalidArgument),
    ("EXPRESSION_LIMIT", Code::InvalidArgument),
    ("PAYLOAD_TOO_LARGE", Code::ResourceExhausted),
    ("PAYLOAD_TOO_DEEP", Code::InvalidArgument),
    ("RESOURCE_EXHAUSTED", Code::ResourceExhausted),
    ("UNAUTHENTICATED", Code::Unauthenticated),
    ("PERMISSION_DENIED", Code::PermissionDenied),
    ("UNAVAILABLE", Code::Unavailable),
    ("STORAGE_ERROR", Code::Internal),
    ("SCHEDULE_NOT_FOUND", Code::NotFound),
    ("SCHEDULE_EXISTS", Code::AlreadyExists),
    ("UNKNOWN_TOKEN", Code::NotFound),
    ("PROTOCOL_ERROR", Code::FailedPrecondition),
    ("WORKER_MISMATCH", Code::PermissionDenied),
    ("EXECUTION_NOT_SUSPENDED", Code::FailedPrecondition),
    ("REQUEST_ID_REUSED", Code::AlreadyExists),
    ("MIGRATION_UNSAFE", Code::FailedPrecondition),
    ("RESET_POINT_INVALID", Code::FailedPrecondition),
    ("EXECUTION_PENDING_START", Code::FailedPrecondition),
    ("SEARCH_ATTRIBUTE_CONFLICT", Code::FailedPrecondition),
    ("BATCH_NOT_FOUND", Code::NotFound),
    ("RATE_LIMIT_NOT_FOUND", Code::NotFound),
    ("INVALID_QUERY", Code::InvalidArgument),
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
fn invalid_query_carries_its_position() {
    let error = OrbitError::invalid_query("expected a value", 12, 2, 5);
    let status = error.to_status();
    assert_eq!(status.code(), Code::InvalidArgument);
    assert!(status.message().contains("line 2, column 5"), "{}", status.message());
    let info = status.get_details_error_info().unwrap();
    assert_eq!(info.reason, "INVALID_QUERY");
    assert_eq!(info.metadata.get("position").map(String::as_str), Some("12"));
    assert_eq!(info.metadata.get("line").map(String::as_str), Some("2"));
    assert_eq!(info.metadata.get("column").map(String::as_str), Some("5"));
    assert_eq!(info.metadata.get("path").map(String::as_str), Some("query"));
    let back = OrbitError::from_status(&status).unwrap();
    assert_eq!(back.query_position(), Some((12, 2, 5)));
    assert_eq!(back, error);
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

#[test]
fn statuses_stay_under_the_metadata_limit_whatever_the_error() {
    use orbit_server_kit::error::{MAX_STATUS_MESSAGE_BYTES, MAX_STATUS_VIOLATIONS};
    let long = "é".repeat(100_000);
    let error = OrbitError::new(ErrorCode::InvalidDefinition, long.clone()).with_violations(
        (0..5_000).map(|i| FieldViolation::new(format!("steps[{i}].{long}"), "CYCLE", &long)),
    );
    let status: Status = error.into();
    assert!(status.message().len() <= MAX_STATUS_MESSAGE_BYTES, "{}", status.message().len());
    assert!(status.message().ends_with('…'));
    assert!(status.details().len() < 4096, "details of {} bytes", status.details().len());
    let back = OrbitError::from_status(&status).expect("still an Orbit error");
    assert_eq!(back.code, ErrorCode::InvalidDefinition);
    assert!(!back.details.is_empty() && back.details.len() <= MAX_STATUS_VIOLATIONS);
}

#[test]
fn a_message_that_does_not_decode_is_an_orbit_invalid_argument() {
    use prost::Message as _;
    // The codec of every generated server speaks the same metadata key as this crate.
    assert_eq!(orbit_api::codec::ERROR_CODE_METADATA_KEY, ERROR_CODE_METADATA_KEY);
    // `document` (field 1) with bytes that are not UTF-8.
    let bytes: &[u8] = &[0x0a, 0x02, 0xff, 0xfe];
    let e = orbit_api::v1::RegisterWorkflowRequest::decode(bytes).unwrap_err();
    let status = orbit_api::codec::decode_error(&e);
    assert_eq!(status.code(), Code::InvalidArgument);
    assert!(status.message().contains("UTF-8"), "{status:?}");
    assert_eq!(OrbitError::from_status(&status).unwrap().code, ErrorCode::InvalidArgument);
    // Too deep for prost: the message says so and names the payload limit.
    let deep = (0..60).fold(prost_types::Value { kind: None }, |v, _| prost_types::Value {
        kind: Some(prost_types::value::Kind::ListValue(prost_types::ListValue { values: vec![v] })),
    });
    let e = prost_types::Value::decode(deep.encode_to_vec().as_slice()).unwrap_err();
    let status = orbit_api::codec::decode_error(&e);
    assert!(status.message().contains("nested too deep"), "{status:?}");
}

#[test]
fn every_violation_that_fits_is_sent_and_a_cut_list_says_how_many_were_left_out() {
    use orbit_server_kit::error::{MAX_STATUS_VIOLATIONS, MORE_VIOLATIONS};
    let many = |n: usize| {
        OrbitError::new(ErrorCode::InvalidDefinition, "many").with_violations(
            (0..n).map(|i| FieldViolation::new(format!("steps[{i}].task"), "UNKNOWN_TASK", "no")),
        )
    };
    // Short violations: as many as the count bound allows, all of them when they fit.
    let back = OrbitError::from_status(&many(MAX_STATUS_VIOLATIONS).to_status()).unwrap();
    assert_eq!(back.details.len(), MAX_STATUS_VIOLATIONS);
    assert!(back.details.iter().all(|v| v.code == "UNKNOWN_TASK"));
    let back = OrbitError::from_status(&many(MAX_STATUS_VIOLATIONS + 11).to_status()).unwrap();
    assert_eq!(back.details.len(), MAX_STATUS_VIOLATIONS);
    let last = back.details.last().unwrap();
    assert_eq!((last.code.as_str(), last.path.as_str()), (MORE_VIOLATIONS, ""));
    assert!(last.message.starts_with("12 more"), "{last:?}");
    assert_eq!(back.details[0].path, "steps[0].task");
    // Long ones: the byte budget cuts first, and says so too.
    let long = "x".repeat(200);
    let error = OrbitError::new(ErrorCode::InvalidDefinition, "long")
        .with_violations((0..30).map(|i| FieldViolation::new(format!("p{i}"), "C", &long)));
    let back = OrbitError::from_status(&error.to_status()).unwrap();
    assert!(back.details.len() < 30);
    let last = back.details.last().unwrap();
    assert_eq!(last.code, MORE_VIOLATIONS);
    let shown = back.details.len() - 1;
    assert!(last.message.starts_with(&format!("{} more", 30 - shown)), "{last:?}");
}
