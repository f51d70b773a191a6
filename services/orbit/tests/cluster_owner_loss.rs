//! Owner death and owner pause on the split topology (real processes, PostgreSQL):
//!
//! * `SIGKILL` one owner with 50 executions in flight: the other owner takes its executions
//!   over (epoch + 1) within the node timeout plus a few seconds, all 50 complete, no result
//!   is applied twice and every history replays;
//! * `SIGSTOP` an owner past the node timeout, then `SIGCONT`: its next append is refused by
//!   the epoch check, it drops what it lost, and nothing is corrupted.

mod common;

use common::cluster::*;
use std::time::{Duration, Instant};
use tokio_util::sync::CancellationToken;

const EXECUTIONS: usize = 50;
/// `FAST` sets a 2 s node timeout.
const NODE_TIMEOUT: Duration = Duration::from_secs(2);

/// Waits until no owners row of `ids` names `node`; returns how long that took.
async fn wait_moved_off(topo: &Topology, ids: &[String], node: &str, within: Duration) -> Duration {
    let store = topo.store().await;
    let began = Instant::now();
    loop {
        let mut left = 0;
        for id in ids {
            let owner = orbit_store::Store::get_owner(&store, id).await.expect("owners row");
            if owner.is_some_and(|o| o.node_id == node) {
                left += 1;
            }
        }
        if left == 0 {
            return began.elapsed();
        }
        assert!(
            began.elapsed() < within,
            "{left} executions still owned by {node} after {within:?}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// The open executions `node` owns (one query: per-id queries take long enough for the
/// executions to finish meanwhile).
fn open_on(topo: &Topology, node: &str) -> Vec<String> {
    psql(
        topo,
        &format!(
            "SELECT o.execution_id FROM owners o JOIN executions e USING (execution_id) \
             WHERE o.node_id = '{node}' AND e.status = 'RUNNING' ORDER BY 1"
        ),
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_killed_owner_is_taken_over_and_everything_completes_once() {
    let topo = Topology::start("ownerkill", 2, 2, 1, FAST);
    let mut clients = vec![topo.client(0).await, topo.client(1).await];
    common::register(&mut clients[0], STEADY).await;
    let stop = CancellationToken::new();
    let fe = topo.frontends();
    load_worker(&fe[0], "w-a", 16, Duration::from_millis(150), &stop);
    load_worker(&fe[1], "w-b", 16, Duration::from_millis(150), &stop);
    let ids = start_steady(&mut clients, "k", EXECUTIONS).await;
    tokio::time::sleep(Duration::from_millis(400)).await;

    topo.signal("owner-1", "KILL");
    // Read after the kill: what owner-1 still had open can only finish through a takeover.
    let victim = open_on(&topo, "owner-1");
    assert!(!victim.is_empty(), "owner-1 had executions in flight");
    let took =
        wait_moved_off(&topo, &victim, "owner-1", NODE_TIMEOUT + Duration::from_secs(8)).await;
    eprintln!("takeover of {} executions took {took:?} after the kill", victim.len());
    assert!(topo.log("owner-2").contains("took over root"), "owner-2 logs its takeover");

    expect_completed(&mut clients[1], &ids, Duration::from_secs(90)).await;
    stop.cancel();
    let def = orbit_definition::parse(STEADY).unwrap();
    check_all(&topo, &def, &ids, STEADY_UNITS).await;
    let epochs = psql(&topo, "SELECT DISTINCT epoch FROM owners ORDER BY 1");
    assert!(epochs.contains(&"2".to_string()), "taken-over executions are at epoch 2: {epochs:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_paused_owner_is_fenced_when_it_wakes() {
    let topo = Topology::start("ownerpause", 2, 2, 1, FAST);
    let mut clients = vec![topo.client(0).await, topo.client(1).await];
    common::register(&mut clients[0], STEADY).await;
    let stop = CancellationToken::new();
    let fe = topo.frontends();
    load_worker(&fe[0], "w-a", 16, Duration::from_millis(100), &stop);
    load_worker(&fe[1], "w-b", 16, Duration::from_millis(100), &stop);
    let mut ids = start_steady(&mut clients, "p", EXECUTIONS).await;
    tokio::time::sleep(Duration::from_millis(300)).await;

    topo.signal("owner-1", "STOP");
    // Read after the pause: what owner-1 still had open can only finish through a takeover.
    let held = open_on(&topo, "owner-1");
    assert!(!held.is_empty(), "owner-1 had executions in flight");
    wait_moved_off(&topo, &held, "owner-1", NODE_TIMEOUT + Duration::from_secs(8)).await;
    // Keep work flowing for the executions it held while it wakes up.
    ids.extend(start_steady(&mut clients, "q", 20).await);
    topo.signal("owner-1", "CONT");

    expect_completed(&mut clients[0], &ids[..EXECUTIONS], Duration::from_secs(90)).await;
    let more: Vec<String> = ids[EXECUTIONS..].to_vec();
    for (i, id) in more.iter().enumerate() {
        let (status, output) = common::result(&mut clients[1], id, Duration::from_secs(60)).await;
        assert_eq!(status, orbit_api::v1::ExecutionStatus::Completed, "{id}: {output}");
        assert_eq!(output, serde_json::json!(i));
    }
    stop.cancel();
    assert!(topo.alive("owner-1"), "the paused owner keeps running after it was fenced");
    let log = topo.log("owner-1");
    assert!(
        log.contains("refused by the epoch check"),
        "owner-1's stale append was refused by the epoch check:\n{log}"
    );
    let def = orbit_definition::parse(STEADY).unwrap();
    check_all(&topo, &def, &ids, STEADY_UNITS).await;
}
