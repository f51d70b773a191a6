//! The idle cost of the split topology on PostgreSQL (issue 14 item 3): with nothing to do,
//! a cluster of 1 frontend, 1 owner and 1 scheduler with idle worker sessions connected
//! makes about one transaction per node per heartbeat (the membership beat, which reads
//! the live nodes in the same statement) and nothing else but slow safety nets.
//!
//! Counted with PostgreSQL's own counter (`pg_stat_database.xact_commit` of the topology's
//! database, read from another database so the reads do not count), over a window that
//! starts after the run settled: the count does not depend on how fast the machine is.
//! The bound is generous (3 transactions per node per second): before issue 14 the same
//! cluster made 25 per second with no worker at all and about 40 more per 10 sessions
//! (each session claimed every 250 ms).
//!
//! The database server is shared with other tests: every NOTIFY on it (any database) makes
//! a listening connection that fell 4 queue pages behind process the queue, a transaction
//! counted in its own database. A control connection LISTENs in a database of its own over
//! the same window; what it counted is allowed to each of the topology's three listeners.

mod common;

use common::cluster::*;
use std::io::Write;
use std::process::{Command, Stdio};
use std::time::Duration;
use tokio_util::sync::CancellationToken;

/// Worker sessions kept connected while the cluster idles.
const SESSIONS: usize = 5;
/// How long the count runs.
const WINDOW: Duration = Duration::from_secs(20);
/// PostgreSQL holds a backend's counters back for up to 10 s (`PGSTAT_IDLE_INTERVAL`)
/// when it flushed less than a second before going idle: the window starts after that, and
/// the last reading waits for it too.
const SETTLE: Duration = Duration::from_secs(12);
/// The bound: transactions per node per second (the heartbeat is one per second).
const PER_NODE: f64 = 3.0;

/// Runs `sql` with psql on `url`; the rows' text.
fn psql_at(url: &str, sql: &str) -> String {
    let out = Command::new("psql").arg(url).args(["-qtAc", sql]).output().expect("psql runs");
    assert!(out.status.success(), "psql {sql}: {}", String::from_utf8_lossy(&out.stderr));
    String::from_utf8_lossy(&out.stdout).trim().to_string()
}

/// Committed transactions of `database`, read from the server's admin database (so the
/// reading does not count).
fn commits(admin_url: &str, database: &str) -> u64 {
    let sql = format!(
        "SELECT xact_commit + xact_rollback FROM pg_stat_database WHERE datname = '{database}'"
    );
    let text = psql_at(admin_url, &sql);
    text.parse().unwrap_or_else(|_| panic!("a count for {database}: {text:?}"))
}

/// A connection that LISTENs, idle, in `database` for `wait`; returns the transactions the
/// server counted there meanwhile (published when it exits).
fn listen_idle(admin_url: &str, database: &str, wait: Duration) -> u64 {
    let url = match admin_url.rsplit_once('/') {
        Some((base, _)) => format!("{base}/{database}"),
        None => panic!("an admin URL with a database: {admin_url}"),
    };
    let before = commits(admin_url, database);
    let mut child = Command::new("psql")
        .arg(&url)
        .args(["-qtA"])
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .spawn()
        .expect("psql runs");
    let mut stdin = child.stdin.take().expect("stdin");
    stdin.write_all(b"LISTEN orbit_idle_control;\n").expect("write");
    stdin.flush().expect("flush");
    std::thread::sleep(wait);
    drop(stdin);
    assert!(child.wait().expect("psql ends").success());
    std::thread::sleep(Duration::from_millis(1500));
    commits(admin_url, database).saturating_sub(before)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_idle_split_cluster_makes_about_one_transaction_per_node_per_heartbeat() {
    // The shipped defaults but for a node id per process; heartbeat 1 s, said explicitly.
    let topo = Topology::start("idle", 1, 1, 1, &["--heartbeat-ms", "1000"]);
    assert_eq!(topo.nodes.len(), 3, "1 frontend, 1 owner, 1 scheduler");
    let mut client = topo.client(0).await;
    common::register(&mut client, STEADY).await;
    let stop = CancellationToken::new();
    let endpoints = topo.worker_endpoints();
    let workers: Vec<String> = (0..SESSIONS).map(|i| format!("w-idle-{i}")).collect();
    for id in &workers {
        load_worker(&endpoints, id, 4, Duration::ZERO, &stop);
    }
    // Some work first, so every path (claims, results, the owner's passes, timers) ran.
    let ids = start_steady(std::slice::from_mut(&mut client), "idle", 3).await;
    expect_completed(&mut client, &ids, Duration::from_secs(60)).await;
    drop(client);
    let control = format!("{}_control", topo.database);
    psql_at(&topo.admin_url, &format!("DROP DATABASE IF EXISTS {control}"));
    psql_at(&topo.admin_url, &format!("CREATE DATABASE {control}"));
    let own = listen_idle(&topo.admin_url, &control, Duration::from_millis(200));

    // The test's thread blocks from here on; the workers keep their sessions on the
    // runtime's worker threads.
    std::thread::sleep(SETTLE);
    let before = commits(&topo.admin_url, &topo.database);
    let began = std::time::Instant::now();
    let heard = listen_idle(&topo.admin_url, &control, WINDOW).saturating_sub(own);
    // Every commit of the window is published within the flush delay: counted up to the
    // end of a second settle, all of it idle time too.
    std::thread::sleep(SETTLE);
    let total = commits(&topo.admin_url, &topo.database).saturating_sub(before);
    let secs = began.elapsed().as_secs_f64();
    let listening = WINDOW.as_secs_f64() + 1.5;
    // Sessions were open all along: the frontend's last beat lists them.
    let sessions = psql_at(
        &topo.database_url,
        "SELECT coalesce(sessions, '') FROM nodes WHERE service = 'frontend'",
    );
    stop.cancel();
    psql_at(&topo.admin_url, &format!("DROP DATABASE IF EXISTS {control}"));

    let per_second = total as f64 / secs;
    let nodes = topo.nodes.len() as f64;
    // Each of the topology's three listening connections may have heard what the control did.
    let bound = PER_NODE * nodes + 3.0 * heard as f64 / listening;
    eprintln!(
        "idle: {total} commits in {secs:.1} s = {per_second:.2}/s with {SESSIONS} worker \
         sessions on 3 nodes; the control listener counted {heard} in {listening:.1} s; \
         bound {bound:.2}/s"
    );
    for id in &workers {
        assert!(sessions.contains(id.as_str()), "session of {id} connected: {sessions}");
    }
    assert!(
        per_second <= bound,
        "an idle cluster made {per_second:.2} transactions/s (bound {bound:.2}/s: \
         {PER_NODE} per node for {nodes} nodes, {SESSIONS} idle worker sessions)"
    );
}
