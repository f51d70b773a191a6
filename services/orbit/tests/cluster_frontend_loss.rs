//! `SIGKILL` of a frontend that holds worker streams, on the split topology: the workers
//! reconnect to the other frontend, and the results of the attempts that were in flight on
//! the dead one still land (through the other frontend: results are recorded by token).

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
    // and no unit had to run again.
    for token in &in_flight {
        let state = psql(&topo, &format!("SELECT state FROM task_queue WHERE token = '{token}'"));
        assert_eq!(state, vec!["done"], "row of {token}");
    }
    let runs: Vec<_> =
        runs_a.lock().unwrap().iter().chain(runs_b.lock().unwrap().iter()).cloned().collect();
    let redelivered: Vec<_> = runs.iter().filter(|r| r.3).collect();
    assert!(redelivered.is_empty(), "nothing was redelivered: {redelivered:?}");
    assert_eq!(runs.len(), ids.len() * 3, "each unit ran once");
    let def = orbit_definition::parse(STEADY).unwrap();
    check_all(&topo, &def, &ids, STEADY_UNITS).await;
}
