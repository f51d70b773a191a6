//! `orbit bench --mode priority`: does a priority-1 execution keep its schedule-to-start
//! behind a backlog of priority-5 work? Issue 27: "with a backlog of 5,000 priority-5
//! tasks, a priority-1 execution's p50 schedule-to-start stays within 2x of the unloaded
//! value".
//!
//! The run, in-process (`orbit dev` started by the bench) or against `--address`:
//! 1. registers `bench-priority` (one `bench.step` task that returns its input) and starts
//!    `--workers` in-process workers of `--worker-concurrency` slots (2 x 4 by default)
//!    whose handler sleeps `--task-delay-ms` (2 ms; a priority-5 task a random time within
//!    `--task-jitter-pct`, 50%, either side): a bounded capacity, so work queues;
//! 2. **unloaded**: runs `--probes` priority-1 executions one at a time (each a random 0 to
//!    `--probe-gap-ms`, 10 ms, after the previous one completed) on the idle workers;
//! 3. **loaded**: starts `--executions` priority-5 executions (5,000; `--concurrency` start
//!    calls in flight) while their handlers wait at a gate, so their first tasks fill every
//!    slot and the rest queue: the whole backlog is queued before the first measurement, on
//!    a fast machine or a slow one. It then opens the gate and runs priority-1 executions
//!    one at a time again while at least `--min-backlog` priority-5 tasks (1,000) have not
//!    reached a handler, up to `--probes`;
//! 4. waits for the backlog to drain and reports.
//!
//! The two random spreads are what a real backlog and real arrivals look like. Without
//! them (`--probe-gap-ms 0 --task-jitter-pct 0`) the slots, opened at one gate and all
//! sleeping the same time, finish in lockstep, and a probe started just after the previous
//! one completed arrives just after the slots were refilled: it waits a whole slot cycle
//! every time, a figure of the bench's phase rather than of the dispatch.
//!
//! **Schedule-to-start** of a priority-1 execution: from its `StepScheduled` event (the
//! owner's clock when it recorded the event, from the history) to its handler starting
//! (this process's wall clock). Both are milliseconds, so one figure is a whole number of
//! milliseconds; the two clocks are one for the embedded server and for a cluster on this
//! host (across hosts, their skew adds in). Beside it, **start-to-task**: from the start
//! call to the handler, on one monotonic clock in microseconds (it includes the start
//! call). The priority-5 tasks' figure is from their start call to their handler (it
//! includes their wait at the gate: it is the backlog's wait, given for context).
//!
//! `--output json` prints one object (times in milliseconds):
//! - `mode` (`"priority"`), `executions` (priority-5 executions started),
//!   `start_failures`, `workers`, `worker_concurrency`, `task_delay_ms`, `task_jitter_pct`,
//!   `probe_gap_ms`, `min_backlog`;
//! - `unloaded` and `loaded`: `{measured, p50_ms, p95_ms, max_ms, start_to_task_p50_ms,
//!   start_to_task_p95_ms}`, the priority-1 executions of each phase;
//! - `ratio_p50`: `loaded.p50_ms / unloaded.p50_ms` (null when the unloaded p50 is 0), and
//!   `start_to_task_ratio_p50` the same for start-to-task;
//! - `measured` (= `loaded.measured`), `backlog_first` and `backlog_last`: priority-5 tasks
//!   not yet started when the first and the last loaded measurement began (null when none);
//! - `bulk_p50_ms`, `bulk_p95_ms`: the priority-5 tasks, start call to handler.

mod report;

use super::args::BenchArgs;
use super::backlog::{self, StartHooks};
use hdrhistogram::Histogram;
use orbit_api::v1 as pb;
use orbit_api::v1::workflow_service_client::WorkflowServiceClient;
use orbit_cli::client::Transport;
use orbit_server_kit::payload::json_to_proto;
use orbit_worker::{TaskContext, TaskFailure};
use report::{Phase, Report, Sample};
use serde_json::{json, Value};
use std::collections::HashMap;
use std::hash::{DefaultHasher, Hash, Hasher};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Duration;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

const WORKFLOW: &str = "name: bench-priority\nversion: \"1\"\ntasks:\n  bench.step: {}\nsteps:\n  - { id: s1, task: bench.step, input: \"${{ input }}\" }\noutput: \"${{ steps.s1.output }}\"\n";

/// The longest one priority-1 execution may take: far beyond any figure worth reporting,
/// short enough that workers that never connect end the run with an error.
const PROBE_WITHIN: Duration = Duration::from_secs(120);

/// What the priority run needs from `bench`.
pub struct Setup {
    pub channels: Vec<Transport>,
    /// The frontends the workers connect to.
    pub addresses: Vec<String>,
    /// Cancelled when the bench ends: stops the workers.
    pub stop: CancellationToken,
}

/// What the handlers saw.
struct Seen {
    /// Priority-1 tasks: execution id → (monotonic, wall-clock ms) at the handler's start.
    probes: Mutex<HashMap<String, (Instant, u64)>>,
    /// Priority-5 executions whose task has not started: id → before their start call.
    bulk_calls: Mutex<HashMap<String, Instant>>,
    /// Priority-5 tasks, start call to handler (µs).
    bulk_wait: Mutex<Histogram<u64>>,
    bulk_started: AtomicU64,
    bulk_finished: AtomicU64,
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

fn micros(d: Duration) -> u64 {
    u64::try_from(d.as_micros()).unwrap_or(u64::MAX)
}

/// A number in [0, 1) drawn from `seed` (spread, not secret): the same seed, the same draw.
fn unit(seed: &str) -> f64 {
    let mut h = DefaultHasher::new();
    seed.hash(&mut h);
    (h.finish() >> 11) as f64 / (1u64 << 53) as f64
}

/// `base` spread uniformly within `pct` percent either side, drawn from `seed`.
fn spread(base: Duration, pct: u64, seed: &str) -> Duration {
    base.mul_f64(1.0 + (2.0 * unit(seed) - 1.0) * pct as f64 / 100.0)
}

/// Runs the priority mode (see the module docs).
pub async fn run(args: &BenchArgs, setup: Setup) -> anyhow::Result<()> {
    let Setup { channels, addresses, stop } = setup;
    let mut client = WorkflowServiceClient::new(channels[0].clone());
    client
        .register_workflow(pb::RegisterWorkflowRequest { document: WORKFLOW.into(), format: 0 })
        .await?;
    let seen = Arc::new(Seen {
        probes: Mutex::default(),
        bulk_calls: Mutex::default(),
        bulk_wait: Mutex::new(Histogram::new(3)?),
        bulk_started: AtomicU64::new(0),
        bulk_finished: AtomicU64::new(0),
    });
    // Opened once the backlog is queued; a child of `stop`, so stopping opens it too.
    let gate = stop.child_token();
    let _open_on_error = gate.clone().drop_guard();
    start_workers(args, &addresses, &seen, &gate, &stop)?;

    // Unique per run, also against a cluster that keeps earlier runs' executions.
    let run_id = format!("{}-{}", std::process::id(), orbit_owner::system_clock());
    // Unmeasured: waits for the workers' sessions.
    probe(&mut client, &seen, &format!("prio-{run_id}-warm")).await?;
    let mut unloaded = Phase::new()?;
    for i in 0..args.probes {
        let id = format!("prio-{run_id}-u{i}");
        gap(args, &id).await;
        unloaded.record(probe(&mut client, &seen, &id).await?);
    }
    eprintln!("unloaded: {} priority-1 executions measured", unloaded.measured);

    let (accepted, failed) = start_backlog(args, &channels, &seen, &run_id).await?;
    gate.cancel();
    let mut loaded = Phase::new()?;
    let (mut backlog_first, mut backlog_last) = (None, None);
    for i in 0..args.probes {
        let backlog = accepted.saturating_sub(seen.bulk_started.load(Ordering::Relaxed));
        if backlog < args.min_backlog.max(1) {
            break;
        }
        backlog_first.get_or_insert(backlog);
        backlog_last = Some(backlog);
        let id = format!("prio-{run_id}-l{i}");
        gap(args, &id).await;
        loaded.record(probe(&mut client, &seen, &id).await?);
    }
    eprintln!(
        "loaded: {} priority-1 executions measured behind {} to {} queued priority-5 tasks",
        loaded.measured,
        backlog_first.unwrap_or(0),
        backlog_last.unwrap_or(0)
    );
    backlog::drain(&seen.bulk_finished, accepted, "priority-5 tasks").await?;
    let bulk = lock(&seen.bulk_wait).clone();
    let report = Report {
        executions: accepted,
        start_failures: failed,
        unloaded,
        loaded,
        backlog: [backlog_first, backlog_last],
        bulk,
    };
    report::print(args, &report);
    anyhow::ensure!(
        report.loaded.measured > 0,
        "the backlog fell below --min-backlog {} before the first loaded measurement: lower \
         --worker-concurrency or raise --task-delay-ms so that it lasts",
        args.min_backlog
    );
    Ok(())
}

fn start_workers(
    args: &BenchArgs,
    addresses: &[String],
    seen: &Arc<Seen>,
    gate: &CancellationToken,
    stop: &CancellationToken,
) -> anyhow::Result<()> {
    let (delay, jitter) = (Duration::from_millis(args.task_delay_ms), args.task_jitter_pct);
    for w in 0..args.workers {
        let (seen, gate) = (seen.clone(), gate.clone());
        let handler = move |ctx: TaskContext| {
            let (seen, gate) = (seen.clone(), gate.clone());
            async move {
                let (at, wall) = (Instant::now(), orbit_owner::system_clock());
                let id = ctx.execution_id();
                if ctx.input().get("bulk").and_then(Value::as_bool) == Some(true) {
                    // Only a first delivery finds its entry: a redelivery counts once.
                    if let Some(t0) = lock(&seen.bulk_calls).remove(id) {
                        let _ = lock(&seen.bulk_wait).record(micros(at - t0));
                        seen.bulk_started.fetch_add(1, Ordering::Relaxed);
                    }
                    gate.cancelled().await;
                    tokio::time::sleep(spread(delay, jitter, id)).await;
                    seen.bulk_finished.fetch_add(1, Ordering::Relaxed);
                } else {
                    lock(&seen.probes).insert(id.to_string(), (at, wall));
                    tokio::time::sleep(delay).await;
                }
                Ok::<Value, TaskFailure>(ctx.input().clone())
            }
        };
        let worker =
            super::worker_builder(args, addresses, w).task("bench.step", "1", handler).build()?;
        let s = stop.clone();
        tokio::spawn(async move { worker.run(s).await });
    }
    Ok(())
}

/// Waits a random 0 to `--probe-gap-ms` before probe `id` (see the module docs).
async fn gap(args: &BenchArgs, id: &str) {
    let most = Duration::from_millis(args.probe_gap_ms);
    tokio::time::sleep(most.mul_f64(unit(id))).await;
}

/// Runs one priority-1 execution to completion and measures its task's wait.
async fn probe(
    client: &mut WorkflowServiceClient<Transport>,
    seen: &Seen,
    id: &str,
) -> anyhow::Result<Sample> {
    let t0 = Instant::now();
    let start = pb::StartExecutionRequest {
        memo: None,
        workflow: "bench-priority".into(),
        version: String::new(),
        input: Some(json_to_proto(json!({ "bulk": false }))),
        execution_id: id.into(),
        priority: 1,
    };
    client.start_execution(start).await?;
    let done = tokio::time::timeout(PROBE_WITHIN, super::completed(client, id)).await;
    anyhow::ensure!(
        matches!(done, Ok(true)),
        "priority-1 execution {id} did not complete within {PROBE_WITHIN:?}: are the workers \
         connected?"
    );
    let (at, wall) = lock(&seen.probes)
        .remove(id)
        .ok_or_else(|| anyhow::anyhow!("{id} completed without its task reaching a handler"))?;
    let scheduled = step_scheduled_ms(client, id).await?;
    Ok(Sample { schedule_to_start_ms: wall.saturating_sub(scheduled), start_to_task: at - t0 })
}

/// The owner's timestamp of execution `id`'s `StepScheduled`, in Unix milliseconds.
pub(super) async fn step_scheduled_ms(
    client: &mut WorkflowServiceClient<Transport>,
    id: &str,
) -> anyhow::Result<u64> {
    let history = client
        .get_history(pb::GetHistoryRequest { execution_id: id.into(), ..Default::default() })
        .await?
        .into_inner();
    let at = history
        .events
        .iter()
        .find(|e| e.event_type == "StepScheduled")
        .and_then(|e| e.timestamp.as_ref())
        .ok_or_else(|| anyhow::anyhow!("{id} has no StepScheduled with a timestamp"))?;
    Ok(u64::try_from(at.seconds)? * 1000 + u64::try_from(at.nanos)? / 1_000_000)
}

/// Starts the priority-5 executions, `--concurrency` calls in flight; (started, failed).
async fn start_backlog(
    args: &BenchArgs,
    channels: &[Transport],
    seen: &Arc<Seen>,
    run_id: &str,
) -> anyhow::Result<(u64, u64)> {
    let shape = args.shape();
    let request = |i: u64| pb::StartExecutionRequest {
        memo: None,
        workflow: "bench-priority".into(),
        version: String::new(),
        input: Some(json_to_proto(json!({ "bulk": true, "n": i }))),
        execution_id: format!("prio-{run_id}-b{i}"),
        priority: 5,
    };
    let hooks: Arc<dyn StartHooks> = Arc::new(BulkCalls(seen.clone()));
    let what = "priority-5 executions";
    backlog::start(channels, shape.executions, shape.concurrency, what, request, hooks).await
}

/// Notes each priority-5 start call's time, for its task's wait.
struct BulkCalls(Arc<Seen>);

impl StartHooks for BulkCalls {
    fn before(&self, id: &str) {
        lock(&self.0.bulk_calls).insert(id.to_string(), Instant::now());
    }
    fn failed(&self, id: &str) {
        lock(&self.0.bulk_calls).remove(id);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_spread_stays_within_its_percentage_and_is_not_one_value() {
        let base = Duration::from_millis(2);
        let draws: Vec<Duration> = (0..200).map(|i| spread(base, 50, &format!("e{i}"))).collect();
        assert!(draws.iter().all(|d| *d >= base / 2 && *d <= base * 3 / 2), "{draws:?}");
        let (lo, hi) = (draws.iter().min().expect("draws"), draws.iter().max().expect("draws"));
        assert!(*hi - *lo > base / 2, "spread over most of the range: {lo:?}..{hi:?}");
        assert_eq!(spread(base, 0, "e1"), base, "0% is the plain delay");
        assert_eq!(spread(base, 50, "e7"), spread(base, 50, "e7"), "one seed, one draw");
    }
}
