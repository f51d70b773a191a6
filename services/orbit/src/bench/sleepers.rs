//! `orbit bench --mode sleepers`: the owner's memory with many sleeping executions, and the
//! time to wake them all at once (issue 14, "owner memory bounded").
//!
//! It registers `bench-sleep` (one `until` step, no task: no worker is needed), starts N
//! executions that all sleep until the same instant, then reads the owner's resident set
//! size (`VmRSS` of `/proc/<pid>/status`: `--owner-pid`, or this process for the embedded
//! server) once they all sleep, and measures the time from that instant until all N have
//! completed, counted from the owner's `orbit_executions_closed_total` (the embedded
//! server's registry, or the admin ports given with `--metrics`). The owner's
//! `orbit_owner_executions_held` / `_evicted` gauges say how many of them it keeps in
//! memory; run the server with `--evict-after-ms off` for the figure without eviction.

use super::BenchArgs;
use crate::bench_server::{Snapshot, Source};
use orbit_api::v1 as pb;
use orbit_api::v1::workflow_service_client::WorkflowServiceClient;
use orbit_cli::client::Transport;
use orbit_server_kit::payload::json_to_proto;
use serde_json::json;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::Semaphore;
use tokio::time::Instant;

const WORKFLOW: &str = "name: bench-sleep\nversion: \"1\"\nsteps:\n  - { id: nap, until: \"${{ input.at }}\" }\noutput: \"${{ input.n }}\"\n";

/// The metric that counts completed executions.
const CLOSED: &str = "orbit_executions_closed_total";

/// What the sleepers run needs from `bench`.
pub struct Setup {
    pub channels: Vec<Transport>,
    pub metrics: Source,
    /// The owner's process id (its RSS is read); `None`: not read.
    pub owner_pid: Option<u32>,
}

/// Runs the sleepers mode (see the module docs).
pub async fn run(args: &BenchArgs, setup: Setup) -> anyhow::Result<()> {
    let Setup { channels, metrics, owner_pid } = setup;
    let n = args.shape().executions;
    let concurrency = args.shape().concurrency.max(1);
    let mut client = WorkflowServiceClient::new(channels[0].clone());
    client
        .register_workflow(pb::RegisterWorkflowRequest { document: WORKFLOW.into(), format: 0 })
        .await?;
    // Starting runs at a few hundred to a thousand per second; the default leaves room
    // for 100 per second plus 20 s.
    let sleep_s = args.sleep_seconds.unwrap_or(20 + n / 100);
    let wake_ms = now_ms() + sleep_s * 1000;
    let at = chrono::DateTime::from_timestamp_millis(i64::try_from(wake_ms)?)
        .ok_or_else(|| anyhow::anyhow!("bad wake instant"))?
        .to_rfc3339_opts(chrono::SecondsFormat::Millis, true);
    let rss_before = owner_pid.and_then(rss_kib);
    eprintln!("starting {n} executions sleeping until {at} ({sleep_s} s from now)");

    let gate = Arc::new(Semaphore::new(concurrency));
    let (started, failed) = (Arc::new(AtomicU64::new(0)), Arc::new(AtomicU64::new(0)));
    let began = Instant::now();
    let run_id = std::process::id();
    let mut handles = Vec::new();
    for i in 0..n {
        let permit = gate.clone().acquire_owned().await?;
        let channel = channels[usize::try_from(i).unwrap_or(0) % channels.len()].clone();
        let (started, failed, at) = (started.clone(), failed.clone(), at.clone());
        handles.push(tokio::spawn(async move {
            let request = pb::StartExecutionRequest {
                memo: None,
                workflow: "bench-sleep".into(),
                version: String::new(),
                input: Some(json_to_proto(json!({ "n": i, "at": at }))),
                execution_id: format!("sleep-{run_id}-{i}"),
                priority: 0,
            };
            match WorkflowServiceClient::new(channel).start_execution(request).await {
                Ok(_) => started.fetch_add(1, Ordering::Relaxed),
                Err(_) => failed.fetch_add(1, Ordering::Relaxed),
            };
            drop(permit);
        }));
        if i % 10_000 == 9_999 {
            eprint!("\r  {}/{n} started", i + 1);
        }
        // Finished handles are dropped as we go, so a million starts keep few alive.
        if handles.len() >= 4 * concurrency {
            handles.retain(|h: &tokio::task::JoinHandle<()>| !h.is_finished());
        }
    }
    for h in handles {
        h.await?;
    }
    let start_secs = began.elapsed().as_secs_f64();
    let ok = started.load(Ordering::Relaxed);
    eprintln!(
        "\r  {ok}/{n} started in {start_secs:.1} s ({:.0}/s)",
        ok as f64 / start_secs.max(1e-9)
    );
    anyhow::ensure!(
        now_ms() + 2000 < wake_ms,
        "starting took longer than the sleep: raise --sleep-seconds (now {sleep_s})"
    );
    // Let the last commits and evictions land, then read the memory of a sleeping owner.
    tokio::time::sleep(Duration::from_secs(2)).await;
    let rss_sleeping = owner_pid.and_then(rss_kib);
    let asleep = metrics.read().await;
    let base_closed = asleep.get(CLOSED);

    // Wait for the instant, then count completions.
    let until_wake = wake_ms.saturating_sub(now_ms());
    tokio::time::sleep(Duration::from_millis(until_wake)).await;
    let woke = Instant::now();
    let (mut first, mut done) = (None, 0.0);
    let deadline = woke + Duration::from_secs(600 + n / 100);
    while Instant::now() < deadline {
        done = metrics.read().await.get(CLOSED) - base_closed;
        if done > 0.0 && first.is_none() {
            first = Some(woke.elapsed());
        }
        if done >= ok as f64 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(if n > 100_000 { 200 } else { 50 })).await;
    }
    let wake_secs = woke.elapsed().as_secs_f64();
    let rss_after = owner_pid.and_then(rss_kib);
    report(
        args,
        Report {
            n: ok,
            failed: failed.load(Ordering::Relaxed),
            start_secs,
            rss: [rss_before, rss_sleeping, rss_after],
            asleep: &asleep,
            completed: done,
            first_ms: first.map(|d| d.as_secs_f64() * 1000.0),
            wake_secs,
        },
    );
    anyhow::ensure!(done >= ok as f64, "only {done} of {ok} executions completed after the wake");
    Ok(())
}

struct Report<'a> {
    n: u64,
    failed: u64,
    start_secs: f64,
    /// KiB: before starting, all sleeping, after the wake.
    rss: [Option<u64>; 3],
    asleep: &'a Snapshot,
    completed: f64,
    first_ms: Option<f64>,
    wake_secs: f64,
}

fn report(args: &BenchArgs, r: Report<'_>) {
    let [before, sleeping, after] = r.rss;
    let per = match (before, sleeping) {
        (Some(b), Some(s)) if r.n > 0 => Some((s.saturating_sub(b) * 1024) as f64 / r.n as f64),
        _ => None,
    };
    let held = r.asleep.get("orbit_owner_executions_held");
    let evicted = r.asleep.get("orbit_owner_executions_evicted");
    let out = json!({
        "mode": "sleepers",
        "executions": r.n,
        "start_failures": r.failed,
        "start_seconds": r.start_secs,
        "rss_kib": { "before": before, "sleeping": sleeping, "after_wake": after },
        "rss_bytes_per_sleeping_execution": per,
        "owner_held": held,
        "owner_evicted": evicted,
        "completed_after_wake": r.completed,
        "first_completion_ms": r.first_ms,
        "all_completed_seconds": r.wake_secs,
    });
    if args.output == "json" {
        println!("{out}");
        return;
    }
    let kib =
        |v: Option<u64>| v.map_or_else(|| "-".into(), |k| format!("{:.1} MiB", k as f64 / 1024.0));
    println!(
        "sleepers     {} executions started in {:.1} s ({} failed)",
        r.n, r.start_secs, r.failed
    );
    println!(
        "owner RSS    before {}   all sleeping {}   after the wake {}   ({} per sleeping execution)",
        kib(before),
        kib(sleeping),
        kib(after),
        per.map_or_else(|| "-".into(), |b| format!("{b:.0} B")),
    );
    println!("owner memory {held:.0} held, {evicted:.0} evicted while asleep");
    println!(
        "wake         {:.0}/{} completed {:.2} s after the instant (first after {})",
        r.completed,
        r.n,
        r.wake_secs,
        r.first_ms.map_or_else(|| "-".into(), |ms| format!("{ms:.0} ms")),
    );
}

/// `VmRSS` of process `pid` in KiB (Linux).
fn rss_kib(pid: u32) -> Option<u64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let line = status.lines().find(|l| l.starts_with("VmRSS:"))?;
    line.split_whitespace().nth(1)?.parse().ok()
}

fn now_ms() -> u64 {
    orbit_owner::system_clock()
}
