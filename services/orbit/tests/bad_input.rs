//! Bad input over gRPC against one `orbit dev`: every mistake gets its stable Orbit code,
//! and the server keeps serving; afterwards a normal register → start → complete flow works.

mod common;

use common::*;
use orbit_api::v1 as pb;
use orbit_api::v1::workflow_service_client::WorkflowServiceClient;
use orbit_server_kit::payload::json_to_proto;
use orbit_server_kit::OrbitError;
use orbit_worker::{TaskContext, TaskFailure, Worker};
use serde_json::{json, Value};
use std::time::Duration;
use tokio_util::sync::CancellationToken;
use tonic::transport::Channel;

const CALL: Duration = Duration::from_secs(15);

/// A bounded unary call.
async fn bounded<T>(
    what: &str,
    fut: impl std::future::Future<Output = Result<tonic::Response<T>, tonic::Status>>,
) -> Result<T, tonic::Status> {
    tokio::time::timeout(CALL, fut)
        .await
        .unwrap_or_else(|_| panic!("{what}: no answer within {CALL:?}"))
        .map(tonic::Response::into_inner)
}

fn expect_code<T: std::fmt::Debug>(what: &str, r: Result<T, tonic::Status>, expected: &str) {
    match r {
        Ok(v) => panic!("{what}: expected {expected}, got success {v:?}"),
        Err(status) => assert_eq!(code(&status), expected, "{what}: {status:?}"),
    }
}

/// The server still answers a plain call.
async fn still_serving(c: &mut WorkflowServiceClient<Channel>, after: &str) {
    bounded("ListWorkflows", c.list_workflows(pb::ListWorkflowsRequest::default()))
        .await
        .unwrap_or_else(|e| panic!("the server stopped answering after {after}: {e:?}"));
}

fn register_req(document: &str) -> pb::RegisterWorkflowRequest {
    pb::RegisterWorkflowRequest { document: document.into(), format: 0 }
}

fn signal_req(id: &str, name: &str, payload: Value) -> pb::SignalExecutionRequest {
    pb::SignalExecutionRequest {
        execution_id: id.into(),
        name: name.into(),
        payload: Some(json_to_proto(payload)),
        request_id: String::new(),
    }
}

fn query_req(id: &str, name: &str) -> pb::QueryExecutionRequest {
    pb::QueryExecutionRequest { execution_id: id.into(), name: name.into(), run: 0, at_seq: 0 }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_input_gets_stable_codes_and_the_server_keeps_serving() {
    let dir = TempDir::new("bad-input");
    let server = Server::start(&dir.0.join("orbit.db"), &[]).await;
    let address = server.address();
    let mut c = server.client().await;

    // --- Malformed YAML (does not parse): INVALID_DEFINITION with field violations.
    let broken_yaml = "name: broken\nversion: \"1\"\nsteps:\n  - { id: a, task: t\n  -: [\n";
    let status = bounded("register malformed YAML", c.register_workflow(register_req(broken_yaml)))
        .await
        .expect_err("malformed YAML must be rejected");
    assert_eq!(code(&status), "INVALID_DEFINITION", "{status:?}");
    let e = OrbitError::from_status(&status).expect("an Orbit error");
    assert!(!e.details.is_empty(), "malformed YAML: no field violations in {status:?}");
    eprintln!("malformed YAML violations: {:?}", e.details);
    still_serving(&mut c, "malformed YAML").await;

    // --- Well-formed YAML, invalid definition: the violation names the offending path.
    let invalid_def = r#"
name: invalid
version: "1"
tasks: { t: {} }
steps:
  - { id: a, task: t }
  - { id: b, needs: [nope], task: t }
"#;
    let status =
        bounded("register invalid definition", c.register_workflow(register_req(invalid_def)))
            .await
            .expect_err("an invalid definition must be rejected");
    assert_eq!(code(&status), "INVALID_DEFINITION", "{status:?}");
    let e = OrbitError::from_status(&status).expect("an Orbit error");
    assert!(
        e.details.iter().any(|v| v.path.starts_with("steps[1]")),
        "expected a violation at steps[1]...: {:?}",
        e.details
    );
    eprintln!("invalid definition violations: {:?}", e.details);
    still_serving(&mut c, "an invalid definition").await;

    // --- Oversized definition (> 4 MiB request message).
    let mut huge = String::from("name: huge\nversion: \"1\"\ndescription: \"");
    huge.push_str(&"x".repeat(5 * 1024 * 1024));
    huge.push_str("\"\ntasks: { t: {} }\nsteps:\n  - { id: a, task: t }\n");
    let r = bounded("register oversized", c.register_workflow(register_req(&huge))).await;
    let status = r.expect_err("a 5 MiB definition must be rejected");
    let orbit = code(&status);
    assert!(
        matches!(orbit.as_str(), "PAYLOAD_TOO_LARGE" | "RESOURCE_EXHAUSTED" | "OutOfRange")
            || matches!(status.code(), tonic::Code::ResourceExhausted | tonic::Code::OutOfRange),
        "oversized definition: unexpected {orbit} / {status:?}"
    );
    eprintln!("oversized definition answered {orbit} ({:?})", status.code());
    // The same channel (and a fresh one) still work.
    still_serving(&mut c, "an oversized definition").await;
    still_serving(&mut server.client().await, "an oversized definition (new channel)").await;

    // --- A valid workflow to aim the other mistakes at.
    register_example(&mut c, "order-saga.yaml").await;
    register_example(&mut c, "hello.yaml").await;

    // Input violating the input contract.
    expect_code(
        "start with bad input",
        bounded(
            "start bad input",
            c.start_execution(pb::StartExecutionRequest {
                memo: None,
                workflow: "order-saga".into(),
                version: String::new(),
                input: Some(json_to_proto(json!({"order_id": 7, "amount": -1}))),
                execution_id: "bad-input-1".into(),
                priority: 0,
            }),
        )
        .await,
        "INVALID_INPUT",
    );

    // Unknown workflow.
    expect_code(
        "start unknown workflow",
        start(&mut c, "no-such-workflow", "x-1", json!({})).await,
        "WORKFLOW_NOT_FOUND",
    );
    expect_code(
        "get unknown workflow",
        bounded(
            "get workflow",
            c.get_workflow(pb::GetWorkflowRequest {
                name: "no-such-workflow".into(),
                version: String::new(),
            }),
        )
        .await,
        "WORKFLOW_NOT_FOUND",
    );

    // Unknown execution: describe, signal, query, cancel.
    expect_code(
        "describe unknown execution",
        bounded(
            "describe",
            c.describe_execution(pb::DescribeExecutionRequest {
                execution_id: "no-such-execution".into(),
                run: 0,
                at_seq: 0,
            }),
        )
        .await,
        "EXECUTION_NOT_FOUND",
    );
    expect_code(
        "signal unknown execution",
        bounded(
            "signal",
            c.signal_execution(signal_req("no-such-execution", "approve", json!({"by": "ops"}))),
        )
        .await,
        "EXECUTION_NOT_FOUND",
    );
    expect_code(
        "query unknown execution",
        bounded("query", c.query_execution(query_req("no-such-execution", "charged"))).await,
        "EXECUTION_NOT_FOUND",
    );
    expect_code(
        "cancel unknown execution",
        bounded(
            "cancel",
            c.cancel_execution(pb::CancelExecutionRequest {
                execution_id: "no-such-execution".into(),
                reason: "test".into(),
                request_id: String::new(),
            }),
        )
        .await,
        "EXECUTION_NOT_FOUND",
    );

    // A running execution (no worker serves payments.charge yet, so it waits).
    start(
        &mut c,
        "order-saga",
        "saga-1",
        json!({"order_id": "o-1", "amount": 1500, "items": [{"sku": "a"}]}),
    )
    .await
    .expect("start saga");
    expect_code(
        "unknown signal",
        bounded("signal", c.signal_execution(signal_req("saga-1", "no-such-signal", json!({}))))
            .await,
        "UNKNOWN_SIGNAL",
    );
    expect_code(
        "unknown query",
        bounded("query", c.query_execution(query_req("saga-1", "no-such-query"))).await,
        "UNKNOWN_QUERY",
    );
    expect_code(
        "signal payload violating its contract",
        bounded("signal", c.signal_execution(signal_req("saga-1", "approve", json!({"by": 42}))))
            .await,
        "SIGNAL_PAYLOAD_INVALID",
    );
    expect_code(
        "signal payload missing a required field",
        bounded("signal", c.signal_execution(signal_req("saga-1", "approve", json!({})))).await,
        "SIGNAL_PAYLOAD_INVALID",
    );
    // The declared query still answers on the same execution.
    bounded("query", c.query_execution(query_req("saga-1", "charged")))
        .await
        .expect("a declared query answers");

    // A result for a token that was never issued (unary CompleteTask).
    let mut wc = worker_client(&address).await;
    match bounded(
        "complete unknown token",
        wc.complete_task(pb::CompleteTaskRequest {
            token: "t999999.1".into(),
            output: Some(json_to_proto(json!({"x": 1}))),
            worker_id: "w".into(),
        }),
    )
    .await
    {
        Ok(r) => assert!(!r.accepted, "a result for an unknown token was accepted: {r:?}"),
        Err(status) => assert_eq!(code(&status), "UNKNOWN_TOKEN", "{status:?}"),
    }
    match bounded(
        "complete garbage token",
        wc.complete_task(pb::CompleteTaskRequest {
            token: "not-a-token".into(),
            output: None,
            worker_id: "w".into(),
        }),
    )
    .await
    {
        Ok(r) => assert!(!r.accepted, "a result for a garbage token was accepted: {r:?}"),
        Err(status) => assert!(
            matches!(code(&status).as_str(), "UNKNOWN_TOKEN" | "INVALID_ARGUMENT"),
            "{status:?}"
        ),
    }

    // A worker stream whose first message is `complete` instead of `hello`.
    let first = pb::WorkerMessage {
        kind: Some(pb::worker_message::Kind::Complete(pb::worker_message::Complete {
            token: "t1.1".into(),
            output: None,
        })),
    };
    let status = match open_raw_session(&address, first).await {
        Err(status) => status,
        Ok(mut s) => match tokio::time::timeout(CALL, s.rx.message()).await {
            Err(_) => panic!("no answer to a session opened without hello"),
            Ok(Ok(m)) => panic!("a session opened without hello got {m:?} instead of an error"),
            Ok(Err(status)) => status,
        },
    };
    // worker.proto: "Fails with `INVALID_ARGUMENT` when the first message is not a valid
    // `hello`" (it answered PROTOCOL_ERROR before issue 13).
    assert_eq!(code(&status), "INVALID_ARGUMENT", "{status:?}");

    // Garbage bytes on the port, then close.
    for garbage in [
        &b"\x00\x01\x02\x03garbage\xff\xfe\xfd"[..],
        &b"GET / HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n"[..],
        &b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n\xff\xff\xff\xff\xff\xff\xff\xff\xff"[..],
    ] {
        write_garbage(server.port, garbage).await;
        still_serving(&mut c, "garbage bytes").await;
    }
    // A connection opened and closed without a byte.
    drop(tokio::net::TcpStream::connect(("127.0.0.1", server.port)).await.expect("connect"));

    // After all of it: a normal flow works.
    still_serving(&mut c, "everything").await;
    let stop = CancellationToken::new();
    let worker = Worker::builder(address.clone())
        .worker_id("after-bad-input")
        .task("greet", "1", |ctx: TaskContext| async move {
            let name = ctx.input()["name"].as_str().unwrap_or("world").to_string();
            Ok::<Value, TaskFailure>(json!({"greeting": format!("Hello, {name}!")}))
        })
        .build()
        .expect("worker");
    let s = stop.clone();
    let worker_task = tokio::spawn(async move { worker.run(s).await });
    let mut fresh = server.client().await;
    register_example(&mut fresh, "hello.yaml").await;
    start(&mut fresh, "hello", "hello-after", json!({"name": "Ada"})).await.expect("start hello");
    assert_eq!(
        result(&mut fresh, "hello-after", CALL).await,
        (pb::ExecutionStatus::Completed, json!({"greeting": "Hello, Ada!"}))
    );

    // The waiting saga can still be cancelled.
    bounded(
        "cancel saga",
        c.cancel_execution(pb::CancelExecutionRequest {
            execution_id: "saga-1".into(),
            reason: "test over".into(),
            request_id: String::new(),
        }),
    )
    .await
    .expect("cancel the waiting saga");
    assert_eq!(result(&mut c, "saga-1", CALL).await.0, pb::ExecutionStatus::Cancelled);

    stop.cancel();
    let _ = tokio::time::timeout(Duration::from_secs(10), worker_task).await;
}

/// Writes `bytes` to the port on a raw TCP connection, then closes it.
async fn write_garbage(port: u16, bytes: &[u8]) {
    let stream = tokio::time::timeout(CALL, tokio::net::TcpStream::connect(("127.0.0.1", port)))
        .await
        .expect("connect in time")
        .expect("connect");
    let mut written = 0;
    while written < bytes.len() {
        tokio::time::timeout(CALL, stream.writable()).await.expect("writable in time").unwrap();
        match stream.try_write(&bytes[written..]) {
            Ok(n) => written += n,
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {}
            Err(e) => panic!("write garbage: {e}"),
        }
    }
    // Give the server a moment to read (and reject) it, then close.
    tokio::time::sleep(Duration::from_millis(100)).await;
    drop(stream);
}
