//! Checks of the API's shape against the design (API.md): services, RPCs, paging,
//! documentation, the worker session messages and exact payload round-trips.

use std::collections::{BTreeSet, HashSet};

use prost::Message as _;
use prost_types::field_descriptor_proto::Type;
use prost_types::{
    value, DescriptorProto, EnumDescriptorProto, FileDescriptorProto, FileDescriptorSet,
    ServiceDescriptorProto, Struct, Value,
};

use crate::v1::{worker_message, TaskRef, WorkerMessage};

fn descriptor_set() -> FileDescriptorSet {
    FileDescriptorSet::decode(crate::FILE_DESCRIPTOR_SET).expect("descriptor set decodes")
}

fn orbit_files(fds: &FileDescriptorSet) -> impl Iterator<Item = &FileDescriptorProto> {
    fds.file.iter().filter(|f| f.package().starts_with("orbit."))
}

fn services(fds: &FileDescriptorSet) -> Vec<(String, &ServiceDescriptorProto)> {
    orbit_files(fds)
        .flat_map(|f| f.service.iter().map(move |s| (format!("{}.{}", f.package(), s.name()), s)))
        .collect()
}

/// Finds a message by its fully qualified name (`.orbit.v1.Foo` or `.orbit.v1.Foo.Bar`).
fn message<'a>(fds: &'a FileDescriptorSet, full_name: &str) -> &'a DescriptorProto {
    fn find<'a>(
        prefix: &str,
        msgs: &'a [DescriptorProto],
        want: &str,
    ) -> Option<&'a DescriptorProto> {
        msgs.iter().find_map(|m| {
            let name = format!("{prefix}.{}", m.name());
            if name == want {
                Some(m)
            } else {
                find(&name, &m.nested_type, want)
            }
        })
    }
    fds.file
        .iter()
        .find_map(|f| find(&format!(".{}", f.package()), &f.message_type, full_name))
        .unwrap_or_else(|| panic!("message {full_name} exists"))
}

fn field_names(msg: &DescriptorProto) -> Vec<&str> {
    msg.field.iter().map(|f| f.name()).collect()
}

#[test]
fn every_expected_service_and_rpc_exists() {
    let expected: &[(&str, &[&str])] = &[
        (
            "orbit.v1.WorkflowService",
            &[
                "RegisterWorkflow",
                "GetWorkflow",
                "ListWorkflows",
                "StartExecution",
                "DescribeExecution",
                "GetHistory",
                "WatchExecution",
                "ListExecutions",
                "CountExecutions",
                "ListSearchAttributes",
                "SignalExecution",
                "QueryExecution",
                "CancelExecution",
                "ResumeExecution",
                "TerminateExecution",
                "UpdateExecution",
                "DeleteExecution",
                "MigrateExecution",
                "ResetExecution",
                "ForkExecution",
                "StartBatch",
                "DescribeBatch",
                "ListBatches",
                "ListBatchItems",
                "CancelBatch",
            ],
        ),
        ("orbit.v1.WorkerService", &["Session", "CompleteTask", "FailTask"]),
        (
            "orbit.v1.ScheduleService",
            &[
                "CreateSchedule",
                "GetSchedule",
                "ListSchedules",
                "UpdateSchedule",
                "PauseSchedule",
                "ResumeSchedule",
                "TriggerSchedule",
                "DeleteSchedule",
                "BackfillSchedule",
                "PreviewSchedule",
            ],
        ),
        (
            "orbit.v1.AdminService",
            &[
                "ClusterStatus",
                "ListWorkers",
                "DescribeTaskQueue",
                "Replay",
                "SetRateLimit",
                "ListRateLimits",
                "DeleteRateLimit",
            ],
        ),
        (
            "orbit.internal.v1.OwnerService",
            &["StartExecution", "Wake", "ReportResult", "QueryExecution", "DescribeExecution"],
        ),
        ("orbit.internal.v1.SchedulerService", &["Status"]),
        ("orbit.internal.v1.HandoffService", &["Lend"]),
    ];
    let fds = descriptor_set();
    let services = services(&fds);
    let found: BTreeSet<&str> = services.iter().map(|(name, _)| name.as_str()).collect();
    let wanted: BTreeSet<&str> = expected.iter().map(|(name, _)| *name).collect();
    assert_eq!(found, wanted, "exactly the designed services exist");
    for (service, rpcs) in expected {
        let (_, descriptor) = services.iter().find(|(name, _)| name == service).unwrap();
        let methods: BTreeSet<&str> = descriptor.method.iter().map(|m| m.name()).collect();
        let rpcs: BTreeSet<&str> = rpcs.iter().copied().collect();
        assert_eq!(methods, rpcs, "RPCs of {service}");
    }
}

#[test]
fn no_rpc_is_named_connect() {
    // A `Connect` RPC would clash with the generated client's `connect` constructor.
    let fds = descriptor_set();
    for (service, descriptor) in services(&fds) {
        for method in &descriptor.method {
            assert!(
                !method.name().eq_ignore_ascii_case("connect"),
                "{service} has {}",
                method.name()
            );
        }
    }
}

#[test]
fn worker_session_streams_both_ways_with_the_designed_messages() {
    let fds = descriptor_set();
    let services = services(&fds);
    let (_, worker) = services.iter().find(|(name, _)| name == "orbit.v1.WorkerService").unwrap();
    let session = worker.method.iter().find(|m| m.name() == "Session").unwrap();
    assert!(session.client_streaming() && session.server_streaming());
    assert_eq!(session.input_type(), ".orbit.v1.WorkerMessage");
    assert_eq!(session.output_type(), ".orbit.v1.ServerMessage");

    let worker_message = message(&fds, ".orbit.v1.WorkerMessage");
    assert_eq!(
        field_names(worker_message),
        ["hello", "credits", "complete", "fail", "heartbeat", "drain"]
    );
    let server_message = message(&fds, ".orbit.v1.ServerMessage");
    assert_eq!(field_names(server_message), ["welcome", "task", "ack", "cancel", "ping"]);
    for envelope in [worker_message, server_message] {
        assert!(envelope.field.iter().all(|f| f.oneof_index == Some(0)), "one oneof");
    }
    assert_eq!(
        field_names(message(&fds, ".orbit.v1.WorkerMessage.Hello")),
        ["worker_id", "runtime", "sdk", "tasks", "max_concurrency", "labels"]
    );
    let task = field_names(message(&fds, ".orbit.v1.ServerMessage.Task"));
    for field in [
        "token",
        "execution_id",
        "workflow",
        "step",
        "task",
        "version",
        "input",
        "idempotency_key",
        "attempt",
        "redelivery",
        "deadline",
        "trace_context",
    ] {
        assert!(task.contains(&field), "Task has {field}");
    }
}

#[test]
fn every_list_rpc_pages() {
    let fds = descriptor_set();
    for (service, descriptor) in services(&fds) {
        for method in &descriptor.method {
            let paged = method.name().starts_with("List")
                || ["GetHistory", "DescribeTaskQueue"].contains(&method.name());
            if !paged {
                continue;
            }
            let input = field_names(message(&fds, method.input_type()));
            let output = field_names(message(&fds, method.output_type()));
            let rpc = format!("{service}/{}", method.name());
            assert!(input.contains(&"page_size") && input.contains(&"page_token"), "{rpc}");
            assert!(output.contains(&"next_page_token"), "{rpc}");
        }
    }
}

#[test]
fn times_are_timestamps_and_spans_are_durations() {
    let fds = descriptor_set();
    let mut checked = 0;
    for file in orbit_files(&fds) {
        let mut stack: Vec<&DescriptorProto> = file.message_type.iter().collect();
        while let Some(msg) = stack.pop() {
            stack.extend(msg.nested_type.iter());
            for field in &msg.field {
                let name = field.name();
                let wanted = if name.ends_with("_at") || name == "deadline" || name == "timestamp" {
                    ".google.protobuf.Timestamp"
                } else if name.ends_with("_interval")
                    || name.ends_with("_timeout")
                    || name.ends_with("_window")
                    || ["interval", "jitter", "oldest_age"].contains(&name)
                {
                    ".google.protobuf.Duration"
                } else {
                    assert!(
                        !name.ends_with("_ms"),
                        "{}.{name}: use Duration or Timestamp",
                        msg.name()
                    );
                    continue;
                };
                assert_eq!(field.r#type(), Type::Message, "{}.{name}", msg.name());
                assert_eq!(field.type_name(), wanted, "{}.{name}", msg.name());
                checked += 1;
            }
        }
    }
    assert!(checked > 20, "found the time fields ({checked})");
}

#[test]
fn every_element_has_a_doc_comment() {
    // Paths into FileDescriptorProto (descriptor.proto field numbers).
    const MESSAGE: i32 = 4;
    const ENUM: i32 = 5;
    const SERVICE: i32 = 6;
    const FIELD: i32 = 2;
    const NESTED_MESSAGE: i32 = 3;
    const NESTED_ENUM: i32 = 4;
    const ONEOF: i32 = 8;
    const VALUE: i32 = 2;
    const METHOD: i32 = 2;

    fn index(i: usize) -> i32 {
        i32::try_from(i).unwrap()
    }
    fn walk_enum(path: Vec<i32>, e: &EnumDescriptorProto, out: &mut Vec<(Vec<i32>, String)>) {
        for (i, v) in e.value.iter().enumerate() {
            out.push(([path.as_slice(), &[VALUE, index(i)]].concat(), v.name().to_owned()));
        }
        out.push((path, e.name().to_owned()));
    }
    fn walk_message(path: Vec<i32>, m: &DescriptorProto, out: &mut Vec<(Vec<i32>, String)>) {
        for (i, f) in m.field.iter().enumerate() {
            out.push((
                [path.as_slice(), &[FIELD, index(i)]].concat(),
                format!("{}.{}", m.name(), f.name()),
            ));
        }
        for (i, o) in m.oneof_decl.iter().enumerate() {
            // proto3 `optional` fields get a synthetic oneof named `_<field>`.
            if !o.name().starts_with('_') {
                out.push(([path.as_slice(), &[ONEOF, index(i)]].concat(), o.name().to_owned()));
            }
        }
        for (i, n) in m.nested_type.iter().enumerate() {
            if !n.options.as_ref().is_some_and(|o| o.map_entry()) {
                walk_message([path.as_slice(), &[NESTED_MESSAGE, index(i)]].concat(), n, out);
            }
        }
        for (i, e) in m.enum_type.iter().enumerate() {
            walk_enum([path.as_slice(), &[NESTED_ENUM, index(i)]].concat(), e, out);
        }
        out.push((path, m.name().to_owned()));
    }

    let fds = descriptor_set();
    let mut missing = Vec::new();
    for file in orbit_files(&fds) {
        let documented: HashSet<&[i32]> = file
            .source_code_info
            .as_ref()
            .expect("source info is kept for reflection")
            .location
            .iter()
            .filter(|l| !l.leading_comments().trim().is_empty())
            .map(|l| l.path.as_slice())
            .collect();
        let mut elements = Vec::new();
        for (i, m) in file.message_type.iter().enumerate() {
            walk_message(vec![MESSAGE, index(i)], m, &mut elements);
        }
        for (i, e) in file.enum_type.iter().enumerate() {
            walk_enum(vec![ENUM, index(i)], e, &mut elements);
        }
        for (i, s) in file.service.iter().enumerate() {
            for (j, m) in s.method.iter().enumerate() {
                elements.push((vec![SERVICE, index(i), METHOD, index(j)], m.name().to_owned()));
            }
            elements.push((vec![SERVICE, index(i)], s.name().to_owned()));
        }
        missing.extend(
            elements
                .into_iter()
                .filter(|(path, _)| !documented.contains(path.as_slice()))
                .map(|(_, name)| format!("{}: {name}", file.name())),
        );
    }
    assert!(missing.is_empty(), "undocumented: {missing:#?}");
}

#[test]
fn descriptor_set_includes_well_known_imports_for_reflection() {
    let fds = descriptor_set();
    let names: BTreeSet<&str> = fds.file.iter().map(|f| f.name()).collect();
    for file in &fds.file {
        for dependency in &file.dependency {
            assert!(names.contains(dependency.as_str()), "{} imports {dependency}", file.name());
        }
    }
    assert!(names.contains("google/protobuf/struct.proto"));
}

#[test]
fn worker_hello_round_trips() {
    let hello = WorkerMessage {
        kind: Some(worker_message::Kind::Hello(worker_message::Hello {
            worker_id: "worker-1".into(),
            runtime: "python 3.12".into(),
            sdk: "orbit-python 0.1.0".into(),
            tasks: vec![TaskRef { name: "payments.charge".into(), version: "1".into() }],
            max_concurrency: 8,
            labels: [("zone".to_owned(), "a".to_owned())].into(),
        })),
    };
    let decoded = WorkerMessage::decode(hello.encode_to_vec().as_slice()).unwrap();
    assert_eq!(decoded, hello);
}

#[test]
fn payload_integers_within_2_pow_53_round_trip_exactly() {
    const MAX_SAFE: i64 = 9_007_199_254_740_991; // 2^53 - 1
    #[allow(clippy::cast_precision_loss)] // exact: |n| < 2^53
    let number = |n: i64| Value { kind: Some(value::Kind::NumberValue(n as f64)) };
    let payload = Value {
        kind: Some(value::Kind::StructValue(Struct {
            fields: [("max".to_owned(), number(MAX_SAFE)), ("min".to_owned(), number(-MAX_SAFE))]
                .into(),
        })),
    };
    let request = crate::v1::StartExecutionRequest {
        workflow: "order".into(),
        input: Some(payload.clone()),
        ..Default::default()
    };
    let decoded =
        crate::v1::StartExecutionRequest::decode(request.encode_to_vec().as_slice()).unwrap();
    assert_eq!(decoded.input.as_ref(), Some(&payload));
    let Some(value::Kind::StructValue(fields)) = decoded.input.and_then(|v| v.kind) else {
        panic!("input is an object");
    };
    for (key, want) in [("max", MAX_SAFE), ("min", -MAX_SAFE)] {
        let Some(value::Kind::NumberValue(got)) = fields.fields[key].kind else {
            panic!("{key} is a number");
        };
        #[allow(clippy::cast_possible_truncation)] // checked: the value is integral
        let got_int = got as i64;
        assert_eq!(got.fract(), 0.0);
        assert_eq!(got_int, want, "{key}");
    }
}
