//! Worker pools and sticky workers in `orbit dev` (issue 27; docs/flow-control.md, "Worker
//! pools and sticky workers"), through the real binary and raw worker sessions that
//! announce labels, so every delivery is seen:
//!
//! - a step `on: {pool: gpu}` waits (queued, `DescribeExecution` naming its labels) while
//!   only a `pool: cpu` worker serves its task, and runs on the `pool: gpu` worker once it
//!   connects; an unlabelled step runs on either;
//! - a sticky 3-step workflow runs every step on the worker that ran its first, while both
//!   workers have free slots;
//! - when the sticky worker has gone, the next step waits for it (described as sticky to
//!   it) and runs on the other worker once the sticky timeout has passed.

// Tests read their environment and the wall clock directly.
#![allow(clippy::disallowed_methods)]

mod common;

use common::*;
use orbit_api::v1 as pb;
use serde_json::{json, Value};
use std::time::Duration;

const GPU: &str = r#"
name: gpu
version: "1"
tasks: { work: {} }
steps:
  - id: a
    task: work
    input: "${{ input }}"
    on: { pool: gpu }
output: "${{ steps.a.output }}"
"#;

const PLAIN: &str = r#"
name: plain
version: "1"
tasks: { work: {} }
steps:
  - id: a
    task: work
    input: "${{ input }}"
output: "${{ steps.a.output }}"
"#;

/// The sticky timeout of [`STICKY`]; the test's waits for the fallback derive from it.
const STICKY_TIMEOUT: Duration = Duration::from_secs(1);

const STICKY: &str = r#"
name: sticky
version: "1"
sticky: { timeout: 1s }
tasks: { work: {} }
steps:
  - { id: a, task: work, input: "${{ input }}" }
  - { id: b, task: work, input: "${{ input }}", needs: [a] }
  - { id: c, task: work, input: "${{ input }}", needs: [b] }
output: "${{ steps.c.output }}"
"#;

/// Bounds every wait for something the server does at once (a delivery after a result, a
/// described state): generous for a busy machine.
const WAIT: Duration = Duration::from_secs(20);

/// The frontend's queue watch in `orbit dev` (`METRICS_SAMPLE_EVERY`): a session that
/// missed nothing still looks again at least this often while rows are queued.
const QUEUE_WATCH: Duration = Duration::from_secs(5);

/// A session of `worker_id` announcing `labels`, with `n` credits.
async fn labelled(address: &str, worker_id: &str, labels: &[(&str, &str)], n: u32) -> RawSession {
    let mut first = hello(worker_id, &[("work", "")], n);
    if let Some(pb::worker_message::Kind::Hello(h)) = &mut first.kind {
        h.labels = labels.iter().map(|(k, v)| ((*k).to_string(), (*v).to_string())).collect();
    }
    let mut s = open_raw_session(address, first).await.expect("open session");
    match s.next(Duration::from_secs(10)).await {
        Some(pb::server_message::Kind::Welcome(_)) => {}
        other => panic!("expected welcome, got {other:?}"),
    }
    s.tx.send(credits(n)).await.expect("send credits");
    s
}

/// The next task delivered to `w`, skipping acks (bounded).
async fn next_task(w: &mut RawSession, within: Duration) -> pb::server_message::Task {
    let deadline = tokio::time::Instant::now() + within;
    loop {
        let left = deadline.saturating_duration_since(tokio::time::Instant::now());
        match w.next(left.max(Duration::from_millis(1))).await {
            Some(pb::server_message::Kind::Task(t)) => return t,
            Some(pb::server_message::Kind::Ack(_)) => {}
            other => panic!("expected a task, got {other:?}"),
        }
    }
}

/// The next task delivered to either session: (0 for `a`, 1 for `b`, the task).
async fn next_of_two(
    a: &mut RawSession,
    b: &mut RawSession,
    within: Duration,
) -> (usize, pb::server_message::Task) {
    tokio::select! {
        t = next_task(a, within) => (0, t),
        t = next_task(b, within) => (1, t),
    }
}

/// Asserts that `w` is delivered no task for `window` (acks and pings aside).
async fn nothing_for(w: &mut RawSession, window: Duration, what: &str) {
    let deadline = tokio::time::Instant::now() + window;
    loop {
        match tokio::time::timeout_at(deadline, w.rx.message()).await {
            Err(_) => return,
            Ok(Ok(Some(m))) => {
                assert!(
                    !matches!(m.kind, Some(pb::server_message::Kind::Task(_))),
                    "{what}: a task was delivered: {m:?}"
                );
            }
            Ok(other) => panic!("{what}: the session ended: {other:?}"),
        }
    }
}

fn input_of(task: &pb::server_message::Task) -> Value {
    task.input
        .clone()
        .and_then(|v| orbit_server_kit::payload::proto_to_json(v).ok())
        .unwrap_or(Value::Null)
}

/// The pending task of `id`, once `check` holds for it (bounded).
async fn pending_until(
    c: &mut pb::workflow_service_client::WorkflowServiceClient<tonic::transport::Channel>,
    id: &str,
    check: impl Fn(&pb::PendingTask) -> bool,
) -> pb::PendingTask {
    pending_task_until(c, id, WAIT, check).await
}

#[tokio::test]
async fn a_labelled_step_runs_only_on_a_worker_with_its_labels() {
    let dir = TempDir::new("pools-labels");
    let server = Server::start(&dir.0.join("db"), &[]).await;
    let mut c = server.client().await;
    register(&mut c, GPU).await;
    register(&mut c, PLAIN).await;
    let mut cpu = labelled(&server.address(), "w-cpu", &[("pool", "cpu")], 2).await;
    for i in 0..3 {
        start(&mut c, "gpu", &format!("g-{i}"), json!({"id": format!("g-{i}")})).await.unwrap();
    }
    // Queued, naming the labels they wait for; the cpu worker (2 free credits) gets none.
    for i in 0..3 {
        let t = pending_until(&mut c, &format!("g-{i}"), |t| {
            t.state == pb::PendingTaskState::Queued as i32
        })
        .await;
        assert_eq!(t.labels.get("pool").map(String::as_str), Some("gpu"));
    }
    nothing_for(&mut cpu, Duration::from_millis(500), "the cpu worker").await;
    // An unlabelled step goes to the cpu worker: it is the only one.
    for i in 0..2 {
        start(&mut c, "plain", &format!("p-{i}"), json!({"id": format!("p-{i}")})).await.unwrap();
    }
    let mut on_cpu = Vec::new();
    for _ in 0..2 {
        on_cpu.push(next_task(&mut cpu, WAIT).await);
    }
    let mut ids: Vec<String> = on_cpu.iter().map(|t| input_of(t)["id"].to_string()).collect();
    ids.sort();
    assert_eq!(ids, ["\"p-0\"", "\"p-1\""]);

    // The gpu worker takes the three gpu steps; an unlabelled step also runs on it (the cpu
    // worker's credits are all in use).
    let mut gpu = labelled(&server.address(), "w-gpu", &[("pool", "gpu"), ("zone", "a")], 10).await;
    let mut on_gpu = Vec::new();
    for _ in 0..3 {
        on_gpu.push(next_task(&mut gpu, WAIT).await);
    }
    let mut ids: Vec<String> = on_gpu.iter().map(|t| input_of(t)["id"].to_string()).collect();
    ids.sort();
    assert_eq!(ids, ["\"g-0\"", "\"g-1\"", "\"g-2\""]);
    start(&mut c, "plain", "p-2", json!({"id": "p-2"})).await.unwrap();
    let p2 = next_task(&mut gpu, WAIT).await;
    assert_eq!(input_of(&p2)["id"], "p-2");
    on_gpu.push(p2);
    for t in &on_cpu {
        cpu.complete(&t.token, json!("cpu")).await;
    }
    for t in &on_gpu {
        gpu.complete(&t.token, json!("gpu")).await;
    }
    for id in ["g-0", "g-1", "g-2", "p-0", "p-1", "p-2"] {
        let (status, output) = result(&mut c, id, WAIT).await;
        assert_eq!(status, pb::ExecutionStatus::Completed, "{id}");
        let expected = if id.starts_with('g') || id == "p-2" { "gpu" } else { "cpu" };
        assert_eq!(output, json!(expected), "{id}");
    }
}

#[tokio::test]
async fn a_sticky_workflow_stays_on_one_worker_and_falls_back_when_it_is_gone() {
    let dir = TempDir::new("pools-sticky");
    let server = Server::start(&dir.0.join("db"), &[]).await;
    let mut c = server.client().await;
    register(&mut c, STICKY).await;
    let mut w = [
        labelled(&server.address(), "w-1", &[], 10).await,
        labelled(&server.address(), "w-2", &[], 10).await,
    ];

    // Both workers have free slots; every step runs where the first one did.
    for round in 0..4 {
        let id = format!("s-{round}");
        start(&mut c, "sticky", &id, json!({"id": id})).await.unwrap();
        let [w1, w2] = &mut w;
        let (first, t) = next_of_two(w1, w2, WAIT).await;
        w[first].complete(&t.token, json!("a")).await;
        for step in ["b", "c"] {
            let [w1, w2] = &mut w;
            let (which, t) = next_of_two(w1, w2, WAIT).await;
            assert_eq!(which, first, "{id}: step {step} ran on another worker than `a`");
            w[which].complete(&t.token, json!(step)).await;
        }
        let (status, output) = result(&mut c, &id, WAIT).await;
        assert_eq!((status, output), (pb::ExecutionStatus::Completed, json!("c")), "{id}");
    }

    // The worker running `a` leaves, then reports `a`'s result through the unary RPC: `b`
    // sticks to it, waits (no session of it is open), and runs on the other worker once
    // the sticky timeout has passed.
    start(&mut c, "sticky", "gone", json!({"id": "gone"})).await.unwrap();
    let [w1, w2] = &mut w;
    let (first, a) = next_of_two(w1, w2, WAIT).await;
    let gone_worker = ["w-1", "w-2"][first];
    let [w1, w2] = w;
    let (leaving, mut staying) = if first == 0 { (w1, w2) } else { (w2, w1) };
    drop(leaving);
    let mut admin =
        pb::admin_service_client::AdminServiceClient::new(channel_to(&server.address()).await);
    poll_until(
        WAIT,
        || format!("{gone_worker} never went offline"),
        async || {
            let workers = admin
                .list_workers(pb::ListWorkersRequest::default())
                .await
                .expect("list workers")
                .into_inner()
                .workers;
            (!workers.iter().any(|w| w.worker_id == gone_worker && w.online)).then_some(())
        },
    )
    .await;
    worker_client(&server.address())
        .await
        .complete_task(pb::CompleteTaskRequest {
            token: a.token.clone(),
            output: Some(orbit_server_kit::payload::json_to_proto(json!("a"))),
            worker_id: gone_worker.into(),
        })
        .await
        .expect("complete a through the unary RPC");
    let described = pending_until(&mut c, "gone", |t| t.unit == "b").await;
    assert_eq!(described.sticky_worker, gone_worker, "{described:?}");
    let b = next_task(&mut staying, STICKY_TIMEOUT + QUEUE_WATCH + WAIT).await;
    assert_eq!(input_of(&b)["id"], "gone");
    staying.complete(&b.token, json!("b")).await;
    // `c` now sticks to the worker that ran `b`.
    let c_task = next_task(&mut staying, WAIT).await;
    staying.complete(&c_task.token, json!("c")).await;
    let (status, _) = result(&mut c, "gone", WAIT).await;
    assert_eq!(status, pb::ExecutionStatus::Completed);

    // `b` was queued at least the sticky timeout (less clock granularity) before it was
    // dispatched to the other worker.
    let events = history(&mut c, "gone").await;
    let at = |kind: &str| {
        let e = events.iter().find(|e| e.event_type == kind && e.step == "b");
        let ts = e.and_then(|e| e.timestamp).unwrap_or_else(|| panic!("no {kind} of b"));
        i128::from(ts.seconds) * 1000 + i128::from(ts.nanos) / 1_000_000
    };
    let waited = at("StepDispatched") - at("StepScheduled");
    let least = i128::try_from(STICKY_TIMEOUT.as_millis()).unwrap_or(i128::MAX) - 50;
    assert!(waited >= least, "b was dispatched {waited} ms after it was queued");
}
