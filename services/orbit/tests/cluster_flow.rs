//! Flow control across the split (issue 27; docs/flow-control.md), through the real
//! binaries on PostgreSQL with 2 frontends and 2 owners, and workers in processes of their
//! own (this test binary run again as a worker, so a worker can be SIGKILLed):
//!
//! - a per-key limit: 2,000 executions over 20 keys with `concurrency: {limit: 1}`; one
//!   owner is SIGKILLed and one worker process is SIGKILLed in the middle. Every attempt's
//!   run is logged by the worker that runs it (start and end, wall clock), and a sampler
//!   reads the claimed rows every few milliseconds: no key ever has two attempts running,
//!   and all 2,000 complete with a clean replay;
//! - a rate limit: 1,000 steps under `rate_limit: {limit: 50, per: 10s}` across 2
//!   frontends: no aligned 10 s window (the database clock's, which the claims use) starts
//!   more than 50, and the run takes 20 windows ± 1.

// Tests read their environment and the wall clock (the workers' logs) directly.
#![allow(clippy::disallowed_methods)]

mod common;

use common::cluster::{check_all, psql, token, Topology, FAST};
use orbit_api::v1 as pb;
use serde_json::{json, Value};
use std::collections::BTreeMap;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

const SERIAL: &str = r#"
name: serial
version: "1"
tasks: { work: {} }
steps:
  - id: a
    task: work
    input: "${{ input }}"
    concurrency: { key: "${{ input.account }}", limit: 1 }
output: "${{ steps.a.output.n }}"
"#;

const METERED: &str = r#"
name: metered
version: "1"
tasks: { work: {} }
steps:
  - id: a
    task: work
    input: "${{ input }}"
    rate_limit: { limit: 50, per: 10s }
output: "${{ steps.a.output.n }}"
"#;

/// The variable that turns this test binary into a worker process (see `worker_process`).
const WORKER_ENV: &str = "ORBIT_FLOW_TEST_WORKER";

fn now_ns() -> u128 {
    SystemTime::now().duration_since(UNIX_EPOCH).map(|d| d.as_nanos()).unwrap_or(0)
}

/// Not a test of its own: when [`WORKER_ENV`] is set (by [`spawn_worker`]), this runs a
/// worker for task `work` until the process is killed, logging `start|end <account>
/// <execution> <ns>` per attempt to the file the variable names. Otherwise it returns.
#[test]
fn worker_process() {
    let Ok(config) = std::env::var(WORKER_ENV) else { return };
    let config: Value = serde_json::from_str(&config).expect("worker config");
    let text = |k: &str| config[k].as_str().expect(k).to_string();
    let log = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(text("log"))
        .expect("worker log");
    let log = std::sync::Arc::new(std::sync::Mutex::new(log));
    let certs = PathBuf::from(text("certs"));
    let tls = orbit_api::tls::ClientTls {
        ca: Some(certs.join("ca.pem")),
        cert: Some(certs.join("client.pem")),
        key: Some(certs.join("client-key.pem")),
    };
    let delay = Duration::from_millis(config["delay_ms"].as_u64().unwrap_or(5));
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("runtime");
    runtime
        .block_on(async move {
            let worker = orbit_worker::Worker::builder(text("endpoints"))
                .tls(tls)
                .bearer_token(text("token"))
                .worker_id(text("worker_id"))
                .max_concurrency(16)
                .reconnect_backoff(Duration::from_millis(50), Duration::from_millis(500))
                .task("work", "1", move |ctx: orbit_worker::TaskContext| {
                    let log = log.clone();
                    async move {
                        let account = ctx.input()["account"].as_str().unwrap_or("-").to_string();
                        let line = |what: &str| {
                            format!("{what} {account} {} {}\n", ctx.execution_id(), now_ns())
                        };
                        if let Ok(mut f) = log.lock() {
                            let _ = f.write_all(line("start").as_bytes());
                        }
                        tokio::time::sleep(delay).await;
                        if let Ok(mut f) = log.lock() {
                            let _ = f.write_all(line("end").as_bytes());
                        }
                        Ok::<Value, orbit_worker::TaskFailure>(ctx.input().clone())
                    }
                })
                .build()
                .expect("worker");
            worker.run(tokio_util::sync::CancellationToken::new()).await
        })
        .expect("worker run");
}

/// A worker process (this binary, [`worker_process`]) for `endpoints`, logging to `log`.
struct WorkerProcess(Child);

impl Drop for WorkerProcess {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

impl WorkerProcess {
    /// SIGKILL; returns when the process is gone, with the time it was killed.
    fn kill(&mut self) -> u128 {
        let at = now_ns();
        let _ = self.0.kill();
        let _ = self.0.wait();
        at
    }
}

fn spawn_worker(topo: &Topology, endpoints: &str, worker_id: &str, log: &Path) -> WorkerProcess {
    let certs = common::cluster::shared_tls().ca.expect("the topology's CA");
    let config = json!({
        "endpoints": endpoints,
        "worker_id": worker_id,
        "log": log,
        "certs": certs.parent().expect("certs dir"),
        "token": topo.token,
        "delay_ms": 5,
    });
    let child = Command::new(std::env::current_exe().expect("test binary"))
        .args(["--exact", "worker_process", "--nocapture", "--test-threads", "1"])
        .env(WORKER_ENV, config.to_string())
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("spawn the worker process");
    WorkerProcess(child)
}

/// One attempt's run as its worker logged it: (account, execution, start ns, end ns); an
/// attempt without an end (its worker was killed) ends at `killed_at`.
fn runs(logs: &[PathBuf], killed_at: u128) -> Vec<(String, String, u128, u128)> {
    let mut open: BTreeMap<(String, String), u128> = BTreeMap::new();
    let mut out = Vec::new();
    for log in logs {
        let text = std::fs::read_to_string(log).unwrap_or_default();
        for line in text.lines() {
            let f: Vec<&str> = line.split_whitespace().collect();
            let [what, account, execution, at] = f[..] else { continue };
            let at: u128 = at.parse().unwrap_or(0);
            let key = (account.to_string(), execution.to_string());
            match what {
                "start" => {
                    open.insert(key, at);
                }
                "end" => {
                    if let Some(start) = open.remove(&key) {
                        out.push((key.0, key.1, start, at));
                    }
                }
                _ => {}
            }
        }
    }
    out.extend(open.into_iter().map(|((a, e), s)| (a, e, s, killed_at)));
    out
}

/// The pairs of runs of one account that overlap in time.
fn overlaps(mut runs: Vec<(String, String, u128, u128)>) -> Vec<String> {
    runs.sort_by(|a, b| (&a.0, a.2).cmp(&(&b.0, b.2)));
    runs.windows(2)
        .filter(|w| w[0].0 == w[1].0 && w[1].2 < w[0].3)
        .map(|w| {
            format!(
                "{}: {} [{}, {}] and {} from {}",
                w[0].0, w[0].1, w[0].2, w[0].3, w[1].1, w[1].2
            )
        })
        .collect()
}

fn count(topo: &Topology, sql: &str) -> u64 {
    psql(topo, sql).first().and_then(|v| v.trim().parse().ok()).unwrap_or(0)
}

async fn start_all(
    topo: &Topology,
    workflow: &str,
    prefix: &str,
    n: usize,
    keys: usize,
) -> Vec<String> {
    let mut starters = tokio::task::JoinSet::new();
    const STARTERS: usize = 16;
    for s in 0..STARTERS {
        let mut c = topo.client(s % 2).await;
        let (workflow, prefix) = (workflow.to_string(), prefix.to_string());
        starters.spawn(async move {
            for i in (s..n).step_by(STARTERS) {
                let id = format!("{prefix}-{i:04}");
                let input = json!({"account": format!("acct-{:02}", i % keys), "n": i});
                common::start(&mut c, &workflow, &id, input).await.expect("start");
            }
        });
    }
    while let Some(done) = starters.join_next().await {
        done.expect("starter");
    }
    (0..n).map(|i| format!("{prefix}-{i:04}")).collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_per_key_limit_holds_through_an_owner_and_a_worker_kill() {
    const EXECUTIONS: usize = 2000;
    const KEYS: usize = 20;
    // A killed worker's attempts are handed back after the session timeout.
    let env = [("ORBIT_SESSION_TIMEOUT_MS", "3000")];
    let topo = Topology::start_env("flowkey", [2, 2, 1], "disable", FAST, &env);
    let mut c = topo.client(0).await;
    common::register(&mut c, SERIAL).await;
    let fe = topo.frontends();
    let dir = topo.dir.0.clone();
    let logs = [dir.join("worker-a.log"), dir.join("worker-b.log")];
    let mut worker_a = spawn_worker(&topo, &fe[0], "w-a", &logs[0]);
    let _worker_b = spawn_worker(&topo, &fe[1], "w-b", &logs[1]);

    // The sampler: never two claimed rows of one key in the database.
    let sampler_topo_url = topo.database_url.clone();
    let stop = tokio_util::sync::CancellationToken::new();
    let sampler = {
        let stop = stop.clone();
        tokio::spawn(async move {
            let (client, conn) = tokio_postgres::connect(&sampler_topo_url, tokio_postgres::NoTls)
                .await
                .expect("sampler connect");
            tokio::spawn(conn);
            let mut samples = 0u64;
            let mut seen = Vec::new();
            while !stop.is_cancelled() {
                let rows = client
                    .query(
                        "SELECT concurrency_key, count(*) FROM task_queue WHERE state = 'claimed' \
                         AND concurrency_key IS NOT NULL GROUP BY 1 HAVING count(*) > 1",
                        &[],
                    )
                    .await
                    .expect("sample");
                for r in rows {
                    seen.push(format!("{}: {}", r.get::<_, String>(0), r.get::<_, i64>(1)));
                }
                samples += 1;
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
            (samples, seen)
        })
    };

    let ids = start_all(&topo, "serial", "serial", EXECUTIONS, KEYS).await;
    let completed = || count(&topo, "SELECT count(*) FROM executions WHERE status = 'COMPLETED'");
    let deadline = Instant::now() + Duration::from_secs(600);
    while completed() < 500 {
        assert!(Instant::now() < deadline, "500 executions did not complete");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    topo.signal("owner-1", "KILL");
    while completed() < 1000 {
        assert!(Instant::now() < deadline, "1,000 executions did not complete");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let killed_at = worker_a.kill();
    while completed() < EXECUTIONS as u64 {
        assert!(
            Instant::now() < deadline,
            "{} of {EXECUTIONS} completed; by status: {:?}",
            completed(),
            psql(&topo, "SELECT status, count(*) FROM executions GROUP BY 1")
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    stop.cancel();
    let (samples, doubled) = sampler.await.expect("sampler");
    assert!(doubled.is_empty(), "a key had two claimed attempts: {doubled:?}");
    assert!(samples > 100, "the sampler ran {samples} times");

    let runs = runs(&logs, killed_at);
    assert!(runs.len() >= EXECUTIONS, "{} runs logged", runs.len());
    let bad = overlaps(runs.clone());
    assert!(bad.is_empty(), "two attempts of one key ran at once: {:?}", &bad[..bad.len().min(10)]);
    // The kill happened with attempts in flight: some ran twice (redelivered).
    let by_account = runs.iter().fold(BTreeMap::<&str, usize>::new(), |mut m, r| {
        *m.entry(r.0.as_str()).or_default() += 1;
        m
    });
    assert_eq!(by_account.len(), KEYS, "{by_account:?}");

    let def = orbit_definition::parse(SERIAL).expect("definition");
    check_all(&topo, &def, &ids, 1).await;
    let _ = token();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rate_limit_holds_across_two_frontends() {
    const STEPS: usize = 1000;
    // The claims' times are read back from the task rows: keep done rows. The dispatchers'
    // claims and recalls are logged, so a failed run's kept logs say why a window went
    // unused.
    let env =
        [("ORBIT_DONE_GRACE", "30m"), ("ORBIT_LOG", "info,orbit_frontend::worker::dispatch=debug")];
    let topo = Topology::start_env("flowrate", [2, 1, 1], "disable", FAST, &env);
    let mut c = topo.client(0).await;
    common::register(&mut c, METERED).await;
    let fe = topo.frontends();
    let dir = topo.dir.0.clone();
    let _a = spawn_worker(&topo, &fe[0], "w-a", &dir.join("worker-a.log"));
    let _b = spawn_worker(&topo, &fe[1], "w-b", &dir.join("worker-b.log"));
    let ids = start_all(&topo, "metered", "metered", STEPS, 10).await;
    // 20 windows of 10 s; bounded well beyond that for a busy machine.
    let deadline = Instant::now() + Duration::from_secs(400);
    let completed = || count(&topo, "SELECT count(*) FROM executions WHERE status = 'COMPLETED'");
    while completed() < STEPS as u64 {
        assert!(Instant::now() < deadline, "{} of {STEPS} completed", completed());
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    // Starts per aligned window, from the claims (database clock).
    let windows: Vec<(u64, u64)> = psql(
        &topo,
        "SELECT claimed_at / 10000, count(*) FROM task_queue WHERE claimed_at IS NOT NULL \
         GROUP BY 1 ORDER BY 1",
    )
    .iter()
    .filter_map(|l| {
        let f: Vec<&str> = l.split('|').map(str::trim).collect();
        Some((f.first()?.parse().ok()?, f.get(1)?.parse().ok()?))
    })
    .collect();
    let claims: u64 = windows.iter().map(|w| w.1).sum();
    assert_eq!(claims, STEPS as u64, "one claim per step (no worker was lost): {windows:?}");
    assert!(windows.iter().all(|w| w.1 <= 50), "a window started more than 50: {windows:?}");
    let span = windows.last().map_or(0, |l| l.0) - windows.first().map_or(0, |f| f.0) + 1;
    assert!((20..=21).contains(&span), "{span} windows for 1,000 starts at 50 each: {windows:?}");
    let full = windows.iter().filter(|w| w.1 == 50).count();
    assert!(full >= 18, "the limit was not used fully: {windows:?}");
    let def = orbit_definition::parse(METERED).expect("definition");
    check_all(&topo, &def, &ids, 1).await;
    let _ = pb::ExecutionStatus::Completed;
}
