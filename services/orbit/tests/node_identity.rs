//! One process per node id (issue 8, item 9): a service started with the node id of a node
//! that heartbeats refuses to start (exit code 6, a message naming the id) while the first
//! keeps serving; a restart after SIGKILL with the same id comes up once the dead
//! process's heartbeat has gone stale; `--take-over` starts at once. Runs the split
//! services on one SQLite file with short membership timeouts (`PLAIN`: 1.5 s).

// Tests read their environment (ORBIT_PYTHON, the database URL) and the wall clock
// (unique names, deadlines of real processes) directly.
#![allow(clippy::disallowed_methods)]

mod common;

use common::split::{Split, PLAIN};
use orbit_store::roles::*;
use orbit_store::NodeRow;
use std::time::{Duration, Instant};

/// The exit code of a service refused because its node id is in use.
const NODE_ID_IN_USE: i32 = 6;

/// Starts `orbit <service> --node-id <id>` and waits (bounded) for it to exit; returns its
/// exit code and stderr. Panics if it serves instead.
fn run_to_exit(s: &Split, service: &str, node_id: &str) -> (i32, String) {
    let log = s.dir.0.join(format!("{node_id}-second.log"));
    let mut guard = s.start(service, node_id, PLAIN, &log);
    // It may watch the live node for up to one node timeout (1.5 s) before deciding.
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        if let Ok(Some(status)) = guard.0.try_wait() {
            let text = std::fs::read_to_string(&log).unwrap_or_default();
            return (status.code().unwrap_or(-1), text);
        }
        let text = std::fs::read_to_string(&log).unwrap_or_default();
        assert!(!text.contains("serving on"), "a second {node_id} started serving:\n{text}");
        assert!(Instant::now() < deadline, "the second {node_id} neither served nor exited");
        std::thread::sleep(Duration::from_millis(50));
    }
}

async fn node_row(s: &Split, node_id: &str) -> NodeRow {
    let store = s.store().await;
    let nodes = store.list_nodes().await.expect("nodes");
    nodes.into_iter().find(|n| n.node_id == node_id).expect("the node's row")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_second_process_with_a_live_node_id_is_refused() {
    let mut s = Split::new("node-id-dup");
    s.spawn("owner", "owner-1", PLAIN);
    s.spawn("frontend", "frontend-1", PLAIN);
    let before = node_row(&s, "owner-1").await;

    for (service, node_id) in [("owner", "owner-1"), ("frontend", "frontend-1")] {
        let (code, stderr) = run_to_exit(&s, service, node_id);
        assert_eq!(code, NODE_ID_IN_USE, "{service} {node_id}:\n{stderr}");
        assert!(
            stderr.contains(&format!("node id {node_id} is in use"))
                && stderr.contains("--take-over"),
            "the message names the id and the way out:\n{stderr}"
        );
    }

    // The first owner kept its identity and keeps heartbeating.
    tokio::time::sleep(Duration::from_millis(600)).await;
    let after = node_row(&s, "owner-1").await;
    assert_eq!(after.incarnation, before.incarnation, "the first process still holds the id");
    assert!(after.heartbeat_at_ms > before.heartbeat_at_ms, "and still heartbeats");
    let mut client = s.client("frontend-1").await;
    let listed = client.list_workflows(orbit_api::v1::ListWorkflowsRequest::default()).await;
    assert!(listed.is_ok(), "the first frontend still serves: {listed:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_restart_after_sigkill_comes_up_with_the_same_node_id() {
    let mut s = Split::new("node-id-restart");
    s.spawn("owner", "owner-1", PLAIN);
    let before = node_row(&s, "owner-1").await;
    s.node("owner-1").kill9();
    // At once: the dead process's row still looks live; the new one waits it out.
    s.spawn("owner", "owner-1", PLAIN);
    let after = node_row(&s, "owner-1").await;
    assert_ne!(after.incarnation, before.incarnation, "a new incarnation holds the id");
    let log = s.procs.last().expect("restarted").log();
    assert!(log.contains("stopped heartbeating"), "it said why it waited:\n{log}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn take_over_starts_at_once() {
    let mut s = Split::new("node-id-take-over");
    s.spawn("owner", "owner-1", PLAIN);
    let mut take_over = PLAIN.to_vec();
    take_over.push("--take-over");
    s.spawn("owner", "owner-1", &take_over);
    let log = s.procs.last().expect("second").log();
    assert!(log.contains("taking over node id owner-1"), "{log}");
}
