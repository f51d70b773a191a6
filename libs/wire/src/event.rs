//! History events → `orbit.v1.HistoryEvent`.
//!
//! The payload is the event's own JSON form (the serde form history is stored in) without
//! its `type` tag, which travels as `event_type`. Times inside payloads stay epoch
//! milliseconds, as the semantics document lists them.

use orbit_api::v1 as wire;
use orbit_engine::{Event, HistoryEvent};
use orbit_server_kit::payload::{fit_fields, json_object_to_struct, ms_to_timestamp};
use serde_json::{Map, Value};

/// The event's fields as a JSON object (without the `type` tag).
#[must_use]
pub fn event_payload(event: &Event) -> Map<String, Value> {
    match serde_json::to_value(event) {
        Ok(Value::Object(mut map)) => {
            map.remove("type");
            map
        }
        // Every variant is a struct variant of an internally tagged enum, so serde always
        // writes an object; anything else would be a serde bug, shown rather than hidden.
        Ok(other) => Map::from_iter([("value".to_string(), other)]),
        Err(e) => Map::from_iter([("serialization_error".to_string(), e.to_string().into())]),
    }
}

/// The wire form of one event of run `run`. A payload field over the read limits (a row
/// written before the limits were enforced) is sent as the truncation marker, so the event
/// always fits a message and decodes (see [`crate::READ_MAX_PAYLOAD_BYTES`]).
#[must_use]
pub fn history_event(event: &HistoryEvent, run: u32) -> wire::HistoryEvent {
    let fields = fit_fields(event_payload(&event.event), crate::READ_MAX_PAYLOAD_BYTES);
    wire::HistoryEvent {
        seq: event.seq,
        run,
        event_type: event.event.type_name().to_string(),
        step: event.event.step().unwrap_or_default().to_string(),
        payload: Some(json_object_to_struct(fields)),
        timestamp: Some(ms_to_timestamp(event.timestamp_ms)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use orbit_engine::Origin;
    use orbit_server_kit::payload::struct_to_json_object;
    use serde_json::json;

    #[test]
    fn step_events_carry_their_fields_and_unit() {
        let he = HistoryEvent {
            seq: 7,
            timestamp_ms: 1_700_000_000_123,
            origin: Origin::Recorded,
            event: Event::StepSucceeded {
                step: "charge".into(),
                attempt: Some(2),
                output: json!({"id": 42, "ok": true}),
            },
        };
        let wire = history_event(&he, 3);
        assert_eq!(wire.seq, 7);
        assert_eq!(wire.run, 3);
        assert_eq!(wire.event_type, "StepSucceeded");
        assert_eq!(wire.step, "charge");
        let ts = wire.timestamp.unwrap();
        assert_eq!((ts.seconds, ts.nanos), (1_700_000_000, 123_000_000));
        let payload = Value::Object(struct_to_json_object(wire.payload.unwrap()).unwrap());
        assert_eq!(
            payload,
            json!({"step": "charge", "attempt": 2, "output": {"id": 42, "ok": true}})
        );
    }

    #[test]
    fn execution_level_events_have_no_step() {
        let he = HistoryEvent {
            seq: 2,
            timestamp_ms: 5,
            origin: Origin::Decided,
            event: Event::WorkflowStarted {},
        };
        let wire = history_event(&he, 1);
        assert_eq!(wire.event_type, "WorkflowStarted");
        assert_eq!(wire.step, "");
        assert!(wire.payload.unwrap().fields.is_empty());
    }
}
