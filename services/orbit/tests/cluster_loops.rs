//! A `for_each` over a 5-step group on the split topology (issue 29's must-show): 1,000
//! elements with `max_concurrency: 50`, the owner of the execution SIGKILLed midway. The
//! other owner takes the execution over, every element's five units run and succeed exactly
//! once (the workers' own record, and the history: one `StepSucceeded` per unit), the output
//! lists the elements in order, and the history replays.
//!
//! Before the kill, the cost per step is measured beside a flat 5-step workflow doing the
//! same number of tasks: statements per task (`pg_stat_statements` of the topology's
//! database) and owner CPU per task (both owners' `/proc/<pid>/stat`), printed for
//! docs/benchmarks.md. Not asserted: a test does not time (QUALITY.md).

// Tests read their environment (the database URL) and the wall clock (deadlines of real
// processes) directly.
#![allow(clippy::disallowed_methods)]

mod common;

use common::cluster::*;
use serde_json::{json, Value};
use std::collections::BTreeMap;
use std::time::Duration;
use tokio_util::sync::CancellationToken;

/// Five sequential tasks per element; each echoes its input.
const EACH: &str = r#"
name: each5
version: "1"
tasks: { work: {} }
steps:
  - id: each
    for_each: "${{ input.items }}"
    as: item
    max_concurrency: 50
    group:
      steps:
        - { id: a, task: work, input: "${{ item }}" }
        - { id: b, needs: [a], task: work, input: "${{ steps.a.output }}" }
        - { id: c, needs: [b], task: work, input: "${{ steps.b.output }}" }
        - { id: d, needs: [c], task: work, input: "${{ steps.c.output }}" }
        - { id: e, needs: [d], task: work, input: "${{ steps.d.output }}" }
      output: "${{ steps.e.output }}"
output: "${{ steps.each.output }}"
"#;

/// The same five tasks, flat.
const FLAT: &str = r#"
name: flat5
version: "1"
tasks: { work: {} }
steps:
  - { id: a, task: work, input: "${{ input.n }}" }
  - { id: b, needs: [a], task: work, input: "${{ steps.a.output }}" }
  - { id: c, needs: [b], task: work, input: "${{ steps.b.output }}" }
  - { id: d, needs: [c], task: work, input: "${{ steps.c.output }}" }
  - { id: e, needs: [d], task: work, input: "${{ steps.d.output }}" }
output: "${{ steps.e.output }}"
"#;

const ELEMENTS: usize = 1_000;
/// Elements (and flat executions) of the cost comparison: 1,000 tasks each way.
const COST_N: usize = 200;

/// Statements run in the topology's database so far (BEGIN/COMMIT left out).
fn statements(topo: &Topology) -> u64 {
    let sum = psql(
        topo,
        "SELECT coalesce(sum(calls), 0)::bigint FROM pg_stat_statements \
         WHERE dbid = (SELECT oid FROM pg_database WHERE datname = current_database()) \
         AND query NOT IN ('BEGIN', 'COMMIT', 'ROLLBACK')",
    );
    sum.first().and_then(|s| s.parse().ok()).unwrap_or(0)
}

/// CPU time of the owners still alive, in clock ticks (utime + stime).
fn owner_ticks(topo: &Topology) -> u64 {
    topo.of("owner")
        .iter()
        .filter(|n| topo.alive(&n.node_id))
        .map(|n| {
            let stat = std::fs::read_to_string(format!("/proc/{}/stat", n.pid)).unwrap_or_default();
            // After the command's closing parenthesis: field 3 (state) first, so utime
            // (field 14) and stime (15) are the 12th and 13th words.
            let rest = stat.rsplit_once(')').map_or("", |(_, r)| r);
            let f: Vec<&str> = rest.split_whitespace().collect();
            let at = |i: usize| f.get(i).and_then(|x| x.parse::<u64>().ok()).unwrap_or(0);
            at(11) + at(12)
        })
        .sum()
}

/// Runs `f`'s executions to completion; returns (statements per task, owner CPU ms per task).
async fn cost<F: std::future::Future<Output = ()>>(
    topo: &Topology,
    tasks: usize,
    f: F,
) -> (f64, f64) {
    let (s0, t0) = (statements(topo), owner_ticks(topo));
    f.await;
    let (s1, t1) = (statements(topo), owner_ticks(topo));
    // Linux reports clock ticks of 10 ms (USER_HZ 100).
    let ms = (t1.saturating_sub(t0) * 10) as f64;
    ((s1 - s0) as f64 / tasks as f64, ms / tasks as f64)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_thousand_element_group_loop_survives_an_owner_kill() {
    let topo = Topology::start("loops", 2, 2, 1, FAST);
    psql(&topo, "CREATE EXTENSION IF NOT EXISTS pg_stat_statements");
    let mut clients = [topo.client(0).await, topo.client(1).await];
    common::register(&mut clients[0], EACH).await;
    common::register(&mut clients[0], FLAT).await;
    let stop = CancellationToken::new();
    let fe = topo.frontends();
    let runs_a = load_worker(&fe[0], "w-a", 32, Duration::from_millis(2), &stop);
    let runs_b = load_worker(&fe[1], "w-b", 32, Duration::from_millis(2), &stop);
    let within = Duration::from_secs(300);

    // The cost per task: 200 flat 5-step executions, 50 in flight, against one for_each
    // of 200 elements at max_concurrency 50.
    let flat = cost(&topo, COST_N * 5, async {
        let mut started = 0;
        let mut c = clients[0].clone();
        while started < COST_N {
            let batch: Vec<String> =
                (started..(started + 50).min(COST_N)).map(|i| format!("flat-{i}")).collect();
            for (k, id) in batch.iter().enumerate() {
                let n = started + k;
                common::start(&mut c, "flat5", id, json!({"n": n})).await.expect("start flat");
            }
            for (k, id) in batch.iter().enumerate() {
                let (status, out) = common::result(&mut c, id, within).await;
                assert_eq!(status, orbit_api::v1::ExecutionStatus::Completed, "{id}: {out}");
                assert_eq!(out, json!(started + k));
            }
            started += batch.len();
        }
    })
    .await;
    let small: Vec<Value> = (0..COST_N).map(|i| json!(i)).collect();
    let grouped = cost(&topo, COST_N * 5, async {
        let mut c = clients[1].clone();
        common::start(&mut c, "each5", "each-small", json!({"items": small})).await.expect("start");
        let (status, out) = common::result(&mut c, "each-small", within).await;
        assert_eq!(status, orbit_api::v1::ExecutionStatus::Completed, "{out}");
        assert_eq!(out, Value::Array(small.clone()));
    })
    .await;
    eprintln!(
        "cost per task: flat 5-step x {COST_N}: {:.2} statements, {:.2} ms owner CPU; \
         for_each over a 5-step group, {COST_N} elements: {:.2} statements, {:.2} ms owner CPU",
        flat.0, flat.1, grouped.0, grouped.1
    );

    // The 1,000-element loop, its owner killed midway.
    let items: Vec<Value> = (0..ELEMENTS).map(|i| json!(i)).collect();
    let id = "each-big";
    common::start(&mut clients[0], "each5", id, json!({"items": items})).await.expect("start");
    let deadline = std::time::Instant::now() + within;
    let half = (ELEMENTS * 5 / 2).to_string();
    loop {
        let done = psql(
            &topo,
            &format!("SELECT count(*) >= {half} FROM task_queue WHERE execution_id = '{id}' AND state = 'done'"),
        );
        if done == ["t"] {
            break;
        }
        assert!(std::time::Instant::now() < deadline, "the loop never got halfway");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let holder = psql(&topo, &format!("SELECT node_id FROM owners WHERE execution_id = '{id}'"));
    let [holder] = holder.as_slice() else { panic!("no owner of {id}: {holder:?}") };
    topo.signal(holder, "KILL");
    let survivor = if holder == "owner-1" { "owner-2" } else { "owner-1" };

    let (status, out) = common::result(&mut clients[1], id, within).await;
    assert_eq!(status, orbit_api::v1::ExecutionStatus::Completed, "{out}");
    assert_eq!(out, Value::Array(items), "every element's output, in order");
    stop.cancel();
    assert!(topo.log(survivor).contains("took over root"), "{survivor} took the execution over");

    // Every unit of the big loop ran once on a worker...
    let mut per_unit: BTreeMap<String, usize> = BTreeMap::new();
    for r in runs_a.lock().unwrap().iter().chain(runs_b.lock().unwrap().iter()) {
        if r.0 == id {
            *per_unit.entry(r.1.clone()).or_default() += 1;
        }
    }
    let twice: Vec<_> = per_unit.iter().filter(|(_, n)| **n > 1).collect();
    assert!(twice.is_empty(), "units that ran twice: {twice:?}");
    assert_eq!(per_unit.len(), ELEMENTS * 5, "every element's five units ran");
    // ... and succeeded once in a history that replays (the five units and the element
    // of each element, and the loop itself).
    let def = orbit_definition::parse(EACH).unwrap();
    check_all(&topo, &def, &[id.to_string()], ELEMENTS * 6 + 1).await;
}
