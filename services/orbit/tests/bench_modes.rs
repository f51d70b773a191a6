//! `orbit bench` presets and database figures, with the real binary: `--mode latency`
//! runs its executions one at a time and prints the end-to-end percentiles; against the
//! split on PostgreSQL, `--database-url` prints transactions per task (writes and reads)
//! and `--idle-seconds` the cluster's idle transactions per second. `--mode priority`
//! measures priority-1 executions behind a queued priority-5 backlog, in process and
//! against the split; `--mode fairness` a small tenant's tasks behind a large one's.
//! `--replay` replays every completed execution against the server's decider, in process
//! and on the split.

mod common;

use common::cluster::{shared_tls, Topology, FAST};
use common::*;
use std::process::Command;
use std::time::Duration;

/// A handful of executions take well under a second; the rest is room for a busy machine.
const WITHIN: Duration = Duration::from_secs(180);

/// The numbers after each `label` on the report line that starts with `line`.
fn figures(out: &str, line: &str, labels: &[&str]) -> Vec<f64> {
    let text = out
        .lines()
        .find(|l| l.trim_start().starts_with(line))
        .unwrap_or_else(|| panic!("no `{line}` line in:\n{out}"));
    labels
        .iter()
        .map(|label| {
            let rest = text.split(label).nth(1).unwrap_or_else(|| panic!("no {label} in {text}"));
            let word = rest.split_whitespace().next().unwrap_or_default();
            word.parse().unwrap_or_else(|_| panic!("{label} is not a number in `{text}`"))
        })
        .collect()
}

#[test]
fn latency_mode_runs_one_at_a_time_and_prints_percentiles() {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_orbit"));
    cmd.args(["bench", "--mode", "latency", "--executions", "5", "--replay"]);
    let (ok, out, err) = run_bounded(&mut cmd, WITHIN);
    assert!(ok, "orbit bench --mode latency failed:\n{out}{err}");
    // The preset's 3 steps and concurrency 1, the flag's 5 executions.
    assert!(
        out.contains("orbit bench: 5 executions x 3 steps, 1 in flight, 0 failed"),
        "the latency preset with --executions 5:\n{out}"
    );
    let e2e = figures(&out, "end-to-end", &["p50", "p95", "p99"]);
    assert!(e2e[0] > 0.0, "a measured p50: {out}");
    assert!(e2e[0] <= e2e[1] && e2e[1] <= e2e[2], "percentiles in order: {out}");
    // `--replay`: each execution's history reproduced by the server's decider, 12 events
    // each (created, started, scheduled + dispatched + succeeded per step, completed).
    let replay = figures(&out, "replay", &["replay", " of ", "decider ("]);
    assert_eq!(replay, [5.0, 5.0, 60.0], "{out}");
}

#[test]
fn idle_seconds_prints_the_split_clusters_idle_transactions_per_second() {
    let topo = Topology::start("bench-idle", 1, 1, 1, FAST);
    let tls = shared_tls();
    let path = |p: Option<std::path::PathBuf>| p.expect("the topology's certificates");
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_orbit"));
    cmd.args(["bench", "--address", &topo.frontends().join(",")])
        .args(["--executions", "4", "--steps", "2", "--concurrency", "2"])
        .args(["--database-url", &topo.database_url, "--idle-seconds", "3", "--replay"])
        .args(["--token", &topo.token])
        .arg("--tls-ca")
        .arg(path(tls.ca))
        .arg("--tls-client-cert")
        .arg(path(tls.cert))
        .arg("--tls-client-key")
        .arg(path(tls.key))
        .env_remove("ORBIT_TOKEN")
        .env_remove("ORBIT_DATABASE_URL");
    let (ok, out, err) = run_bounded(&mut cmd, WITHIN);
    assert!(ok, "orbit bench --idle-seconds failed:\n{out}{err}");
    assert!(out.contains("4 executions x 2 steps, 2 in flight, 0 failed"), "{out}");
    // The run wrote: every step commits at least once.
    let per_task = figures(&out, "database", &["database", "writes +"]);
    assert!(per_task[0] > 0.0, "transactions per task counted: {out}");
    // Idle, the nodes still beat their membership (every 250 ms with FAST): a figure above
    // zero, measured over about the 3 s asked for.
    let idle = figures(&out, "idle", &["idle", " in "]);
    assert!(idle[0] > 0.0, "a numeric idle transactions/s above zero: {out}");
    assert!(idle[1] >= 3.0, "the window lasted the seconds asked for: {out}");
    // `--replay` through a frontend of the split, with the admin token.
    let replay = figures(&out, "replay", &["replay", " of "]);
    assert_eq!(replay, [4.0, 4.0], "{out}");
}

/// `--mode priority` shrunk: 300 priority-5 executions on 2 workers x 1 slot whose tasks take
/// 20 ms (about 3 s of backlog), 5 priority-1 executions per phase, measured while at least
/// 50 tasks wait. Only the shape is asserted, never a timing ratio.
const PRIORITY_SMALL: [&str; 14] = [
    "--mode",
    "priority",
    "--executions",
    "300",
    "--worker-concurrency",
    "1",
    "--task-delay-ms",
    "20",
    "--probes",
    "5",
    "--min-backlog",
    "50",
    "--output",
    "json",
];

/// The JSON report of a `PRIORITY_SMALL` run: every key, and loaded measurements taken
/// behind a backlog.
fn assert_priority_report(out: &str) {
    let line = out.lines().rev().find(|l| l.starts_with('{')).unwrap_or_else(|| panic!("{out}"));
    let report: serde_json::Value = serde_json::from_str(line).expect("one JSON object");
    for key in [
        "ratio_p50",
        "measured",
        "backlog_first",
        "backlog_last",
        "bulk_p50_ms",
        "bulk_p95_ms",
        "start_failures",
    ] {
        assert!(report.get(key).is_some(), "no {key} in {report}");
    }
    for phase in ["unloaded", "loaded"] {
        for key in ["measured", "p50_ms", "p95_ms", "start_to_task_p50_ms"] {
            assert!(report[phase].get(key).is_some(), "no {phase}.{key} in {report}");
        }
    }
    assert_eq!(report["mode"], "priority");
    assert_eq!(
        (report["executions"].as_u64(), report["start_failures"].as_u64()),
        (Some(300), Some(0))
    );
    assert_eq!(report["unloaded"]["measured"], 5, "every unloaded probe measured: {report}");
    let measured = report["measured"].as_u64().expect("a count");
    assert!((1..=5).contains(&measured), "loaded measurements taken: {report}");
    assert_eq!(report["loaded"]["measured"], measured);
    let first = report["backlog_first"].as_u64().expect("a backlog at the first measurement");
    let last = report["backlog_last"].as_u64().expect("a backlog at the last measurement");
    assert!(
        (50..=300).contains(&last) && last <= first && first <= 300,
        "every loaded measurement behind at least --min-backlog queued tasks: {report}"
    );
    // The backlog waited for the gate and for one another: far longer than a probe.
    assert!(report["bulk_p50_ms"].as_f64() > Some(0.0), "{report}");
}

#[test]
fn priority_mode_measures_priority_one_behind_a_queued_backlog() {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_orbit"));
    cmd.arg("bench").args(PRIORITY_SMALL);
    let (ok, out, err) = run_bounded(&mut cmd, WITHIN);
    assert!(ok, "orbit bench --mode priority failed:\n{out}{err}");
    assert_priority_report(&out);
}

#[test]
fn priority_mode_runs_against_the_split() {
    let topo = Topology::start("bench-priority", 1, 1, 1, FAST);
    let tls = shared_tls();
    let path = |p: Option<std::path::PathBuf>| p.expect("the topology's certificates");
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_orbit"));
    cmd.arg("bench")
        .args(PRIORITY_SMALL)
        .args(["--address", &topo.frontends().join(","), "--token", &topo.token])
        .arg("--tls-ca")
        .arg(path(tls.ca))
        .arg("--tls-client-cert")
        .arg(path(tls.cert))
        .arg("--tls-client-key")
        .arg(path(tls.key))
        .env_remove("ORBIT_TOKEN");
    let (ok, out, err) = run_bounded(&mut cmd, WITHIN);
    assert!(ok, "orbit bench --mode priority --address failed:\n{out}{err}");
    assert_priority_report(&out);
}

/// `--mode fairness` shrunk: tenant A's 200 executions on 2 workers x 1 slot whose tasks
/// take 10 ms (about 1 s of backlog), tenant B's 5 per phase. Only the shape is asserted,
/// never a timing ratio: every B task measured in both phases, A's all run, and A kept
/// running while B's ran (fair shares, equal weights: B never takes every slot).
#[test]
fn fairness_mode_measures_a_small_tenant_behind_a_large_one() {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_orbit"));
    cmd.arg("bench").args([
        "--mode",
        "fairness",
        "--executions",
        "200",
        "--worker-concurrency",
        "1",
        "--task-delay-ms",
        "10",
        "--probes",
        "5",
        "--output",
        "json",
    ]);
    let (ok, out, err) = run_bounded(&mut cmd, WITHIN);
    assert!(ok, "orbit bench --mode fairness failed:\n{out}{err}");
    let line = out.lines().rev().find(|l| l.starts_with('{')).unwrap_or_else(|| panic!("{out}"));
    let report: serde_json::Value = serde_json::from_str(line).expect("one JSON object");
    assert_eq!(report["mode"], "fairness");
    assert_eq!(
        (report["executions"].as_u64(), report["start_failures"].as_u64()),
        (Some(200), Some(0))
    );
    for phase in ["idle", "loaded"] {
        assert_eq!(report[phase]["measured"], 5, "every tenant-B task measured: {report}");
        assert!(report[phase].get("p95_ms").is_some(), "{report}");
    }
    for key in ["ratio_p95", "ratio_p50", "a_queued_at_b", "b_window_ms"] {
        assert!(report.get(key).is_some(), "no {key} in {report}");
    }
    assert!(
        report["a_queued_at_b"].as_u64() > Some(100),
        "B's loaded phase began behind A's queued tasks: {report}"
    );
    // With one running each, a slot A's task frees goes back to A: A always gets some.
    assert!(report["a_started_during_b"].as_u64() > Some(0), "A starved while B ran: {report}");
}
