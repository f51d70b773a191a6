//! The idle cost of the split topology on PostgreSQL (issue 14 item 3): with nothing to do,
//! a cluster of 1 frontend, 1 owner and 1 scheduler with idle worker sessions connected
//! makes about one statement per node per heartbeat (the membership beat, which reads the
//! live nodes in the same statement) and nothing else but slow safety nets.
//!
//! Counted with PostgreSQL's own `pg_stat_statements` (scripts/pg.sh preloads it): every
//! statement the topology's database ran in a window that starts after the run settled,
//! `BEGIN`/`COMMIT` left out, so a transaction of several statements counts several — at
//! least as strict as counting transactions. `pg_stat_database.xact_commit` was used before
//! and is not reliable for a window: backends publish those counters late (a burst of a
//! run's commits showed up 25 s after it), and a listening connection counts a transaction
//! each time another database's notifications make it catch up.
//!
//! The bound is the target, one per node per second, with the shipped defaults (a
//! beat every 2 s, safety nets of 30 s and more): about 0.7 per node is expected, and
//! nothing here runs more often on a slow machine. Before issue 14 the same cluster made 25
//! transactions per second with no worker at all and about 40 more per 10 sessions (each
//! session claimed every 250 ms).

// Tests read their environment (ORBIT_PYTHON, the database URL) and the wall clock
// (unique names, deadlines of real processes) directly.
#![allow(clippy::disallowed_methods)]

mod common;

use common::cluster::*;
use std::process::Command;
use std::time::Duration;
use tokio_util::sync::CancellationToken;

/// Worker sessions kept connected while the cluster idles (the issue measures with 10).
const SESSIONS: usize = 10;
/// How long the count runs: two of the 30 s safety nets' periods would be 60 s; 40 s sees
/// every one of them at least once.
const WINDOW: Duration = Duration::from_secs(40);
/// After the run, before the window: the last replies, acks and supervisors settle.
const SETTLE: Duration = Duration::from_secs(3);
/// The bound: statements per node per second (the heartbeat is one per 2 s).
const PER_NODE: f64 = 1.0;

/// Runs `sql` with psql on `url`; the rows' text.
fn psql_at(url: &str, sql: &str) -> String {
    let out = Command::new("psql").arg(url).args(["-qtAc", sql]).output().expect("psql runs");
    assert!(out.status.success(), "psql {sql}: {}", String::from_utf8_lossy(&out.stderr));
    String::from_utf8_lossy(&out.stdout).trim().to_string()
}

/// Statements `database` ran since its counts were last reset, by statement, from the
/// server's admin database (so the reading does not count).
fn statements(admin_url: &str, database: &str) -> Vec<(u64, String)> {
    let sql = format!(
        "SELECT s.calls, left(regexp_replace(s.query, '\\s+', ' ', 'g'), 70) \
         FROM pg_stat_statements s JOIN pg_database d ON d.oid = s.dbid \
         WHERE d.datname = '{database}' AND s.query NOT IN ('BEGIN', 'COMMIT', 'ROLLBACK') \
         ORDER BY s.calls DESC"
    );
    psql_at(admin_url, &sql)
        .lines()
        .filter_map(|l| {
            let (calls, query) = l.split_once('|')?;
            Some((calls.parse().ok()?, query.to_string()))
        })
        .collect()
}

/// Forgets what `database` ran so far.
fn reset(admin_url: &str, database: &str) {
    psql_at(
        admin_url,
        &format!(
            "SELECT pg_stat_statements_reset(0, d.oid, 0) FROM pg_database d \
             WHERE d.datname = '{database}'"
        ),
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_idle_split_cluster_runs_about_one_statement_per_node_per_heartbeat() {
    // The shipped defaults but for a node id per process (heartbeat 2 s, node timeout 10 s).
    let topo = Topology::start("idle", 1, 1, 1, &[]);
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
    let missing = "pg_stat_statements is not loaded: start PostgreSQL with scripts/pg.sh \
                   (restart a cluster it started before: scripts/pg.sh stop && scripts/pg.sh start)";
    let loaded = Command::new("psql")
        .arg(&topo.admin_url)
        .args(["-qtAc", "CREATE EXTENSION IF NOT EXISTS pg_stat_statements; SELECT count(*) FROM pg_stat_statements"])
        .output()
        .expect("psql runs");
    assert!(loaded.status.success(), "{missing}: {}", String::from_utf8_lossy(&loaded.stderr));

    // The test's thread blocks from here on; the workers keep their sessions on the
    // runtime's worker threads.
    std::thread::sleep(SETTLE);
    reset(&topo.admin_url, &topo.database);
    let began = std::time::Instant::now();
    std::thread::sleep(WINDOW);
    let counted = statements(&topo.admin_url, &topo.database);
    let secs = began.elapsed().as_secs_f64();
    // Sessions were open all along: the frontend's last beat lists them.
    let sessions = psql_at(
        &topo.database_url,
        "SELECT coalesce(sessions, '') FROM nodes WHERE service = 'frontend'",
    );
    stop.cancel();

    let total: u64 = counted.iter().map(|(calls, _)| calls).sum();
    let per_second = total as f64 / secs;
    let nodes = topo.nodes.len() as f64;
    let bound = PER_NODE * nodes;
    eprintln!(
        "idle: {total} statements in {secs:.1} s = {per_second:.2}/s with {SESSIONS} worker \
         sessions on 3 nodes; bound {bound:.2}/s"
    );
    for (calls, query) in &counted {
        eprintln!("  {calls:>5}  {query}");
    }
    for id in &workers {
        assert!(sessions.contains(id.as_str()), "session of {id} connected: {sessions}");
    }
    assert!(
        per_second <= bound,
        "an idle cluster ran {per_second:.2} statements/s (bound {bound:.2}/s: \
         {PER_NODE} per node for {nodes} nodes, {SESSIONS} idle worker sessions): {counted:?}"
    );
}
