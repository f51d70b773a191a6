//! `orbit bench` presets and database figures, with the real binary: `--mode latency`
//! runs its executions one at a time and prints the end-to-end percentiles; against the
//! split on PostgreSQL, `--database-url` prints transactions per task (writes and reads)
//! and `--idle-seconds` the cluster's idle transactions per second.

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
    cmd.args(["bench", "--mode", "latency", "--executions", "5"]);
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
}

#[test]
fn idle_seconds_prints_the_split_clusters_idle_transactions_per_second() {
    let topo = Topology::start("bench-idle", 1, 1, 1, FAST);
    let tls = shared_tls();
    let path = |p: Option<std::path::PathBuf>| p.expect("the topology's certificates");
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_orbit"));
    cmd.args(["bench", "--address", &topo.frontends().join(",")])
        .args(["--executions", "4", "--steps", "2", "--concurrency", "2"])
        .args(["--database-url", &topo.database_url, "--idle-seconds", "3"])
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
}
