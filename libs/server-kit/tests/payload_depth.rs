//! Measures the deepest JSON payload prost can still decode inside each message Orbit sends
//! or receives a payload in, and checks that `orbit_payload::MAX_DEPTH` stays below every
//! one of them with margin. Also checks that `orbit_payload::measure` computes exactly
//! prost's encoded length of the payload as a `google.protobuf.Value`.
//!
//! The Python side (protobuf's upb runtime) is measured by
//! `sdks/python/tests/test_worker.py::test_max_depth_decodes_in_python`.

use orbit_api::v1 as pb;
use orbit_payload::{measure, MAX_DEPTH};
use orbit_server_kit::payload::json_to_proto;
use proptest::prelude::*;
use prost::Message;
use prost_types::{value::Kind, Struct};
use serde_json::{json, Value};

/// Levels of margin `MAX_DEPTH` keeps below the shallowest measured decode limit, for
/// wrappers this test does not know of (a client embedding a payload one message deeper).
const MARGIN: usize = 4;

fn nested_objects(depth: usize) -> Value {
    (0..depth).fold(json!(1), |v, _| json!({ "k": v }))
}

fn nested_lists(depth: usize) -> Value {
    (0..depth).fold(json!(1), |v, _| Value::Array(vec![v]))
}

fn struct_of(fields: Value) -> Struct {
    match json_to_proto(fields).kind {
        Some(Kind::StructValue(s)) => s,
        other => panic!("not an object: {other:?}"),
    }
}

fn error_with(details: &Value) -> pb::TaskError {
    pb::TaskError {
        code: "E".into(),
        message: "m".into(),
        retryable: false,
        details: Some(json_to_proto(details.clone())),
    }
}

/// A history event whose payload holds `v` as `error.details`, the deepest place a payload
/// sits in an event (`StepAttemptFailed`, `StepFailed`, `WorkflowFailed`).
fn event_with(v: &Value) -> pb::HistoryEvent {
    pb::HistoryEvent {
        seq: 1,
        run: 1,
        event_type: "StepFailed".into(),
        step: "s".into(),
        payload: Some(struct_of(json!({"step": "s", "error": {"code": "E", "details": v}}))),
        timestamp: None,
    }
}

/// Encodes the message holding `v`, then decodes it as its type.
type Wrapper = (&'static str, fn(&Value) -> Result<(), prost::DecodeError>);

fn round_trip<M: Message + Default>(m: &M) -> Result<(), prost::DecodeError> {
    M::decode(m.encode_to_vec().as_slice()).map(|_| ())
}

const WRAPPERS: &[Wrapper] = &[
    ("ServerMessage.task.input", |v| {
        round_trip(&pb::ServerMessage {
            kind: Some(pb::server_message::Kind::Task(pb::server_message::Task {
                input: Some(json_to_proto(v.clone())),
                ..Default::default()
            })),
        })
    }),
    ("GetHistoryResponse.events[].payload.error.details", |v| {
        round_trip(&pb::GetHistoryResponse { events: vec![event_with(v)], ..Default::default() })
    }),
    ("WatchExecutionResponse.event.payload.error.details", |v| {
        round_trip(&pb::WatchExecutionResponse {
            kind: Some(pb::watch_execution_response::Kind::Event(event_with(v))),
        })
    }),
    ("DescribeExecutionResponse.execution.units[].last_error.details", |v| {
        round_trip(&pb::DescribeExecutionResponse {
            execution: Some(pb::ExecutionDescription {
                units: vec![pb::UnitSummary {
                    last_error: Some(error_with(v)),
                    ..Default::default()
                }],
                ..Default::default()
            }),
            ..Default::default()
        })
    }),
    ("QueryExecutionResponse.result", |v| {
        round_trip(&pb::QueryExecutionResponse {
            result: Some(json_to_proto(v.clone())),
            as_of_seq: 1,
        })
    }),
    ("WorkerMessage.fail.error.details", |v| {
        round_trip(&pb::WorkerMessage {
            kind: Some(pb::worker_message::Kind::Fail(pb::worker_message::Fail {
                token: "t".into(),
                error: Some(error_with(v)),
            })),
        })
    }),
];

/// The deepest `shape(d)` that still decodes in `wrapper`.
fn deepest(wrapper: &Wrapper, shape: fn(usize) -> Value) -> usize {
    let mut d = 0;
    while (wrapper.1)(&shape(d + 1)).is_ok() {
        d += 1;
        assert!(d < 1000, "{}: no decode limit found", wrapper.0);
    }
    d
}

#[test]
fn max_depth_decodes_in_every_wrapper_with_margin() {
    let mut shallowest = usize::MAX;
    for wrapper in WRAPPERS {
        let objects = deepest(wrapper, nested_objects);
        let lists = deepest(wrapper, nested_lists);
        eprintln!("{}: objects {objects} deep, lists {lists} deep", wrapper.0);
        shallowest = shallowest.min(objects).min(lists);
        // What is within the limit decodes everywhere.
        (wrapper.1)(&nested_objects(MAX_DEPTH)).expect(wrapper.0);
    }
    eprintln!("shallowest decodable depth {shallowest}; MAX_DEPTH {MAX_DEPTH}");
    assert!(
        MAX_DEPTH + MARGIN <= shallowest,
        "MAX_DEPTH {MAX_DEPTH} leaves less than {MARGIN} levels below prost's limit {shallowest}"
    );
}

fn arb_json() -> impl Strategy<Value = Value> {
    let leaf = prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::Bool),
        any::<i32>().prop_map(|i| json!(i)),
        any::<f64>().prop_filter("finite", |f| f.is_finite()).prop_map(|f| json!(f)),
        "\\PC{0,300}".prop_map(Value::String),
    ];
    leaf.prop_recursive(5, 200, 40, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..40).prop_map(Value::Array),
            prop::collection::btree_map("\\PC{0,200}", inner, 0..20)
                .prop_map(|m| Value::Object(m.into_iter().collect())),
        ]
    })
}

proptest! {
    #[test]
    fn wire_bytes_are_prosts_encoded_len(v in arb_json()) {
        let m = measure(&v);
        prop_assert_eq!(m.wire_bytes, json_to_proto(v).encoded_len() as u64);
    }
}

#[test]
fn wire_bytes_of_large_lengths() {
    // Multi-byte varints for lengths and an empty key (not written by prost).
    let v = json!({"": "x".repeat(20_000), "k": vec!["y".repeat(200); 100]});
    assert_eq!(measure(&v).wire_bytes, json_to_proto(v).encoded_len() as u64);
}
