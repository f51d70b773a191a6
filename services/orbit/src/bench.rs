//! `orbit bench`: N executions of a K-step workflow driven through the public API, with
//! in-process Rust workers over loopback gRPC; prints executions/s, tasks/s and latency
//! percentiles (end-to-end: start call → result seen by the client; dispatch: start call →
//! first task in a worker's hands).

use crate::bench_server::Source;
use crate::client::{Auth, Transport};
use crate::dev;
use hdrhistogram::Histogram;
use orbit_api::v1 as pb;
use orbit_api::v1::workflow_service_client::WorkflowServiceClient;
use orbit_frontend::FrontendConfig;
use orbit_server_kit::payload::json_to_proto;
use orbit_worker::{TaskContext, TaskFailure, Worker};
use serde_json::{json, Value};
use std::collections::HashMap;
use std::process::ExitCode;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tokio::sync::Semaphore;
use tokio_util::sync::CancellationToken;
use tonic::service::interceptor::InterceptedService;
use tonic::transport::Channel;

/// Options of `orbit bench`.
#[derive(clap::Args, Debug, Clone)]
#[command(
    after_help = "Example:\n  orbit bench --executions 2000 --steps 3 --concurrency 64\n  orbit bench --address http://127.0.0.1:7233   # against a running server\n  orbit bench --address 127.0.0.1:7233 --workers 0   # external workers serve bench.step (per-SDK figures)\n  orbit bench --address localhost:7233 --tls-ca ca.pem --token \"$ADMIN_TOKEN\"   # with TLS and identities"
)]
pub struct BenchArgs {
    /// Executions to run.
    #[arg(long, default_value_t = 2000)]
    pub executions: u64,
    /// Sequential task steps per execution.
    #[arg(long, default_value_t = 3)]
    pub steps: u32,
    /// Executions in flight at once.
    #[arg(long, default_value_t = 64)]
    pub concurrency: usize,
    /// Start executions at this fixed rate (per second) instead of as fast as the
    /// concurrency allows; for soak runs (see scripts/soak.sh). 0: no pacing.
    #[arg(long, env = "ORBIT_BENCH_RATE", default_value_t = 0.0)]
    pub rate: f64,
    /// Worker processes' worth of sessions (each one stream). 0 (only with `--address`):
    /// no in-process workers; external worker processes serve `bench.step` (version "1",
    /// returning its input), so the figures are those of those workers, e.g. one SDK's
    /// conformance worker (sdks/conformance/README.md). Tasks are then counted from the
    /// completed executions and the dispatch latency is not measured.
    #[arg(long, default_value_t = 2)]
    pub workers: u32,
    /// Tasks each worker runs at once.
    #[arg(long, default_value_t = 64)]
    pub worker_concurrency: u32,
    /// Benchmark a running server instead of starting an embedded one. Several frontends
    /// (comma-separated) share the load: worker `w` and execution `i` use frontend `w % n`
    /// and `i % n`.
    #[arg(long)]
    pub address: Option<String>,
    /// With `--address`: the cluster's PostgreSQL URL, to count the database transactions per
    /// completed task (read from the database's own counters before and after the run).
    #[arg(long, env = "ORBIT_DATABASE_URL")]
    pub database_url: Option<String>,
    /// SQLite file of the embedded server (a fresh temporary file by default).
    #[arg(long)]
    pub db: Option<std::path::PathBuf>,
    /// `human` or `json`.
    #[arg(long, default_value = "human")]
    pub output: String,
    /// With `--address`: a bearer token for a server that enforces an identities file
    /// (docs/security.md), sent by the benchmark's calls and by its workers; the identity
    /// needs `register`, `start` and `read` and may run workers, e.g. an `admin`.
    #[arg(long, env = "ORBIT_TOKEN", hide_env_values = true, value_name = "TOKEN")]
    pub token: Option<String>,
    /// With `--address`: the servers' admin ports (`host:port`, comma-separated), whose
    /// `/metrics` give the server-side view at the end (backlog, schedule-to-start p99,
    /// commit latency). The embedded server is read in process.
    /// Example: --metrics 127.0.0.1:9233,127.0.0.1:9234
    #[arg(long, env = "ORBIT_BENCH_METRICS", value_name = "HOST:PORT,...")]
    pub metrics: Option<String>,
    /// With `--address`: TLS to the running server.
    #[command(flatten)]
    pub tls: crate::tls_args::ClientTlsArgs,
    /// Traces of the embedded server and the benchmark's workers (to measure their cost).
    #[command(flatten)]
    pub traces: crate::trace_args::TraceArgs,
}

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
    dev::init_logs("warn");
    match bench(args).await {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e:#}");
            ExitCode::from(4)
        }
    }
}

async fn bench(args: BenchArgs) -> anyhow::Result<()> {
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
    let mut client = WorkflowServiceClient::new(channels[0].clone());
    client
        .register_workflow(pb::RegisterWorkflowRequest {
            document: workflow(args.steps),
            format: 0,
        })
        .await?;

    let db = match (&args.address, &args.database_url) {
        (Some(_), Some(url)) => {
            let opts = orbit_store::PgOptions { pool_size: 1, ..orbit_store::PgOptions::default() };
            Some(orbit_store::PgStore::connect(url, opts).await?)
        }
        _ => None,
    };
    let before = match &db {
        Some(db) => Some(db.database_stats().await?),
        None => None,
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
        let mut builder = Worker::builder(addresses[w as usize % addresses.len()].clone())
            .tls(args.tls.options());
        if let Some(token) = &args.token {
            builder = builder.bearer_token(token.clone());
        }
        let worker = builder
            .worker_id(format!("bench-{w}"))
            .max_concurrency(args.worker_concurrency)
            .task("bench.step", "1", handler)
            .build()?;
        let s = stop.clone();
        tokio::spawn(async move { worker.run(s).await });
    }

    let e2e = Arc::new(Mutex::new(Histogram::<u64>::new(3)?));
    let failures = Arc::new(AtomicU64::new(0));
    let finished = Arc::new(AtomicU64::new(0));
    let gate = Arc::new(Semaphore::new(args.concurrency.max(1)));
    let began = Instant::now();
    let progress = {
        let (finished, total) = (finished.clone(), args.executions);
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
    for i in 0..args.executions {
        if args.rate > 0.0 {
            // Execution i starts at i / rate seconds: a fixed rate, not a burst after a stall.
            let due = began + Duration::from_secs_f64(i as f64 / args.rate);
            tokio::time::sleep_until(due.into()).await;
        }
        let permit = gate.clone().acquire_owned().await?;
        let channel = &channels[usize::try_from(i).unwrap_or(0) % channels.len()];
        let mut client = WorkflowServiceClient::new(channel.clone());
        let (starts, e2e, failures, finished) =
            (starts.clone(), e2e.clone(), failures.clone(), finished.clone());
        let workflow_name = format!("bench-{}", args.steps);
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
    let transactions = match (&db, before) {
        (Some(db), Some(before)) => {
            // The server publishes commit counts with a delay of up to a second.
            tokio::time::sleep(Duration::from_millis(1500)).await;
            let after = db.database_stats().await?;
            Some((
                after.write_transactions.saturating_sub(before.write_transactions + 1),
                after.commits.saturating_sub(before.commits + 1),
            ))
        }
        _ => None,
    };
    let server_view = match (&metrics, &metrics_before) {
        (Some(source), Some(before)) => Some(source.read().await.since(before).report()),
        _ => None,
    };
    stop.cancel();
    if let Some(s) = server {
        s.await??;
        let _ = std::fs::remove_dir_all(&tmp);
    }
    // External workers (`--workers 0`) are not counted here: every completed execution ran
    // `steps` tasks.
    let tasks = match args.workers {
        0 => {
            args.executions.saturating_sub(failures.load(Ordering::Relaxed)) * u64::from(args.steps)
        }
        _ => tasks_done.load(Ordering::Relaxed),
    };
    report(
        &args,
        elapsed,
        tasks,
        failures.load(Ordering::Relaxed),
        &e2e,
        &dispatch,
        Sections { transactions, server_view },
    );
    Ok(())
}

/// Starts one execution and waits for its result; true when it completed.
async fn one(
    client: &mut WorkflowServiceClient<Transport>,
    workflow: &str,
    id: &str,
    n: u64,
) -> bool {
    let start = pb::StartExecutionRequest {
        workflow: workflow.into(),
        version: String::new(),
        input: Some(json_to_proto(json!({ "n": n }))),
        execution_id: id.into(),
    };
    if client.start_execution(start).await.is_err() {
        return false;
    }
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

/// The optional parts of the report.
struct Sections {
    /// Write transactions and commits counted by PostgreSQL (`--database-url`).
    transactions: Option<(u64, u64)>,
    /// The servers' own view ([`crate::bench_server`]): the line and its JSON.
    server_view: Option<(String, Value)>,
}

fn report(
    args: &BenchArgs,
    elapsed: Duration,
    tasks: u64,
    failures: u64,
    e2e: &Mutex<Histogram<u64>>,
    dispatch: &Mutex<Histogram<u64>>,
    sections: Sections,
) {
    let Sections { transactions, server_view } = sections;
    let secs = elapsed.as_secs_f64().max(1e-9);
    let pct = |h: &Mutex<Histogram<u64>>, q: f64| {
        h.lock().map_or(0.0, |h| h.value_at_quantile(q) as f64 / 1000.0)
    };
    let per_task = |n: u64| n as f64 / tasks.max(1) as f64;
    let mut out = json!({
        "executions": args.executions,
        "steps": args.steps,
        "concurrency": args.concurrency,
        "failures": failures,
        "seconds": secs,
        "executions_per_s": args.executions as f64 / secs,
        "tasks_per_s": tasks as f64 / secs,
        "e2e_ms": { "p50": pct(e2e, 0.5), "p95": pct(e2e, 0.95), "p99": pct(e2e, 0.99) },
        "dispatch_ms": { "p50": pct(dispatch, 0.5), "p95": pct(dispatch, 0.95), "p99": pct(dispatch, 0.99) },
    });
    if let Some((writes, commits)) = transactions {
        out["database"] = json!({
            "write_transactions": writes,
            "write_transactions_per_task": per_task(writes),
            "commits": commits,
            "commits_per_task": per_task(commits),
        });
    }
    if let Some((_, json)) = &server_view {
        out["server"] = json.clone();
    }
    if args.output == "json" {
        println!("{out}");
        return;
    }
    println!(
        "orbit bench: {} executions x {} steps, {} in flight, {} failed",
        args.executions, args.steps, args.concurrency, failures
    );
    println!(
        "  throughput   {:>9.1} executions/s   {:>9.1} tasks/s   ({secs:.2} s)",
        out["executions_per_s"].as_f64().unwrap_or(0.0),
        out["tasks_per_s"].as_f64().unwrap_or(0.0)
    );
    println!(
        "  end-to-end   p50 {:>7.2} ms   p95 {:>7.2} ms   p99 {:>7.2} ms",
        pct(e2e, 0.5),
        pct(e2e, 0.95),
        pct(e2e, 0.99)
    );
    if args.workers > 0 {
        println!(
            "  dispatch     p50 {:>7.2} ms   p95 {:>7.2} ms   p99 {:>7.2} ms",
            pct(dispatch, 0.5),
            pct(dispatch, 0.95),
            pct(dispatch, 0.99)
        );
    } else {
        println!("  dispatch     not measured (external workers)");
    }
    if let Some((writes, commits)) = transactions {
        println!(
            "  database     {writes} write transactions ({:.2} per task), {commits} commits with reads ({:.2} per task)",
            per_task(writes),
            per_task(commits)
        );
    }
    if let Some((text, _)) = &server_view {
        println!("{text}");
    }
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
