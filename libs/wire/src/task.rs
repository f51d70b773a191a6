//! Task-level pieces: errors ⇄ `orbit.v1.TaskError`, and what a unit key's task is.

use orbit_api::v1 as wire;
use orbit_definition::{Definition, StepKind};
use orbit_engine::unit::UnitKey;
use orbit_engine::TaskError;
use orbit_server_kit::payload::{fit, json_to_proto, proto_to_json, PayloadError};
use serde_json::Value;

/// The wire form of a task error; `details` is unset when there are none (or null), and
/// the truncation marker when over the read limits (see [`crate::READ_MAX_PAYLOAD_BYTES`]).
#[must_use]
pub fn task_error(error: &TaskError) -> wire::TaskError {
    wire::TaskError {
        code: error.code.clone(),
        message: error.message.clone(),
        retryable: error.retryable,
        details: error.details.clone().filter(|d| !d.is_null()).map(read_value),
    }
}

/// A stored value as reads send it: within the limits, or the truncation marker.
pub(crate) fn read_value(value: Value) -> prost_types::Value {
    json_to_proto(fit(value, crate::READ_MAX_PAYLOAD_BYTES))
}

/// The domain form of a wire task error. Does not check that `code` is set.
///
/// # Errors
/// A `details` value JSON cannot represent (NaN, infinity).
pub fn task_error_from_wire(error: wire::TaskError) -> Result<TaskError, PayloadError> {
    let details = error.details.map(proto_to_json).transpose()?.filter(|d| !d.is_null());
    Ok(TaskError { code: error.code, message: error.message, retryable: error.retryable, details })
}

/// The task name a unit runs (compensations included), or `None` for units that run no
/// worker task (compute, sleep, await, child, ...). Built-in HTTP steps are `http`.
#[must_use]
pub fn task_name(def: &Definition, unit: &str) -> Option<String> {
    let key = UnitKey::parse(unit)?;
    let step = def.find_step(&key.scope.body(), &key.step)?;
    if key.compensate {
        return step.compensate.as_ref().map(|c| c.task.clone());
    }
    match &step.kind {
        StepKind::Task { task } => Some(task.clone()),
        StepKind::Http { .. } => Some("http".into()),
        _ => None,
    }
}

/// The timeouts that apply to one attempt of a task unit, in milliseconds.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct TaskTimeouts {
    /// Per-attempt timeout (`TIMEOUT`), counted from dispatch.
    pub attempt_ms: Option<u64>,
    /// Longest wait in the queue (`QUEUE_TIMEOUT`), counted from scheduling.
    pub queue_ms: Option<u64>,
    /// Longest gap between heartbeats (`HEARTBEAT_TIMEOUT`).
    pub heartbeat_ms: Option<u64>,
}

/// The timeouts of a unit's task, read from its step (or its `compensate` call).
#[must_use]
pub fn task_timeouts(def: &Definition, unit: &str) -> TaskTimeouts {
    let Some(key) = UnitKey::parse(unit) else { return TaskTimeouts::default() };
    let Some(step) = def.find_step(&key.scope.body(), &key.step) else {
        return TaskTimeouts::default();
    };
    if key.compensate {
        return TaskTimeouts {
            attempt_ms: step.compensate.as_ref().and_then(|c| c.timeout_ms),
            ..TaskTimeouts::default()
        };
    }
    TaskTimeouts {
        attempt_ms: step.timeout_ms,
        queue_ms: step.queue_timeout_ms,
        heartbeat_ms: step.heartbeat_timeout_ms,
    }
}

/// A stored value as reads send it ([`read_value`]); absent stays unset.
pub(crate) fn opt_value(value: Option<&Value>) -> Option<prost_types::Value> {
    value.cloned().map(read_value)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn task_errors_round_trip() {
        let error = TaskError {
            code: "CARD_DECLINED".into(),
            message: "no".into(),
            retryable: false,
            details: Some(json!({"field": "card", "n": 3})),
        };
        let back = task_error_from_wire(task_error(&error)).unwrap();
        assert_eq!(back, error);
        let bare = TaskError::retryable("TIMEOUT", "late");
        let wire = task_error(&bare);
        assert!(wire.details.is_none());
        assert_eq!(task_error_from_wire(wire).unwrap(), bare);
    }
}
