//! The examples scenario, shared by the `orbit dev` test and the split-topology test: every
//! example definition runs to its expected output, with in-process Rust workers.

use super::*;
use orbit_api::v1 as pb;
use orbit_api::v1::workflow_service_client::WorkflowServiceClient;
use orbit_server_kit::payload::{json_to_proto, proto_to_json};
use orbit_worker::{TaskContext, TaskFailure, Worker};
use serde_json::{json, Value};
use std::time::Duration;
use tokio_util::sync::CancellationToken;
use tonic::transport::Channel;

/// Every example file, in registration order (children before parents is not needed).
pub const EXAMPLES: &[&str] = &[
    "hello.yaml",
    "order-saga.yaml",
    "fan-out.yaml",
    "parent.yaml",
    "child.yaml",
    "continue-as-new.yaml",
    "handlers.yaml",
    "query.yaml",
];

const WAIT: Duration = Duration::from_secs(30);

fn text(ctx: &TaskContext, key: &str) -> String {
    ctx.input()[key].as_str().unwrap_or_default().to_string()
}

/// One worker that serves every task of the examples.
pub fn worker(address: &str, worker_id: &str, stop: &CancellationToken) {
    worker_tls(address, worker_id, stop, orbit_worker::ClientTls::default());
}

/// [`worker`] connecting with `tls`.
pub fn worker_tls(
    address: &str,
    worker_id: &str,
    stop: &CancellationToken,
    tls: orbit_worker::ClientTls,
) {
    let w = Worker::builder(address.to_string())
        .tls(tls)
        .worker_id(worker_id)
        .max_concurrency(16)
        .task("greet", "1", |ctx: TaskContext| async move {
            Ok::<Value, TaskFailure>(json!({"greeting": format!("Hello, {}!", text(&ctx, "name"))}))
        })
        .task("payments.charge", "1", |ctx: TaskContext| async move {
            let amount = ctx.input()["amount"].as_f64().unwrap_or(0.0);
            if ctx.workflow() == "handlers" && amount > 100.0 {
                return Err(TaskFailure::retryable("CARD_DECLINED", "declined"));
            }
            let order = ctx.input()["order_id"].as_str().or(ctx.input()["order"].as_str()).unwrap_or("1").to_string();
            let id = if ctx.workflow() == "query" { "ch-7".to_string() } else if ctx.workflow() == "handlers" { "ch-1".into() } else { format!("ch-{order}") };
            Ok(json!({"charge_id": id}))
        })
        .task("payments.refund", "1", |_ctx: TaskContext| async move { Ok(json!({})) })
        .task("inventory.reserve", "1", |ctx: TaskContext| async move {
            Ok(json!({"reservation": format!("r-{}", text(&ctx, "sku")), "reserved": text(&ctx, "sku")}))
        })
        .task("inventory.release", "1", |_ctx: TaskContext| async move { Ok(json!({})) })
        .task("math.double", "1", |ctx: TaskContext| async move {
            Ok(json!({"value": ctx.input()["n"].as_f64().unwrap_or(0.0) * 2.0}))
        })
        .task("notes.append", "1", |_ctx: TaskContext| async move { Ok(json!({})) })
        .task("ops.alert", "1", |_ctx: TaskContext| async move { Ok(json!({})) })
        .build()
        .expect("worker");
    let stop = stop.clone();
    tokio::spawn(async move { w.run(stop).await });
}

pub async fn signal(
    client: &mut orbit_api::v1::workflow_service_client::WorkflowServiceClient<
        tonic::transport::Channel,
    >,
    id: &str,
    name: &str,
    payload: Value,
) {
    client
        .signal_execution(pb::SignalExecutionRequest {
            execution_id: id.into(),
            name: name.into(),
            payload: Some(json_to_proto(payload)),
            request_id: String::new(),
        })
        .await
        .unwrap_or_else(|e| panic!("signal {name} to {id}: {e}"));
}

/// Waits until the query answers `expected` (bounded).
pub async fn query_until(
    client: &mut orbit_api::v1::workflow_service_client::WorkflowServiceClient<
        tonic::transport::Channel,
    >,
    id: &str,
    name: &str,
    expected: Value,
) {
    for _ in 0..300 {
        let r = client
            .query_execution(pb::QueryExecutionRequest {
                execution_id: id.into(),
                name: name.into(),
                run: 0,
                at_seq: 0,
            })
            .await;
        if let Ok(r) = r {
            if r.into_inner().result.map(|v| proto_to_json(v).unwrap_or(Value::Null))
                == Some(expected.clone())
            {
                return;
            }
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    panic!("query {name} on {id} never answered {expected}");
}

/// Runs every example: starts go through `c`, signals, queries and results through `d` (the
/// same frontend in `orbit dev`, another one in the split topology). Workers must be running.
pub async fn run_every_example(
    c: &mut WorkflowServiceClient<Channel>,
    d: &mut WorkflowServiceClient<Channel>,
) {
    start(c, "hello", "hello-1", json!({"name": "Ada"})).await.unwrap();
    assert_eq!(
        result(d, "hello-1", WAIT).await,
        (pb::ExecutionStatus::Completed, json!({"greeting": "Hello, Ada!"}))
    );

    start(
        c,
        "order-saga",
        "order-1",
        json!({"order_id": "o-1", "amount": 1500, "items": [{"sku": "a"}, {"sku": "b"}]}),
    )
    .await
    .unwrap();
    query_until(d, "order-1", "charged", json!(true)).await;
    signal(d, "order-1", "approve", json!({"by": "ops"})).await;
    // The saga sleeps 10 s before the receipt.
    assert_eq!(
        result(d, "order-1", WAIT).await,
        (
            pb::ExecutionStatus::Completed,
            json!({"order": "o-1", "charge_id": "ch-o-1", "approved_by": "ops", "reservations": ["r-a", "r-b"]})
        )
    );

    start(c, "fan-out", "fan-1", json!({"items": [1, 2, 3, 4, 5]})).await.unwrap();
    assert_eq!(
        result(d, "fan-1", WAIT).await,
        (
            pb::ExecutionStatus::Completed,
            json!({"doubled": [2, 4, 6, 8, 10], "count": 5, "sum": 30})
        )
    );

    start(c, "parent", "parent-1", json!({"numbers": [3, 4]})).await.unwrap();
    assert_eq!(
        result(d, "parent-1", WAIT).await,
        (pb::ExecutionStatus::Completed, json!({"doubled": [6, 8]}))
    );

    start(c, "continue-as-new", "loop-1", json!({"count": 0, "limit": 3})).await.unwrap();
    let watch = pb::WatchExecutionRequest {
        execution_id: "loop-1".into(),
        result_only: true,
        follow_continue_as_new: true,
        ..Default::default()
    };
    let mut stream = d.watch_execution(watch).await.unwrap().into_inner();
    let mut last = None;
    while let Ok(Some(m)) = tokio::time::timeout(WAIT, stream.message()).await.unwrap() {
        if let Some(pb::watch_execution_response::Kind::Result(r)) = m.kind {
            if r.status == pb::ExecutionStatus::Completed as i32 {
                last = r.output.map(|o| proto_to_json(o).unwrap());
                break;
            }
        }
    }
    assert_eq!(last, Some(json!({"count": 3})));

    start(c, "handlers", "handlers-1", json!({"amount": 500})).await.unwrap();
    signal(d, "handlers-1", "note", json!({"text": "call the customer"})).await;
    signal(d, "handlers-1", "proceed", json!({})).await;
    assert_eq!(result(d, "handlers-1", WAIT).await.0, pb::ExecutionStatus::Failed);

    start(c, "query", "query-1", json!({"order_id": "o-7", "items": [{"sku": "a"}, {"sku": "b"}]}))
        .await
        .unwrap();
    query_until(d, "query-1", "done", json!(1)).await;
    signal(d, "query-1", "packed", json!({})).await;
    assert_eq!(
        result(d, "query-1", WAIT).await,
        (pb::ExecutionStatus::Completed, json!({"order": "o-7", "charge_id": "ch-7"}))
    );
}
