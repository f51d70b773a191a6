//! `orbit bench`: N executions of a K-step workflow driven through the public API, with
//! in-process Rust workers over loopback gRPC; prints executions/s, tasks/s and latency
//! percentiles (end-to-end: start call → result seen by the client; dispatch: start call →
//! first task in a worker's hands). `--mode` names the workload of the issue 14 table
//! ([`args`]); `--database-url` adds the database's own transaction counts ([`db`]).
//! `--mode sleepers`, `--mode priority` and `--mode fairness` run flows of their own
//! ([`sleepers`], [`priority`], [`fairness`]). `--replay` replays the completed executions
//! against the server's decider afterwards ([`replay`]).

mod args;
mod backlog;
mod db;
mod fairness;
mod priority;
mod replay;
mod report;
mod sleepers;

pub use args::BenchArgs;

use crate::bench_server::Source;
use crate::dev;
use hdrhistogram::Histogram;
use orbit_api::v1 as pb;
use orbit_api::v1::workflow_service_client::WorkflowServiceClient;
use orbit_cli::client::{Auth, Transport};
use orbit_frontend::FrontendConfig;
use orbit_server_kit::payload::json_to_proto;
use orbit_worker::{TaskContext, TaskFailure, Worker};
use serde_json::{json, Value};
use std::collections::HashMap;
use std::process::ExitCode;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::sync::Semaphore;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;
use tonic::service::interceptor::InterceptedService;
use tonic::transport::Channel;

fn workflow(steps: u32) -> String {
    let mut doc =
        format!("name: bench-{steps}\nversion: \"1\"\ntasks:\n  bench.step: {{}}\nsteps:\n");
    for i in 1..=steps {
        let input = if i == 1 {
            "\"${{ input.n }}\"".to_string()
        } else {
            format!("\"${{{{ steps.s{}.output }}}}\"", i - 1)
        };
        doc.push_str(&format!("  - {{ id: s{i}, task: bench.step, input: {input} }}\n"));
    }
    doc.push_str(&format!("output: \"${{{{ steps.s{steps}.output }}}}\"\n"));
    doc
}

/// Runs the benchmark.
pub async fn run(args: BenchArgs) -> ExitCode {
    let _traces = match args.traces.init("orbit-bench") {
        Ok(guard) => guard,
        Err(code) => return code,
    };
    crate::logs::init("warn");
    match bench(args).await {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e:#}");
            ExitCode::from(4)
        }
    }
}

async fn bench(args: BenchArgs) -> anyhow::Result<()> {
    let shape = args.shape();
    let stop = CancellationToken::new();
    let tmp = std::env::temp_dir().join(format!("orbit-bench-{}", std::process::id()));
    let (addresses, server) = match &args.address {
        Some(a) => (
            a.split(',')
                .map(|s| s.trim().to_string())
                .filter(|s| !s.is_empty())
                .collect::<Vec<_>>(),
            None,
        ),
        None => {
            std::fs::create_dir_all(&tmp)?;
            let db = args.db.clone().unwrap_or_else(|| tmp.join("bench.db"));
            let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
            let addr = listener.local_addr()?;
            let s = stop.clone();
            let handle = tokio::spawn(async move {
                dev::serve(
                    &db,
                    listener,
                    s,
                    FrontendConfig::default(),
                    Default::default(),
                    3,
                    false,
                )
                .await
            });
            (vec![format!("http://{addr}")], Some(handle))
        }
    };
    anyhow::ensure!(!addresses.is_empty(), "--address names no server");
    anyhow::ensure!(
        args.workers > 0 || args.address.is_some(),
        "--workers 0 needs --address: the embedded server has no external workers"
    );
    let auth = Auth::bearer(args.token.as_deref()).map_err(anyhow::Error::msg)?;
    let mut channels = Vec::new();
    for a in &addresses {
        channels
            .push(InterceptedService::new(connect(a, &args.tls.options()).await?, auth.clone()));
    }
    if args.mode == Some(args::Mode::Sleepers) {
        let metrics = match (&args.address, &args.metrics) {
            (None, _) => Source::InProcess,
            (Some(_), Some(list)) => Source::Admin(
                list.split(',').map(|s| s.trim().to_string()).filter(|s| !s.is_empty()).collect(),
            ),
            (Some(_), None) => anyhow::bail!(
                "--mode sleepers with --address needs --metrics (the owner's admin port): \
                 completions are counted there"
            ),
        };
        let owner_pid =
            if args.address.is_some() { args.owner_pid } else { Some(std::process::id()) };
        let outcome = sleepers::run(&args, sleepers::Setup { channels, metrics, owner_pid }).await;
        stop.cancel();
        if let Some(s) = server {
            s.await??;
            let _ = std::fs::remove_dir_all(&tmp);
        }
        return outcome;
    }
    if args.mode == Some(args::Mode::Priority) {
        anyhow::ensure!(
            args.workers > 0,
            "--mode priority needs in-process workers (--workers 1 or more): it times each \
             task in its handler"
        );
        let setup = priority::Setup { channels, addresses, stop: stop.clone() };
        let outcome = priority::run(&args, setup).await;
        stop.cancel();
        if let Some(s) = server {
            s.await??;
            let _ = std::fs::remove_dir_all(&tmp);
        }
        return outcome;
    }
    if args.mode == Some(args::Mode::Fairness) {
        anyhow::ensure!(
            args.workers > 0,
            "--mode fairness needs in-process workers (--workers 1 or more): it times each \
             task in its handler"
        );
        let setup = fairness::Setup { channels, addresses, stop: stop.clone() };
        let outcome = fairness::run(&args, setup).await;
        stop.cancel();
        if let Some(s) = server {
            s.await??;
            let _ = std::fs::remove_dir_all(&tmp);
        }
        return outcome;
    }
    let mut client = WorkflowServiceClient::new(channels[0].clone());
    client
        .register_workflow(pb::RegisterWorkflowRequest {
            document: workflow(shape.steps),
            format: 0,
        })
        .await?;

    anyhow::ensure!(
        args.idle_seconds == 0 || (args.address.is_some() && args.database_url.is_some()),
        "--idle-seconds needs --address and --database-url: it reads the cluster's database"
    );
    let observer = match (&args.address, &args.database_url) {
        (Some(_), Some(url)) => Some(db::Observer::start(url).await?),
        _ => None,
    };
    let metrics = match (&args.address, &args.metrics) {
        (None, _) => Some(Source::InProcess),
        (Some(_), Some(list)) => Some(Source::Admin(
            list.split(',').map(|s| s.trim().to_string()).filter(|s| !s.is_empty()).collect(),
        )),
        (Some(_), None) => None,
    };
    let metrics_before = match &metrics {
        Some(source) => Some(source.read().await),
        None => None,
    };
    let starts: Arc<Mutex<HashMap<String, Instant>>> = Arc::new(Mutex::new(HashMap::new()));
    let dispatch = Arc::new(Mutex::new(Histogram::<u64>::new(3)?));
    let tasks_done = Arc::new(AtomicU64::new(0));
    for w in 0..args.workers {
        let (starts, dispatch, tasks_done) = (starts.clone(), dispatch.clone(), tasks_done.clone());
        let handler = move |ctx: TaskContext| {
            let (starts, dispatch, tasks_done) =
                (starts.clone(), dispatch.clone(), tasks_done.clone());
            async move {
                if ctx.step() == "s1" && ctx.attempt() == 1 {
                    let started =
                        starts.lock().ok().and_then(|m| m.get(ctx.execution_id()).copied());
                    if let (Some(t0), Ok(mut h)) = (started, dispatch.lock()) {
                        let _ =
                            h.record(u64::try_from(t0.elapsed().as_micros()).unwrap_or(u64::MAX));
                    }
                }
                tasks_done.fetch_add(1, Ordering::Relaxed);
                Ok::<Value, TaskFailure>(ctx.input().clone())
            }
        };
        let worker =
            worker_builder(&args, &addresses, w).task("bench.step", "1", handler).build()?;
        let s = stop.clone();
        tokio::spawn(async move { worker.run(s).await });
    }

    let e2e = Arc::new(Mutex::new(Histogram::<u64>::new(3)?));
    // The ids `--replay` replays afterwards.
    let completed: Arc<Mutex<Vec<String>>> = Arc::new(Mutex::new(Vec::new()));
    let failures = Arc::new(AtomicU64::new(0));
    let finished = Arc::new(AtomicU64::new(0));
    let gate = Arc::new(Semaphore::new(shape.concurrency.max(1)));
    let began = Instant::now();
    let progress = {
        let (finished, total) = (finished.clone(), shape.executions);
        tokio::spawn(async move {
            loop {
                tokio::time::sleep(Duration::from_millis(500)).await;
                let done = finished.load(Ordering::Relaxed);
                eprint!(
                    "\r  {done}/{total} executions ({:.0}%)",
                    done as f64 * 100.0 / total.max(1) as f64
                );
                if done >= total {
                    eprintln!();
                    break;
                }
            }
        })
    };
    let run_id = std::process::id();
    let mut handles = Vec::new();
    for i in 0..shape.executions {
        if args.rate > 0.0 {
            // Execution i starts at i / rate seconds: a fixed rate, not a burst after a stall.
            let due = began + Duration::from_secs_f64(i as f64 / args.rate);
            tokio::time::sleep_until(due).await;
        }
        let permit = gate.clone().acquire_owned().await?;
        let channel = &channels[usize::try_from(i).unwrap_or(0) % channels.len()];
        let mut client = WorkflowServiceClient::new(channel.clone());
        let (starts, e2e, failures, finished) =
            (starts.clone(), e2e.clone(), failures.clone(), finished.clone());
        let completed = args.replay.then(|| completed.clone());
        let workflow_name = format!("bench-{}", shape.steps);
        handles.push(tokio::spawn(async move {
            let id = format!("bench-{run_id}-{i}");
            let t0 = Instant::now();
            if let Ok(mut m) = starts.lock() {
                m.insert(id.clone(), t0);
            }
            let ok = one(&mut client, &workflow_name, &id, i).await;
            if ok {
                if let Ok(mut h) = e2e.lock() {
                    let _ = h.record(u64::try_from(t0.elapsed().as_micros()).unwrap_or(u64::MAX));
                }
                if let Some(Ok(mut c)) = completed.as_ref().map(|c| c.lock()) {
                    c.push(id.clone());
                }
            } else {
                failures.fetch_add(1, Ordering::Relaxed);
            }
            if let Ok(mut m) = starts.lock() {
                m.remove(&id);
            }
            finished.fetch_add(1, Ordering::Relaxed);
            drop(permit);
        }));
    }
    for h in handles {
        h.await?;
    }
    let elapsed = began.elapsed();
    let _ = progress.await;
    let transactions = match &observer {
        Some(o) => Some(o.run_counts().await?),
        None => None,
    };
    // External workers (`--workers 0`) are not counted here: every completed execution ran
    // `steps` tasks.
    let tasks = match args.workers {
        0 => {
            shape.executions.saturating_sub(failures.load(Ordering::Relaxed))
                * u64::from(shape.steps)
        }
        _ => tasks_done.load(Ordering::Relaxed),
    };
    let server_view = match (&metrics, &metrics_before) {
        (Some(source), Some(before)) => Some(source.read().await.since(before).report(tasks)),
        _ => None,
    };
    // The idle window runs with the benchmark's workers still connected (idle sessions are
    // part of an idle cluster's cost), before they are stopped below.
    let idle = match (&observer, args.idle_seconds) {
        (Some(o), n) if n > 0 => Some(o.idle(n).await?),
        _ => None,
    };
    // Before the embedded server stops: it answers the replays.
    let replayed = match args.replay {
        true => {
            let ids = completed.lock().map(|mut c| std::mem::take(&mut *c)).unwrap_or_default();
            Some(replay::run(channels[0].clone(), ids).await)
        }
        false => None,
    };
    stop.cancel();
    if let Some(s) = server {
        s.await??;
        let _ = std::fs::remove_dir_all(&tmp);
    }
    let measured = report::Measured {
        elapsed,
        tasks,
        failures: failures.load(Ordering::Relaxed),
        e2e: &e2e,
        dispatch: &dispatch,
    };
    let sections = report::Sections { transactions, idle, server_view, replay: replayed.as_ref() };
    report::report(&args, shape, measured, sections);
    match replayed {
        Some(r) if !r.clean() => anyhow::bail!(
            "the replay check failed: {} execution(s) diverged, {} could not be replayed",
            r.diverged.len(),
            r.failed.len()
        ),
        _ => Ok(()),
    }
}

/// In-process worker `w`: its frontend (`w % n`), TLS, token, id and capacity; the caller
/// adds its `bench.step` handler.
fn worker_builder(args: &BenchArgs, addresses: &[String], w: u32) -> orbit_worker::WorkerBuilder {
    let mut builder =
        Worker::builder(addresses[w as usize % addresses.len()].clone()).tls(args.tls.options());
    if let Some(token) = &args.token {
        builder = builder.bearer_token(token.clone());
    }
    builder.worker_id(format!("bench-{w}")).max_concurrency(args.worker_concurrency())
}

/// Starts one execution and waits for its result; true when it completed.
async fn one(
    client: &mut WorkflowServiceClient<Transport>,
    workflow: &str,
    id: &str,
    n: u64,
) -> bool {
    let start = pb::StartExecutionRequest {
        memo: None,
        workflow: workflow.into(),
        version: String::new(),
        input: Some(json_to_proto(json!({ "n": n }))),
        execution_id: id.into(),
        priority: 0,
    };
    if client.start_execution(start).await.is_err() {
        return false;
    }
    completed(client, id).await
}

/// Waits for execution `id`'s result; true when it completed.
async fn completed(client: &mut WorkflowServiceClient<Transport>, id: &str) -> bool {
    let watch = pb::WatchExecutionRequest {
        execution_id: id.into(),
        result_only: true,
        ..Default::default()
    };
    let Ok(stream) = client.watch_execution(watch).await else { return false };
    let mut stream = stream.into_inner();
    while let Ok(Some(msg)) = stream.message().await {
        if let Some(pb::watch_execution_response::Kind::Result(r)) = msg.kind {
            return r.status == pb::ExecutionStatus::Completed as i32;
        }
    }
    false
}

async fn connect(address: &str, tls: &orbit_api::tls::ClientTls) -> anyhow::Result<Channel> {
    let endpoint = tls.endpoint(address).map_err(anyhow::Error::msg)?;
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        match endpoint.connect().await {
            Ok(c) => return Ok(c),
            Err(e) if Instant::now() > deadline => return Err(e.into()),
            Err(_) => tokio::time::sleep(Duration::from_millis(50)).await,
        }
    }
}
