//! `SIGKILL` of a frontend that holds worker streams, on the split topology: the workers
//! reconnect to the other frontend, and the results of the attempts that were in flight on
//! the dead one still land (through the other frontend: results are recorded by token);
//! and a worker that reconnects through the other frontend while both are alive keeps its
//! attempt (the new frontend adopts its claim, the old one hands back nothing).

// Tests read their environment (ORBIT_PYTHON, the database URL) and the wall clock
// (unique names, deadlines of real processes) directly.
#![allow(clippy::disallowed_methods)]

mod common;

use common::cluster::*;
use std::time::Duration;
use tokio_util::sync::CancellationToken;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn workers_move_to_the_other_frontend_and_their_results_land() {
    let topo = Topology::start("fekill", 2, 2, 1, FAST);
    let fe = topo.of("frontend").iter().map(|n| n.addr.clone()).collect::<Vec<_>>();
    let mut survivor = topo.client(1).await;
    common::register(&mut survivor, STEADY).await;
    let stop = CancellationToken::new();
    // Both workers start on frontend-1 and know frontend-2 as the next address. Tasks take
    // 1 s, so the kill finds them in the workers' hands.
    let both = format!("{},{}", fe[0], fe[1]);
    let runs_a = load_worker(&both, "w-a", 8, Duration::from_millis(1000), &stop);
    let runs_b = load_worker(&both, "w-b", 8, Duration::from_millis(1000), &stop);
    let ids = start_steady(std::slice::from_mut(&mut survivor), "f", 12).await;

    // Wait until tasks are in flight on frontend-1, then kill it.
    let deadline = std::time::Instant::now() + Duration::from_secs(20);
    loop {
        let claimed = psql(
            &topo,
            "SELECT count(*) FROM task_queue WHERE state = 'claimed' AND claimed_by = 'frontend-1'",
        );
        if claimed.first().is_some_and(|n| n != "0") {
            break;
        }
        assert!(std::time::Instant::now() < deadline, "no task was claimed through frontend-1");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let in_flight: Vec<String> = psql(
        &topo,
        "SELECT token FROM task_queue WHERE state = 'claimed' AND claimed_by = 'frontend-1'",
    );
    topo.signal("frontend-1", "KILL");

    expect_completed(&mut survivor, &ids, Duration::from_secs(90)).await;
    stop.cancel();

    // The in-flight attempts' results landed: their rows are done (not released as lost),
    // and no unit ran twice.
    for token in &in_flight {
        let state = psql(&topo, &format!("SELECT state FROM task_queue WHERE token = '{token}'"));
        assert_eq!(state, vec!["done"], "row of {token}");
    }
    let runs: Vec<_> =
        runs_a.lock().unwrap().iter().chain(runs_b.lock().unwrap().iter()).cloned().collect();
    let mut units: Vec<_> = runs.iter().map(|r| (r.0.clone(), r.1.clone())).collect();
    units.sort();
    units.dedup();
    assert_eq!(units.len(), runs.len(), "a unit ran twice: {runs:?}");
    assert_eq!(runs.len(), ids.len() * 3, "each unit ran once");
    // An attempt claimed through frontend-1 after the snapshot above (the next step, on a
    // loaded machine whose polling took longer than a task) can die with it on its way to
    // the worker: it is handed back and redelivered, and then runs once, as a redelivery.
    // An attempt a worker held is never redelivered: it would have run twice (above), and
    // every snapshot attempt's own result landed.
    let redelivered: Vec<_> = runs.iter().filter(|r| r.3).collect();
    let handed_back = psql(
        &topo,
        "SELECT count(*) FROM task_queue WHERE claimed_by = 'frontend-1' AND state = 'cancelled'",
    );
    assert_eq!(
        handed_back,
        [redelivered.len().to_string()],
        "each redelivery is of an attempt handed back as lost in transit: {redelivered:?}"
    );
    let def = orbit_definition::parse(STEADY).unwrap();
    check_all(&topo, &def, &ids, STEADY_UNITS).await;
}

/// The session timeout of this test's frontends: a parked session of frontend-1 hands
/// back what it still holds this long after the worker was last heard there.
const SESSION_TIMEOUT_MS: u64 = 2_000;

fn count(events: &[orbit_api::v1::HistoryEvent], event_type: &str) -> usize {
    events.iter().filter(|e| e.event_type == event_type).count()
}

/// Issue 30 item 5: a worker whose stream to frontend-1 breaks and that reconnects through
/// frontend-2 (both alive) keeps its attempt. Its complete heartbeat on the new stream names
/// the token; frontend-2 adopts the row (`claimed_by` becomes frontend-2), so when
/// frontend-1's parked session times out it hands back nothing: no `StepAttemptUncertain`,
/// no redelivery, and the result reported through frontend-2 is the step's output. Before,
/// the attempt was handed back as `SESSION_LOST` and redelivered.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_worker_reconnecting_through_the_other_frontend_keeps_its_attempt() {
    use common::{history, history_until, register, start, RawSession};
    use orbit_api::v1 as pb;
    use serde_json::json;

    let timeout = SESSION_TIMEOUT_MS.to_string();
    let env = [("ORBIT_SESSION_TIMEOUT_MS", timeout.as_str())];
    let topo = Topology::start_env("roam", [2, 1, 1], "disable", FAST, &env);
    let fe = topo.frontends();
    let step = Duration::from_secs(30);
    let mut c = topo.client(1).await;
    // One step, one task: the attempt the worker holds while it moves between frontends.
    register(&mut c, common::DESCRIBED).await;
    start(&mut c, "described", "roam-1", json!({})).await.expect("start");

    let mut first = RawSession::start(&fe[0], "roamer", &[("work", "1")], 1).await;
    let task = first.next_task(step).await;
    history_until(&mut c, "roam-1", step, |h| count(h, "StepDispatched") == 1).await;
    let holder = format!("SELECT claimed_by FROM task_queue WHERE token = '{}'", task.token);
    assert_eq!(psql(&topo, &holder), ["frontend-1"]);
    drop(first);

    // Back through frontend-2, naming the attempt it holds (the SDKs send this heartbeat
    // right after `welcome`).
    let again = RawSession::start(&fe[1], "roamer", &[("work", "1")], 0).await;
    let heartbeat = pb::WorkerMessage {
        kind: Some(pb::worker_message::Kind::Heartbeat(pb::worker_message::Heartbeat {
            tokens: vec![task.token.clone()],
            details: None,
            complete: true,
        })),
    };
    // It heartbeats as an SDK does (a third of the session timeout), so frontend-2 keeps
    // its session while frontend-1's times out.
    let beats = again.tx.clone();
    let beating = tokio::spawn(async move {
        while beats.send(heartbeat.clone()).await.is_ok() {
            tokio::time::sleep(Duration::from_millis(SESSION_TIMEOUT_MS / 3)).await;
        }
    });
    let deadline = std::time::Instant::now() + step;
    while psql(&topo, &holder) != ["frontend-2"] {
        assert!(std::time::Instant::now() < deadline, "frontend-2 never adopted the row");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }

    // Frontend-1's parked session times out and finds nothing of its own to hand back.
    let deadline = std::time::Instant::now() + step;
    while !topo.log("frontend-1").contains("worker did not come back within the session timeout") {
        assert!(
            std::time::Instant::now() < deadline,
            "frontend-1's parked session never timed out"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    // Its owner was woken by nothing; an entry, had one been written, would be here.
    let entries = psql(&topo, "SELECT count(*) FROM inbox WHERE kind = 'uncertain'");
    assert_eq!(entries, ["0"], "nothing was handed back");
    assert_eq!(psql(&topo, &holder), ["frontend-2"]);

    let mut again = again;
    again.complete(&task.token, json!({"by": "roamer"})).await;
    match again.next(step).await {
        Some(pb::server_message::Kind::Ack(ack)) => assert!(ack.accepted, "{ack:?}"),
        other => panic!("expected an ack, got {other:?}"),
    }
    let (status, output) = common::result(&mut c, "roam-1", step).await;
    assert_eq!(status, pb::ExecutionStatus::Completed);
    assert_eq!(output, json!({"by": "roamer"}));
    let h = history(&mut c, "roam-1").await;
    assert_eq!(count(&h, "StepAttemptUncertain"), 0, "{h:?}");
    assert_eq!(count(&h, "StepDispatched"), 1, "never redelivered: {h:?}");
    beating.abort();
}
