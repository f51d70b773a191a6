//! The production topology for end-to-end tests: `scripts/topology.sh` starts real `orbit
//! frontend|owner|scheduler` processes on loopback over a fresh PostgreSQL database; the test
//! kills, pauses and resumes them by pid and checks what the database holds afterwards.
//!
//! Secure by default, like the script: every service serves mutual TLS and enforces the
//! topology's identities file; the test's clients ([`Topology::client`]) present the client
//! certificate, which is the admin identity, and its load workers ([`load_worker`]) the
//! certificate AND the admin token (the token decides: the token path is exercised on every
//! worker call). The certificates and the token are made once per test process
//! ([`shared_tls`], [`shared_token`]) and shared by its topologies.
//!
//! PostgreSQL must be running (`scripts/pg.sh start`; `scripts/test.sh` does it): the
//! topology script would otherwise start it and stop it again with the topology.

// Tests read their environment (ORBIT_PYTHON, the database URL) and the wall clock
// (unique names, deadlines of real processes) directly.
#![allow(clippy::disallowed_methods)]

use super::TempDir;
use orbit_api::v1::workflow_service_client::WorkflowServiceClient;
use orbit_engine::event::Event;
use orbit_engine::HistoryEvent;
use orbit_store::roles::*;
use orbit_store::{PgOptions, PgStore};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};
use tonic::transport::Channel;

/// Flags every service of a test topology gets: short membership timeouts so takeovers
/// happen within a test's patience.
pub const FAST: &[&str] = &["--node-timeout-ms", "2000", "--heartbeat-ms", "250"];

/// The repository root.
pub fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// The CA and certificates every topology of this test process uses, generated once by
/// `topology.sh certs`; `None` until a topology started (plain-text harnesses, such as the
/// SQLite split's, never set it).
static CERTS: std::sync::OnceLock<PathBuf> = std::sync::OnceLock::new();

fn certs() -> &'static PathBuf {
    CERTS.get_or_init(|| {
        let dir = Path::new(env!("CARGO_TARGET_TMPDIR"))
            .join(format!("topology-certs-{}", std::process::id()));
        let mut cmd = Command::new(repo().join("scripts/topology.sh"));
        cmd.args(["certs", "--certs"]).arg(&dir);
        let (ok, out, err) = super::run_bounded(&mut cmd, Duration::from_secs(60));
        assert!(ok, "topology.sh certs failed:\n{out}\n{err}");
        dir
    })
}

/// The admin token of every topology of this test process (`ORBIT_TOPOLOGY_TOKEN` for
/// the script); `None` until a topology started.
pub fn shared_token() -> Option<&'static str> {
    CERTS.get().map(|_| token())
}

/// The admin token every topology of this test process runs with (known before one
/// starts, for flags and variables that name it).
pub fn token() -> &'static str {
    static TOKEN: std::sync::OnceLock<String> = std::sync::OnceLock::new();
    TOKEN.get_or_init(|| orbit_auth::token::new_token().expect("random token"))
}

/// What clients and workers of this process's topologies connect with: the CA and the
/// client certificate (the admin identity); plain text before any topology started.
pub fn shared_tls() -> orbit_api::tls::ClientTls {
    match CERTS.get() {
        None => orbit_api::tls::ClientTls::default(),
        Some(dir) => orbit_api::tls::ClientTls {
            ca: Some(dir.join("ca.pem")),
            cert: Some(dir.join("client.pem")),
            key: Some(dir.join("client-key.pem")),
        },
    }
}

/// One process of the topology.
#[derive(Debug, Clone)]
pub struct Node {
    pub service: String,
    pub node_id: String,
    pub pid: i32,
    pub addr: String,
    pub log: PathBuf,
}

/// A running topology; stopped (every process and the database) on drop.
pub struct Topology {
    pub dir: TempDir,
    pub nodes: Vec<Node>,
    pub database_url: String,
    pub admin_url: String,
    pub database: String,
    /// The admin token the script generated (`ORBIT_TOKEN` in its env file).
    pub token: String,
}

fn script(args: &[&str], dir: &Path) -> (bool, String, String) {
    let mut cmd = Command::new(repo().join("scripts/topology.sh"));
    cmd.args(args).args(["--dir"]).arg(dir);
    super::run_bounded(&mut cmd, Duration::from_secs(180))
}

fn pg_admin_url() -> String {
    std::env::var("ORBIT_TEST_DATABASE_URL").unwrap_or_else(|_| {
        panic!(
            "ORBIT_TEST_DATABASE_URL is not set: start PostgreSQL with `scripts/pg.sh start` and \
             `eval \"$(scripts/pg.sh env)\"` (scripts/test.sh does both)"
        )
    })
}

impl Topology {
    /// Starts `frontends` frontends, `owners` owners and 1 scheduler (or as many as
    /// `schedulers`) with `extra` flags for every service, on a database of its own.
    pub fn start(
        name: &str,
        frontends: u32,
        owners: u32,
        schedulers: u32,
        extra: &[&str],
    ) -> Topology {
        Topology::start_with(name, frontends, owners, schedulers, "disable", extra)
    }

    /// [`Topology::start`] with the services reaching PostgreSQL with `sslmode` (`disable`,
    /// `require` or `verify-full`).
    pub fn start_with(
        name: &str,
        frontends: u32,
        owners: u32,
        schedulers: u32,
        sslmode: &str,
        extra: &[&str],
    ) -> Topology {
        Topology::start_env(name, [frontends, owners, schedulers], sslmode, extra, &[])
    }

    /// [`Topology::start_with`] with `env` set for every service: how a test gives a
    /// variable (`ORBIT_*`) to the services that read it when the others have no such flag.
    pub fn start_env(
        name: &str,
        [frontends, owners, schedulers]: [u32; 3],
        sslmode: &str,
        extra: &[&str],
        env: &[(&str, &str)],
    ) -> Topology {
        let admin_url = pg_admin_url();
        let dir = TempDir::new(&format!("topo-{name}"));
        let database = format!("orbit_e2e_{name}_{}", std::process::id()).replace('-', "_");
        let (f, o, s) = (frontends.to_string(), owners.to_string(), schedulers.to_string());
        let mut cmd = Command::new(repo().join("scripts/topology.sh"));
        cmd.arg("start").arg("--dir").arg(&dir.0);
        cmd.args(["--database", &database, "--frontends", &f, "--owners", &o]);
        cmd.args(["--schedulers", &s, "--ports", "auto", "--bin", env!("CARGO_BIN_EXE_orbit")]);
        cmd.args(["--sslmode", sslmode, "--certs"]).arg(certs());
        cmd.env("ORBIT_TOPOLOGY_TOKEN", token());
        cmd.envs(env.iter().copied());
        cmd.arg("--").args(extra);
        let (ok, out, err) = super::run_bounded(&mut cmd, Duration::from_secs(300));
        assert!(ok, "topology.sh start failed:\n{out}\n{err}");
        let mut topo = Topology {
            nodes: Vec::new(),
            database_url: String::new(),
            admin_url,
            database,
            dir,
            token: String::new(),
        };
        topo.reload();
        assert_eq!(topo.token, token(), "the topology runs with identities and this token");
        topo
    }

    /// Re-reads the state files the script wrote.
    fn reload(&mut self) {
        let nodes = std::fs::read_to_string(self.dir.0.join("nodes")).expect("nodes file");
        self.nodes = nodes
            .lines()
            .filter_map(|l| {
                let f: Vec<&str> = l.split_whitespace().collect();
                (f.len() == 5).then(|| Node {
                    service: f[0].into(),
                    node_id: f[1].into(),
                    pid: f[2].parse().expect("pid"),
                    addr: f[3].into(),
                    log: PathBuf::from(f[4]),
                })
            })
            .collect();
        let env = std::fs::read_to_string(self.dir.0.join("env")).expect("env file");
        for line in env.lines() {
            if let Some(v) = line.strip_prefix("ORBIT_DATABASE_URL=") {
                self.database_url = v.trim_matches('\'').to_string();
            }
            if let Some(v) = line.strip_prefix("ORBIT_TOKEN=") {
                self.token = v.trim_matches('\'').to_string();
            }
        }
    }

    pub fn of(&self, service: &str) -> Vec<&Node> {
        self.nodes.iter().filter(|n| n.service == service).collect()
    }

    pub fn node(&self, node_id: &str) -> &Node {
        self.nodes
            .iter()
            .find(|n| n.node_id == node_id)
            .unwrap_or_else(|| panic!("no node {node_id}"))
    }

    /// `https://host:port` of every frontend.
    pub fn frontends(&self) -> Vec<String> {
        self.of("frontend").iter().map(|n| format!("https://{}", n.addr)).collect()
    }

    /// What clients and workers connect with (see [`shared_tls`]).
    pub fn tls(&self) -> orbit_api::tls::ClientTls {
        shared_tls()
    }

    /// The TLS and identities flags the script gave every service, for a process a test
    /// starts itself in the topology.
    pub fn service_flags(&self) -> Vec<String> {
        let c = |f: &str| certs().join(f).display().to_string();
        let ids = self.dir.0.join("identities.yaml").display().to_string();
        [
            ("--tls-cert", c("node.pem")),
            ("--tls-key", c("node-key.pem")),
            ("--tls-client-ca", c("ca.pem")),
            ("--tls-ca", c("ca.pem")),
            ("--tls-client-cert", c("node.pem")),
            ("--tls-client-key", c("node-key.pem")),
            ("--identities", ids),
        ]
        .into_iter()
        .flat_map(|(flag, value)| [flag.to_owned(), value])
        .collect()
    }

    /// The frontends as one comma-separated worker endpoint list.
    pub fn worker_endpoints(&self) -> String {
        self.of("frontend").iter().map(|n| n.addr.clone()).collect::<Vec<_>>().join(",")
    }

    pub async fn client(&self, i: usize) -> WorkflowServiceClient<Channel> {
        let addr = self.frontends()[i].clone();
        let endpoint = self.tls().endpoint(&addr).expect("frontend endpoint");
        WorkflowServiceClient::new(endpoint.connect().await.expect("connect to a frontend"))
    }

    /// Sends `signal` (e.g. "KILL", "STOP", "CONT") to a node's process.
    pub fn signal(&self, node_id: &str, signal: &str) {
        let pid = self.node(node_id).pid;
        let ok = Command::new("kill").args([&format!("-{signal}"), &pid.to_string()]).status();
        assert!(ok.is_ok_and(|s| s.success()), "kill -{signal} {pid} ({node_id})");
        if signal == "KILL" {
            // Reap the zombie if it is ours; it is the script's child, so just wait it out.
            let deadline = Instant::now() + Duration::from_secs(5);
            while self.alive(node_id) && Instant::now() < deadline {
                std::thread::sleep(Duration::from_millis(20));
            }
        }
    }

    /// Whether a node's process still runs.
    pub fn alive(&self, node_id: &str) -> bool {
        let pid = self.node(node_id).pid;
        let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
        // Field 3 is the state; `Z` (zombie) or a missing file is dead.
        !stat.is_empty() && stat.split_whitespace().nth(2) != Some("Z")
    }

    /// A node's log so far.
    pub fn log(&self, node_id: &str) -> String {
        std::fs::read_to_string(&self.node(node_id).log).unwrap_or_default()
    }

    /// A store over the topology's database, for checks.
    pub async fn store(&self) -> PgStore {
        PgStore::connect(&self.database_url, PgOptions { pool_size: 4, ..PgOptions::default() })
            .await
            .expect("connect to the topology's database")
    }
}

impl Drop for Topology {
    fn drop(&mut self) {
        let _ = script(&["stop"], &self.dir.0);
        // Only those the script left running (a paused node): a pid already gone may be
        // another process's by now.
        for n in self.nodes.iter().filter(|n| self.alive(&n.node_id)) {
            for signal in ["-CONT", "-KILL"] {
                let _ = Command::new("kill")
                    .args([signal, &n.pid.to_string()])
                    .stderr(Stdio::null())
                    .status();
            }
        }
        // A failed test keeps its logs (the temporary dir goes with `self.dir`): a flake on
        // a busy machine is explained from them, not reproduced by luck.
        if std::env::var_os("ORBIT_KEEP_LOGS").is_some() || std::thread::panicking() {
            let keep = std::env::temp_dir().join(format!("orbit-logs-{}", self.database));
            let _ = std::fs::create_dir_all(&keep);
            for n in &self.nodes {
                let _ = std::fs::copy(&n.log, keep.join(format!("{}.log", n.node_id)));
            }
            eprintln!("logs of the topology kept in {}", keep.display());
        }
        let _ = Command::new("psql")
            .arg(&self.admin_url)
            .args(["-qc", &format!("DROP DATABASE IF EXISTS \"{}\" WITH (FORCE)", self.database)])
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .status();
    }
}

/// Checks one execution's stored history: it replays through the current decider, and no
/// unit succeeded twice. Returns the number of successful units.
pub fn check_history(
    def: &orbit_definition::Definition,
    id: &str,
    history: &[HistoryEvent],
) -> usize {
    orbit_engine::replay::replay(def, history, &orbit_definition::Limits::default())
        .unwrap_or_else(|d| panic!("{id}: replay diverged: {d:?}"));
    let mut successes: BTreeMap<String, usize> = BTreeMap::new();
    for he in history {
        if let Event::StepSucceeded { step, .. } = &he.event {
            *successes.entry(step.clone()).or_default() += 1;
        }
    }
    assert!(successes.values().all(|n| *n == 1), "{id}: a result was applied twice: {successes:?}");
    successes.len()
}

/// Reads every history of `ids` (run 1) from the topology's database and checks each.
pub async fn check_all(
    topo: &Topology,
    def: &orbit_definition::Definition,
    ids: &[String],
    units: usize,
) {
    let store = topo.store().await;
    for id in ids {
        let history = store.load_history(id, 1).await.expect("load history");
        assert_eq!(check_history(def, id, &history), units, "{id}: successful units");
    }
}

/// Units of [`STEADY`] that succeed once each (a, nap, b, c: a sleep succeeds too).
pub const STEADY_UNITS: usize = 4;

/// A workflow with three task units and a durable sleep between the first two: long enough
/// to be caught in flight, short enough for a test. Its input is `{"n": <number>}` and its
/// output that number.
pub const STEADY: &str = r#"
name: steady
version: "1"
tasks: { work: {} }
steps:
  - { id: a, task: work, input: "${{ input.n }}" }
  - { id: nap, needs: [a], sleep: 300ms }
  - { id: b, needs: [nap], task: work, input: "${{ steps.a.output }}" }
  - { id: c, needs: [b], task: work, input: "${{ steps.b.output }}" }
output: "${{ steps.c.output }}"
"#;

/// What a load worker saw: (execution id, step, idempotency key, redelivery) per run.
pub type Runs = std::sync::Arc<std::sync::Mutex<Vec<(String, String, String, bool)>>>;

/// Runs a worker for `work` on `endpoints` (comma-separated) that echoes its input after
/// `delay`; returns the record of every task it ran. It connects with [`shared_tls`] and
/// [`shared_token`]: the topologies' client certificate and admin token, or plain text
/// without a token in a process that started none.
pub fn load_worker(
    endpoints: &str,
    worker_id: &str,
    concurrency: u32,
    delay: Duration,
    stop: &tokio_util::sync::CancellationToken,
) -> Runs {
    use orbit_worker::{TaskContext, TaskFailure, Worker};
    let runs: Runs = Runs::default();
    let seen = runs.clone();
    let mut builder = Worker::builder(endpoints.to_string()).tls(shared_tls());
    if let Some(token) = shared_token() {
        builder = builder.bearer_token(token);
    }
    let worker = builder
        .worker_id(worker_id)
        .max_concurrency(concurrency)
        .reconnect_backoff(Duration::from_millis(50), Duration::from_millis(500))
        .task("work", "1", move |ctx: TaskContext| {
            let seen = seen.clone();
            async move {
                tokio::time::sleep(delay).await;
                if let Ok(mut s) = seen.lock() {
                    s.push((
                        ctx.execution_id().to_string(),
                        ctx.step().to_string(),
                        ctx.idempotency_key().to_string(),
                        ctx.redelivery(),
                    ));
                }
                Ok::<serde_json::Value, TaskFailure>(ctx.input().clone())
            }
        })
        .build()
        .expect("worker");
    let stop = stop.clone();
    tokio::spawn(async move { worker.run(stop).await });
    runs
}

/// Starts `n` executions of `steady` named `<prefix>-<i>` (input `{"n": i}`) through the
/// given clients in turn.
pub async fn start_steady(
    clients: &mut [WorkflowServiceClient<Channel>],
    prefix: &str,
    n: usize,
) -> Vec<String> {
    let mut ids = Vec::new();
    for i in 0..n {
        let id = format!("{prefix}-{i}");
        let k = i % clients.len();
        super::start(&mut clients[k], "steady", &id, serde_json::json!({"n": i}))
            .await
            .unwrap_or_else(|e| panic!("start {id}: {e}"));
        ids.push(id);
    }
    ids
}

/// Waits for every execution to complete with its own index as output.
pub async fn expect_completed(
    client: &mut WorkflowServiceClient<Channel>,
    ids: &[String],
    within: Duration,
) {
    let deadline = tokio::time::Instant::now() + within;
    for (i, id) in ids.iter().enumerate() {
        let left = deadline.saturating_duration_since(tokio::time::Instant::now());
        let (status, output) = super::result(client, id, left.max(Duration::from_secs(1))).await;
        assert_eq!(status, orbit_api::v1::ExecutionStatus::Completed, "{id}: {output}");
        assert_eq!(output, serde_json::json!(i), "{id}");
    }
}

/// The topology's database sessions that are inside a transaction or waiting for a lock,
/// one line each (who, state, what it waits for, for how long, its last statement): what a
/// stalled takeover or commit is waiting behind.
pub fn sessions_in_transaction(topo: &Topology) -> Vec<String> {
    psql(
        topo,
        &format!(
            "SELECT application_name, pid, state, coalesce(wait_event_type || ':' || \
             wait_event, '-'), now() - state_change, pg_blocking_pids(pid), \
             left(regexp_replace(query, '\\s+', ' ', 'g'), 90) FROM pg_stat_activity \
             WHERE datname = '{}' AND (state LIKE '%transaction%' OR wait_event_type = 'Lock') \
             ORDER BY application_name, pid",
            topo.database
        ),
    )
}

/// Runs a SQL query with psql on the topology's database; rows as `|`-separated lines.
pub fn psql(topo: &Topology, sql: &str) -> Vec<String> {
    let (ok, out, err) = super::run_bounded(
        Command::new("psql").arg(&topo.database_url).args(["-qtAc", sql]),
        Duration::from_secs(30),
    );
    assert!(ok, "psql {sql}: {err}");
    out.lines().filter(|l| !l.is_empty()).map(str::to_string).collect()
}
