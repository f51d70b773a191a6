//! The split services as real processes (2 owners, 1 scheduler, 2 frontends) on one SQLite
//! file: every example completes across frontends; a SIGKILLed owner's executions are taken
//! over and complete once; a SIGTERMed service leaves the cluster cleanly.

// Tests read their environment (ORBIT_PYTHON, the database URL) and the wall clock
// (unique names, deadlines of real processes) directly.
#![allow(clippy::disallowed_methods)]

mod common;

use common::cluster::{load_worker, STEADY};
use common::scenario::{run_every_example, worker, EXAMPLES};
use common::split::{Split, PLAIN};
use common::*;
use orbit_store::roles::*;
use serde_json::json;
use std::time::Duration;
use tokio_util::sync::CancellationToken;

fn topology(name: &str) -> Split {
    let mut s = Split::new(name);
    s.spawn("owner", "owner-1", PLAIN);
    s.spawn("owner", "owner-2", PLAIN);
    s.spawn("scheduler", "scheduler-1", PLAIN);
    s.spawn("frontend", "frontend-1", PLAIN);
    s.spawn("frontend", "frontend-2", PLAIN);
    s
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_example_completes_across_frontends() {
    let mut s = topology("split-examples");
    let mut c = s.client("frontend-1").await;
    let mut d = s.client("frontend-2").await;
    for f in EXAMPLES {
        register_example(&mut c, f).await;
    }
    let stop = CancellationToken::new();
    worker(&s.url("frontend-1"), "examples-a", &stop);
    worker(&s.url("frontend-2"), "examples-b", &stop);
    run_every_example(&mut c, &mut d).await;
    stop.cancel();
    let store = s.store().await;
    let nodes: Vec<String> =
        store.list_nodes().await.unwrap().into_iter().map(|n| n.node_id).collect();
    assert_eq!(nodes, ["frontend-1", "frontend-2", "owner-1", "owner-2", "scheduler-1"]);
    // A clean stop removes the node's row at once.
    assert!(s.node("scheduler-1").terminate(), "scheduler-1 exits 0 on SIGTERM");
    let nodes = store.list_nodes().await.unwrap();
    assert!(nodes.iter().all(|n| n.node_id != "scheduler-1"), "{nodes:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_killed_owner_is_taken_over_and_everything_completes_once() {
    let mut s = topology("split-ownerkill");
    let mut clients = [s.client("frontend-1").await, s.client("frontend-2").await];
    // A nap far longer than starting 30 executions takes, even on a loaded machine: owner-1
    // still holds open executions when it is killed, so there is something to take over.
    let steady = STEADY.replace("sleep: 300ms", "sleep: 8s");
    register(&mut clients[0], &steady).await;
    let stop = CancellationToken::new();
    load_worker(&s.url("frontend-1"), "w-a", 16, Duration::from_millis(100), &stop);
    load_worker(&s.url("frontend-2"), "w-b", 16, Duration::from_millis(100), &stop);
    let ids: Vec<String> = (0..30).map(|i| format!("k-{i}")).collect();
    for (i, id) in ids.iter().enumerate() {
        start(&mut clients[i % 2], "steady", id, json!({"n": i})).await.expect("start");
    }
    let store = s.store().await;
    let mut victims = Vec::new();
    for id in &ids {
        if store.get_owner(id).await.unwrap().unwrap().node_id == "owner-1" {
            victims.push(id.clone());
        }
    }
    assert!(!victims.is_empty(), "owner-1 owns some executions");
    s.node("owner-1").kill9();

    for (i, id) in ids.iter().enumerate() {
        let (status, output) = result(&mut clients[1], id, Duration::from_secs(90)).await;
        assert_eq!(status, orbit_api::v1::ExecutionStatus::Completed, "{id}: {output}");
        assert_eq!(output, json!(i), "{id}");
    }
    stop.cancel();
    // Every victim ends at owner-2's epoch 2, or was closed by owner-1 itself before it died
    // (only the holder of an epoch writes a history, and a closed tree is never taken over).
    // A victim that had already finished needs no takeover to complete, so the results above
    // can all arrive while the takeover loop (one root tree per step) is still moving the
    // others: wait for every one of them, with a bound far above the node timeout.
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    let moved = loop {
        let (mut left, mut moved) = (Vec::new(), 0);
        for id in &victims {
            let o = store.get_owner(id).await.unwrap().unwrap();
            match (o.node_id.as_str(), o.epoch) {
                ("owner-2", 2) => moved += 1,
                ("owner-1", 1) if !is_open(&store, id).await => {}
                _ => left.push((id.clone(), o.node_id, o.epoch)),
            }
        }
        if left.is_empty() {
            break moved;
        }
        assert!(std::time::Instant::now() < deadline, "not taken over within 60 s: {left:?}");
        tokio::time::sleep(Duration::from_millis(200)).await;
    };
    assert!(moved > 0, "owner-2 took over owner-1's open executions: {victims:?}");
    assert!(s.node("owner-2").log().contains("took over root"), "owner-2 logs its takeovers");
    let def = orbit_definition::parse(&steady).unwrap();
    for id in &ids {
        let history = store.load_history(id, 1).await.unwrap();
        orbit_engine::replay::replay(&def, &history, &orbit_definition::Limits::default())
            .unwrap_or_else(|d| panic!("{id}: {d:?}"));
        let mut succeeded: Vec<&str> = history
            .iter()
            .filter_map(|h| match &h.event {
                orbit_engine::Event::StepSucceeded { step, .. } => Some(step.as_str()),
                _ => None,
            })
            .collect();
        succeeded.sort_unstable();
        assert_eq!(succeeded, ["a", "b", "c", "nap"], "{id}: each unit succeeded exactly once");
    }
}

/// Whether execution `id` is still open (not completed, failed, cancelled or timed out).
async fn is_open(store: &impl ExecutionReads, id: &str) -> bool {
    let row = store.get_execution(id).await.unwrap().expect("execution row");
    !row.status.is_closed()
}

/// The `--heartbeat-ms` of [`PLAIN`]: another frontend's sessions reach `ListWorkers` with
/// its next beat, so the waits below are counted in these.
const HEARTBEAT: Duration = Duration::from_millis(200);

/// The worker ids `ListWorkers` on `url` answers, with the frontend of each live session.
async fn listed_workers(url: &str) -> Vec<(String, Vec<String>)> {
    use orbit_api::v1::admin_service_client::AdminServiceClient;
    let mut admin = AdminServiceClient::connect(url.to_string()).await.expect("admin client");
    let answer = admin
        .list_workers(orbit_api::v1::ListWorkersRequest::default())
        .await
        .expect("ListWorkers")
        .into_inner();
    answer
        .workers
        .into_iter()
        .map(|w| (w.worker_id, w.sessions.into_iter().map(|s| s.frontend_node_id).collect()))
        .collect()
}

/// Polls `ListWorkers` on `url` until it answers `want`, for at most `patience`.
async fn wait_for_workers(url: &str, want: &[(String, Vec<String>)], patience: Duration) {
    let deadline = std::time::Instant::now() + patience;
    loop {
        let got = listed_workers(url).await;
        if got == want {
            return;
        }
        assert!(std::time::Instant::now() < deadline, "{url} lists {got:?}, want {want:?}");
        tokio::time::sleep(HEARTBEAT / 4).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn list_workers_answers_for_every_frontend() {
    let mut s = Split::new("split-workers");
    s.spawn("owner", "owner-1", PLAIN);
    s.spawn("frontend", "frontend-1", PLAIN);
    s.spawn("frontend", "frontend-2", PLAIN);
    let (one, two) = (s.url("frontend-1"), s.url("frontend-2"));
    let stop = CancellationToken::new();
    worker(&one, "worker-on-1", &stop);
    worker(&two, "worker-on-2", &stop);
    let w1 = ("worker-on-1".to_string(), vec!["frontend-1".to_string()]);
    let w2 = ("worker-on-2".to_string(), vec!["frontend-2".to_string()]);
    // Once each worker is connected (its own frontend lists it at once; connecting on a busy
    // machine is what takes time), the other frontend lists it after its next heartbeat:
    // 25 intervals is a wide margin over the one it needs.
    let both = [w1.clone(), w2.clone()];
    let connect = Duration::from_secs(60);
    let beats = HEARTBEAT * 25;
    let deadline = std::time::Instant::now() + connect;
    while !listed_workers(&one).await.contains(&w1) || !listed_workers(&two).await.contains(&w2) {
        assert!(std::time::Instant::now() < deadline, "workers did not connect");
        tokio::time::sleep(HEARTBEAT / 4).await;
    }
    wait_for_workers(&one, &both, beats).await;
    wait_for_workers(&two, &both, beats).await;

    // A frontend that leaves takes its workers out of the others' answers (its row goes).
    assert!(s.node("frontend-2").terminate(), "frontend-2 exits 0 on SIGTERM");
    wait_for_workers(&one, &[w1], beats).await;
    stop.cancel();
}
