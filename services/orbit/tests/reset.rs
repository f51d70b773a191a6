//! Issue 26: reset and fork through the real binary — `orbit dev` (SQLite) and the split
//! (PostgreSQL, 2 frontends, 2 owners):
//!
//! * executions of `a → b → c` whose worker of `b` has a bug fail in `b`; a reset to a step
//!   that never ran is refused `RESET_POINT_INVALID` and writes nothing; the dry run of a
//!   reset to `b` names `a` kept and writes nothing; after the worker is fixed, the reset
//!   reopens each one as run 2, which completes without running `a` again (`work.a` ran
//!   once per execution); run 1 stays readable, ends with `WorkflowReset` after its
//!   `WorkflowFailed`, and both runs pass the admin replay check;
//! * a fork of run 2 at the seq where `b` succeeded has exactly the original's state at
//!   that seq (`DescribeExecution` with `at_seq`: every unit's key, status and attempt; the
//!   events `2..=N` of both histories alike), then completes by itself while the original
//!   is untouched.

// Tests read the wall clock (deadlines of real processes) directly.
#![allow(clippy::disallowed_methods)]

mod common;

use common::{channel_to, history, history_until, register, result, start, Server, TempDir};
use orbit_api::v1 as pb;
use orbit_api::v1::admin_service_client::AdminServiceClient;
use orbit_api::v1::reset_execution_request::To;
use orbit_api::v1::workflow_service_client::WorkflowServiceClient;
use orbit_worker::{TaskContext, TaskFailure, Worker, WorkerBuilder};
use serde_json::{json, Value};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;
use tokio_util::sync::CancellationToken;
use tonic::transport::Channel;

const WF: &str = r#"
name: resettable
version: "1"
tasks: { work.a: {}, work.b: {}, work.c: {} }
steps:
  - { id: a, task: work.a, input: "${{ input.n }}" }
  - { id: b, needs: [a], task: work.b, input: "${{ steps.a.output }}" }
  - { id: c, needs: [b], task: work.c, input: { from: "${{ steps.b.output }}" } }
output: "${{ steps.c.output }}"
"#;

const EXECUTIONS: usize = 5;
const WAIT: Duration = Duration::from_secs(120);

/// What the worker shares with the test: whether `work.b` is still broken, and how often
/// `work.a` ran.
#[derive(Clone, Default)]
struct Bug {
    broken: Arc<AtomicBool>,
    a_runs: Arc<AtomicUsize>,
}

fn worker(builder: WorkerBuilder, bug: &Bug, stop: &CancellationToken) {
    let (broken, a_runs) = (bug.broken.clone(), bug.a_runs.clone());
    let w = builder
        .worker_id("reset-worker")
        .max_concurrency(16)
        .reconnect_backoff(Duration::from_millis(50), Duration::from_millis(500))
        .task("work.a", "1", move |ctx: TaskContext| {
            a_runs.fetch_add(1, Ordering::SeqCst);
            async move { Ok::<Value, TaskFailure>(ctx.input().clone()) }
        })
        .task("work.b", "1", move |ctx: TaskContext| {
            let broken = broken.load(Ordering::SeqCst);
            async move {
                if broken {
                    Err(TaskFailure::fatal("BUG", "work.b has a bug"))
                } else {
                    Ok::<Value, TaskFailure>(json!({"b": ctx.input().clone()}))
                }
            }
        })
        .task("work.c", "1", |ctx: TaskContext| async move {
            Ok::<Value, TaskFailure>(ctx.input().clone())
        })
        .build()
        .expect("worker");
    let stop = stop.clone();
    tokio::spawn(async move { w.run(stop).await });
}

async fn reset(
    c: &mut WorkflowServiceClient<Channel>,
    id: &str,
    to: To,
    dry_run: bool,
) -> Result<pb::ResetExecutionResponse, tonic::Status> {
    let request = pb::ResetExecutionRequest {
        execution_id: id.into(),
        to: Some(to),
        reason: "the worker of b was fixed".into(),
        dry_run,
        ..Default::default()
    };
    c.reset_execution(request).await.map(tonic::Response::into_inner)
}

async fn history_of(
    c: &mut WorkflowServiceClient<Channel>,
    id: &str,
    run: u32,
) -> Vec<pb::HistoryEvent> {
    let request = pb::GetHistoryRequest { execution_id: id.into(), run, ..Default::default() };
    c.get_history(request).await.expect("history").into_inner().events
}

/// Every unit's (key, status, attempt) as of `at_seq` of `run`.
async fn units_at(
    c: &mut WorkflowServiceClient<Channel>,
    id: &str,
    run: u32,
    at_seq: u64,
) -> Vec<(String, i32, u32)> {
    let request = pb::DescribeExecutionRequest { execution_id: id.into(), run, at_seq };
    let described = c.describe_execution(request).await.expect("describe").into_inner();
    let units = described.execution.expect("execution").units;
    units.into_iter().map(|u| (u.key, u.status, u.attempt)).collect()
}

fn code(status: &tonic::Status) -> Option<&str> {
    status.metadata().get("orbit-error-code").and_then(|v| v.to_str().ok())
}

async fn replays(admin: &mut AdminServiceClient<Channel>, id: &str, run: u32) {
    let replay = pb::ReplayRequest { execution_id: id.into(), run };
    let r = admin.replay(replay).await.expect("replay").into_inner();
    assert!(r.ok, "{id} run {run}: replay diverged: {:?}", r.divergence);
}

async fn scenario(
    c: &mut WorkflowServiceClient<Channel>,
    admin: &mut AdminServiceClient<Channel>,
    workers: impl Fn() -> WorkerBuilder,
) {
    register(c, WF).await;
    let bug = Bug::default();
    bug.broken.store(true, Ordering::SeqCst);
    let stop = CancellationToken::new();
    worker(workers(), &bug, &stop);
    let ids: Vec<String> = (0..EXECUTIONS).map(|i| format!("reset-{i}")).collect();
    for (i, id) in ids.iter().enumerate() {
        start(c, "resettable", id, json!({"n": i})).await.expect("start");
    }
    for id in &ids {
        let (status, _) = result(c, id, WAIT).await;
        assert_eq!(status, pb::ExecutionStatus::Failed, "{id}");
    }

    // Refusals write nothing.
    let before = history(c, &ids[0]).await;
    let never = reset(c, &ids[0], To::Step("c".into()), false).await.expect_err("c never ran");
    assert_eq!(never.code(), tonic::Code::FailedPrecondition, "{never:?}");
    assert_eq!(code(&never), Some("RESET_POINT_INVALID"), "{never:?}");
    let last = before.last().expect("events").seq;
    let ended = reset(c, &ids[0], To::Seq(last), false).await.expect_err("the run had ended");
    assert_eq!(code(&ended), Some("RESET_POINT_INVALID"), "{ended:?}");
    let missing = reset(c, "no-such", To::Step("b".into()), false).await.expect_err("missing");
    assert_eq!(missing.code(), tonic::Code::NotFound, "{missing:?}");
    let dry = reset(c, &ids[0], To::Step("b".into()), true).await.expect("dry run");
    let plan = dry.plan.clone().expect("plan");
    assert!(!dry.reset && dry.seq == 0 && dry.run == 1, "{dry:?}");
    assert_eq!((plan.kept.as_slice(), plan.forgotten.len()), (&["a".to_string()][..], 0));
    assert_eq!(history(c, &ids[0]).await, before, "refusals and a dry run write nothing");

    // The worker is fixed; each execution goes on from before `b` in run 2.
    bug.broken.store(false, Ordering::SeqCst);
    for id in &ids {
        let done = reset(c, id, To::Step("b".into()), false).await.expect("reset");
        assert!(done.reset && done.run == 2 && done.seq > 0, "{id}: {done:?}");
    }
    for (i, id) in ids.iter().enumerate() {
        let (status, output) = result(c, id, WAIT).await;
        assert_eq!(status, pb::ExecutionStatus::Completed, "{id}: {output}");
        assert_eq!(output, json!({"from": {"b": i}}), "{id}");
        let old = history_of(c, id, 1).await;
        let types: Vec<&str> = old.iter().rev().take(2).map(|e| e.event_type.as_str()).collect();
        assert_eq!(types, ["WorkflowReset", "WorkflowFailed"], "{id}: run 1 is kept");
        let new = history_of(c, id, 2).await;
        let restored = new.iter().find(|e| e.event_type == "RunRestored").expect("restored");
        for (copied, original) in new.iter().zip(&old).take(restored.seq as usize - 1).skip(1) {
            assert_eq!(
                (copied.seq, &copied.event_type, &copied.payload),
                (original.seq, &original.event_type, &original.payload),
                "{id}: the prefix is the old run's"
            );
        }
        replays(admin, id, 1).await;
        replays(admin, id, 2).await;
    }
    assert_eq!(bug.a_runs.load(Ordering::SeqCst), EXECUTIONS, "a kept, never run again");

    // A fork at the seq where `b` succeeded in run 2 has exactly the state there.
    let source = &ids[0];
    let h = history_of(c, source, 2).await;
    let n = h.iter().find(|e| e.event_type == "StepSucceeded" && e.step == "b").expect("b").seq;
    let fork_id = format!("{source}-fork");
    let request = pb::ForkExecutionRequest {
        execution_id: source.clone(),
        run: 2,
        at_seq: n,
        new_execution_id: fork_id.clone(),
        reason: "what if".into(),
        ..Default::default()
    };
    let forked = c.fork_execution(request.clone()).await.expect("fork").into_inner();
    assert!(forked.created && forked.execution_id == fork_id, "{forked:?}");
    let again = c.fork_execution(request).await.expect("fork again").into_inner();
    assert!(!again.created, "a retry answers the fork: {again:?}");
    assert_eq!(units_at(c, &fork_id, 1, n).await, units_at(c, source, 2, n).await);
    let fork_history =
        history_until(c, &fork_id, WAIT, |h| h.iter().any(|e| e.event_type == "WorkflowCompleted"))
            .await;
    for (f, o) in fork_history.iter().zip(&h).take(n as usize).skip(1) {
        assert_eq!((f.seq, &f.event_type, &f.payload), (o.seq, &o.event_type, &o.payload));
    }
    let (status, output) = result(c, &fork_id, WAIT).await;
    assert_eq!((status, output), (pb::ExecutionStatus::Completed, json!({"from": {"b": 0}})));
    assert_eq!(history_of(c, source, 2).await, h, "the source is untouched");
    replays(admin, &fork_id, 1).await;
    stop.cancel();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn failed_executions_reset_and_fork_in_orbit_dev() {
    let dir = TempDir::new("reset-dev");
    let server = Server::start(&dir.0.join("orbit.db"), &[]).await;
    let mut c = server.client().await;
    let mut admin = AdminServiceClient::new(channel_to(&server.address()).await);
    let address = server.address();
    scenario(&mut c, &mut admin, || Worker::builder(address.clone())).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn failed_executions_reset_and_fork_on_the_split() {
    use common::cluster::{shared_tls, shared_token, Topology, FAST};
    let topo = Topology::start("reset", 2, 2, 1, FAST);
    let mut c = topo.client(0).await;
    let admin_channel = topo.tls().endpoint(&topo.frontends()[1]).expect("endpoint");
    let mut admin = AdminServiceClient::new(admin_channel.connect().await.expect("connect"));
    let endpoints = topo.worker_endpoints();
    scenario(&mut c, &mut admin, || {
        let builder = Worker::builder(endpoints.clone()).tls(shared_tls());
        match shared_token() {
            Some(token) => builder.bearer_token(token),
            None => builder,
        }
    })
    .await;
}

/// A batch that resets every FAILED execution of the workflow to just before `b` (issue
/// 26 item 5, `BatchReset`): the dry run answers each one's plan (`a` kept) and starts
/// nothing; the batch records one SUCCEEDED item per execution, and each completes as run 2
/// without running `a` again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_batch_resets_every_failed_execution_in_orbit_dev() {
    use common::batches::{batch_until, items};
    let dir = TempDir::new("reset-batch");
    let server = Server::start(&dir.0.join("orbit.db"), &[]).await;
    let mut c = server.client().await;
    register(&mut c, WF).await;
    let bug = Bug::default();
    bug.broken.store(true, Ordering::SeqCst);
    let stop = CancellationToken::new();
    worker(Worker::builder(server.address()), &bug, &stop);
    let ids: Vec<String> = (0..20).map(|i| format!("bulk-reset-{i:02}")).collect();
    for (i, id) in ids.iter().enumerate() {
        start(&mut c, "resettable", id, json!({"n": i})).await.expect("start");
    }
    for id in &ids {
        assert_eq!(result(&mut c, id, WAIT).await.0, pb::ExecutionStatus::Failed, "{id}");
    }
    bug.broken.store(false, Ordering::SeqCst);
    let request = |dry_run| pb::StartBatchRequest {
        selector: Some(pb::BatchSelector {
            workflow: "resettable".into(),
            version: String::new(),
            statuses: vec![pb::ExecutionStatus::Failed as i32],
            query: String::new(),
        }),
        action: Some(pb::BatchAction {
            action: Some(pb::batch_action::Action::Reset(pb::BatchReset {
                step: "b".into(),
                ..Default::default()
            })),
        }),
        rate_per_second: 200,
        reason: "the worker of b was fixed".into(),
        dry_run,
        ..Default::default()
    };
    let dry = c.start_batch(request(true)).await.expect("dry run").into_inner();
    assert_eq!((dry.dry_run_total, dry.dry_run_items.len(), dry.batch_id.as_str()), (20, 20, ""));
    for item in &dry.dry_run_items {
        let plan = item.plan.clone().expect("a reset's plan");
        assert!(item.safe && item.code.is_empty(), "{item:?}");
        assert_eq!(plan.kept, ["a"], "{item:?}");
    }
    assert_eq!(
        history_of(&mut c, &ids[0], 0).await.last().map(|e| e.event_type.clone()),
        Some("WorkflowFailed".to_string()),
        "a dry run writes nothing"
    );
    let started = c.start_batch(request(false)).await.expect("start").into_inner();
    let done = batch_until(&mut c, &started.batch_id, WAIT, "completed", |b| {
        b.state == pb::BatchState::Completed as i32
    })
    .await;
    assert_eq!((done.succeeded, done.failed, done.skipped), (20, 0, 0), "{done:?}");
    assert_eq!(items(&mut c, &started.batch_id, false).await.len(), 20);
    for (i, id) in ids.iter().enumerate() {
        let (status, output) = result(&mut c, id, WAIT).await;
        assert_eq!((status, output), (pb::ExecutionStatus::Completed, json!({"from": {"b": i}})));
        let h = history_of(&mut c, id, 0).await;
        assert_eq!(h.iter().filter(|e| e.event_type == "RunRestored").count(), 1, "{id}");
    }
    assert_eq!(bug.a_runs.load(Ordering::SeqCst), 20, "a kept, never run again");
    stop.cancel();
}
