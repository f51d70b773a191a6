//! `orbit bench --mode fairness`: does a small tenant keep its queue wait behind a large
//! one? Issue 27: "tenant A enqueues 10,000 tasks, then tenant B 100; with equal weights
//! B's p95 queue wait is under 2x its wait on an idle system with the same workers, and A
//! is not starved while B runs".
//!
//! The run, in-process (`orbit dev` started by the bench) or against `--address`:
//! 1. registers `bench-fair` (one `bench.step` task; the workflow declares
//!    `fairness: {key: ${{ input.tenant }}}`, equal weights) and starts `--workers`
//!    in-process workers of `--worker-concurrency` slots (2 x 4 by default) whose handler
//!    sleeps `--task-delay-ms` (2 ms);
//! 2. **idle**: starts `--probes` (100) tenant-B executions at once (`--concurrency` start
//!    calls in flight) on the idle workers and waits for them all;
//! 3. **loaded**: starts `--executions` (10,000) tenant-A executions while their handlers
//!    wait at a gate, so the first ones fill every slot and the rest queue; opens the gate,
//!    then starts the same `--probes` tenant-B executions again and waits for them;
//! 4. waits for tenant A to drain and reports.
//!
//! **Queue wait** of a tenant-B task: from its `StepScheduled` (the owner's clock, from the
//! history) to its handler starting (this process's wall clock), whole milliseconds, as in
//! `--mode priority`. **A not starved**: tenant A's tasks that started while B's ran (from
//! B's first start call to B's last handler start), beside B's own.
//!
//! `--output json` prints one object (times in milliseconds): `mode` (`"fairness"`),
//! `executions` (tenant A's), `start_failures`, `workers`, `worker_concurrency`,
//! `task_delay_ms`, `tenant_b` (B's executions per phase); `idle` and `loaded`:
//! `{measured, p50_ms, p95_ms, max_ms}` of B's queue waits; `ratio_p95` and `ratio_p50`
//! (`loaded / idle`, null over 0); `a_queued_at_b` (A's tasks not yet started when B's
//! loaded phase began), `a_started_during_b`, `b_window_ms`.

mod report;

use super::args::BenchArgs;
use super::backlog;
use super::priority::step_scheduled_ms;
use orbit_api::v1 as pb;
use orbit_api::v1::workflow_service_client::WorkflowServiceClient;
use orbit_cli::client::Transport;
use orbit_server_kit::payload::json_to_proto;
use orbit_worker::{TaskContext, TaskFailure};
use report::{Phase, Report};
use serde_json::{json, Value};
use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Duration;
use tokio::sync::Semaphore;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

const WORKFLOW: &str = "name: bench-fair\nversion: \"1\"\nfairness:\n  key: \"${{ input.tenant }}\"\ntasks:\n  bench.step: {}\nsteps:\n  - { id: s1, task: bench.step, input: \"${{ input }}\" }\noutput: \"${{ steps.s1.output }}\"\n";

/// The longest one phase of tenant B may take: far beyond any figure worth reporting.
const PHASE_WITHIN: Duration = Duration::from_secs(300);

/// What the fairness run needs from `bench`.
pub struct Setup {
    pub channels: Vec<Transport>,
    /// The frontends the workers connect to.
    pub addresses: Vec<String>,
    /// Cancelled when the bench ends: stops the workers.
    pub stop: CancellationToken,
}

/// What the handlers saw.
#[derive(Default)]
struct Seen {
    /// Tenant-B tasks: execution id → wall-clock ms at the handler's start.
    b_started: Mutex<HashMap<String, u64>>,
    /// Tenant-A tasks that reached a handler, first deliveries and redeliveries alike.
    a_started: AtomicU64,
    a_finished: AtomicU64,
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

/// Runs the fairness mode (see the module docs).
pub async fn run(args: &BenchArgs, setup: Setup) -> anyhow::Result<()> {
    let Setup { channels, addresses, stop } = setup;
    let mut client = WorkflowServiceClient::new(channels[0].clone());
    client
        .register_workflow(pb::RegisterWorkflowRequest { document: WORKFLOW.into(), format: 0 })
        .await?;
    let seen = Arc::new(Seen::default());
    // Opened once tenant A is queued; a child of `stop`, so stopping opens it too.
    let gate = stop.child_token();
    let _open_on_error = gate.clone().drop_guard();
    start_workers(args, &addresses, &seen, &gate, &stop)?;

    // Unique per run, also against a cluster that keeps earlier runs' executions.
    let run_id = format!("{}-{}", std::process::id(), orbit_owner::system_clock());
    // Unmeasured: waits for the workers' sessions.
    tenant_b(args, &channels, &seen, &format!("fair-{run_id}-warm"), 1).await?;
    let idle = tenant_b(args, &channels, &seen, &format!("fair-{run_id}-i"), args.probes).await?;
    eprintln!("idle: {} tenant-B tasks measured", idle.measured);

    let (accepted, failed) = start_tenant_a(args, &channels, &run_id).await?;
    gate.cancel();
    let a_before = seen.a_started.load(Ordering::Relaxed);
    let began = Instant::now();
    let loaded = tenant_b(args, &channels, &seen, &format!("fair-{run_id}-l"), args.probes).await?;
    let b_window = began.elapsed();
    let a_during = seen.a_started.load(Ordering::Relaxed).saturating_sub(a_before);
    eprintln!(
        "loaded: {} tenant-B tasks measured behind {} queued tenant-A tasks; {a_during} of A's \
         started meanwhile",
        loaded.measured,
        accepted.saturating_sub(a_before)
    );
    backlog::drain(&seen.a_finished, accepted, "tenant-A tasks").await?;
    let report = Report {
        executions: accepted,
        start_failures: failed,
        tenant_b: args.probes,
        idle,
        loaded,
        a_queued_at_b: accepted.saturating_sub(a_before),
        a_started_during_b: a_during,
        b_window,
    };
    report::print(args, &report);
    Ok(())
}

fn start_workers(
    args: &BenchArgs,
    addresses: &[String],
    seen: &Arc<Seen>,
    gate: &CancellationToken,
    stop: &CancellationToken,
) -> anyhow::Result<()> {
    let delay = Duration::from_millis(args.task_delay_ms);
    for w in 0..args.workers {
        let (seen, gate) = (seen.clone(), gate.clone());
        let handler = move |ctx: TaskContext| {
            let (seen, gate) = (seen.clone(), gate.clone());
            async move {
                let wall = orbit_owner::system_clock();
                if ctx.input().get("tenant").and_then(Value::as_str) == Some("a") {
                    seen.a_started.fetch_add(1, Ordering::Relaxed);
                    gate.cancelled().await;
                    tokio::time::sleep(delay).await;
                    seen.a_finished.fetch_add(1, Ordering::Relaxed);
                } else {
                    lock(&seen.b_started).entry(ctx.execution_id().to_string()).or_insert(wall);
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

/// Starts `n` tenant-B executions at once (`--concurrency` calls in flight), waits for
/// each, and measures their tasks' queue waits.
async fn tenant_b(
    args: &BenchArgs,
    channels: &[Transport],
    seen: &Arc<Seen>,
    prefix: &str,
    n: u64,
) -> anyhow::Result<Phase> {
    let gate = Arc::new(Semaphore::new(args.shape().concurrency.max(1)));
    let mut handles = Vec::new();
    for i in 0..n {
        let permit = gate.clone().acquire_owned().await?;
        let mut client = WorkflowServiceClient::new(
            channels[usize::try_from(i).unwrap_or(0) % channels.len()].clone(),
        );
        let id = format!("{prefix}{i}");
        handles.push(tokio::spawn(async move {
            let request = pb::StartExecutionRequest {
                workflow: "bench-fair".into(),
                input: Some(json_to_proto(json!({ "tenant": "b", "n": i }))),
                execution_id: id.clone(),
                ..Default::default()
            };
            let started = client.start_execution(request).await;
            drop(permit);
            started?;
            let done = tokio::time::timeout(PHASE_WITHIN, super::completed(&mut client, &id)).await;
            anyhow::ensure!(
                matches!(done, Ok(true)),
                "tenant-B execution {id} did not complete within {PHASE_WITHIN:?}"
            );
            anyhow::Ok(id)
        }));
    }
    let mut phase = Phase::new()?;
    let mut client = WorkflowServiceClient::new(channels[0].clone());
    for h in handles {
        let id = h.await??;
        let wall = lock(&seen.b_started)
            .remove(&id)
            .ok_or_else(|| anyhow::anyhow!("{id} completed without its task reaching a handler"))?;
        let scheduled = step_scheduled_ms(&mut client, &id).await?;
        phase.record(wall.saturating_sub(scheduled));
    }
    Ok(phase)
}

/// Starts tenant A's executions, `--concurrency` calls in flight; (started, failed).
async fn start_tenant_a(
    args: &BenchArgs,
    channels: &[Transport],
    run_id: &str,
) -> anyhow::Result<(u64, u64)> {
    let shape = args.shape();
    let request = |i: u64| pb::StartExecutionRequest {
        workflow: "bench-fair".into(),
        input: Some(json_to_proto(json!({ "tenant": "a", "n": i }))),
        execution_id: format!("fair-{run_id}-a{i}"),
        ..Default::default()
    };
    let hooks = Arc::new(backlog::NoHooks);
    let what = "tenant-A executions";
    backlog::start(channels, shape.executions, shape.concurrency, what, request, hooks).await
}
