//! The admin port of `orbit dev` end to end: a real Prometheus server (Debian's
//! `prometheus` package; scripts/test.sh installs it) scrapes `/metrics` while executions
//! run, and PromQL over its HTTP API sees them; `/readyz` and gRPC health follow the
//! schema check (a database migrated by a newer binary is not ready).

// Tests read their environment (ORBIT_PYTHON, the database URL) and the wall clock
// (unique names, deadlines of real processes) directly.
#![allow(clippy::disallowed_methods)]

mod common;

use common::admin;
use common::scenario::worker;
use common::*;
use serde_json::{json, Value};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};
use tokio_util::sync::CancellationToken;
use tonic_health::pb::health_check_response::ServingStatus;
use tonic_health::pb::health_client::HealthClient;
use tonic_health::pb::HealthCheckRequest;

const RUNS: usize = 5;
/// Generous on a busy 2-core machine: Prometheus scrapes every second.
const PATIENCE: Duration = Duration::from_secs(90);

/// The Prometheus binary: on PATH, where Debian's package puts it.
fn prometheus_bin() -> std::path::PathBuf {
    let path = std::env::var_os("PATH").unwrap_or_default();
    std::env::split_paths(&path).map(|d| d.join("prometheus")).find(|p| p.is_file()).unwrap_or_else(
        || panic!("no `prometheus` on PATH: apt-get install prometheus (scripts/test.sh does)"),
    )
}

struct Prometheus {
    child: Child,
    addr: String,
}

impl Drop for Prometheus {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Prometheus {
    /// Starts Prometheus scraping `target` (`host:port`) every second.
    async fn start(dir: &std::path::Path, target: &str) -> Prometheus {
        let config = dir.join("prometheus.yml");
        std::fs::write(
            &config,
            format!(
                "global:\n  scrape_interval: 1s\n  evaluation_interval: 1s\n\
                 scrape_configs:\n  - job_name: orbit\n    static_configs:\n      - targets: ['{target}']\n"
            ),
        )
        .expect("prometheus config");
        let addr = format!("127.0.0.1:{}", free_port());
        let child = Command::new(prometheus_bin())
            .arg(format!("--config.file={}", config.display()))
            .arg(format!("--storage.tsdb.path={}", dir.join("tsdb").display()))
            .arg(format!("--web.listen-address={addr}"))
            .arg("--log.level=warn")
            .stdout(Stdio::null())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("spawn prometheus");
        let p = Prometheus { child, addr };
        let deadline = Instant::now() + PATIENCE;
        while !matches!(admin::get(&p.addr, "/-/ready").await, Some((200, _))) {
            assert!(Instant::now() < deadline, "prometheus did not become ready");
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
        p
    }

    /// The instant vector of `promql`: (labels, value) per series.
    async fn query(&self, promql: &str) -> Vec<(Value, f64)> {
        let path = format!("/api/v1/query?query={}", admin::encode(promql));
        let Some((200, body)) = admin::get(&self.addr, &path).await else { return vec![] };
        let v: Value = serde_json::from_str(&body).unwrap_or(Value::Null);
        assert_eq!(v["status"], "success", "{body}");
        v["data"]["result"]
            .as_array()
            .cloned()
            .unwrap_or_default()
            .into_iter()
            .map(|s| {
                let value = s["value"][1].as_str().and_then(|x| x.parse().ok()).unwrap_or(f64::NAN);
                (s["metric"].clone(), value)
            })
            .collect()
    }

    /// Polls `promql` until `done` holds for its result (bounded).
    async fn until(
        &self,
        promql: &str,
        done: impl Fn(&[(Value, f64)]) -> bool,
    ) -> Vec<(Value, f64)> {
        let deadline = Instant::now() + PATIENCE;
        loop {
            let found = self.query(promql).await;
            if done(&found) {
                return found;
            }
            assert!(Instant::now() < deadline, "`{promql}` never held; last: {found:?}");
            tokio::time::sleep(Duration::from_millis(500)).await;
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn prometheus_scrapes_orbit_dev_and_promql_sees_the_runs() {
    let dir = TempDir::new("metrics-prom");
    let admin_addr = format!("127.0.0.1:{}", free_port());
    let server =
        Server::start(&dir.0.join("orbit.db"), &["--admin-listen", admin_addr.as_str()]).await;

    // The admin port's own endpoints.
    let (status, body) = admin::get(&admin_addr, "/healthz").await.expect("healthz");
    assert_eq!((status, body.trim()), (200, r#"{"status":"ok"}"#));
    let deadline = Instant::now() + PATIENCE;
    loop {
        match admin::get(&admin_addr, "/readyz").await {
            Some((200, body)) => {
                assert!(body.contains("ready"), "{body}");
                break;
            }
            other => assert!(Instant::now() < deadline, "never ready: {other:?}"),
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }

    let prometheus = Prometheus::start(&dir.0, &admin_addr).await;
    let mut c = server.client().await;
    register_example(&mut c, "hello.yaml").await;
    let stop = CancellationToken::new();
    worker(&server.address(), "metrics", &stop);
    for i in 0..RUNS {
        let id = format!("prom-{i}");
        start(&mut c, "hello", &id, json!({"name": format!("n{i}")})).await.expect("start");
        let (status, _) = result(&mut c, &id, PATIENCE).await;
        assert_eq!(status, orbit_api::v1::ExecutionStatus::Completed);
    }

    // The executions this test completed, as Prometheus stored them from the scrapes.
    let want = RUNS as f64;
    let closed = prometheus
        .until(
            r#"sum(orbit_executions_closed_total{job="orbit",workflow="hello",status="COMPLETED"})"#,
            |r| r.first().is_some_and(|(_, v)| *v >= want),
        )
        .await;
    assert_eq!(closed[0].1, want, "exactly the runs of this test: {closed:?}");
    let started =
        prometheus.query(r#"sum(orbit_executions_started_total{workflow="hello"})"#).await;
    assert_eq!(started.first().map(|s| s.1), Some(want), "{started:?}");

    // A non-empty schedule-to-start histogram for the task: buckets, a count of one
    // observation per attempt, and a p99 PromQL can compute.
    let buckets = prometheus
        .until(r#"orbit_task_schedule_to_start_seconds_bucket{task="greet"}"#, |r| {
            r.iter().any(|(m, v)| m["le"] == "+Inf" && *v >= want)
        })
        .await;
    assert!(buckets.len() > 2, "one series per bucket: {buckets:?}");
    let count =
        prometheus.query(r#"orbit_task_schedule_to_start_seconds_count{task="greet"}"#).await;
    assert_eq!(count.first().map(|s| s.1), Some(want), "{count:?}");
    let p99 = prometheus
        .until(
            r#"histogram_quantile(0.99, sum by (le) (orbit_task_schedule_to_start_seconds_bucket{task="greet"}))"#,
            |r| r.first().is_some_and(|(_, v)| v.is_finite()),
        )
        .await;
    assert!(p99[0].1 >= 0.0, "{p99:?}");

    // The gRPC layer counted the starts by method and code.
    let starts = prometheus
        .until(
            r#"orbit_grpc_requests_total{method="orbit.v1.WorkflowService/StartExecution",code="OK"}"#,
            |r| r.first().is_some_and(|(_, v)| *v >= want),
        )
        .await;
    assert_eq!(starts[0].1, want);
    let dispatched = prometheus.query(r#"orbit_tasks_dispatched_total{task="greet"}"#).await;
    assert_eq!(dispatched.first().map(|s| s.1), Some(want), "{dispatched:?}");
    let completed = prometheus.query(r#"orbit_tasks_completed_total{task="greet"}"#).await;
    assert_eq!(completed.first().map(|s| s.1), Some(want), "{completed:?}");

    // No label carries an execution id.
    let (_, text) = admin::get(&admin_addr, "/metrics").await.expect("metrics");
    assert!(!text.contains("prom-0"), "an execution id leaked into a label");

    // One start at a time against a waiting worker: the owner hands the task straight to its
    // session in the commit that queues it (issue 14); at least every run after the first
    // (whose start may come before the worker's first claim), counted among the dispatches.
    let handed = text
        .lines()
        .find_map(|l| l.strip_prefix(r#"orbit_tasks_handed_off_total{task="greet"} "#))
        .and_then(|v| v.trim().parse::<f64>().ok())
        .unwrap_or(0.0);
    assert!((want - 1.0..=want).contains(&handed), "handed off {handed} of {want}: {text}");
    stop.cancel();
}

async fn health(address: &str) -> Option<ServingStatus> {
    let channel = tonic::transport::Endpoint::from_shared(address.to_string()).ok()?;
    let mut client = HealthClient::new(channel.connect().await.ok()?);
    let r = client.check(HealthCheckRequest { service: String::new() }).await.ok()?;
    ServingStatus::try_from(r.into_inner().status).ok()
}

/// Waits (bounded) until `/readyz` answers `code` and gRPC health says `serving`.
async fn until_ready_is(admin_addr: &str, grpc: &str, code: u16, serving: ServingStatus) -> String {
    let deadline = Instant::now() + PATIENCE;
    loop {
        let ready = admin::get(admin_addr, "/readyz").await;
        let h = health(grpc).await;
        if let (Some((c, body)), Some(h)) = (&ready, h) {
            if *c == code && h == serving {
                return body.clone();
            }
        }
        assert!(
            Instant::now() < deadline,
            "readyz {ready:?}, health {h:?}; wanted {code} {serving:?}"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn readiness_follows_the_schema_and_grpc_health_follows_readiness() {
    let dir = TempDir::new("metrics-ready");
    let db = dir.0.join("orbit.db");
    let admin_addr = format!("127.0.0.1:{}", free_port());
    let server = Server::start(&db, &["--admin-listen", admin_addr.as_str()]).await;
    let grpc = server.address();
    until_ready_is(&admin_addr, &grpc, 200, ServingStatus::Serving).await;

    // A newer binary migrated this database: this one must not serve work from it.
    let conn = rusqlite::Connection::open(&db).expect("open db");
    conn.execute(
        "INSERT INTO schema_migrations (version, name, applied_at) VALUES (999, 'future', 0)",
        [],
    )
    .expect("insert future migration");
    let body = until_ready_is(&admin_addr, &grpc, 503, ServingStatus::NotServing).await;
    let reason: Value = serde_json::from_str(&body).expect("json reason");
    assert_eq!(reason["status"], "not_ready", "{body}");
    assert_eq!(reason["check"], "database", "{body}");
    assert!(reason["reason"].as_str().unwrap_or_default().contains("999"), "{body}");
    // Liveness is not readiness: the process still runs.
    assert_eq!(admin::get(&admin_addr, "/healthz").await.map(|r| r.0), Some(200));

    conn.execute("DELETE FROM schema_migrations WHERE version = 999", []).expect("delete");
    until_ready_is(&admin_addr, &grpc, 200, ServingStatus::Serving).await;
    let (_, text) = admin::get(&admin_addr, "/metrics").await.expect("metrics");
    assert!(text.contains("orbit_ready 1"), "{text}");
}
