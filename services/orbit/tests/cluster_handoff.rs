//! The split's task hand-off (issue 14), real processes on PostgreSQL: frontends lend the
//! free credits of their drained worker sessions to owners over `HandoffService.Lend`, and
//! an owner queues a step's next task already claimed for such a session, in the commit of
//! the previous step's result, then sends it straight over.
//!
//! * one worker with two credits on a 2-owner, 2-frontend topology runs executions one at
//!   a time: tasks are handed off (the frontends' `orbit_tasks_handed_off_total`; it stays 0
//!   without the hand-off), every execution completes and every history replays with one
//!   `StepSucceeded` per step. The executions spread over both owners while the session's
//!   free credit is lent to the owner that last handed it a task, so a step `a` queued by
//!   the other owner finds the session without a free credit: the frontend recalls the
//!   lent one (without the recall that execution would never finish);
//! * a worker with ONE credit, many executions at once: it never holds two tasks at once;
//! * an owner, then a frontend, SIGKILLed while hand-offs flow: every execution completes,
//!   each step succeeded exactly once;
//! * a handed-off task's `StepDispatched` is in the commit that queued it (issue 25: no
//!   `dispatched` entry, no pass of its own): a task that runs for seconds is recorded
//!   dispatched before it runs, not with its result, and a handler describing its own
//!   execution through a frontend sees itself named as the attempt's worker.

// Tests read their environment (ORBIT_PYTHON, the database URL) and the wall clock
// (unique names, deadlines of real processes) directly.
#![allow(clippy::disallowed_methods)]

mod common;

use common::cluster::*;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio_util::sync::CancellationToken;

/// Three steps in a chain: each step's task is queued by the commit of the previous
/// step's result, where the hand-off happens.
const CHAIN: &str = r#"
name: steady
version: "1"
tasks: { work: {} }
steps:
  - { id: a, task: work, input: "${{ input.n }}" }
  - { id: b, needs: [a], task: work, input: "${{ steps.a.output }}" }
  - { id: c, needs: [b], task: work, input: "${{ steps.b.output }}" }
output: "${{ steps.c.output }}"
"#;
const CHAIN_UNITS: usize = 3;

/// A worker's running tasks now and the most it ever held at once.
#[derive(Default)]
struct Concurrency {
    now: AtomicU32,
    max: AtomicU32,
    ran: AtomicU32,
}

/// A worker of `work` with `credits` slots on `endpoints`, recording its concurrency.
fn counting_worker(
    endpoints: &str,
    worker_id: &str,
    credits: u32,
    delay: Duration,
    stop: &CancellationToken,
) -> Arc<Concurrency> {
    use orbit_worker::{TaskContext, TaskFailure, Worker};
    let seen = Arc::new(Concurrency::default());
    let counts = seen.clone();
    let mut builder = Worker::builder(endpoints.to_string()).tls(shared_tls());
    if let Some(token) = shared_token() {
        builder = builder.bearer_token(token);
    }
    let worker = builder
        .worker_id(worker_id)
        .max_concurrency(credits)
        .reconnect_backoff(Duration::from_millis(50), Duration::from_millis(500))
        .task("work", "1", move |ctx: TaskContext| {
            let counts = counts.clone();
            async move {
                let now = counts.now.fetch_add(1, Ordering::SeqCst) + 1;
                counts.max.fetch_max(now, Ordering::SeqCst);
                tokio::time::sleep(delay).await;
                counts.now.fetch_sub(1, Ordering::SeqCst);
                counts.ran.fetch_add(1, Ordering::SeqCst);
                Ok::<serde_json::Value, TaskFailure>(ctx.input().clone())
            }
        })
        .build()
        .expect("worker");
    let stop = stop.clone();
    tokio::spawn(async move { worker.run(stop).await });
    seen
}

/// A counter of a frontend's metrics, summed over its labels.
async fn counter(topo: &Topology, frontend: &str, name: &str) -> u64 {
    let addr = common::admin::address_in(&topo.log(frontend)).expect("admin address in the log");
    common::admin::metric_sum(&addr, name, "").await
}

/// (handed off, dispatched) over every frontend still running.
async fn handed_and_dispatched(topo: &Topology) -> (u64, u64) {
    let (mut handed, mut dispatched) = (0, 0);
    for f in topo.of("frontend") {
        if !topo.alive(&f.node_id) {
            continue;
        }
        handed += counter(topo, &f.node_id, "orbit_tasks_handed_off_total").await;
        dispatched += counter(topo, &f.node_id, "orbit_tasks_dispatched_total").await;
    }
    (handed, dispatched)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tasks_are_handed_off_across_two_owners() {
    const EXECUTIONS: usize = 16;
    let topo = Topology::start("handoff", 2, 2, 1, FAST);
    let mut client = topo.client(1).await;
    common::register(&mut client, CHAIN).await;
    let stop = CancellationToken::new();
    let fe = topo.frontends();
    let seen = counting_worker(&fe[0], "w-two", 2, Duration::from_millis(20), &stop);

    let mut ids = Vec::new();
    for i in 0..EXECUTIONS {
        let id = format!("h-{i}");
        common::start(&mut client, "steady", &id, serde_json::json!({"n": i}))
            .await
            .expect("start");
        // One at a time: the next step's task is queued by the commit of a result.
        let (status, output) = common::result(&mut client, &id, Duration::from_secs(60)).await;
        assert_eq!(status, orbit_api::v1::ExecutionStatus::Completed, "{id}: {output}");
        assert_eq!(output, serde_json::json!(i), "{id}");
        ids.push(id);
    }
    stop.cancel();

    let owners = psql(&topo, "SELECT DISTINCT node_id FROM owners ORDER BY 1");
    assert_eq!(owners.len(), 2, "the executions spread over both owners: {owners:?}");
    let (handed, dispatched) = handed_and_dispatched(&topo).await;
    eprintln!("handed off {handed} of {dispatched} dispatched tasks");
    assert!(dispatched >= (EXECUTIONS * CHAIN_UNITS) as u64, "{dispatched} dispatched");
    // Without the hand-off none is. With it, a step queued by the owner that holds the
    // session's spare credit is handed off (20 of 48 here, run after run: the other
    // owner's steps wait for a recall and are claimed); half that leaves a busy machine
    // its margin.
    let floor = EXECUTIONS as u64 / 2;
    assert!(handed >= floor, "only {handed} of {dispatched} tasks were handed off");
    assert_eq!(seen.max.load(Ordering::SeqCst), 1, "one execution at a time");
    let def = orbit_definition::parse(CHAIN).unwrap();
    check_all(&topo, &def, &ids, CHAIN_UNITS).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_one_credit_worker_never_holds_two_tasks() {
    const EXECUTIONS: usize = 12;
    let topo = Topology::start("handoff-credit", 1, 2, 1, FAST);
    let mut clients = vec![topo.client(0).await];
    common::register(&mut clients[0], CHAIN).await;
    let stop = CancellationToken::new();
    let fe = topo.frontends();
    let seen = counting_worker(&fe[0], "w-one", 1, Duration::from_millis(30), &stop);
    let ids = start_steady(&mut clients, "c", EXECUTIONS).await;
    expect_completed(&mut clients[0], &ids, Duration::from_secs(120)).await;
    stop.cancel();
    assert_eq!(seen.max.load(Ordering::SeqCst), 1, "a worker with one credit held two tasks");
    assert_eq!(seen.ran.load(Ordering::SeqCst) as usize, EXECUTIONS * CHAIN_UNITS, "ran once each");
    let (handed, dispatched) = handed_and_dispatched(&topo).await;
    eprintln!("handed off {handed} of {dispatched} dispatched tasks");
    let def = orbit_definition::parse(CHAIN).unwrap();
    check_all(&topo, &def, &ids, CHAIN_UNITS).await;
}

/// Runs executions `EXECUTIONS` at a time through both frontends until hand-offs flow,
/// SIGKILLs `victim`, and checks that everything completes exactly once.
async fn kill_while_handing_off(name: &str, victim: &str) {
    const EXECUTIONS: usize = 40;
    let topo = Topology::start(name, 2, 2, 1, FAST);
    let mut clients = vec![topo.client(0).await, topo.client(1).await];
    common::register(&mut clients[0], CHAIN).await;
    let stop = CancellationToken::new();
    let fe = topo.frontends();
    // Each worker knows the other frontend as its next address.
    let a = counting_worker(
        &format!("{},{}", fe[0], fe[1]),
        "w-a",
        4,
        Duration::from_millis(60),
        &stop,
    );
    let b = counting_worker(
        &format!("{},{}", fe[1], fe[0]),
        "w-b",
        4,
        Duration::from_millis(60),
        &stop,
    );
    let ids = start_steady(&mut clients, "k", EXECUTIONS).await;

    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let (handed, _) = handed_and_dispatched(&topo).await;
        if handed >= 4 {
            break;
        }
        assert!(Instant::now() < deadline, "no task was handed off before the kill");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    topo.signal(victim, "KILL");

    let survivor = if victim == "frontend-1" { 1 } else { 0 };
    expect_completed(&mut clients[survivor], &ids, Duration::from_secs(120)).await;
    stop.cancel();
    assert!(a.max.load(Ordering::SeqCst) <= 4 && b.max.load(Ordering::SeqCst) <= 4, "credits");
    let def = orbit_definition::parse(CHAIN).unwrap();
    check_all(&topo, &def, &ids, CHAIN_UNITS).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_owner_killed_while_handing_off_loses_nothing() {
    kill_while_handing_off("handoff-owner", "owner-1").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_frontend_killed_while_handing_off_loses_nothing() {
    kill_while_handing_off("handoff-frontend", "frontend-1").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_long_handed_off_task_is_recorded_dispatched_while_it_runs() {
    const RUNS: Duration = Duration::from_secs(4);
    // `StepDispatched` is in the commit that handed the task off, before the worker got it
    // (step `a`, queued before the session lent its credits, by the claim's entry, applied
    // 50 ms later); 800 ms leaves a loaded machine its margin.
    const PROMPT: Duration = Duration::from_millis(800);
    let topo = Topology::start("handoff-long", 1, 1, 1, FAST);
    let mut client = topo.client(0).await;
    common::register(&mut client, CHAIN).await;
    let stop = CancellationToken::new();
    let fe = topo.frontends();
    let seen = counting_worker(&fe[0], "w-long", 2, RUNS, &stop);
    common::start(&mut client, "steady", "long", serde_json::json!({"n": 5})).await.expect("start");
    let (status, output) = common::result(&mut client, "long", Duration::from_secs(90)).await;
    assert_eq!(status, orbit_api::v1::ExecutionStatus::Completed, "{output}");
    stop.cancel();
    let (handed, _) = handed_and_dispatched(&topo).await;
    assert!(handed >= 2, "steps b and c are handed off: {handed}");
    assert_eq!(seen.ran.load(Ordering::SeqCst), CHAIN_UNITS as u32);

    let h = common::history(&mut client, "long").await;
    let at = |ty: &str, step: &str| -> i64 {
        let e = h
            .iter()
            .find(|e| e.event_type == ty && e.step == step)
            .unwrap_or_else(|| panic!("{ty} of {step}"));
        let t = e.timestamp.as_ref().expect("timestamp");
        t.seconds * 1000 + i64::from(t.nanos) / 1_000_000
    };
    for step in ["a", "b", "c"] {
        let gap = at("StepSucceeded", step) - at("StepDispatched", step);
        // Recorded with the result, the two would share the pass's timestamp.
        assert!(
            gap >= (RUNS - PROMPT).as_millis() as i64,
            "{step}: StepDispatched {gap} ms before StepSucceeded, the task ran {RUNS:?}"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_handler_describing_its_execution_through_a_frontend_sees_itself_named() {
    // One owner: the session's lent credits are all where the executions are.
    let topo = Topology::start("handoff-describe", 1, 1, 1, FAST);
    let mut client = topo.client(0).await;
    common::register(&mut client, common::DESCRIBED).await;
    let stop = CancellationToken::new();
    let mut builder = orbit_worker::Worker::builder(topo.frontends()[0].clone()).tls(shared_tls());
    if let Some(token) = shared_token() {
        builder = builder.bearer_token(token);
    }
    common::describing_worker(builder.worker_id("self-9"), client.clone(), &stop);
    common::assert_described_from_the_handler(
        &mut client,
        "self",
        "self-9",
        5,
        Duration::from_secs(60),
    )
    .await;
    let (handed, _) = handed_and_dispatched(&topo).await;
    assert!(handed >= 5, "the checked tasks were handed off: {handed}");
    stop.cancel();
}
