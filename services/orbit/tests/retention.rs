//! Retention through the real binary: `orbit dev` with a 3 s retention, a 10 s done-row
//! grace (the reply timeout) and a 1 s sweep. Finished executions disappear with every row
//! of theirs; running ones keep theirs (only applied inbox/task rows go); a workflow's own
//! `retention` wins; replies still reach their callers; `orbit execution delete` deletes a
//! finished execution and refuses a running one; a finished batch job goes after
//! `--batch-retention`.
//!
//! Waits are bounded by the configured intervals with wide margins (a busy machine), never
//! assert on timing.

// Tests read their environment (ORBIT_PYTHON, the database URL) and the wall clock
// (unique names, deadlines of real processes) directly.
#![allow(clippy::disallowed_methods)]

mod common;

use common::*;
use orbit_api::v1 as pb;
use orbit_server_kit::payload::json_to_proto;
use orbit_worker::{TaskContext, TaskFailure, Worker};
use serde_json::{json, Value};
use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};
use tokio_util::sync::CancellationToken;

const RETENTION: &str = "3s";
const GRACE: &str = "10s";
/// retention + grace + sweeps, times a generous factor for a loaded machine.
const WITHIN: Duration = Duration::from_secs(90);

const QUICK: &str = r#"
name: quick
version: "1"
tasks: { echo: {} }
steps:
  - { id: a, task: echo, input: "${{ input }}" }
  - { id: b, task: echo, input: "${{ steps.a.output }}" }
  - { id: c, task: echo, input: "${{ steps.b.output }}" }
output: "${{ steps.c.output }}"
"#;

const KEPT: &str = r#"
name: kept
version: "1"
retention: 1h
tasks: { echo: {} }
steps:
  - { id: a, task: echo, input: "${{ input }}" }
output: "${{ steps.a.output }}"
"#;

const WAITING: &str = r#"
name: waiting
version: "1"
tasks: { echo: {} }
signals: { go: null }
steps:
  - { id: a, task: echo, input: "${{ input }}" }
  - { id: wait, await: go, needs: [a] }
output: "${{ steps.wait.output }}"
"#;

/// Rows per table that belong to `id` (read-only, beside the running server).
fn rows_of(db: &Path, id: &str) -> Vec<(&'static str, i64)> {
    let conn =
        rusqlite::Connection::open_with_flags(db, rusqlite::OpenFlags::SQLITE_OPEN_READ_ONLY)
            .expect("open the server's database");
    conn.busy_timeout(Duration::from_secs(10)).expect("busy timeout");
    ["executions", "history_events", "inbox", "task_queue", "timers", "owners"]
        .into_iter()
        .map(|t| {
            let sql = format!("SELECT COUNT(*) FROM {t} WHERE execution_id = ?1");
            (t, conn.query_row(&sql, [id], |r| r.get(0)).expect("count"))
        })
        .collect()
}

fn count(db: &Path, id: &str, table: &str, filter: &str) -> i64 {
    let conn =
        rusqlite::Connection::open_with_flags(db, rusqlite::OpenFlags::SQLITE_OPEN_READ_ONLY)
            .expect("open the server's database");
    conn.busy_timeout(Duration::from_secs(10)).expect("busy timeout");
    let sql = format!("SELECT COUNT(*) FROM {table} WHERE execution_id = ?1 AND {filter}");
    conn.query_row(&sql, [id], |r| r.get(0)).expect("count")
}

/// Polls `check` every 250 ms until it holds or `WITHIN` passes.
async fn eventually(what: &str, mut check: impl FnMut() -> bool) {
    let deadline = Instant::now() + WITHIN;
    while !check() {
        assert!(Instant::now() < deadline, "{what}: not within {WITHIN:?}");
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
}

fn cli(server: &Server, args: &[&str]) -> (bool, String, String) {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_orbit"));
    cmd.args(args).args(["--address", &server.address()]);
    run_bounded(&mut cmd, Duration::from_secs(30))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn finished_executions_go_with_their_rows_and_running_ones_stay() {
    let dir = TempDir::new("retention");
    let db = dir.0.join("orbit.db");
    let args = ["--retention", RETENTION, "--done-grace", GRACE, "--sweep-interval", "1s"];
    let server = Server::start(&db, &args).await;
    let mut c = server.client().await;
    for doc in [QUICK, KEPT, WAITING] {
        register(&mut c, doc).await;
    }
    let stop = CancellationToken::new();
    let worker = Worker::builder(server.address())
        .worker_id("echo")
        .task("echo", "1", |ctx: TaskContext| async move {
            Ok::<Value, TaskFailure>(ctx.input().clone())
        })
        .build()
        .unwrap();
    let s = stop.clone();
    tokio::spawn(async move { worker.run(s).await });

    let quick: Vec<String> = (0..5).map(|i| format!("quick-{i}")).collect();
    for id in &quick {
        start(&mut c, "quick", id, json!({"n": id})).await.unwrap();
    }
    start(&mut c, "kept", "kept-1", json!(1)).await.unwrap();
    start(&mut c, "waiting", "wait-1", json!(2)).await.unwrap();
    for id in quick.iter().chain(std::iter::once(&"kept-1".to_string())) {
        let (status, _) = result(&mut c, id, WITHIN).await;
        assert_eq!(status, pb::ExecutionStatus::Completed, "{id}");
    }
    history_until(&mut c, "wait-1", WITHIN, |h| {
        h.iter().any(|e| e.step == "a" && e.event_type == "StepSucceeded")
    })
    .await;

    // Finished executions (server retention 3 s) go, with every row of theirs.
    for id in &quick {
        eventually(&format!("{id} deleted"), || rows_of(&db, id).iter().all(|(_, n)| *n == 0))
            .await;
        let gone = c
            .describe_execution(pb::DescribeExecutionRequest {
                execution_id: id.clone(),
                ..Default::default()
            })
            .await
            .expect_err("deleted");
        assert_eq!(code(&gone), "EXECUTION_NOT_FOUND");
    }

    // The running execution keeps its projection, history and owner; its applied inbox and
    // task rows go after the grace, as do kept-1's owners row and applied rows (its own
    // retention of 1 h keeps the execution and its history).
    eventually("applied rows of wait-1 and kept-1 deleted", || {
        ["wait-1", "kept-1"].iter().all(|id| {
            count(&db, id, "inbox", "done_at IS NOT NULL") == 0
                && count(&db, id, "task_queue", "state = 'done'") == 0
        })
    })
    .await;
    eventually("kept-1's owners row released", || count(&db, "kept-1", "owners", "1=1") == 0).await;
    for (id, status) in [("wait-1", "RUNNING"), ("kept-1", "COMPLETED")] {
        assert_eq!(count(&db, id, "executions", &format!("status = '{status}'")), 1, "{id}");
        assert!(count(&db, id, "history_events", "1=1") >= 6, "{id} keeps its history");
    }
    assert_eq!(count(&db, "wait-1", "owners", "1=1"), 1, "a running execution keeps its owner");
    let (_, described) = describe(&mut c, "kept-1").await;
    assert_eq!(described, pb::ExecutionStatus::Completed as i32);

    // A running execution cannot be deleted; the refusal has a stable code.
    let (ok, _, err) = cli(&server, &["execution", "delete", "wait-1"]);
    assert!(!ok, "deleting a running execution is refused");
    assert!(err.contains("EXECUTION_NOT_FINISHED"), "{err}");
    assert_eq!(count(&db, "wait-1", "executions", "1=1"), 1);

    // A caller waiting for the owner's reply gets it (applied rows older than the grace
    // were deleted meanwhile, this one is fresh).
    let signalled = c
        .signal_execution(pb::SignalExecutionRequest {
            execution_id: "wait-1".into(),
            name: "go".into(),
            payload: Some(json_to_proto(json!({"ok": 1}))),
            ..Default::default()
        })
        .await
        .expect("the signal's reply reaches the caller")
        .into_inner();
    assert!(signalled.seq > 0);
    let (status, output) = result(&mut c, "wait-1", WITHIN).await;
    assert_eq!((status, output), (pb::ExecutionStatus::Completed, json!({"ok": 1})));

    // kept-1 is finished: deleted on demand, then not found (idempotent for scripts).
    let (ok, out, err) = cli(&server, &["execution", "delete", "kept-1"]);
    assert!(ok, "{out}{err}");
    assert!(out.contains("deleted kept-1"), "{out}");
    assert!(rows_of(&db, "kept-1").iter().all(|(_, n)| *n == 0), "{:?}", rows_of(&db, "kept-1"));
    let (ok, _, err) = cli(&server, &["execution", "delete", "kept-1"]);
    assert!(!ok);
    assert!(err.contains("EXECUTION_NOT_FOUND"), "{err}");

    // And wait-1, now finished, goes by retention like the others.
    eventually("wait-1 deleted", || rows_of(&db, "wait-1").iter().all(|(_, n)| *n == 0)).await;
    stop.cancel();
}

async fn describe(
    c: &mut orbit_api::v1::workflow_service_client::WorkflowServiceClient<
        tonic::transport::Channel,
    >,
    id: &str,
) -> (String, i32) {
    let d = c
        .describe_execution(pb::DescribeExecutionRequest {
            execution_id: id.into(),
            ..Default::default()
        })
        .await
        .expect("describe")
        .into_inner();
    let info = d.execution.and_then(|e| e.info).expect("info");
    (info.execution_id, info.status)
}

/// `--batch-retention`: a finished batch job and its items are deleted by the sweeper once
/// the retention has passed since it finished; `DescribeBatch` then answers
/// `BATCH_NOT_FOUND`, and the SQLite file has no row of it left.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_finished_batch_job_goes_after_its_retention() {
    let dir = TempDir::new("retention-batch");
    let db = dir.0.join("orbit.db");
    let args = ["--batch-retention", RETENTION, "--sweep-interval", "1s"];
    let server = Server::start(&db, &args).await;
    let mut c = server.client().await;
    register(&mut c, WAITING).await;
    start(&mut c, "waiting", "wait-b", json!(1)).await.unwrap();
    let request = pb::StartBatchRequest {
        selector: Some(pb::BatchSelector { workflow: "waiting".into(), ..Default::default() }),
        action: Some(pb::BatchAction {
            action: Some(pb::batch_action::Action::Cancel(pb::BatchCancel::default())),
        }),
        rate_per_second: 100,
        reason: "retention test".into(),
        ..Default::default()
    };
    let batch_id = c.start_batch(request).await.expect("start batch").into_inner().batch_id;
    let describe = |id: String| pb::DescribeBatchRequest { batch_id: id };
    let deadline = Instant::now() + WITHIN;
    // Completed (one item, the cancel), then gone with its item.
    loop {
        match c.describe_batch(describe(batch_id.clone())).await {
            Ok(b) => {
                let b = b.into_inner().batch.expect("batch");
                assert!(
                    b.state() != pb::BatchState::Completed || b.succeeded + b.skipped == 1,
                    "{b:?}"
                );
            }
            Err(status) => {
                assert_eq!(code(&status), "BATCH_NOT_FOUND", "{status:?}");
                break;
            }
        }
        assert!(Instant::now() < deadline, "batch {batch_id} not deleted within {WITHIN:?}");
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    let conn = rusqlite::Connection::open(&db).expect("open");
    let items: i64 = conn
        .query_row("SELECT count(*) FROM batch_items WHERE batch_id = ?1", [&batch_id], |r| {
            r.get(0)
        })
        .expect("count");
    assert_eq!(items, 0, "its items went with it");
}

#[test]
fn a_grace_below_the_reply_timeout_is_refused() {
    let dir = TempDir::new("retention-flags");
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_orbit"));
    cmd.args(["dev", "--db"]).arg(dir.0.join("o.db")).args([
        "--listen",
        &format!("127.0.0.1:{}", free_port()),
        "--done-grace",
        "2s",
    ]);
    let (ok, _, err) = run_bounded(&mut cmd, Duration::from_secs(30));
    assert!(!ok);
    assert!(err.contains("--done-grace"), "{err}");
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_orbit"));
    cmd.args(["dev", "--db"]).arg(dir.0.join("o.db")).args(["--retention", "7"]);
    let (ok, _, err) = run_bounded(&mut cmd, Duration::from_secs(30));
    assert!(!ok);
    assert!(err.contains("no unit"), "{err}");
}
