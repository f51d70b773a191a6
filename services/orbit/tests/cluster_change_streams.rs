//! What an owner's commits change reaches the frontends down the hand-off streams, not as
//! `orbit_changes` notifications (issue 25), on the split: 2 frontends, 2 owners.
//!
//! A notification wakes every backend listening in the database, whatever its channel, and
//! the processes behind them: five wake-ups per commit on this topology, on a step's
//! critical path. While every live frontend holds a `Lend` stream to an owner, the owner's
//! commits send none and the owner sends each change down every stream instead.
//!
//! The test watches executions through frontend-1 while a worker serves them through
//! frontend-2, listens on `orbit_changes` itself, and checks:
//! - once both owners say their streams reach every live frontend, the executions complete,
//!   their watches answer, frontend-1 counts the changes as received by stream, and no
//!   notification names them (before the change, every commit notified: this fails);
//! - after frontend-2 is killed (still live for the owners: the node timeout is long), the
//!   owners notify again, and the watches on frontend-1 still answer.

mod common;

use common::cluster::{load_worker, Topology};
use common::{admin, register, result, start};
use futures_util::StreamExt;
use orbit_api::v1 as pb;
use serde_json::json;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio_util::sync::CancellationToken;

const WORKFLOW: &str = r#"
name: streamed
version: "1"
tasks: { work: {} }
steps:
  - { id: a, task: work, input: "${{ input.n }}" }
  - { id: b, needs: [a], task: work, input: "${{ steps.a.output }}" }
output: "${{ steps.b.output }}"
"#;

const PATIENCE: Duration = Duration::from_secs(60);
/// Executions measured in each phase.
const EXECUTIONS: u64 = 8;
/// What the owners log when their commits stop notifying, and start again.
const STREAMING: &str = "commits' changes go down the streams, not orbit_changes";
const NOTIFYING: &str = "commits notify orbit_changes";
/// What an owner logs when a frontend's stream ends.
const ENDED: &str = "a frontend's lend stream ended";

/// `orbit_changes_received_total{via}` on a frontend's metrics.
async fn received(admin_addr: &str, via: &str) -> u64 {
    let (status, body) = admin::get(admin_addr, "/metrics").await.expect("metrics");
    assert_eq!(status, 200, "{body}");
    let label = format!("via=\"{via}\"");
    body.lines()
        .filter(|l| l.starts_with("orbit_changes_received_total{") && l.contains(&label))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum::<f64>() as u64
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

/// Starts executions `<prefix>-<i>` through `c` and waits for each one's result there.
async fn run(
    c: &mut pb::workflow_service_client::WorkflowServiceClient<tonic::transport::Channel>,
    prefix: &str,
) -> Vec<String> {
    let ids: Vec<String> = (0..EXECUTIONS).map(|i| format!("{prefix}-{i}")).collect();
    let mut watches = Vec::new();
    for (i, id) in ids.iter().enumerate() {
        start(c, "streamed", id, json!({ "n": i })).await.expect("start");
        let (mut watcher, id) = (c.clone(), id.clone());
        watches.push(tokio::spawn(async move { result(&mut watcher, &id, PATIENCE).await }));
    }
    for (i, (id, watch)) in ids.iter().zip(watches).enumerate() {
        let (status, output) = watch.await.expect("watch");
        assert_eq!(status, pb::ExecutionStatus::Completed, "{id}: {output}");
        assert_eq!(output, json!(i), "{id}");
    }
    ids
}

/// Notifications that name one of `ids`.
fn naming(seen: &Mutex<Vec<String>>, ids: &[String]) -> usize {
    let seen = seen.lock().expect("seen");
    seen.iter().filter(|p| ids.iter().any(|id| p.contains(&format!("\"{id}\"")))).count()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn changes_go_down_the_hand_off_streams_while_every_frontend_holds_one() {
    // A long node timeout keeps a killed frontend live for the owners (phase 2).
    let topo = Topology::start("change-streams", 2, 2, 1, &["--node-timeout-ms", "600000"]);
    let frontends = topo.frontends();
    let admin_addr = admin::address_in(&topo.log("frontend-1")).expect("frontend admin address");
    let stop = CancellationToken::new();
    let mut c = topo.client(0).await;
    register(&mut c, WORKFLOW).await;
    let _runs = load_worker(&frontends[1], "streams-worker", 4, Duration::ZERO, &stop);

    // Until both owners stream (each decides at its first pass after its heartbeat saw both
    // frontends and both streams are open), executions run and notify as before.
    let deadline = tokio::time::Instant::now() + PATIENCE;
    let mut round = 0;
    while !["owner-1", "owner-2"].iter().all(|o| topo.log(o).contains(STREAMING)) {
        assert!(tokio::time::Instant::now() < deadline, "the owners never streamed their changes");
        run(&mut c, &format!("warm-{round}")).await;
        round += 1;
    }

    let seen = listen(&topo.database_url, &stop).await;
    let (streamed, notified) =
        (received(&admin_addr, "stream").await, received(&admin_addr, "notification").await);
    let ids = run(&mut c, "streamed").await;
    let streamed = received(&admin_addr, "stream").await - streamed;
    let notified = received(&admin_addr, "notification").await - notified;
    eprintln!("changes on frontend-1: {streamed} by stream, {notified} by notification");
    // Each execution's start, two steps' results and end: three commits at least.
    assert!(streamed >= 3 * EXECUTIONS, "changes by stream: {streamed}");
    assert_eq!(notified, 0, "a commit notified while every frontend held a stream");
    assert_eq!(naming(&seen, &ids), 0, "orbit_changes named a streamed execution");

    // Frontend-2 killed: live for the owners, with no stream, so the commits notify again.
    topo.signal("frontend-2", "KILL");
    // Once both owners closed its stream, no task is handed to it (a task handed to it
    // before would wait for the claim sweep, after the node timeout).
    let deadline = tokio::time::Instant::now() + PATIENCE;
    while !["owner-1", "owner-2"].iter().all(|o| topo.log(o).contains(ENDED)) {
        assert!(tokio::time::Instant::now() < deadline, "the owners never saw the stream end");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let _also = load_worker(&frontends[0], "streams-worker-1", 4, Duration::ZERO, &stop);
    let deadline = tokio::time::Instant::now() + PATIENCE;
    let mut round = 0;
    loop {
        let ids = run(&mut c, &format!("after-{round}")).await;
        let both = ["owner-1", "owner-2"].iter().all(|o| topo.log(o).contains(NOTIFYING));
        if both && naming(&seen, &ids) > 0 {
            break;
        }
        assert!(tokio::time::Instant::now() < deadline, "the owners never notified again");
        round += 1;
    }
    stop.cancel();
}
