//! PostgreSQL restarts during a run of the split topology: every service recovers by
//! itself (pools drop dead connections, listeners reconnect, passes retry) and every
//! execution completes, once.
//!
//! This binary restarts the shared test server, so it holds a single test.

mod common;

use common::cluster::*;
use std::time::Duration;
use tokio_util::sync::CancellationToken;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_service_recovers_from_a_database_restart() {
    // A node timeout longer than the outage: nobody needs to take anything over.
    let topo = Topology::start(
        "pgrestart",
        2,
        2,
        1,
        &["--node-timeout-ms", "15000", "--heartbeat-ms", "250"],
    );
    let mut clients = vec![topo.client(0).await, topo.client(1).await];
    common::register(&mut clients[0], STEADY).await;
    let stop = CancellationToken::new();
    let fe: Vec<String> = topo.of("frontend").iter().map(|n| n.addr.clone()).collect();
    load_worker(&format!("{},{}", fe[0], fe[1]), "w-a", 8, Duration::from_millis(200), &stop);
    load_worker(&format!("{},{}", fe[1], fe[0]), "w-b", 8, Duration::from_millis(200), &stop);
    let ids = start_steady(&mut clients, "r", 30).await;
    tokio::time::sleep(Duration::from_millis(500)).await;

    let pg = repo().join("scripts/pg.sh");
    let (ok, out, err) =
        common::run_bounded(std::process::Command::new(&pg).arg("stop"), Duration::from_secs(60));
    assert!(ok, "pg.sh stop: {out}{err}");
    tokio::time::sleep(Duration::from_secs(2)).await;
    let (ok, out, err) =
        common::run_bounded(std::process::Command::new(&pg).arg("start"), Duration::from_secs(120));
    assert!(ok, "pg.sh start: {out}{err}");

    expect_completed(&mut clients[1], &ids, Duration::from_secs(120)).await;
    // New work after the restart, through both frontends.
    let more = start_steady(&mut clients, "after", 10).await;
    expect_completed(&mut clients[0], &more, Duration::from_secs(60)).await;
    stop.cancel();
    for n in &topo.nodes {
        assert!(topo.alive(&n.node_id), "{} survived the restart", n.node_id);
    }
    let def = orbit_definition::parse(STEADY).unwrap();
    check_all(&topo, &def, &ids, STEADY_UNITS).await;
    check_all(&topo, &def, &more, STEADY_UNITS).await;
}
