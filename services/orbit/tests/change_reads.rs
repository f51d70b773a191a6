//! Readers read only when their own thing changed (issue 14, item 2), end to end: in
//! `orbit dev` (SQLite, the in-process change hub) and on the split on PostgreSQL (the
//! `orbit_changes` NOTIFY payload).
//!
//! One execution holds a task on a raw worker session (so a supervisor watches it) and is
//! watched for its result only, while it is sent N signals one after another. Before, every
//! signal's commit made the reply wait read its inbox entry, the result watch read the
//! execution row and the supervisor read the task row: N reads each. Now the change says the
//! entry was applied with its reply, that the run did not close and that no unit was
//! cancelled, so none of them reads. The counts come from the frontend's own metrics
//! (`orbit_store_transactions_total{kind}`), the bounds allow the timed safety nets (a
//! reply wait re-reads after 50 ms without a notification, a busy machine can delay one)
//! but not a read per signal. Then the signals' replies are checked (each its own seq,
//! in order) and the run ends normally.
//!
//! A run's completing commit carries its output in the change, so result watches answer
//! without reading the history back: [`completed_results`] watches several executions to
//! their end and counts the frontend's history reads (one per watch before).

mod common;

use common::cluster::Topology;
use common::{admin, register, result, start, RawSession, Server, TempDir};
use orbit_api::v1 as pb;
use orbit_api::v1::workflow_service_client::WorkflowServiceClient;
use orbit_server_kit::payload::json_to_proto;
use serde_json::json;
use std::time::Duration;
use tonic::transport::Channel;

const WORKFLOW: &str = r#"
name: reads
version: "1"
signals: { go: null, ping: null }
tasks: { slow.work: { version: "1" } }
steps:
  - { id: work, task: slow.work }
  - { id: wait, await: go }
output: "${{ steps.wait.output }}"
"#;

const ONE_STEP: &str = r#"
name: done
version: "1"
tasks: { done.work: { version: "1" } }
steps:
  - { id: work, task: done.work }
output: "${{ steps.work.output }}"
"#;

/// Executions watched to their end by [`completed_results`].
const WATCHED: u64 = 8;

/// Signals sent while the task is held and the result watched.
const SIGNALS: u64 = 20;
const PATIENCE: Duration = Duration::from_secs(60);

/// `orbit_store_transactions_total` of `kind` on the frontend's metrics, all backends.
async fn reads(admin_addr: &str, kind: &str) -> u64 {
    admin::metric_sum(admin_addr, "orbit_store_transactions_total", &format!("kind=\"{kind}\""))
        .await
}

async fn scenario(c: &mut WorkflowServiceClient<Channel>, worker_address: &str, admin_addr: &str) {
    register(c, WORKFLOW).await;
    start(c, "reads", "r1", json!({})).await.expect("start");
    let mut session =
        RawSession::start(worker_address, "reads-worker", &[("slow.work", "1")], 1).await;
    let task = session.next_task(PATIENCE).await;
    // The result watch, open while the signals go in.
    let mut watcher = c.clone();
    let watch = tokio::spawn(async move { result(&mut watcher, "r1", PATIENCE).await });
    // Let the dispatch be applied and the watch make its first read.
    tokio::time::sleep(Duration::from_millis(500)).await;

    let kinds = ["inbox_result", "get_execution", "task_by_token"];
    let mut before = Vec::new();
    for k in kinds {
        before.push(reads(admin_addr, k).await);
    }
    let mut last = 0;
    for i in 0..SIGNALS {
        let reply = c
            .signal_execution(pb::SignalExecutionRequest {
                execution_id: "r1".into(),
                name: "ping".into(),
                payload: Some(json_to_proto(json!(i))),
                request_id: String::new(),
            })
            .await
            .expect("signal")
            .into_inner();
        // The reply the owner recorded: the seq of this signal's event, after the last one.
        assert!(reply.seq > last, "signal {i}: seq {} after {last}", reply.seq);
        assert_eq!(reply.run, 1);
        last = reply.seq;
    }
    let mut grew = Vec::new();
    for (k, b) in kinds.iter().zip(&before) {
        grew.push((*k, reads(admin_addr, k).await - b));
    }
    eprintln!("reads during {SIGNALS} signals: {grew:?}");
    let [(_, inbox), (_, rows), (_, tasks)] = grew[..] else { unreachable!() };
    // A read per signal before: now only the safety nets' (50 ms re-reads of a reply that
    // was slow to come; the watch's 1 s poll; the supervisor's 5 s tick).
    assert!(inbox < SIGNALS, "reply waits read their entries: {grew:?}");
    assert!(tasks < SIGNALS / 2, "the supervisor read its task row on changes: {grew:?}");
    // Each signal reads the execution once itself (its authorisation); the watch adds none
    // per change.
    assert!(rows < SIGNALS + SIGNALS / 2, "the result watch read on changes: {grew:?}");

    // Nothing was missed: the task is still supervised (not cancelled), the run ends.
    session.complete(&task.token, json!("done")).await;
    c.signal_execution(pb::SignalExecutionRequest {
        execution_id: "r1".into(),
        name: "go".into(),
        payload: Some(json_to_proto(json!("end"))),
        request_id: String::new(),
    })
    .await
    .expect("go");
    let (status, output) = watch.await.expect("watch task");
    assert_eq!(status, pb::ExecutionStatus::Completed, "{output}");
    assert_eq!(output, json!("end"));
}

/// `WATCHED` executions, each watched for its result only while its task is held, then
/// completed one after another: each watch gets its output, and the history is not read
/// for it (the watches' 1 s safety-net polls read rows, not the history; a poll that sees
/// a run closed before its change arrived reads once, hence the bound).
async fn completed_results(
    c: &mut WorkflowServiceClient<Channel>,
    worker_address: &str,
    admin_addr: &str,
) {
    register(c, ONE_STEP).await;
    let ids: Vec<String> = (0..WATCHED).map(|i| format!("done-{i}")).collect();
    for id in &ids {
        start(c, "done", id, json!({})).await.expect("start");
    }
    let mut session =
        RawSession::start(worker_address, "done-worker", &[("done.work", "1")], WATCHED as u32)
            .await;
    let mut tasks = Vec::new();
    for _ in &ids {
        tasks.push(session.next_task(PATIENCE).await);
    }
    let mut watches = Vec::new();
    for id in &ids {
        let mut watcher = c.clone();
        let id = id.clone();
        watches.push(tokio::spawn(async move { result(&mut watcher, &id, PATIENCE).await }));
    }
    // Let every watch make its first read (the row: still running).
    tokio::time::sleep(Duration::from_millis(500)).await;
    let before = reads(admin_addr, "history_after").await;
    for task in &tasks {
        session.complete(&task.token, json!({ "of": task.execution_id })).await;
    }
    for (id, watch) in ids.iter().zip(watches) {
        let (status, output) = watch.await.expect("watch task");
        assert_eq!(status, pb::ExecutionStatus::Completed, "{id}: {output}");
        assert_eq!(output, json!({ "of": id }), "{id}");
    }
    let history = reads(admin_addr, "history_after").await - before;
    eprintln!("history reads for {WATCHED} result watches: {history}");
    assert!(history < WATCHED / 2, "result watches read the history back: {history}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dev_readers_read_only_when_their_own_thing_changed() {
    let dir = TempDir::new("change-reads");
    let admin_addr = format!("127.0.0.1:{}", common::free_port());
    let server =
        Server::start(&dir.0.join("orbit.db"), &["--admin-listen", admin_addr.as_str()]).await;
    let mut c = server.client().await;
    scenario(&mut c, &server.address(), &admin_addr).await;
    completed_results(&mut c, &server.address(), &admin_addr).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn split_readers_read_only_when_their_own_thing_changed() {
    let topo = Topology::start("change-reads", 1, 1, 1, &[]);
    let admin_addr = admin::address_in(&topo.log("frontend-1")).expect("frontend admin address");
    let mut c = topo.client(0).await;
    let frontend = topo.frontends()[0].clone();
    scenario(&mut c, &frontend, &admin_addr).await;
    completed_results(&mut c, &frontend, &admin_addr).await;
}
