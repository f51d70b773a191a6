//! `kill -9` of `orbit dev` with tasks in flight and timers pending, then a restart on the
//! same file: every execution completes, no worker result is applied twice, and every
//! history passes the replay check.

mod common;

use common::*;
use orbit_api::v1 as pb;
use orbit_engine::event::Event;
use orbit_store::roles::*;
use orbit_store::SqliteStore;
use orbit_worker::{TaskContext, TaskFailure, Worker};
use serde_json::{json, Value};
use std::collections::BTreeMap;
use std::time::Duration;
use tokio_util::sync::CancellationToken;

const WORKFLOW: &str = r#"
name: crashy
version: "1"
tasks: { slow: {} }
steps:
  - { id: a, task: slow, input: "${{ input.n }}" }
  - { id: nap, needs: [a], sleep: 400ms }
  - { id: b, needs: [nap], task: slow, input: "${{ steps.a.output }}" }
output: "${{ steps.b.output }}"
"#;

const EXECUTIONS: usize = 20;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kill9_then_restart_completes_everything_once() {
    let dir = TempDir::new("crash");
    let db = dir.0.join("orbit.db");
    let mut server = Server::start(&db, &[]).await;
    let port = server.port;
    let mut c = server.client().await;
    register(&mut c, WORKFLOW).await;

    let stop = CancellationToken::new();
    let worker = Worker::builder(server.address())
        .worker_id("crash-worker")
        .max_concurrency(8)
        .reconnect_backoff(Duration::from_millis(20), Duration::from_millis(200))
        .task("slow", "1", |ctx: TaskContext| async move {
            tokio::time::sleep(Duration::from_millis(200)).await;
            Ok::<Value, TaskFailure>(ctx.input().clone())
        })
        .build()
        .unwrap();
    let s = stop.clone();
    tokio::spawn(async move { worker.run(s).await });

    for i in 0..EXECUTIONS {
        start(&mut c, "crashy", &format!("c-{i}"), json!({"n": i})).await.unwrap();
    }
    // With 8 slots and 200 ms tasks: at 500 ms the first two waves sleep on durable timers
    // and the third wave's tasks are in the worker's hands.
    tokio::time::sleep(Duration::from_millis(500)).await;
    server.kill9();
    drop(c);

    let server = Server::start_on(&db, port, &[]).await;
    let mut c = server.client().await;
    for i in 0..EXECUTIONS {
        let (status, output) = result(&mut c, &format!("c-{i}"), Duration::from_secs(60)).await;
        assert_eq!(status, pb::ExecutionStatus::Completed, "c-{i}: {output}");
        assert_eq!(output, json!(i));
    }
    stop.cancel();
    drop(c);
    drop(server);

    let store = SqliteStore::open(&db).await.unwrap();
    let def = orbit_definition::parse(WORKFLOW).unwrap();
    for i in 0..EXECUTIONS {
        let id = format!("c-{i}");
        let history = store.load_history(&id, 1).await.unwrap();
        orbit_engine::replay::replay(&def, &history, &orbit_definition::Limits::default())
            .unwrap_or_else(|d| panic!("{id}: replay diverged: {d:?}"));
        let mut successes: BTreeMap<String, usize> = BTreeMap::new();
        for he in &history {
            if let Event::StepSucceeded { step, .. } = &he.event {
                *successes.entry(step.clone()).or_default() += 1;
            }
        }
        assert!(
            successes.values().all(|n| *n == 1),
            "{id}: a result was applied twice: {successes:?}"
        );
        assert_eq!(successes.len(), 3, "{id}: {successes:?}");
    }
}

/// The worker dies with the server: claims of the dead process come back as uncertain
/// attempts when it restarts, and a new worker gets them with the same idempotency keys.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn claims_of_a_killed_server_are_redelivered_after_restart() {
    let dir = TempDir::new("claims");
    let db = dir.0.join("orbit.db");
    let mut server = Server::start(&db, &[]).await;
    let port = server.port;
    let mut c = server.client().await;
    register(&mut c, WORKFLOW).await;
    let first_keys = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
    let keys = first_keys.clone();
    let stuck = Worker::builder(server.address())
        .worker_id("stuck")
        .max_concurrency(4)
        .task("slow", "1", move |ctx: TaskContext| {
            let keys = keys.clone();
            async move {
                keys.lock().unwrap().push(ctx.idempotency_key().to_string());
                tokio::time::sleep(Duration::from_secs(3600)).await;
                Ok::<Value, TaskFailure>(Value::Null)
            }
        })
        .build()
        .unwrap();
    let stuck = tokio::spawn(async move { stuck.run(CancellationToken::new()).await });
    for i in 0..4 {
        start(&mut c, "crashy", &format!("k-{i}"), json!({"n": i})).await.unwrap();
    }
    for _ in 0..100 {
        if first_keys.lock().unwrap().len() == 4 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert_eq!(first_keys.lock().unwrap().len(), 4, "the stuck worker holds all four tasks");
    server.kill9();
    stuck.abort();
    drop(c);

    let server = Server::start_on(&db, port, &[]).await;
    let second_keys = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
    let keys = second_keys.clone();
    let stop = CancellationToken::new();
    let fresh = Worker::builder(server.address())
        .worker_id("fresh")
        .max_concurrency(4)
        .task("slow", "1", move |ctx: TaskContext| {
            let keys = keys.clone();
            async move {
                if ctx.step() == "a" {
                    keys.lock()
                        .unwrap()
                        .push((ctx.idempotency_key().to_string(), ctx.redelivery()));
                }
                Ok::<Value, TaskFailure>(ctx.input().clone())
            }
        })
        .build()
        .unwrap();
    let s = stop.clone();
    tokio::spawn(async move { fresh.run(s).await });
    let mut c = server.client().await;
    for i in 0..4 {
        let (status, output) = result(&mut c, &format!("k-{i}"), Duration::from_secs(30)).await;
        assert_eq!((status, output), (pb::ExecutionStatus::Completed, json!(i)));
    }
    stop.cancel();
    let mut first: Vec<String> = first_keys.lock().unwrap().clone();
    let mut second: Vec<(String, bool)> = second_keys.lock().unwrap().clone();
    first.sort();
    second.sort();
    assert_eq!(
        second.iter().map(|(k, _)| k.clone()).collect::<Vec<_>>(),
        first,
        "same idempotency keys"
    );
    assert!(second.iter().all(|(_, redelivery)| *redelivery), "marked as redeliveries");
}
