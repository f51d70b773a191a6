//! Honest health on the split topology: while PostgreSQL is down every service's `/readyz`
//! answers 503 with the reason and its gRPC health says NOT_SERVING; both recover by
//! themselves once the database is back, and work runs again.
//!
//! The database is this test's own PostgreSQL (scripts/pg.sh in a temporary directory on
//! a free port, through the environment of this process), never a shared one: the test
//! stops it. So this binary holds a single test.

// Tests read their environment (ORBIT_PYTHON, the database URL) and the wall clock
// (unique names, deadlines of real processes) directly.
#![allow(clippy::disallowed_methods)]

mod common;

use common::admin;
use common::cluster::*;
use std::process::Command;
use std::time::{Duration, Instant};
use tonic_health::pb::health_check_response::ServingStatus;
use tonic_health::pb::health_client::HealthClient;
use tonic_health::pb::HealthCheckRequest;

/// The probes run every second with a 2 s timeout; the rest is room for a busy machine.
const PATIENCE: Duration = Duration::from_secs(60);

/// The test's own PostgreSQL; stopped and removed on drop.
struct OwnPostgres {
    dir: common::TempDir,
}

impl OwnPostgres {
    fn pg(&self, args: &[&str]) -> (bool, String, String) {
        let mut cmd = Command::new(repo().join("scripts/pg.sh"));
        cmd.args(args).env("ORBIT_PG_DIR", self.dir.0.join("pg"));
        common::run_bounded(&mut cmd, Duration::from_secs(180))
    }
}

impl Drop for OwnPostgres {
    fn drop(&mut self) {
        let _ = self.pg(&["stop", "--purge"]);
    }
}

/// Starts a PostgreSQL of this test and points this process's environment (read by
/// scripts/pg.sh, scripts/topology.sh and the cluster helpers) at it.
fn own_postgres() -> OwnPostgres {
    let port = common::free_port();
    let own = OwnPostgres { dir: common::TempDir::new("readiness-pg") };
    // Only this test runs in this binary, so nothing reads the environment meanwhile.
    std::env::set_var("ORBIT_PG_DIR", own.dir.0.join("pg"));
    std::env::set_var("ORBIT_PG_PORT", port.to_string());
    std::env::set_var(
        "ORBIT_TEST_DATABASE_URL",
        format!("postgres://postgres@127.0.0.1:{port}/postgres"),
    );
    let (ok, out, err) = own.pg(&["start"]);
    assert!(ok, "pg.sh start: {out}{err}");
    own
}

struct Probed {
    node_id: String,
    grpc: String,
    admin: String,
}

async fn health(topo: &Topology, addr: &str) -> Option<ServingStatus> {
    let endpoint = topo.tls().endpoint(addr).ok()?.connect_timeout(Duration::from_secs(5));
    let mut client = HealthClient::new(endpoint.connect().await.ok()?);
    let request = HealthCheckRequest { service: String::new() };
    let answer = tokio::time::timeout(Duration::from_secs(5), client.check(request)).await;
    ServingStatus::try_from(answer.ok()?.ok()?.into_inner().status).ok()
}

/// Waits until every node answers `/readyz` with `code` and gRPC health with `serving`;
/// returns the `/readyz` bodies and how long it took.
async fn until_all(
    topo: &Topology,
    nodes: &[Probed],
    code: u16,
    serving: ServingStatus,
) -> (Vec<String>, Duration) {
    let since = Instant::now();
    let mut bodies = Vec::new();
    for n in nodes {
        loop {
            let ready = admin::get(&n.admin, "/readyz").await;
            let h = health(topo, &n.grpc).await;
            if let (Some((c, body)), Some(h)) = (&ready, h) {
                if *c == code && h == serving {
                    bodies.push(body.clone());
                    break;
                }
            }
            assert!(
                since.elapsed() < PATIENCE,
                "{}: readyz {ready:?}, health {h:?}; wanted {code} {serving:?}",
                n.node_id
            );
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }
    (bodies, since.elapsed())
}

/// The `ready` column of `orbit cluster status --output json`, one per node.
fn cluster_status_ready(topo: &Topology) -> Vec<String> {
    let tls = topo.tls();
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_orbit"));
    cmd.args(["cluster", "status", "--output", "json", "--address", &topo.frontends()[0]]);
    for (var, path) in [
        ("ORBIT_TLS_CA", tls.ca),
        ("ORBIT_TLS_CLIENT_CERT", tls.cert),
        ("ORBIT_TLS_CLIENT_KEY", tls.key),
    ] {
        if let Some(p) = path {
            cmd.env(var, p);
        }
    }
    let (ok, out, err) = common::run_bounded(&mut cmd, Duration::from_secs(60));
    assert!(ok, "orbit cluster status: {out}{err}");
    let v: serde_json::Value = serde_json::from_str(&out).expect("json");
    v["nodes"]
        .as_array()
        .expect("nodes")
        .iter()
        .map(|n| n["ready"].as_str().unwrap_or_default().to_string())
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_service_reports_not_ready_while_postgres_is_down_and_recovers() {
    let pg = own_postgres();
    // A node timeout longer than the outage: membership is kept, the database decides.
    let topo = Topology::start(
        "readiness",
        1,
        1,
        1,
        &["--node-timeout-ms", "30000", "--heartbeat-ms", "250"],
    );
    let nodes: Vec<Probed> = topo
        .nodes
        .iter()
        .map(|n| Probed {
            node_id: n.node_id.clone(),
            grpc: n.addr.clone(),
            admin: admin::address_in(&topo.log(&n.node_id))
                .unwrap_or_else(|| panic!("{} printed no admin address", n.node_id)),
        })
        .collect();
    assert_eq!(nodes.len(), 3, "a frontend, an owner and a scheduler");
    until_all(&topo, &nodes, 200, ServingStatus::Serving).await;
    assert_eq!(cluster_status_ready(&topo), vec!["ready"; 3], "orbit cluster status");

    let (ok, out, err) = pg.pg(&["stop"]);
    assert!(ok, "pg.sh stop: {out}{err}");
    let (bodies, took) = until_all(&topo, &nodes, 503, ServingStatus::NotServing).await;
    eprintln!("every service not ready {took:?} after PostgreSQL stopped");
    for body in &bodies {
        let v: serde_json::Value = serde_json::from_str(body).expect("json reason");
        assert_eq!(v["status"], "not_ready", "{body}");
        assert_eq!(v["check"], "database", "{body}");
        assert!(!v["reason"].as_str().unwrap_or_default().is_empty(), "{body}");
    }
    // Alive all the same: liveness probes must not restart them for a database outage.
    for n in &nodes {
        assert_eq!(admin::get(&n.admin, "/healthz").await.map(|r| r.0), Some(200), "{}", n.node_id);
        assert!(topo.alive(&n.node_id), "{} exited", n.node_id);
    }

    let (ok, out, err) = pg.pg(&["start"]);
    assert!(ok, "pg.sh start: {out}{err}");
    let (_, took) = until_all(&topo, &nodes, 200, ServingStatus::Serving).await;
    eprintln!("every service ready again {took:?} after PostgreSQL started");
    assert_eq!(cluster_status_ready(&topo), vec!["ready"; 3], "orbit cluster status");

    // And work runs again end to end.
    let mut client = topo.client(0).await;
    common::register(&mut client, STEADY).await;
    let stop = tokio_util::sync::CancellationToken::new();
    load_worker(&topo.worker_endpoints(), "w-ready", 4, Duration::from_millis(10), &stop);
    let ids = start_steady(&mut [client.clone()], "after", 3).await;
    expect_completed(&mut client, &ids, PATIENCE).await;
    stop.cancel();
}
