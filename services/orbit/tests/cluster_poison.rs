//! Poison quarantine on the split topology (real processes, PostgreSQL): one signal that
//! aborts whichever owner applies it (debug-only fault injection). Before the quarantine,
//! it took down both owners for good — each restart re-applied the pending entry, each
//! takeover did too. Now the attempts are counted in the database across restarts and
//! owners, the execution is parked as SUSPENDED, the cluster serves every other execution
//! and no owner stays down. The test restarts dead owners as a supervisor would.

// Tests read their environment (ORBIT_PYTHON, the database URL) and the wall clock
// (unique names, deadlines of real processes) directly.
#![allow(clippy::disallowed_methods)]

mod common;

use common::cluster::*;
use common::{register, result, start, ChildGuard};
use orbit_api::v1 as pb;
use serde_json::json;
use std::collections::BTreeMap;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

const WORKFLOW: &str = r#"
name: poisoned
version: "1"
signals: { go: null, kaboom: null }
steps:
  - { id: wait, await: go }
output: "${{ steps.wait.output }}"
"#;

/// The default of `--max-failures`.
const MAX_FAILURES: u32 = 3;
/// `FAST` sets a 2 s node timeout; a supervisor restarts a dead owner after it (so the
/// restart is never mistaken for a duplicate of a live node).
const RESTART_AFTER: Duration = Duration::from_millis(2_500);

/// An owner as the test supervises it: the topology's process, or the test's restart.
struct Supervised {
    restarted: Option<ChildGuard>,
    died_at: Option<Instant>,
}

fn alive(topo: &Topology, node: &str, s: &mut Supervised) -> bool {
    match &mut s.restarted {
        Some(child) => child.0.try_wait().expect("try_wait").is_none(),
        None => topo.alive(node),
    }
}

fn restart_owner(topo: &Topology, node: &str, n: usize) -> ChildGuard {
    let addr = topo.node(node).addr.clone();
    let log = std::fs::File::create(topo.dir.0.join(format!("{node}.restart-{n}.log")))
        .expect("log file");
    let child = Command::new(env!("CARGO_BIN_EXE_orbit"))
        .args(["owner", "--node-id", node, "--listen", &addr])
        .args(FAST)
        .args(topo.service_flags())
        .env("ORBIT_DATABASE_URL", &topo.database_url)
        .stdout(Stdio::null())
        .stderr(log)
        .spawn()
        .expect("restart the owner");
    ChildGuard(child)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_aborting_signal_is_parked_and_no_owner_stays_down() {
    // Inherited by every process of the topology; only owners apply signals.
    std::env::set_var(orbit_owner::FAULT_INJECT_ENV, "abort-on-signal:kaboom");
    let topo = Topology::start("poison", 1, 2, 1, FAST);
    let mut c = topo.client(0).await;
    register(&mut c, WORKFLOW).await;
    let others: Vec<String> = (0..8).map(|i| format!("ok-{i}")).collect();
    for id in std::iter::once(&"victim".to_string()).chain(&others) {
        start(&mut c, "poisoned", id, json!({})).await.unwrap_or_else(|e| panic!("{id}: {e}"));
    }

    let mut sig = c.clone();
    tokio::spawn(async move {
        let req = pb::SignalExecutionRequest {
            execution_id: "victim".into(),
            name: "kaboom".into(),
            payload: None,
            request_id: String::new(),
        };
        let _ = sig.signal_execution(req).await;
    });

    let owners: Vec<String> = topo.of("owner").iter().map(|n| n.node_id.clone()).collect();
    let mut sup: BTreeMap<String, Supervised> =
        owners.iter().map(|n| (n.clone(), Supervised { restarted: None, died_at: None })).collect();
    let (mut deaths, mut restarts) = (0u32, 0usize);
    let deadline = Instant::now() + Duration::from_secs(180);
    let mut parked_since: Option<Instant> = None;
    loop {
        assert!(Instant::now() < deadline, "not settled: {deaths} owner deaths so far");
        // The first death happens in steady state (not counted); each later one is.
        assert!(deaths <= MAX_FAILURES + 1, "owners keep dying: {deaths} deaths");
        let mut all_up = true;
        for (node, s) in &mut sup {
            if alive(&topo, node, s) {
                continue;
            }
            all_up = false;
            match s.died_at {
                None => {
                    deaths += 1;
                    s.died_at = Some(Instant::now());
                }
                Some(at) if at.elapsed() >= RESTART_AFTER => {
                    restarts += 1;
                    s.restarted = Some(restart_owner(&topo, node, restarts));
                    s.died_at = None;
                }
                Some(_) => {}
            }
        }
        let req = pb::DescribeExecutionRequest { execution_id: "victim".into(), run: 0, at_seq: 0 };
        let parked = c.describe_execution(req).await.ok().and_then(|r| r.into_inner().execution);
        let parked = parked
            .and_then(|d| d.info)
            .is_some_and(|i| i.status() == pb::ExecutionStatus::Suspended);
        // Settled: parked, every owner up, and still up a while later.
        if parked && all_up {
            let since = *parked_since.get_or_insert_with(Instant::now);
            if since.elapsed() >= Duration::from_secs(4) {
                break;
            }
        } else {
            parked_since = None;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    eprintln!("cluster poison: {deaths} owner deaths, {restarts} restarts before it was parked");
    assert!(deaths >= 1, "the injected abort killed the owner that applied the signal");
    // The first death happens in steady state (not counted); each later one is counted.
    assert!(deaths <= MAX_FAILURES + 1, "{deaths} owner deaths");

    let d = c
        .describe_execution(pb::DescribeExecutionRequest {
            execution_id: "victim".into(),
            run: 0,
            at_seq: 0,
        })
        .await
        .unwrap()
        .into_inner()
        .execution
        .unwrap();
    let s = d.suspension.expect("a SUSPENDED execution says why");
    assert_eq!(s.failures, MAX_FAILURES, "{s:?}");
    assert!(s.reason.contains("process ended"), "{s:?}");

    // The cluster serves every other execution, and new ones.
    for id in &others {
        let req = pb::SignalExecutionRequest {
            execution_id: id.clone(),
            name: "go".into(),
            payload: Some(orbit_server_kit::payload::json_to_proto(json!(id))),
            request_id: String::new(),
        };
        c.signal_execution(req).await.unwrap_or_else(|e| panic!("signal {id}: {e}"));
    }
    for id in &others {
        let (status, output) = result(&mut c, id, Duration::from_secs(60)).await;
        assert_eq!((status, output), (pb::ExecutionStatus::Completed, json!(id)), "{id}");
    }

    // The operator ends it; no owner runs the poisoned entry again.
    let req = pb::TerminateExecutionRequest {
        execution_id: "victim".into(),
        reason: "aborts owners".into(),
    };
    assert!(c.terminate_execution(req).await.expect("terminate").into_inner().terminated);
    let (status, error) = result(&mut c, "victim", Duration::from_secs(60)).await;
    assert_eq!((status, error), (pb::ExecutionStatus::Failed, json!("TERMINATED: aborts owners")));
    tokio::time::sleep(Duration::from_secs(1)).await;
    for (node, s) in &mut sup {
        assert!(alive(&topo, node, s), "{node} is down at the end");
    }
}
