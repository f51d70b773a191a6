//! A worker's result between services: the domain `InboxMessage::Complete` / `Fail` ⇄
//! `orbit.internal.v1.ReportResultRequest.result`, the typed form a frontend hands a result
//! to the execution's owner in.
//!
//! Unlike the read conversions ([`crate::task_error`]), nothing is truncated here: the
//! result is being recorded, so the owner must get exactly the value the frontend checked
//! (`task_result_from_wire(task_result(m))` is `m`). The limits (`max_payload_bytes`,
//! depth) are the receiver's to check on the domain value.

use orbit_api::internal::v1::report_result_request::Result as WireResult;
use orbit_api::v1 as wire;
use orbit_engine::TaskError;
use orbit_server_kit::payload::{json_to_proto, proto_to_json};
use orbit_server_kit::validate::invalid;
use orbit_server_kit::OrbitError;
use orbit_store::inbox::{Complete, Fail};
use orbit_store::InboxMessage;

/// The wire form of a worker's result; `None` for any message that is not one.
#[must_use]
pub fn task_result(message: &InboxMessage) -> Option<WireResult> {
    match message {
        InboxMessage::Complete(c) => Some(WireResult::Output(json_to_proto(c.output.clone()))),
        InboxMessage::Fail(f) => Some(WireResult::Error(recorded_task_error(&f.error))),
        _ => None,
    }
}

/// A task error as it is recorded: `details` as they are (unset when none or null).
fn recorded_task_error(error: &TaskError) -> wire::TaskError {
    wire::TaskError {
        code: error.code.clone(),
        message: error.message.clone(),
        retryable: error.retryable,
        details: error.details.clone().filter(|d| !d.is_null()).map(json_to_proto),
    }
}

/// The domain form of the result of the attempt `token`.
///
/// # Errors
/// `INVALID_ARGUMENT` naming the field (`result.output`, `result.error.code`,
/// `result.error.details`): a number JSON cannot hold, or a failure without a code.
pub fn task_result_from_wire(token: &str, result: WireResult) -> Result<InboxMessage, OrbitError> {
    let token = token.to_string();
    Ok(match result {
        WireResult::Output(output) => {
            let output =
                proto_to_json(output).map_err(|e| invalid("result.output", e.to_string()))?;
            InboxMessage::Complete(Complete { token, output })
        }
        WireResult::Error(error) => {
            if error.code.is_empty() {
                return Err(invalid("result.error.code", "is required"));
            }
            let error = crate::task_error_from_wire(error)
                .map_err(|e| invalid("result.error.details", e.to_string()))?;
            InboxMessage::Fail(Fail { token, error })
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use orbit_server_kit::ErrorCode;
    use serde_json::json;

    #[test]
    fn results_round_trip_exactly() {
        let deep = (0..30).fold(json!(1), |v, _| json!([v]));
        let complete = InboxMessage::Complete(Complete { token: "t".into(), output: deep });
        let fail = InboxMessage::Fail(Fail {
            token: "t".into(),
            error: TaskError {
                code: "CARD_DECLINED".into(),
                message: "no".into(),
                retryable: true,
                details: Some(json!({"big": "x".repeat(3 * 1024 * 1024)})),
            },
        });
        let bare = InboxMessage::Fail(Fail { token: "t".into(), error: TaskError::fatal("X", "") });
        for message in [complete, fail, bare] {
            let wire = task_result(&message).expect("a result");
            assert_eq!(task_result_from_wire("t", wire).unwrap(), message);
        }
        let signal = InboxMessage::decode("signal", None, &json!({"name": "s"})).unwrap();
        assert!(task_result(&signal).is_none());
    }

    #[test]
    fn bad_results_name_their_field() {
        let nan =
            prost_types::Value { kind: Some(prost_types::value::Kind::NumberValue(f64::NAN)) };
        let e = task_result_from_wire("t", WireResult::Output(nan.clone())).unwrap_err();
        assert_eq!(
            (e.code, e.details[0].path.as_str()),
            (ErrorCode::InvalidArgument, "result.output")
        );
        let no_code = WireResult::Error(wire::TaskError::default());
        let e = task_result_from_wire("t", no_code).unwrap_err();
        assert_eq!(e.details[0].path, "result.error.code");
        let bad = wire::TaskError { code: "X".into(), details: Some(nan), ..Default::default() };
        let e = task_result_from_wire("t", WireResult::Error(bad)).unwrap_err();
        assert_eq!(e.details[0].path, "result.error.details");
    }
}
