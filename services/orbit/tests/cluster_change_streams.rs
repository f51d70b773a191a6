//! What an owner's commits change reaches the frontends down the hand-off streams, not as
//! `orbit_changes` notifications, and only where someone waits on it (issue 25), on the
//! split: 2 frontends, 2 owners.
//!
//! A notification wakes every backend listening in the database, whatever its channel, and
//! the processes behind them: five wake-ups per commit on this topology, on a step's
//! critical path. While every live frontend holds a `Lend` stream to an owner, the owner's
//! commits send none; the owner sends each change down the streams instead: the changes
//! every reader may need (a run closed, inbox entries applied, units cancelled) to every
//! frontend, a step's mere progress only to a frontend that declared the execution (a
//! whole-history watch, an update wait).
//!
//! With both streams open at both owners, through frontend-1 (which has no worker):
//! - executions held on a task nobody serves are started, then cancelled, with result
//!   watches: frontend-1 hears of each end by stream and not of the starts (a start is
//!   progress), and no notification names them (every commit notified before: this fails;
//!   with every change sent everywhere the starts would come too: this fails);
//! - the same with whole-history watches: each watch declares its execution, and the owner,
//!   which changed it lately, answers with a change that makes the watch read (without the
//!   declaration, or without that answer, only the ends come: this fails).
//!
//! Then frontend-2 is killed (still live for the owners: the node timeout is long): the
//! owners notify again, and executions watched through frontend-1 still complete.

mod common;

use common::cluster::{load_worker, Topology};
use common::{admin, register, result_of, start};
use futures_util::StreamExt;
use orbit_api::v1 as pb;
use orbit_api::v1::workflow_service_client::WorkflowServiceClient;
use serde_json::json;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio_util::sync::CancellationToken;
use tonic::transport::Channel;

/// Held on its step: no worker serves `held.work`.
const HELD: &str = r#"
name: held
version: "1"
tasks: { held.work: { version: "1" } }
steps:
  - { id: a, task: held.work }
"#;

const STREAMED: &str = r#"
name: streamed
version: "1"
tasks: { work: {} }
steps:
  - { id: a, task: work, input: "${{ input.n }}" }
  - { id: b, needs: [a], task: work, input: "${{ steps.a.output }}" }
output: "${{ steps.b.output }}"
"#;

const PATIENCE: Duration = Duration::from_secs(60);
/// Executions in each phase.
const EXECUTIONS: u64 = 8;
/// What an owner logs when a frontend's stream opens, and when it ends.
const OPENED: &str = "a frontend lends credits";
const ENDED: &str = "a frontend's lend stream ended";
/// What the owners log when their commits start notifying again.
const NOTIFYING: &str = "commits notify orbit_changes";

/// `orbit_changes_received_total{via}` on a frontend's metrics.
async fn received(admin_addr: &str, via: &str) -> u64 {
    admin::metric_sum(admin_addr, "orbit_changes_received_total", &format!("via=\"{via}\"")).await
}

/// Waits until frontend-1 counted at least `n` changes by stream since `before` (a change
/// may come after the watch it ends answered from its own read); returns the count.
async fn streamed_since(admin_addr: &str, before: u64, n: u64) -> u64 {
    let deadline = tokio::time::Instant::now() + PATIENCE;
    loop {
        let got = received(admin_addr, "stream").await - before;
        if got >= n || tokio::time::Instant::now() >= deadline {
            return got;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Every `orbit_changes` payload the database sends from now on.
async fn listen(url: &str, stop: &CancellationToken) -> Arc<Mutex<Vec<String>>> {
    let (client, mut conn) =
        tokio_postgres::connect(url, tokio_postgres::NoTls).await.expect("connect");
    let seen = Arc::new(Mutex::new(Vec::new()));
    let (into, stop) = (seen.clone(), stop.clone());
    let mut messages = futures_util::stream::poll_fn(move |cx| conn.poll_message(cx));
    tokio::spawn(async move {
        loop {
            tokio::select! {
                () = stop.cancelled() => break,
                m = messages.next() => match m {
                    Some(Ok(tokio_postgres::AsyncMessage::Notification(n))) => {
                        into.lock().expect("seen").push(n.payload().to_string());
                    }
                    Some(Ok(_)) => {}
                    _ => break,
                },
            }
        }
    });
    client.batch_execute("LISTEN orbit_changes").await.expect("listen");
    // The client must live as long as the connection is read.
    tokio::spawn(async move {
        let _client = client;
        std::future::pending::<()>().await;
    });
    seen
}

/// Notifications that name one of `ids`.
fn naming(seen: &Mutex<Vec<String>>, ids: &[String]) -> usize {
    let seen = seen.lock().expect("seen");
    seen.iter().filter(|p| ids.iter().any(|id| p.contains(&format!("\"{id}\"")))).count()
}

/// Waits until every owner's log holds `line` at least `times` times.
async fn logged(topo: &Topology, line: &str, times: usize) {
    let deadline = tokio::time::Instant::now() + PATIENCE;
    while !["owner-1", "owner-2"].iter().all(|o| topo.log(o).matches(line).count() >= times) {
        assert!(tokio::time::Instant::now() < deadline, "the owners never logged {line:?}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// A watch of `id` through `c` (of the result only, or of the whole history), spawned.
fn watch(
    c: &WorkflowServiceClient<Channel>,
    id: &str,
    result_only: bool,
) -> tokio::task::JoinHandle<(pb::ExecutionStatus, serde_json::Value)> {
    let mut c = c.clone();
    let watch = pb::WatchExecutionRequest {
        execution_id: id.to_string(),
        result_only,
        ..Default::default()
    };
    tokio::spawn(async move { result_of(&mut c, tonic::Request::new(watch), PATIENCE).await })
}

/// Starts `EXECUTIONS` held executions `<prefix>-<i>`, watches each (opened after its
/// start), cancels them and waits for every watch to end cancelled.
async fn held(
    c: &mut WorkflowServiceClient<Channel>,
    prefix: &str,
    result_only: bool,
) -> Vec<String> {
    let ids: Vec<String> = (0..EXECUTIONS).map(|i| format!("{prefix}-{i}")).collect();
    let mut watches = Vec::new();
    for id in &ids {
        start(c, "held", id, json!({})).await.expect("start");
        watches.push(watch(c, id, result_only));
    }
    // Each watch has made its first read once its stream answered; a cancel before that
    // would still be seen (read), so nothing here depends on timing.
    for id in &ids {
        let cancel = pb::CancelExecutionRequest {
            execution_id: id.clone(),
            reason: "test".into(),
            request_id: String::new(),
        };
        c.cancel_execution(cancel).await.expect("cancel");
    }
    for (id, w) in ids.iter().zip(watches) {
        let (status, output) = w.await.expect("watch");
        assert_eq!(status, pb::ExecutionStatus::Cancelled, "{id}: {output}");
    }
    ids
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn changes_go_down_the_hand_off_streams_to_whoever_waits_on_them() {
    // A long node timeout keeps a killed frontend live for the owners (the last phase).
    let topo = Topology::start("change-streams", 2, 2, 1, &["--node-timeout-ms", "600000"]);
    let frontends = topo.frontends();
    let admin_addr = admin::address_in(&topo.log("frontend-1")).expect("frontend admin address");
    let stop = CancellationToken::new();
    let mut c = topo.client(0).await;
    register(&mut c, HELD).await;
    register(&mut c, STREAMED).await;
    // Both frontends' streams open at both owners: from then on every commit streams.
    logged(&topo, OPENED, 2).await;
    let seen = listen(&topo.database_url, &stop).await;
    let notified_before = received(&admin_addr, "notification").await;

    let before = received(&admin_addr, "stream").await;
    let ids = held(&mut c, "result", true).await;
    // Each owner's stream is in order: once the ends are in, so is any start sent before.
    let streamed = streamed_since(&admin_addr, before, EXECUTIONS).await;
    eprintln!("result watches: {streamed} changes by stream");
    assert!(streamed >= EXECUTIONS, "a result watch's end did not come by stream: {streamed}");
    assert!(streamed < 2 * EXECUTIONS, "the starts came to a frontend nobody waits on: {streamed}");
    assert_eq!(naming(&seen, &ids), 0, "orbit_changes named an execution");

    let before = received(&admin_addr, "stream").await;
    let ids = held(&mut c, "history", false).await;
    let streamed = streamed_since(&admin_addr, before, 2 * EXECUTIONS).await;
    eprintln!("history watches: {streamed} changes by stream");
    assert!(streamed >= 2 * EXECUTIONS, "a history watch was not made to read: {streamed}");
    assert_eq!(naming(&seen, &ids), 0, "orbit_changes named an execution");
    let notified = received(&admin_addr, "notification").await - notified_before;
    assert_eq!(notified, 0, "a commit notified while every frontend held a stream");

    // Frontend-2 killed: live for the owners, with no stream, so the commits notify again.
    topo.signal("frontend-2", "KILL");
    // Once both owners closed its stream, no task is handed to it (a task handed to it
    // before would wait for the claim sweep, after the node timeout).
    logged(&topo, ENDED, 1).await;
    let _runs = load_worker(&frontends[0], "streams-worker", 4, Duration::ZERO, &stop);
    let deadline = tokio::time::Instant::now() + PATIENCE;
    for round in 0.. {
        let id = format!("after-{round}");
        start(&mut c, "streamed", &id, json!({ "n": round })).await.expect("start");
        let (status, output) = watch(&c, &id, true).await.expect("watch");
        assert_eq!(status, pb::ExecutionStatus::Completed, "{id}: {output}");
        assert_eq!(output, json!(round), "{id}");
        let both = ["owner-1", "owner-2"].iter().all(|o| topo.log(o).contains(NOTIFYING));
        if both && naming(&seen, &[id]) > 0 {
            break;
        }
        assert!(tokio::time::Instant::now() < deadline, "the owners never notified again");
    }
    stop.cancel();
}
