//! Bounded owner memory through the real `orbit dev` binary: executions that only sleep or
//! await a signal are dropped from the owner's memory (its admin port's gauges say so),
//! and still complete when their timer fires or their signal arrives — also after the
//! process restarted while they slept — with every event recorded once.

// Tests read their environment (ORBIT_PYTHON, the database URL) and the wall clock
// (unique names, deadlines of real processes) directly.
#![allow(clippy::disallowed_methods)]

mod common;

use common::admin;
use common::*;
use orbit_api::v1 as pb;
use serde_json::json;
use std::time::{Duration, Instant};

/// Generous on a busy 2-core machine.
const PATIENCE: Duration = Duration::from_secs(60);

const NAP: &str = "name: nap\nversion: '1'\nsteps: [ { id: z, sleep: 3s } ]\noutput: rested\n";
const WAIT: &str = "name: wait\nversion: '1'\nsignals: { go: {} }\nsteps: [ { id: g, await: go } ]\noutput: '${{ steps.g.output }}'\n";

/// The value of an unlabelled metric on `admin`'s `/metrics` (0 when absent).
async fn metric(admin: &str, name: &str) -> f64 {
    admin::metric_sum(admin, name, "").await as f64
}

/// Waits (bounded) until metric `name` reaches `want`.
async fn metric_reaches(admin: &str, name: &str, want: f64) {
    let deadline = Instant::now() + PATIENCE;
    loop {
        let v = metric(admin, name).await;
        if v >= want {
            return;
        }
        assert!(Instant::now() < deadline, "{name} stayed at {v}, expected {want}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

fn count(history: &[pb::HistoryEvent], event_type: &str) -> usize {
    history.iter().filter(|e| e.event_type == event_type).count()
}

/// Seqs run 1..=n: nothing recorded twice or lost.
fn contiguous(history: &[pb::HistoryEvent]) {
    let seqs: Vec<u64> = history.iter().map(|e| e.seq).collect();
    assert_eq!(seqs, (1..=history.len() as u64).collect::<Vec<_>>());
}

#[tokio::test]
async fn sleeping_and_awaiting_executions_are_evicted_and_complete_on_their_event() {
    let dir = TempDir::new("eviction");
    let db = dir.0.join("orbit.db");
    let port = free_port();
    let admin = format!("127.0.0.1:{}", free_port());
    let args = ["--admin-listen", admin.as_str(), "--evict-after-ms", "500"];
    let mut server = Server::start_on(&db, port, &args).await;
    let mut client = server.client().await;
    register(&mut client, NAP).await;
    register(&mut client, WAIT).await;

    start(&mut client, "nap", "n1", json!({})).await.expect("start n1");
    start(&mut client, "wait", "w1", json!({})).await.expect("start w1");
    metric_reaches(&admin, "orbit_owner_executions_evicted", 2.0).await;
    assert_eq!(metric(&admin, "orbit_owner_executions_held").await, 0.0);

    // The signal reloads the waiter from its history and completes it.
    client
        .signal_execution(pb::SignalExecutionRequest {
            execution_id: "w1".into(),
            name: "go".into(),
            payload: Some(orbit_server_kit::payload::json_to_proto(json!({ "k": 1 }))),
            request_id: String::new(),
        })
        .await
        .expect("signal");
    let (status, output) = result(&mut client, "w1", PATIENCE).await;
    assert_eq!(status, pb::ExecutionStatus::Completed);
    assert_eq!(output, json!({ "k": 1 }));
    let (status, output) = result(&mut client, "n1", PATIENCE).await;
    assert_eq!(status, pb::ExecutionStatus::Completed);
    assert_eq!(output, json!("rested"));
    assert!(
        metric(&admin, "orbit_owner_reloads_total").await >= 2.0,
        "both came back from history"
    );

    let h = history(&mut client, "w1").await;
    contiguous(&h);
    assert_eq!(count(&h, "SignalReceived"), 1);
    assert_eq!(count(&h, "WorkflowCompleted"), 1);
    let h = history(&mut client, "n1").await;
    contiguous(&h);
    assert_eq!((count(&h, "TimerStarted"), count(&h, "TimerFired")), (1, 1));
    assert_eq!(count(&h, "WorkflowCompleted"), 1);

    // A restart while one sleeps: the new process evicts it again at once, and its timer
    // still ends the sleep.
    start(&mut client, "nap", "n2", json!({})).await.expect("start n2");
    metric_reaches(&admin, "orbit_owner_evictions_total", 3.0).await;
    server.kill9();
    let server = Server::start_on(&db, port, &args).await;
    let mut client = server.client().await;
    metric_reaches(&admin, "orbit_owner_executions_evicted", 1.0).await;
    assert_eq!(metric(&admin, "orbit_owner_executions_held").await, 0.0);
    let (status, _) = result(&mut client, "n2", PATIENCE).await;
    assert_eq!(status, pb::ExecutionStatus::Completed);
    let h = history(&mut client, "n2").await;
    contiguous(&h);
    assert_eq!((count(&h, "TimerStarted"), count(&h, "TimerFired")), (1, 1));
}

#[test]
fn bench_sleepers_mode_reports_the_owners_memory_and_the_wake() {
    // The embedded server with its default eviction: every sleeper is evicted while it
    // sleeps, and all complete after the common instant.
    let mut cmd = std::process::Command::new(env!("CARGO_BIN_EXE_orbit"));
    cmd.args(["bench", "--mode", "sleepers", "--executions", "20", "--sleep-seconds", "15"]);
    cmd.args(["--output", "json"]);
    let (ok, out, err) = run_bounded(&mut cmd, Duration::from_secs(180));
    assert!(ok, "orbit bench --mode sleepers failed:\n{out}{err}");
    let report: serde_json::Value =
        serde_json::from_str(out.lines().last().unwrap_or_default()).expect("one JSON line");
    assert_eq!(report["mode"], "sleepers");
    assert_eq!(report["executions"], 20);
    assert_eq!(report["owner_evicted"], 20.0, "{report}");
    assert_eq!(report["owner_held"], 0.0, "{report}");
    assert_eq!(report["completed_after_wake"], 20.0, "{report}");
    assert!(report["rss_kib"]["sleeping"].as_u64().is_some_and(|k| k > 0), "{report}");
}
