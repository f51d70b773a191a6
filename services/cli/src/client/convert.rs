//! Wire messages shared by several commands, turned into JSON documents and short texts.
//!
//! The generated types have no serde; these functions pick the fields that matter and name
//! enums by their short names (`RUNNING`, not `EXECUTION_STATUS_RUNNING`), so `--output json`
//! documents are stable and readable. Payloads become plain JSON values.

use orbit_api::v1::{
    ExecutionInfo, ExecutionResult, ExecutionStatus, HistoryEvent, TaskError, TaskRef,
};
use orbit_server_kit::payload::PayloadError;
use serde_json::{json, Map, Value as Json};

use super::output::{enum_name, ts_json};

/// The short name of an execution status: `RUNNING`, `COMPLETED`, ...
#[must_use]
pub fn status_name(status: ExecutionStatus) -> String {
    enum_name(status.as_str_name(), "EXECUTION_STATUS_")
}

/// A converted payload, or a marker string when the server sent a number JSON cannot hold.
/// Call as `payload(message.output.map(proto_to_json))`; unset reads as `null`.
#[must_use]
pub fn payload(converted: Option<Result<Json, PayloadError>>) -> Json {
    match converted {
        None => Json::Null,
        Some(Ok(value)) => value,
        Some(Err(e)) => Json::String(format!("<unrepresentable payload: {e}>")),
    }
}

/// Like [`payload`], for a `Struct` converted with `struct_to_json_object`.
#[must_use]
pub fn object_payload(converted: Option<Result<Map<String, Json>, PayloadError>>) -> Json {
    payload(converted.map(|r| r.map(Json::Object)))
}

/// `name@version` of a task reference.
#[must_use]
pub fn task_ref_text(task: Option<&TaskRef>) -> String {
    task.map_or_else(String::new, |t| format!("{}@{}", t.name, t.version))
}

/// A task error as JSON.
#[must_use]
pub fn task_error_json(error: &TaskError) -> Json {
    json!({
        "code": error.code,
        "message": error.message,
        "retryable": error.retryable,
        "details": payload(error.details.clone().map(orbit_server_kit::payload::proto_to_json)),
    })
}

/// A task error as one line: `CODE: message`.
#[must_use]
pub fn task_error_text(error: &TaskError) -> String {
    if error.message.is_empty() {
        error.code.clone()
    } else {
        format!("{}: {}", error.code, error.message)
    }
}

/// An execution summary as JSON.
#[must_use]
pub fn info_json(info: &ExecutionInfo) -> Json {
    json!({
        "execution_id": info.execution_id,
        "run": info.run,
        "root_id": info.root_id,
        "parent_id": info.parent_id,
        "workflow": info.workflow,
        "version": info.version,
        "definition_hash": info.definition_hash,
        "status": status_name(info.status()),
        "schedule_id": info.schedule_id,
        "created_at": ts_json(info.created_at.as_ref()),
        "updated_at": ts_json(info.updated_at.as_ref()),
        "closed_at": ts_json(info.closed_at.as_ref()),
        "last_seq": info.last_seq,
        "failed_step": info.failed_step,
        "error_code": info.error_code,
    })
}

/// A history event as JSON.
#[must_use]
pub fn event_json(event: HistoryEvent) -> Json {
    json!({
        "seq": event.seq,
        "run": event.run,
        "event_type": event.event_type,
        "step": event.step,
        "timestamp": ts_json(event.timestamp.as_ref()),
        "payload": object_payload(
            event.payload.map(orbit_server_kit::payload::struct_to_json_object)
        ),
    })
}

/// The cells of a history table row: SEQ, TIME, EVENT, STEP, PAYLOAD (compact JSON).
#[must_use]
pub fn event_row(event: &Json) -> Vec<String> {
    let text = |key: &str| event[key].as_str().unwrap_or("").to_owned();
    let payload = match &event["payload"] {
        Json::Object(map) if map.is_empty() => String::new(),
        Json::Null => String::new(),
        other => other.to_string(),
    };
    vec![event["seq"].to_string(), text("timestamp"), text("event_type"), text("step"), payload]
}

/// The outcome of a closed run as JSON.
#[must_use]
pub fn result_json(result: ExecutionResult) -> Json {
    json!({
        "execution_id": result.execution_id,
        "run": result.run,
        "status": status_name(result.status()),
        "output": payload(result.output.map(orbit_server_kit::payload::proto_to_json)),
        "error": result.error.as_ref().map_or(Json::Null, task_error_json),
        "closed_at": ts_json(result.closed_at.as_ref()),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use orbit_server_kit::payload::{json_object_to_struct, json_to_proto, proto_to_json};

    #[test]
    fn events_convert_with_payload() {
        let Json::Object(fields) = json!({"attempt": 1, "output": {"ok": true}}) else {
            unreachable!()
        };
        let event = HistoryEvent {
            seq: 3,
            run: 1,
            event_type: "StepSucceeded".into(),
            step: "charge".into(),
            payload: Some(json_object_to_struct(fields)),
            timestamp: None,
        };
        let value = event_json(event);
        assert_eq!(value["payload"]["output"]["ok"], json!(true));
        assert_eq!(value["payload"]["attempt"], json!(1));
        assert_eq!(value["timestamp"], Json::Null);
        let row = event_row(&value);
        assert_eq!(row[0], "3");
        assert_eq!(row[2], "StepSucceeded");
        assert!(row[4].contains("\"attempt\":1"), "{}", row[4]);
    }

    #[test]
    fn results_name_status_and_payload() {
        let result = ExecutionResult {
            execution_id: "e1".into(),
            run: 1,
            status: ExecutionStatus::Completed.into(),
            output: Some(json_to_proto(json!({"total": 42}))),
            error: None,
            closed_at: None,
        };
        let value = result_json(result);
        assert_eq!(value["status"], "COMPLETED");
        assert_eq!(value["output"], json!({"total": 42}));
        assert_eq!(value["error"], Json::Null);
    }

    #[test]
    fn unset_and_bad_payloads() {
        assert_eq!(payload(None), Json::Null);
        let null = orbit_server_kit::payload::json_to_proto(Json::Null);
        assert_eq!(payload(Some(proto_to_json(null))), Json::Null);
        let bad = payload(Some(Err(PayloadError::NonFiniteNumber(f64::NAN))));
        assert!(bad.as_str().unwrap().starts_with("<unrepresentable payload"));
    }
}
