//! Payload limits through the real `orbit dev`: a value over `max_payload_bytes` or nested
//! deeper than the depth limit is refused (commands) or fails its step (computed values,
//! worker results) before anything is written, and every read (describe, history, watch)
//! keeps working — also over rows an older version wrote past the limits.

mod common;

use common::*;
use orbit_api::v1 as pb;
use orbit_api::v1::workflow_service_client::WorkflowServiceClient;
use orbit_payload::{MAX_DEPTH, TRUNCATED_KEY};
use orbit_server_kit::payload::{json_to_proto, proto_to_json, struct_to_json_object};
use orbit_server_kit::OrbitError;
use orbit_worker::{TaskContext, TaskFailure, Worker};
use serde_json::{json, Value};
use std::time::Duration;
use tokio_util::sync::CancellationToken;
use tonic::transport::Channel;

const WAIT: Duration = Duration::from_secs(60);

fn nested_lists(depth: usize) -> Value {
    (0..depth).fold(json!(1), |v, _| Value::Array(vec![v]))
}

fn nested_objects(depth: usize) -> Value {
    (0..depth).fold(json!(1), |v, _| json!({ "k": v }))
}

/// A compute step whose value is a literal nested `depth` objects deep around an expression.
fn deep_compute_doc(depth: usize) -> String {
    let mut value = String::from("\"${{ input.x }}\"");
    for _ in 0..depth {
        value = format!("{{\"k\": {value}}}");
    }
    format!(
        "{{\"name\": \"deep-compute\", \"version\": \"1\", \"steps\": [{{\"id\": \"c\", \
         \"compute\": {value}}}], \"output\": \"${{{{ steps.c.output }}}}\"}}"
    )
}

const BIG_COMPUTE: &str = r#"
name: big-compute
version: "1"
steps:
  - id: c
    compute: ${{ input.n.map(i, input.n) }}
output: ${{ steps.c.output }}
"#;

const SIGNALLED: &str = r#"
name: signalled
version: "1"
signals: { go: null }
queries:
  square: ${{ input.n.map(i, input.n) }}
steps:
  - { id: wait, await: go }
output: ${{ steps.wait.output }}
"#;

const DEEP_TASK: &str = r#"
name: deep-task
version: "1"
tasks: { deep.make: { version: "1" } }
steps:
  - { id: make, task: deep.make, input: { depth: "${{ input.depth }}" } }
output: ${{ steps.make.output }}
"#;

const ECHO: &str = r#"
name: echo
version: "1"
steps:
  - { id: c, compute: "${{ input }}" }
output: ${{ steps.c.output }}
"#;

async fn describe(c: &mut WorkflowServiceClient<Channel>, id: &str) -> pb::ExecutionDescription {
    c.describe_execution(pb::DescribeExecutionRequest {
        execution_id: id.into(),
        run: 0,
        at_seq: 0,
    })
    .await
    .unwrap_or_else(|e| panic!("describe {id}: {e:?}"))
    .into_inner()
    .execution
    .expect("a description")
}

/// Every event of the run through `WatchExecution`, then its result.
async fn watch_all(
    c: &mut WorkflowServiceClient<Channel>,
    id: &str,
) -> (Vec<pb::HistoryEvent>, pb::ExecutionResult) {
    let req = pb::WatchExecutionRequest { execution_id: id.into(), ..Default::default() };
    let fut = async {
        let mut stream = c.watch_execution(req).await.expect("watch").into_inner();
        let mut events = Vec::new();
        while let Some(msg) = stream.message().await.unwrap_or_else(|e| panic!("watch {id}: {e:?}"))
        {
            match msg.kind {
                Some(pb::watch_execution_response::Kind::Event(e)) => events.push(e),
                Some(pb::watch_execution_response::Kind::Result(r)) => return (events, r),
                None => {}
            }
        }
        panic!("watch of {id} ended without a result");
    };
    tokio::time::timeout(WAIT, fut).await.expect("watch within the wait")
}

/// The run's error code (FAILED) after waiting for its result.
async fn failed_with(c: &mut WorkflowServiceClient<Channel>, id: &str) -> String {
    let (status, value) = result(c, id, WAIT).await;
    assert_eq!(status, pb::ExecutionStatus::Failed, "{id}: {value}");
    value.as_str().unwrap_or_default().split(':').next().unwrap_or_default().to_string()
}

fn payload_of(e: &pb::HistoryEvent) -> Value {
    Value::Object(struct_to_json_object(e.payload.clone().unwrap_or_default()).expect("payload"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn computed_values_over_the_limits_fail_their_step_and_reads_keep_working() {
    let dir = TempDir::new("payload-compute");
    let server = Server::start(&dir.0.join("orbit.db"), &[]).await;
    let mut c = server.client().await;
    register(&mut c, BIG_COMPUTE).await;
    register(&mut c, &deep_compute_doc(40)).await;

    // 500 × 500 numbers: ~1 MB of JSON, ~2.75 MB as protobuf — within the expression
    // budget (1000 × 1000 is refused earlier, by the budget, as EXPRESSION_LIMIT).
    let n: Vec<u32> = (0..500).collect();
    start(&mut c, "big-compute", "big-1", json!({ "n": n })).await.expect("start big");
    assert_eq!(failed_with(&mut c, "big-1").await, "PAYLOAD_TOO_LARGE");
    let d = describe(&mut c, "big-1").await;
    assert_eq!(d.error.expect("error").code, "PAYLOAD_TOO_LARGE");
    let h = history(&mut c, "big-1").await;
    let failed = h.iter().find(|e| e.event_type == "StepFailed").expect("StepFailed in history");
    assert_eq!(payload_of(failed)["error"]["code"], json!("PAYLOAD_TOO_LARGE"));
    assert!(!h.iter().any(|e| e.event_type == "StepSucceeded"), "the value was not recorded");
    let (events, result) = watch_all(&mut c, "big-1").await;
    assert_eq!(events.len(), h.len());
    assert_eq!(result.error.expect("error").code, "PAYLOAD_TOO_LARGE");

    // A value nested 40 objects deep, built by the compute step itself.
    start(&mut c, "deep-compute", "deep-1", json!({"x": 1})).await.expect("start deep");
    assert_eq!(failed_with(&mut c, "deep-1").await, "PAYLOAD_TOO_DEEP");
    let d = describe(&mut c, "deep-1").await;
    let error = d.error.expect("error");
    assert_eq!(error.code, "PAYLOAD_TOO_DEEP");
    assert!(error.message.contains(".k.k"), "the message names the path: {}", error.message);
    history(&mut c, "deep-1").await;
    watch_all(&mut c, "deep-1").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn commands_with_payloads_over_the_limits_are_refused_with_the_code() {
    let dir = TempDir::new("payload-commands");
    let server = Server::start(&dir.0.join("orbit.db"), &[]).await;
    let mut c = server.client().await;
    register(&mut c, ECHO).await;
    register(&mut c, SIGNALLED).await;

    // Decodable by protobuf (lists), deeper than the limit: PAYLOAD_TOO_DEEP with the path.
    let status = start(&mut c, "echo", "deep-start", nested_lists(40)).await.unwrap_err();
    assert_eq!(code(&status), "PAYLOAD_TOO_DEEP", "{status:?}");
    assert_eq!(status.code(), tonic::Code::InvalidArgument);
    let e = OrbitError::from_status(&status).expect("orbit error");
    assert!(e.details.iter().any(|v| v.path.starts_with("input[0][0]")), "{e:?}");
    // Too deep for protobuf itself (objects): the request does not decode.
    let status = start(&mut c, "echo", "deeper-start", nested_objects(40)).await.unwrap_err();
    assert_eq!(code(&status), "INVALID_ARGUMENT", "{status:?}");
    assert_eq!(status.code(), tonic::Code::InvalidArgument);
    // Too large as protobuf although small as JSON.
    let numbers = Value::Array(vec![json!(1); 300_000]);
    let status = start(&mut c, "echo", "wide-start", numbers).await.unwrap_err();
    assert_eq!(code(&status), "PAYLOAD_TOO_LARGE", "{status:?}");
    // Nothing was created.
    for id in ["deep-start", "deeper-start", "wide-start"] {
        let r = c
            .describe_execution(pb::DescribeExecutionRequest {
                execution_id: id.into(),
                run: 0,
                at_seq: 0,
            })
            .await;
        assert_eq!(code(&r.unwrap_err()), "EXECUTION_NOT_FOUND", "{id}");
    }

    // The owner's internal start path checks the same.
    let mut owner = orbit_api::internal::v1::owner_service_client::OwnerServiceClient::connect(
        server.address(),
    )
    .await
    .expect("owner client");
    let def = c
        .get_workflow(pb::GetWorkflowRequest { name: "echo".into(), version: String::new() })
        .await
        .expect("get workflow")
        .into_inner();
    let hash = def.workflow.map(|w| w.definition_hash).unwrap_or_default();
    let internal = orbit_api::internal::v1::StartExecutionRequest {
        execution_id: "deep-internal".into(),
        workflow: "echo".into(),
        version: "1".into(),
        definition_hash: hash,
        input: Some(json_to_proto(nested_objects(MAX_DEPTH + 2))),
        ..Default::default()
    };
    let status = owner.start_execution(internal).await.unwrap_err();
    assert_eq!(code(&status), "PAYLOAD_TOO_DEEP", "{status:?}");

    // Signals: refused, the execution keeps waiting and takes a good one. (500 × 500: within
    // the expression budget, over the payload limit as protobuf.)
    let n: Vec<u32> = (0..500).collect();
    start(&mut c, "signalled", "sig-1", json!({ "n": n })).await.expect("start signalled");
    // A query result over the limits is a clear error, not a broken response.
    let query = pb::QueryExecutionRequest {
        execution_id: "sig-1".into(),
        name: "square".into(),
        run: 0,
        at_seq: 0,
    };
    let status = c.query_execution(query).await.unwrap_err();
    assert_eq!(code(&status), "PAYLOAD_TOO_LARGE", "{status:?}");
    let signal = |payload: Value| pb::SignalExecutionRequest {
        execution_id: "sig-1".into(),
        name: "go".into(),
        payload: Some(json_to_proto(payload)),
        request_id: String::new(),
    };
    let status = c.signal_execution(signal(nested_lists(40))).await.unwrap_err();
    assert_eq!(code(&status), "PAYLOAD_TOO_DEEP", "{status:?}");
    describe(&mut c, "sig-1").await;
    c.signal_execution(signal(json!({"ok": true}))).await.expect("a good signal");
    let (status, output) = result(&mut c, "sig-1", WAIT).await;
    assert_eq!((status, output), (pb::ExecutionStatus::Completed, json!({"ok": true})));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn worker_results_over_the_limits_never_leave_an_execution_stuck() {
    let dir = TempDir::new("payload-worker");
    let server = Server::start(&dir.0.join("orbit.db"), &[]).await;
    let address = server.address();
    let mut c = server.client().await;
    register(&mut c, DEEP_TASK).await;
    register_example(&mut c, "hello.yaml").await;

    // A raw stream sends a result nested 60 deep: protobuf cannot decode it, and the stream
    // is closed with INVALID_ARGUMENT saying so (never OK).
    start(&mut c, "deep-task", "deep-raw", json!({"depth": 60})).await.expect("start");
    let mut raw = RawSession::start(&address, "raw-deep", &[("deep.make", "1")], 1).await;
    let task = raw.next_task(WAIT).await;
    raw.complete(&task.token, nested_lists(60)).await;
    let end = tokio::time::timeout(WAIT, async {
        loop {
            match raw.rx.message().await {
                Ok(Some(_)) => continue,
                Ok(None) => return None,
                Err(status) => return Some(status),
            }
        }
    })
    .await
    .expect("the stream ends");
    let status = end.expect("the stream ends with an error, not OK");
    assert_eq!(status.code(), tonic::Code::InvalidArgument, "{status:?}");
    assert_eq!(code(&status), "INVALID_ARGUMENT", "{status:?}");
    assert!(status.message().contains("decode"), "{status:?}");

    // A decodable result deeper than the limit fails the step with the depth code.
    start(&mut c, "deep-task", "deep-30", json!({"depth": 30})).await.expect("start");
    let mut raw = RawSession::start(&address, "raw-30", &[("deep.make", "1")], 4).await;
    // The first execution's attempt is redelivered to this session too; answer both.
    for _ in 0..2 {
        let task = raw.next_task(WAIT).await;
        raw.complete(&task.token, nested_lists(30)).await;
    }
    assert_eq!(failed_with(&mut c, "deep-30").await, "PAYLOAD_TOO_DEEP");
    assert_eq!(failed_with(&mut c, "deep-raw").await, "PAYLOAD_TOO_DEEP");
    drop(raw);

    // The Rust worker library checks before sending: a handler's 60-deep result becomes a
    // Fail with the depth code; its other tasks run as usual.
    let stop = CancellationToken::new();
    let worker = Worker::builder(address.clone())
        .worker_id("lib-worker")
        .task("deep.make", "1", |ctx: TaskContext| async move {
            let depth = ctx.input()["depth"].as_u64().unwrap_or(0) as usize;
            Ok::<Value, TaskFailure>(nested_lists(depth))
        })
        .task("greet", "1", |ctx: TaskContext| async move {
            let name = ctx.input()["name"].as_str().unwrap_or_default().to_string();
            Ok::<Value, TaskFailure>(json!({"greeting": format!("Hello, {name}!")}))
        })
        .build()
        .expect("worker");
    let run = tokio::spawn(worker.run(stop.clone()));
    start(&mut c, "deep-task", "deep-lib", json!({"depth": 60})).await.expect("start");
    start(&mut c, "hello", "hello-1", json!({"name": "Ada"})).await.expect("start hello");
    assert_eq!(failed_with(&mut c, "deep-lib").await, "PAYLOAD_TOO_DEEP");
    let (status, _) = result(&mut c, "hello-1", WAIT).await;
    assert_eq!(status, pb::ExecutionStatus::Completed);
    describe(&mut c, "deep-lib").await;
    stop.cancel();
    let _ = tokio::time::timeout(WAIT, run).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn invalid_utf8_in_a_request_is_invalid_argument() {
    let dir = TempDir::new("payload-utf8");
    let server = Server::start(&dir.0.join("orbit.db"), &[]).await;
    /// `RegisterWorkflowRequest` with `document` as raw bytes.
    #[derive(Clone, PartialEq, prost::Message)]
    struct RawRegister {
        #[prost(bytes = "vec", tag = "1")]
        document: Vec<u8>,
    }
    let channel = Channel::from_shared(server.address()).unwrap().connect().await.unwrap();
    let mut grpc = tonic::client::Grpc::new(channel);
    grpc.ready().await.expect("ready");
    let codec = tonic_prost::ProstCodec::<RawRegister, pb::RegisterWorkflowResponse>::default();
    let path = tonic::codegen::http::uri::PathAndQuery::from_static(
        "/orbit.v1.WorkflowService/RegisterWorkflow",
    );
    let req = RawRegister { document: b"name: \xff\xfe\nversion: \"1\"\n".to_vec() };
    let status = grpc.unary(tonic::Request::new(req), path, codec).await.unwrap_err();
    assert_eq!(status.code(), tonic::Code::InvalidArgument, "{status:?}");
    assert_eq!(code(&status), "INVALID_ARGUMENT", "{status:?}");
    assert!(status.message().contains("UTF-8"), "{status:?}");
    // The server goes on serving.
    let mut c = server.client().await;
    register(&mut c, ECHO).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rows_written_past_the_limits_stay_readable() {
    let dir = TempDir::new("payload-old-rows");
    let db = dir.0.join("orbit.db");
    let mut server = Server::start(&db, &[]).await;
    let port = server.port;
    let mut c = server.client().await;
    register(&mut c, ECHO).await;
    for id in ["old-big", "old-deep", "old-pages"] {
        start(&mut c, "echo", id, json!({"x": 1})).await.expect("start");
        assert_eq!(result(&mut c, id, WAIT).await.0, pb::ExecutionStatus::Completed);
    }
    drop(c);
    server.kill9();

    // What an older version could write: a 1000 × 1000 output, a 40-deep one, and three
    // 1.5 MB payloads in one run (each within the limit, together over a message).
    let big = Value::Array(vec![Value::Array((0..1000).map(|i| json!(i)).collect()); 1000]);
    let deep = nested_objects(40);
    let chunk = json!("x".repeat(1_500_000));
    let conn = rusqlite::Connection::open(&db).expect("open the store");
    let set = |id: &str, types: &str, field: &str, value: &Value| {
        let sql = format!(
            "UPDATE history_events SET payload = json_set(payload, '$.{field}', json(?2)) \
             WHERE execution_id = ?1 AND event_type IN ({types})"
        );
        let n = conn.execute(&sql, rusqlite::params![id, value.to_string()]).expect("update");
        assert!(n > 0, "{id}: no {types} row");
    };
    set("old-big", "'StepSucceeded', 'WorkflowCompleted'", "output", &big);
    set("old-deep", "'StepSucceeded', 'WorkflowCompleted'", "output", &deep);
    set("old-pages", "'WorkflowCreated'", "input", &chunk);
    set("old-pages", "'StepSucceeded', 'WorkflowCompleted'", "output", &chunk);
    drop(conn);

    let _server = Server::start_on(&db, port, &[]).await;
    let mut c = _server.client().await;
    for id in ["old-big", "old-deep"] {
        let d = describe(&mut c, id).await;
        let output = proto_to_json(d.output.expect("output")).expect("json");
        assert!(output.get(TRUNCATED_KEY).is_some(), "{id}: {output}");
        let h = history(&mut c, id).await;
        let done = h.iter().find(|e| e.event_type == "WorkflowCompleted").expect("completed");
        assert!(payload_of(done)["output"].get(TRUNCATED_KEY).is_some(), "{id}");
        let (events, result) = watch_all(&mut c, id).await;
        assert_eq!(events.len(), h.len());
        let output = proto_to_json(result.output.expect("output")).expect("json");
        assert!(output.get(TRUNCATED_KEY).is_some(), "{id}: {output}");
    }
    let d = describe(&mut c, "old-deep").await;
    let marker = proto_to_json(d.output.expect("output")).expect("json");
    assert_eq!(marker[TRUNCATED_KEY]["depth"], json!(40));

    // 4.5 MB of history: more than one message, so it comes in pages, nothing truncated.
    let mut pages = 0;
    let mut events = Vec::new();
    let mut token = String::new();
    loop {
        let page = c
            .get_history(pb::GetHistoryRequest {
                execution_id: "old-pages".into(),
                page_token: token.clone(),
                ..Default::default()
            })
            .await
            .expect("a history page")
            .into_inner();
        pages += 1;
        events.extend(page.events);
        if page.next_page_token.is_empty() {
            break;
        }
        token = page.next_page_token;
    }
    assert!(pages >= 2, "{pages} page(s)");
    let seqs: Vec<u64> = events.iter().map(|e| e.seq).collect();
    assert_eq!(seqs, (1..=seqs.len() as u64).collect::<Vec<_>>());
    let done = events.iter().find(|e| e.event_type == "WorkflowCompleted").expect("completed");
    assert_eq!(payload_of(done)["output"], chunk);
    watch_all(&mut c, "old-pages").await;
}

/// The Python worker (the `orbit_worker` package of `sdks/python`) reports a result it cannot
/// send as a Fail with the depth code, so the execution fails at once instead of retrying or
/// hanging. Needs the SDK installed for `$ORBIT_PYTHON` (see `common::python::INSTALL`).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_python_worker_reports_a_too_deep_result_as_a_failure() {
    use std::process::{Command, Stdio};
    let py = common::python::examples_dir();
    common::python::check_sdk("");
    let dir = TempDir::new("payload-python");
    let server = Server::start(&dir.0.join("orbit.db"), &[]).await;
    let mut c = server.client().await;
    register(&mut c, DEEP_TASK).await;
    // A worker whose handler nests lists as deep as asked.
    let script = r#"
import sys
from orbit_worker import Worker, parse_common_args, run_example

def make(depth):
    v = 1
    for _ in range(depth):
        v = [v]
    return v

def factory(**kwargs):
    w = Worker(**kwargs)
    w.register("deep.make", "1", lambda ctx: make(int(ctx.input["depth"])))
    return w

run_example(factory, parse_common_args("deep worker", sys.argv[1:]))
"#;
    let python = common::python::python();
    let log_path = dir.0.join("python.log");
    let log = std::fs::File::create(&log_path).expect("log file");
    let _worker = ChildGuard(
        Command::new(python)
            .current_dir(&py)
            .args(["-c", script, "--address", &format!("127.0.0.1:{}", server.port)])
            .args(["--worker-id", "py-deep", "--max-tasks", "2"])
            .stdin(Stdio::null())
            .stdout(log.try_clone().expect("log file"))
            .stderr(log)
            .spawn()
            .expect("spawn python3"),
    );
    start(&mut c, "deep-task", "py-deep-60", json!({"depth": 60})).await.expect("start");
    start(&mut c, "deep-task", "py-deep-3", json!({"depth": 3})).await.expect("start");
    let code60 = tokio::time::timeout(WAIT, failed_with(&mut c, "py-deep-60")).await;
    let log = || std::fs::read_to_string(&log_path).unwrap_or_default();
    assert_eq!(code60.unwrap_or_else(|_| panic!("{}", log())), "PAYLOAD_TOO_DEEP", "{}", log());
    let attempts = history(&mut c, "py-deep-60")
        .await
        .iter()
        .filter(|e| e.event_type == "StepAttemptFailed")
        .count();
    assert_eq!(attempts, 1, "not retried");
    let (status, output) = result(&mut c, "py-deep-3", WAIT).await;
    assert_eq!((status, output), (pb::ExecutionStatus::Completed, json!([[[1]]])), "{}", log());
}
