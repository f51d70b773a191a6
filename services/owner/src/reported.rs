//! `ReportResultRequest` → the domain result the owner applies, validated on receipt.
//!
//! A current frontend sends the typed `result` (converted by `orbit_wire`); a frontend of an
//! earlier release, during a rolling upgrade, sends the legacy `kind` + JSON `payload`,
//! read only when `result` is unset and checked exactly as before. Either way the result
//! is an `InboxMessage::Complete` / `Fail`, bound to the request's token.

use orbit_api::internal::v1 as pb;
use orbit_server_kit::payload::check_limits;
use orbit_server_kit::validate as rules;
use orbit_server_kit::OrbitError;
use orbit_store::InboxMessage;

/// A result handed to the owner, in domain terms.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Reported {
    pub(crate) execution_id: String,
    pub(crate) worker_id: String,
    pub(crate) message: InboxMessage,
}

/// Validates and converts a `ReportResultRequest`; payloads over `max_payload_bytes` are
/// refused.
///
/// # Errors
/// `INVALID_ARGUMENT` naming the field (an id, a value JSON cannot hold, a malformed
/// legacy entry), `PAYLOAD_TOO_LARGE`, `PAYLOAD_TOO_DEEP` (typed values only: the legacy
/// path keeps its size check).
pub(crate) fn decode(
    r: pb::ReportResultRequest,
    max_payload_bytes: u64,
) -> Result<Reported, OrbitError> {
    rules::id("execution_id", &r.execution_id)?;
    rules::id("token", &r.token)?;
    rules::id("worker_id", &r.worker_id)?;
    let message = match r.result {
        Some(result) => {
            let message = orbit_wire::task_result_from_wire(&r.token, result)?;
            within_limits(&message, max_payload_bytes)?;
            message
        }
        None => legacy(&r.kind, &r.token, &r.payload, max_payload_bytes)?,
    };
    Ok(Reported { execution_id: r.execution_id, worker_id: r.worker_id, message })
}

/// The same limits the frontend checked the values with, on the same values (the output,
/// the error object), so whatever a frontend with the same limit passes on is taken.
fn within_limits(message: &InboxMessage, max: u64) -> Result<(), OrbitError> {
    match message {
        InboxMessage::Complete(c) => check_limits("result.output", &c.output, max),
        InboxMessage::Fail(f) => {
            let error = serde_json::to_value(&f.error).unwrap_or_default();
            check_limits("result.error", &error, max)
        }
        _ => Ok(()),
    }
}

/// The result of an earlier release's frontend: the inbox kind and the JSON payload text.
fn legacy(kind: &str, token: &str, payload: &str, max: u64) -> Result<InboxMessage, OrbitError> {
    let payload: serde_json::Value =
        serde_json::from_str(payload).map_err(|e| rules::invalid("payload", e.to_string()))?;
    rules::check_size("payload", &payload, max)?;
    InboxMessage::decode(kind, Some(token), &payload).map_err(|e| rules::invalid("kind", e.message))
}

#[cfg(test)]
mod tests {
    use super::*;
    use orbit_engine::TaskError;
    use orbit_server_kit::payload::json_to_proto;
    use orbit_server_kit::ErrorCode;
    use orbit_store::inbox::{Complete, Fail};
    use pb::report_result_request::Result as WireResult;
    use serde_json::json;

    fn request(result: Option<WireResult>) -> pb::ReportResultRequest {
        pb::ReportResultRequest {
            execution_id: "e1".into(),
            token: "t1".into(),
            worker_id: "w".into(),
            result,
            ..pb::ReportResultRequest::default()
        }
    }

    #[test]
    fn a_typed_failure_keeps_its_code_message_retryable_and_details() {
        let wire = orbit_api::v1::TaskError {
            code: "CARD_DECLINED".into(),
            message: "the card was declined".into(),
            retryable: true,
            details: Some(json_to_proto(json!({"card": "visa", "attempts": [1, 2.5]}))),
        };
        let reported = decode(request(Some(WireResult::Error(wire))), 10_000).unwrap();
        let error = TaskError {
            code: "CARD_DECLINED".into(),
            message: "the card was declined".into(),
            retryable: true,
            details: Some(json!({"card": "visa", "attempts": [1, 2.5]})),
        };
        let expected = InboxMessage::Fail(Fail { token: "t1".into(), error });
        assert_eq!(
            reported,
            Reported { execution_id: "e1".into(), worker_id: "w".into(), message: expected }
        );
    }

    #[test]
    fn a_typed_output_and_the_legacy_form_give_the_same_result() {
        let output = json!({"greeting": "hello", "n": 3});
        let typed = decode(request(Some(WireResult::Output(json_to_proto(output.clone())))), 100);
        let legacy = decode(
            pb::ReportResultRequest {
                kind: "complete".into(),
                payload: json!({ "output": output }).to_string(),
                ..request(None)
            },
            100,
        );
        let expected = InboxMessage::Complete(Complete { token: "t1".into(), output });
        assert_eq!(typed.unwrap().message, expected);
        assert_eq!(legacy.unwrap().message, expected);

        // A legacy failure, as an earlier release wrote it (the token from the request).
        let fail = pb::ReportResultRequest {
            kind: "fail".into(),
            payload: r#"{"error":{"code":"BROKEN","message":"no luck","retryable":false}}"#.into(),
            ..request(None)
        };
        let error = TaskError::fatal("BROKEN", "no luck");
        let expected = InboxMessage::Fail(Fail { token: "t1".into(), error });
        assert_eq!(decode(fail, 100).unwrap().message, expected);
    }

    #[test]
    fn bad_results_are_refused_with_the_codes_of_the_legacy_path() {
        let big = json_to_proto(json!("x".repeat(200)));
        let e = decode(request(Some(WireResult::Output(big))), 100).unwrap_err();
        assert_eq!(e.code, ErrorCode::PayloadTooLarge);
        let legacy = pb::ReportResultRequest {
            kind: "complete".into(),
            payload: json!({ "output": "x".repeat(200) }).to_string(),
            ..request(None)
        };
        assert_eq!(decode(legacy, 100).unwrap_err().code, ErrorCode::PayloadTooLarge);

        let deep = (0..30).fold(json!(1), |v, _| json!([v]));
        let e = decode(request(Some(WireResult::Output(json_to_proto(deep)))), 10_000);
        assert_eq!(e.unwrap_err().code, ErrorCode::PayloadTooDeep);
        let details = Some(json_to_proto(json!("y".repeat(200))));
        let error = orbit_api::v1::TaskError { code: "X".into(), details, ..Default::default() };
        let e = decode(request(Some(WireResult::Error(error))), 100).unwrap_err();
        assert_eq!(e.code, ErrorCode::PayloadTooLarge);

        let no_code = WireResult::Error(orbit_api::v1::TaskError::default());
        let e = decode(request(Some(no_code)), 100).unwrap_err();
        assert_eq!(
            (e.code, e.details[0].path.as_str()),
            (ErrorCode::InvalidArgument, "result.error.code")
        );
        let unknown =
            pb::ReportResultRequest { kind: "nope".into(), payload: "{}".into(), ..request(None) };
        assert_eq!(decode(unknown, 100).unwrap_err().code, ErrorCode::InvalidArgument);
        let no_token = pb::ReportResultRequest { token: String::new(), ..request(None) };
        assert_eq!(decode(no_token, 100).unwrap_err().code, ErrorCode::InvalidArgument);
    }
}
