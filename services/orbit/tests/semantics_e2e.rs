//! The execution semantics the simulator checks, end to end: the real `orbit dev` binary,
//! a real Rust worker over loopback gRPC, and assertions on the stored HISTORY (event kinds
//! and order, attempts, error codes), not only on the final status.
//!
//! Covered: retries with backoff and a non-retryable error; attempt, queue and workflow
//! timeouts; compensation in reverse order; `on.failure`, `on.cancel` and `on.timeout`
//! handlers; `on_signal` handlers; task input and output contract violations; the
//! `for_each` concurrency cap. Timeouts are small configured values; every wait is derived
//! from them with a wide margin, and nothing asserts how long anything took.

mod common;

use common::scenario::signal;
use common::*;
use orbit_api::v1 as pb;
use orbit_server_kit::payload::proto_to_json;
use orbit_worker::{TaskContext, TaskFailure, Worker, WorkerBuilder};
use serde_json::{json, Value};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio_util::sync::CancellationToken;

/// The bound on any one wait for a result: far above every configured timeout below.
const WAIT: Duration = Duration::from_secs(60);

/// The key [`events`] adds to every event's fields: its commit time, epoch milliseconds.
const AT: &str = "$at_ms";

/// What a worker saw, in order.
type Log<T> = Arc<Mutex<Vec<T>>>;

/// One history event: (type, unit, fields).
type Ev = (String, String, Value);

fn events(h: &[pb::HistoryEvent]) -> Vec<Ev> {
    h.iter()
        .map(|e| {
            let mut fields = e
                .payload
                .clone()
                .map_or(Value::Null, |p| proto_to_json(pb_value(p)).unwrap_or(Value::Null));
            // The commit time rides along under a key no event has, for causality checks.
            if let (Value::Object(m), Some(t)) = (&mut fields, &e.timestamp) {
                let ms = t.seconds * 1000 + i64::from(t.nanos / 1_000_000);
                m.insert(AT.into(), json!(ms));
            }
            (e.event_type.clone(), e.step.clone(), fields)
        })
        .collect()
}

fn pb_value(s: prost_types::Struct) -> prost_types::Value {
    prost_types::Value { kind: Some(prost_types::value::Kind::StructValue(s)) }
}

/// Positions of the events of `kind` on `unit` (any unit for `""`).
fn find(h: &[Ev], kind: &str, unit: &str) -> Vec<usize> {
    h.iter()
        .enumerate()
        .filter(|(_, (t, s, _))| t == kind && (unit.is_empty() || s == unit))
        .map(|(i, _)| i)
        .collect()
}

/// The only event of `kind` on `unit`: its position and fields.
fn one<'a>(h: &'a [Ev], kind: &str, unit: &str) -> (usize, &'a Value) {
    let at = find(h, kind, unit);
    assert_eq!(at.len(), 1, "expected one {kind}({unit}), got {at:?} in {}", summary(h));
    (at[0], &h[at[0]].2)
}

fn summary(h: &[Ev]) -> String {
    h.iter()
        .map(|(t, s, _)| if s.is_empty() { t.clone() } else { format!("{t}({s})") })
        .collect::<Vec<_>>()
        .join(", ")
}

/// Asserts that these (kind, unit) events occur in this order (other events in between).
fn in_order(h: &[Ev], expected: &[(&str, &str)]) {
    let mut from = 0;
    for (kind, unit) in expected {
        let next =
            h[from..].iter().position(|(t, s, _)| t == kind && (unit.is_empty() || s == unit));
        match next {
            Some(i) => from += i + 1,
            None => panic!("{kind}({unit}) not found in order after event {from}: {}", summary(h)),
        }
    }
}

/// A server with `defs` registered and a client.
async fn serve(
    name: &str,
    defs: &[&str],
) -> (TempDir, Server, pb::workflow_service_client::WorkflowServiceClient<tonic::transport::Channel>)
{
    let dir = TempDir::new(name);
    let server = Server::start(&dir.0.join("orbit.db"), &[]).await;
    let mut c = server.client().await;
    for d in defs {
        register(&mut c, d).await;
    }
    (dir, server, c)
}

/// Runs `builder`'s worker until `stop`.
fn run_worker(builder: WorkerBuilder, stop: &CancellationToken) {
    let w: Worker = builder.max_concurrency(16).build().expect("worker");
    let stop = stop.clone();
    tokio::spawn(async move { w.run(stop).await });
}

/// The run's history once it has ended, and its status.
async fn finished(
    c: &mut pb::workflow_service_client::WorkflowServiceClient<tonic::transport::Channel>,
    id: &str,
) -> (pb::ExecutionStatus, Vec<Ev>) {
    let (status, _) = result(c, id, WAIT).await;
    (status, events(&history(c, id).await))
}

fn ok(v: Value) -> Result<Value, TaskFailure> {
    Ok(v)
}

const RETRIES: &str = r#"
name: retries
version: "1"
tasks: { flaky: { version: "1" }, declines: { version: "1" }, breaks: { version: "1" } }
steps:
  - id: flaky
    task: flaky
    retry: { max_attempts: 4, initial_interval: 200ms, backoff: 2.0, max_interval: 10s }
  - id: pay
    needs: [flaky]
    task: '${{ input.second }}'
    retry: { max_attempts: 5, initial_interval: 100ms, non_retryable: [DECLINED] }
output: ${{ steps.flaky.output }}
"#;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn retries_back_off_and_non_retryable_errors_stop_them() {
    // `task:` takes no expression, so two definitions differ only in the second task.
    let declines = RETRIES.replace("'${{ input.second }}'", "declines");
    let breaks = RETRIES
        .replace("name: retries", "name: retries-fatal")
        .replace("'${{ input.second }}'", "breaks");
    let (_dir, server, mut c) = serve("sem-retries", &[&declines, &breaks]).await;
    let stop = CancellationToken::new();
    let builder = Worker::builder(server.address())
        .worker_id("sem-retries")
        .task("flaky", "1", |ctx: TaskContext| async move {
            if ctx.attempt() < 3 {
                return Err(TaskFailure::retryable("FLAKY", format!("attempt {}", ctx.attempt())));
            }
            ok(json!({"attempt": ctx.attempt()}))
        })
        // Retryable by the worker's word, but listed in the step's `non_retryable`.
        .task("declines", "1", |_ctx: TaskContext| async move {
            Err::<Value, _>(TaskFailure::retryable("DECLINED", "card declined"))
        })
        // Not retryable by the worker's word.
        .task("breaks", "1", |_ctx: TaskContext| async move {
            Err::<Value, _>(TaskFailure::fatal("BROKEN", "cannot work"))
        });
    run_worker(builder, &stop);

    for (workflow, id, code) in [("retries", "r-1", "DECLINED"), ("retries-fatal", "r-2", "BROKEN")]
    {
        start(&mut c, workflow, id, json!({})).await.expect("start");
        let (status, h) = finished(&mut c, id).await;
        assert_eq!(status, pb::ExecutionStatus::Failed, "{id}: {}", summary(&h));
        // flaky: attempts 1 and 2 fail, each followed by a backoff, attempt 3 succeeds.
        let failed = find(&h, "StepAttemptFailed", "flaky");
        assert_eq!(failed.len(), 2, "{}", summary(&h));
        for (n, at) in failed.iter().enumerate() {
            assert_eq!(h[*at].2["attempt"], n + 1);
            assert_eq!(h[*at].2["error"]["code"], "FLAKY");
        }
        let retries = find(&h, "RetryScheduled", "flaky");
        assert_eq!(retries.len(), 2, "{}", summary(&h));
        let delays: Vec<u64> =
            retries.iter().map(|i| h[*i].2["delay_ms"].as_u64().unwrap()).collect();
        // 200 ms then 400 ms (backoff 2.0), less at most 10 % deterministic jitter.
        assert!((180..=200).contains(&delays[0]), "{delays:?}");
        assert!((360..=400).contains(&delays[1]), "{delays:?}");
        assert_eq!(h[retries[1]].2["next_attempt"], 3);
        let scheduled = find(&h, "StepScheduled", "flaky");
        let attempts: Vec<_> = scheduled.iter().map(|i| h[*i].2["attempt"].clone()).collect();
        assert_eq!(attempts, [json!(1), json!(2), json!(3)]);
        // Causality, not timing: no retry is scheduled before the backoff it announced ends.
        for (retry, next) in retries.iter().zip(&scheduled[1..]) {
            let fire_at = h[*retry].2["fire_at"].as_i64().unwrap();
            let at = h[*next].2[AT].as_i64().unwrap();
            assert!(at >= fire_at, "attempt scheduled at {at}, before its fire_at {fire_at}");
        }
        let (_, ok) = one(&h, "StepSucceeded", "flaky");
        assert_eq!(ok["attempt"], 3);
        assert_eq!(ok["output"], json!({"attempt": 3}));
        in_order(
            &h,
            &[
                ("StepAttemptFailed", "flaky"),
                ("RetryScheduled", "flaky"),
                ("StepScheduled", "flaky"),
                ("StepAttemptFailed", "flaky"),
                ("RetryScheduled", "flaky"),
                ("StepScheduled", "flaky"),
                ("StepSucceeded", "flaky"),
            ],
        );
        // pay: one attempt, no retry, the step and the workflow fail with the worker's code.
        assert_eq!(find(&h, "StepScheduled", "pay").len(), 1, "{}", summary(&h));
        assert!(find(&h, "RetryScheduled", "pay").is_empty(), "{}", summary(&h));
        let (_, attempt) = one(&h, "StepAttemptFailed", "pay");
        assert_eq!(attempt["error"]["code"], code);
        let (_, failed) = one(&h, "StepFailed", "pay");
        assert_eq!(failed["error"]["code"], code);
        let (_, end) = one(&h, "WorkflowFailed", "");
        assert_eq!(end["error"]["code"], code);
        in_order(&h, &[("StepFailed", "pay"), ("WorkflowFailed", "")]);
    }
    stop.cancel();
}

const TIMEOUTS: &str = r#"
name: timeouts
version: "1"
tasks: { slow: { version: "1" }, nobody: { version: "1" } }
steps:
  - id: slow
    task: slow
    timeout: 2s
    retry: { max_attempts: 2, initial_interval: 100ms }
  - id: queued
    needs: [slow]
    task: nobody
    queue_timeout: 1s
    retry: { max_attempts: 2, initial_interval: 100ms }
"#;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn attempt_and_queue_timeouts_fail_attempts_and_are_retried() {
    let (_dir, server, mut c) = serve("sem-timeouts", &[TIMEOUTS]).await;
    let stop = CancellationToken::new();
    let builder = Worker::builder(server.address()).worker_id("sem-timeouts").task(
        "slow",
        "1",
        |ctx: TaskContext| async move {
            if ctx.attempt() == 1 {
                // Far past the 2 s attempt timeout; the answer arrives stale, if at all.
                tokio::time::sleep(Duration::from_secs(20)).await;
            }
            ok(json!({"attempt": ctx.attempt()}))
        },
    );
    // Nobody serves `nobody`: its attempts wait in the queue until the queue timeout.
    run_worker(builder, &stop);
    start(&mut c, "timeouts", "t-1", json!({})).await.expect("start");
    let (status, h) = finished(&mut c, "t-1").await;
    assert_eq!(status, pb::ExecutionStatus::Failed, "{}", summary(&h));

    let (_, timed_out) = one(&h, "StepAttemptFailed", "slow");
    assert_eq!(timed_out["attempt"], 1);
    assert_eq!(timed_out["error"]["code"], "TIMEOUT");
    let (_, ok) = one(&h, "StepSucceeded", "slow");
    assert_eq!(ok["attempt"], 2);
    in_order(
        &h,
        &[
            ("StepDispatched", "slow"),
            ("StepAttemptFailed", "slow"),
            ("RetryScheduled", "slow"),
            ("StepDispatched", "slow"),
            ("StepSucceeded", "slow"),
        ],
    );

    // Two queue timeouts (attempts 1 and 2, never dispatched), then the step fails.
    assert!(find(&h, "StepDispatched", "queued").is_empty(), "{}", summary(&h));
    let failed = find(&h, "StepAttemptFailed", "queued");
    assert_eq!(failed.len(), 2, "{}", summary(&h));
    for (n, at) in failed.iter().enumerate() {
        assert_eq!(h[*at].2["attempt"], n + 1);
        assert_eq!(h[*at].2["error"]["code"], "QUEUE_TIMEOUT");
    }
    assert_eq!(find(&h, "RetryScheduled", "queued").len(), 1);
    let (_, step) = one(&h, "StepFailed", "queued");
    assert_eq!(step["error"]["code"], "QUEUE_TIMEOUT");
    let (_, end) = one(&h, "WorkflowFailed", "");
    assert_eq!(end["error"]["code"], "QUEUE_TIMEOUT");
    stop.cancel();
}

const SAGA: &str = r#"
name: saga
version: "1"
timeout: ${TIMEOUT}
tasks: { do: { version: "1" }, undo: { version: "1" }, alert: { version: "1" }, boom: { version: "1" } }
signals: { go: null }
steps:
  - { id: a, task: do, input: { name: a }, compensate: { task: undo, input: { name: a } } }
  - { id: b, needs: [a], task: do, input: { name: b }, compensate: { task: undo, input: { name: b } } }
  - { id: c, needs: [b], task: do, input: { name: c }, compensate: { task: undo, input: { name: c } } }
  - { id: gate, needs: [c], await: go }
  - { id: last, needs: [gate], task: boom }
on:
  failure: [ { id: alert, task: alert, input: { outcome: failure, code: "${{ failure.code }}" } } ]
  cancel: [ { id: alert, task: alert, input: { outcome: cancel } } ]
  timeout: [ { id: alert, task: alert, input: { outcome: timeout } } ]
"#;

/// A worker for `saga` that records the names `undo` and the inputs `alert` receive.
fn saga_worker(address: String, stop: &CancellationToken) -> (Log<String>, Log<Value>) {
    let undone = Arc::new(Mutex::new(Vec::new()));
    let alerts = Arc::new(Mutex::new(Vec::new()));
    let (u, a) = (Arc::clone(&undone), Arc::clone(&alerts));
    let builder = Worker::builder(address)
        .worker_id("sem-saga")
        .task("do", "1", |ctx: TaskContext| async move { ok(json!({"done": ctx.input()["name"]})) })
        .task("undo", "1", move |ctx: TaskContext| {
            let u = Arc::clone(&u);
            async move {
                u.lock().unwrap().push(ctx.input()["name"].as_str().unwrap_or("?").to_owned());
                ok(json!({}))
            }
        })
        .task("alert", "1", move |ctx: TaskContext| {
            let a = Arc::clone(&a);
            async move {
                a.lock().unwrap().push(ctx.input().clone());
                ok(json!({}))
            }
        })
        .task("boom", "1", |_ctx: TaskContext| async move {
            Err::<Value, _>(TaskFailure::fatal("BOOM", "the last step broke"))
        });
    run_worker(builder, stop);
    (undone, alerts)
}

/// The wind-down every outcome shares: c, b, a compensated one after the other, then the
/// `on.<outcome>` handler, then the terminal event.
fn assert_wind_down(h: &[Ev], outcome: &str, terminal: &str) {
    let (_, started) = one(h, "CompensationStarted", "");
    assert_eq!(started["reason"], outcome, "{}", summary(h));
    assert_eq!(started["steps"], json!(["c", "b", "a"]));
    in_order(
        h,
        &[
            ("CompensationStarted", ""),
            ("StepScheduled", "compensate:c"),
            ("StepSucceeded", "compensate:c"),
            ("StepScheduled", "compensate:b"),
            ("StepSucceeded", "compensate:b"),
            ("StepScheduled", "compensate:a"),
            ("StepSucceeded", "compensate:a"),
            ("CompensationCompleted", ""),
            ("HandlersStarted", ""),
            ("StepSucceeded", &format!("on:{outcome}:alert")),
            (terminal, ""),
        ],
    );
    let (_, handlers) = one(h, "HandlersStarted", "");
    assert_eq!(handlers["outcome"], outcome);
    let (_, end) = one(h, terminal, "");
    assert_eq!(end["compensation"], "completed");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn failure_compensates_in_reverse_order_then_runs_on_failure() {
    let (_dir, server, mut c) = serve("sem-saga-fail", &[&SAGA.replace("${TIMEOUT}", "1h")]).await;
    let stop = CancellationToken::new();
    let (undone, alerts) = saga_worker(server.address(), &stop);
    start(&mut c, "saga", "s-1", json!({})).await.expect("start");
    history_until(&mut c, "s-1", WAIT, |h| h.iter().any(|e| e.event_type == "AwaitStarted")).await;
    signal(&mut c, "s-1", "go", Value::Null).await;
    let (status, h) = finished(&mut c, "s-1").await;
    assert_eq!(status, pb::ExecutionStatus::Failed, "{}", summary(&h));
    in_order(
        &h,
        &[
            ("StepSucceeded", "a"),
            ("StepSucceeded", "b"),
            ("StepSucceeded", "c"),
            ("StepFailed", "last"),
        ],
    );
    assert_wind_down(&h, "failure", "WorkflowFailed");
    assert_eq!(*undone.lock().unwrap(), ["c", "b", "a"]);
    assert_eq!(*alerts.lock().unwrap(), [json!({"outcome": "failure", "code": "BOOM"})]);
    stop.cancel();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cancel_compensates_then_runs_on_cancel() {
    let (_dir, server, mut c) =
        serve("sem-saga-cancel", &[&SAGA.replace("${TIMEOUT}", "1h")]).await;
    let stop = CancellationToken::new();
    let (undone, alerts) = saga_worker(server.address(), &stop);
    start(&mut c, "saga", "s-2", json!({})).await.expect("start");
    history_until(&mut c, "s-2", WAIT, |h| h.iter().any(|e| e.event_type == "AwaitStarted")).await;
    c.cancel_execution(pb::CancelExecutionRequest {
        execution_id: "s-2".into(),
        reason: "customer changed their mind".into(),
        request_id: String::new(),
    })
    .await
    .expect("cancel");
    let (status, h) = finished(&mut c, "s-2").await;
    assert_eq!(status, pb::ExecutionStatus::Cancelled, "{}", summary(&h));
    let (requested, _) = one(&h, "CancelRequested", "");
    let (cancelled, _) = one(&h, "StepCancelled", "gate");
    assert!(requested < cancelled);
    assert!(find(&h, "StepScheduled", "last").is_empty(), "{}", summary(&h));
    assert_wind_down(&h, "cancel", "WorkflowCancelled");
    assert_eq!(*undone.lock().unwrap(), ["c", "b", "a"]);
    assert_eq!(*alerts.lock().unwrap(), [json!({"outcome": "cancel"})]);
    stop.cancel();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn workflow_timeout_compensates_then_runs_on_timeout() {
    // An 8 s workflow timeout, long enough for a, b and c to succeed first on a busy
    // machine; the gate is never signalled.
    let (_dir, server, mut c) =
        serve("sem-saga-timeout", &[&SAGA.replace("${TIMEOUT}", "8s")]).await;
    let stop = CancellationToken::new();
    let (undone, alerts) = saga_worker(server.address(), &stop);
    start(&mut c, "saga", "s-3", json!({})).await.expect("start");
    let (status, h) = finished(&mut c, "s-3").await;
    assert_eq!(status, pb::ExecutionStatus::TimedOut, "{}", summary(&h));
    let (reached, _) = one(&h, "WorkflowTimeoutReached", "");
    let (cancelled, _) = one(&h, "StepCancelled", "gate");
    assert!(reached < cancelled, "{}", summary(&h));
    assert_wind_down(&h, "timeout", "WorkflowTimedOut");
    assert_eq!(*undone.lock().unwrap(), ["c", "b", "a"]);
    assert_eq!(*alerts.lock().unwrap(), [json!({"outcome": "timeout"})]);
    stop.cancel();
}

const NOTES: &str = r#"
name: notes
version: "1"
tasks: { notes.append: { version: "1" } }
signals:
  done: null
  note: { type: object, required: [text], properties: { text: { type: string } } }
steps:
  - { id: wait, await: done }
output: ${{ steps.wait.output }}
on_signal:
  note: [ { id: record, task: notes.append, input: { text: "${{ event.text }}" } } ]
"#;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_signal_starts_its_on_signal_handler() {
    let (_dir, server, mut c) = serve("sem-notes", &[NOTES]).await;
    let stop = CancellationToken::new();
    let seen = Arc::new(Mutex::new(Vec::new()));
    let s = Arc::clone(&seen);
    let builder = Worker::builder(server.address()).worker_id("sem-notes").task(
        "notes.append",
        "1",
        move |ctx: TaskContext| {
            let s = Arc::clone(&s);
            async move {
                s.lock().unwrap().push((ctx.step().to_owned(), ctx.input()["text"].clone()));
                ok(json!({"stored": ctx.input()["text"]}))
            }
        },
    );
    run_worker(builder, &stop);
    start(&mut c, "notes", "n-1", json!({})).await.expect("start");
    history_until(&mut c, "n-1", WAIT, |h| h.iter().any(|e| e.event_type == "AwaitStarted")).await;
    signal(&mut c, "n-1", "note", json!({"text": "first"})).await;
    signal(&mut c, "n-1", "note", json!({"text": "second"})).await;
    // `done` only after both handlers finished: handlers still running would be cancelled.
    history_until(&mut c, "n-1", WAIT, |h| {
        h.iter()
            .filter(|e| e.event_type == "StepSucceeded" && e.step.starts_with("on_signal:"))
            .count()
            == 2
    })
    .await;
    signal(&mut c, "n-1", "done", json!({"ok": true})).await;
    let (status, h) = finished(&mut c, "n-1").await;
    assert_eq!(status, pb::ExecutionStatus::Completed, "{}", summary(&h));
    // Each note: received, delivered to a handler instance of its own, run, succeeded.
    let delivered: Vec<&Ev> =
        h.iter().filter(|(t, _, f)| t == "SignalDelivered" && f["name"] == "note").collect();
    assert_eq!(delivered.len(), 2, "{}", summary(&h));
    // A delivery names the handler instance (`on_signal:note@<seq>`); its step's unit is
    // `<instance>:record`.
    let units: Vec<String> = delivered
        .iter()
        .map(|(_, _, f)| format!("{}:record", f["step"].as_str().unwrap()))
        .collect();
    for (unit, text) in units.iter().zip(["first", "second"]) {
        assert!(unit.starts_with("on_signal:note@"), "{unit}");
        let (_, scheduled) = one(&h, "StepScheduled", unit);
        assert_eq!(scheduled["input"], json!({"text": text}));
        let (_, ok) = one(&h, "StepSucceeded", unit);
        assert_eq!(ok["output"], json!({"stored": text}));
    }
    assert_ne!(units[0], units[1]);
    // The two instances may run side by side, so only each one's place before `done`.
    for unit in &units {
        in_order(
            &h,
            &[("StepSucceeded", unit), ("SignalDelivered", "wait"), ("WorkflowCompleted", "")],
        );
    }
    let (_, end) = one(&h, "WorkflowCompleted", "");
    assert_eq!(end["output"], json!({"ok": true}));
    let mut seen = seen.lock().unwrap().clone();
    seen.sort_by_key(|(unit, _)| unit.clone());
    let mut expected =
        vec![(units[0].clone(), json!("first")), (units[1].clone(), json!("second"))];
    expected.sort_by_key(|(unit, _)| unit.clone());
    assert_eq!(seen, expected);
    stop.cancel();
}

const CONTRACTS: &str = r#"
name: contracts
version: "1"
tasks:
  math.double:
    version: "1"
    input: { type: object, required: [n], properties: { n: { type: number } } }
    output: { type: object, required: [value], properties: { value: { type: number } } }
steps:
  - id: double
    task: math.double
    input: { n: "${{ input.n }}" }
    retry: { max_attempts: 3, initial_interval: 100ms }
"#;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn contract_violations_fail_the_step_without_retries() {
    let (_dir, server, mut c) = serve("sem-contracts", &[CONTRACTS]).await;
    let stop = CancellationToken::new();
    let calls = Arc::new(AtomicUsize::new(0));
    let n = Arc::clone(&calls);
    let builder = Worker::builder(server.address()).worker_id("sem-contracts").task(
        "math.double",
        "1",
        move |_ctx: TaskContext| {
            n.fetch_add(1, Ordering::SeqCst);
            // Breaks the output contract: `value` is required.
            async move { ok(json!({"val": 1})) }
        },
    );
    run_worker(builder, &stop);

    // Input: `n` rendered as a string breaks the task's input contract before dispatch.
    start(&mut c, "contracts", "k-in", json!({"n": "three"})).await.expect("start");
    let (status, h) = finished(&mut c, "k-in").await;
    assert_eq!(status, pb::ExecutionStatus::Failed, "{}", summary(&h));
    assert!(find(&h, "StepScheduled", "double").is_empty(), "{}", summary(&h));
    assert!(find(&h, "StepDispatched", "double").is_empty(), "{}", summary(&h));
    let (_, failed) = one(&h, "StepFailed", "double");
    assert_eq!(failed["error"]["code"], "INPUT_CONTRACT_VIOLATION");
    let (_, end) = one(&h, "WorkflowFailed", "");
    assert_eq!(end["error"]["code"], "INPUT_CONTRACT_VIOLATION");
    assert_eq!(calls.load(Ordering::SeqCst), 0, "the worker never saw the bad input");

    // Output: the worker's answer breaks the output contract; not retried despite 3 attempts.
    start(&mut c, "contracts", "k-out", json!({"n": 3})).await.expect("start");
    let (status, h) = finished(&mut c, "k-out").await;
    assert_eq!(status, pb::ExecutionStatus::Failed, "{}", summary(&h));
    assert_eq!(find(&h, "StepDispatched", "double").len(), 1, "{}", summary(&h));
    assert!(find(&h, "StepSucceeded", "double").is_empty(), "{}", summary(&h));
    assert!(find(&h, "RetryScheduled", "double").is_empty(), "{}", summary(&h));
    let (_, failed) = one(&h, "StepFailed", "double");
    assert_eq!(failed["error"]["code"], "OUTPUT_CONTRACT_VIOLATION");
    assert_eq!(calls.load(Ordering::SeqCst), 1);
    stop.cancel();
}

const FAN: &str = r#"
name: fan
version: "1"
tasks: { work: { version: "1" } }
steps:
  - id: each
    for_each: ${{ input.items }}
    max_concurrency: 2
    task: work
    input: { n: "${{ item }}" }
output: ${{ steps.each.output }}
"#;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn for_each_never_runs_more_units_than_max_concurrency() {
    let (_dir, server, mut c) = serve("sem-fan", &[FAN]).await;
    let stop = CancellationToken::new();
    let (now, peak) = (Arc::new(AtomicUsize::new(0)), Arc::new(AtomicUsize::new(0)));
    let (n, p) = (Arc::clone(&now), Arc::clone(&peak));
    // The worker could take 16 at once; only the step's cap of 2 limits it.
    let builder = Worker::builder(server.address()).worker_id("sem-fan").task(
        "work",
        "1",
        move |ctx: TaskContext| {
            let (n, p) = (Arc::clone(&n), Arc::clone(&p));
            async move {
                let running = n.fetch_add(1, Ordering::SeqCst) + 1;
                p.fetch_max(running, Ordering::SeqCst);
                tokio::time::sleep(Duration::from_millis(200)).await;
                n.fetch_sub(1, Ordering::SeqCst);
                ok(json!(ctx.input()["n"].as_f64().unwrap_or(0.0) * 10.0))
            }
        },
    );
    run_worker(builder, &stop);
    start(&mut c, "fan", "f-1", json!({"items": [1, 2, 3, 4, 5, 6]})).await.expect("start");
    let (status, h) = finished(&mut c, "f-1").await;
    assert_eq!(status, pb::ExecutionStatus::Completed, "{}", summary(&h));
    let (fan, items) = one(&h, "StepFanOut", "each");
    assert_eq!(items["items"], json!([1, 2, 3, 4, 5, 6]));
    // In history order, never more than 2 elements scheduled and not yet resolved.
    let (mut open, mut most) = (0_i32, 0_i32);
    for (t, s, _) in &h[fan..] {
        if !s.starts_with("each[") {
            continue;
        }
        match t.as_str() {
            "StepScheduled" => open += 1,
            "StepSucceeded" | "StepFailed" => open -= 1,
            _ => {}
        }
        most = most.max(open);
    }
    assert_eq!(most, 2, "the cap is 2 and 6 elements fill it: {}", summary(&h));
    assert!(
        peak.load(Ordering::SeqCst) <= 2,
        "the worker ran {} at once",
        peak.load(Ordering::SeqCst)
    );
    for i in 0..6 {
        one(&h, "StepSucceeded", &format!("each[{i}]"));
    }
    let (_, end) = one(&h, "WorkflowCompleted", "");
    assert_eq!(end["output"], json!([10, 20, 30, 40, 50, 60]));
    stop.cancel();
}

const FAN_SAGA: &str = r#"
name: fan-saga
version: "1"
tasks: { work: { version: "1" }, undo: { version: "1" }, boom: { version: "1" } }
steps:
  - id: each
    for_each: ${{ input.items }}
    max_concurrency: 1
    task: work
    input: { n: "${{ item }}" }
    compensate: { task: undo, input: { n: "${{ item }}", index: "${{ index }}" } }
  - { id: last, needs: [each], task: boom }
"#;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn for_each_elements_are_compensated_with_their_own_element_in_reverse_order() {
    let (_dir, server, mut c) = serve("sem-fan-saga", &[FAN_SAGA]).await;
    let stop = CancellationToken::new();
    let undone: Log<Value> = Arc::new(Mutex::new(Vec::new()));
    let u = Arc::clone(&undone);
    let builder = Worker::builder(server.address())
        .worker_id("sem-fan-saga")
        .task("work", "1", |ctx: TaskContext| async move { ok(ctx.input()["n"].clone()) })
        .task("undo", "1", move |ctx: TaskContext| {
            let u = Arc::clone(&u);
            async move {
                u.lock().unwrap().push(ctx.input().clone());
                ok(json!({}))
            }
        })
        .task("boom", "1", |_ctx: TaskContext| async move {
            Err::<Value, _>(TaskFailure::fatal("BOOM", "after the fan-out"))
        });
    run_worker(builder, &stop);
    start(&mut c, "fan-saga", "fs-1", json!({"items": [10, 20, 30]})).await.expect("start");
    let (status, h) = finished(&mut c, "fs-1").await;
    assert_eq!(status, pb::ExecutionStatus::Failed, "{}", summary(&h));
    // max_concurrency 1: the elements succeed in index order, so they compensate 2, 1, 0.
    in_order(
        &h,
        &[("StepSucceeded", "each[0]"), ("StepSucceeded", "each[1]"), ("StepSucceeded", "each[2]")],
    );
    let (_, started) = one(&h, "CompensationStarted", "");
    assert_eq!(started["steps"], json!(["each[2]", "each[1]", "each[0]"]));
    for (i, n) in [(2, 30), (1, 20), (0, 10)] {
        let (_, scheduled) = one(&h, "StepScheduled", &format!("compensate:each[{i}]"));
        assert_eq!(scheduled["input"], json!({"n": n, "index": i}), "{}", summary(&h));
    }
    in_order(
        &h,
        &[
            ("StepSucceeded", "compensate:each[2]"),
            ("StepSucceeded", "compensate:each[1]"),
            ("StepSucceeded", "compensate:each[0]"),
            ("CompensationCompleted", ""),
            ("WorkflowFailed", ""),
        ],
    );
    let expected =
        [json!({"n": 30, "index": 2}), json!({"n": 20, "index": 1}), json!({"n": 10, "index": 0})];
    assert_eq!(*undone.lock().unwrap(), expected);
    stop.cancel();
}

const LATE: &str = r#"
name: late
version: "1"
tasks: { slow: { version: "1" } }
steps:
  - id: slow
    task: slow
    timeout: 1s
    retry: { max_attempts: 2, initial_interval: 10m }
output: ${{ steps.slow.output }}
"#;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_late_result_for_a_timed_out_attempt_resolves_the_waiting_unit() {
    // Rule 4 of SEMANTICS.md: a result for any token ever issued to an unresolved unit is
    // accepted (the work happened). The attempt timed out and the unit waits 10 minutes for
    // its retry; the first attempt's answer arriving now resolves it.
    let (_dir, server, mut c) = serve("sem-late", &[LATE]).await;
    let mut session = RawSession::start(&server.address(), "sem-late", &[("slow", "1")], 4).await;
    start(&mut c, "late", "l-1", json!({})).await.expect("start");
    let task = session.next_task(WAIT).await;
    assert_eq!((task.step.as_str(), task.attempt), ("slow", 1));
    history_until(&mut c, "l-1", WAIT, |h| h.iter().any(|e| e.event_type == "RetryScheduled"))
        .await;
    session.complete(&task.token, json!({"late": true})).await;
    let (status, h) = finished(&mut c, "l-1").await;
    assert_eq!(status, pb::ExecutionStatus::Completed, "{}", summary(&h));
    in_order(
        &h,
        &[
            ("StepDispatched", "slow"),
            ("StepAttemptFailed", "slow"),
            ("RetryScheduled", "slow"),
            ("StepSucceeded", "slow"),
            ("WorkflowCompleted", ""),
        ],
    );
    let (_, failed) = one(&h, "StepAttemptFailed", "slow");
    assert_eq!(failed["error"]["code"], "TIMEOUT");
    let (_, ok) = one(&h, "StepSucceeded", "slow");
    assert_eq!(ok["attempt"], 1);
    assert_eq!(ok["output"], json!({"late": true}));
    assert_eq!(find(&h, "StepScheduled", "slow").len(), 1, "no second attempt: {}", summary(&h));
}

const STALE: &str = r#"
name: stale
version: "1"
tasks: { slow: { version: "1" } }
signals: { go: null }
steps:
  - id: slow
    task: slow
    timeout: 3s
    retry: { max_attempts: 2, initial_interval: 100ms }
  - { id: gate, needs: [slow], await: go }
output: ${{ steps.slow.output }}
"#;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_result_for_a_resolved_unit_is_recorded_as_stale_and_not_applied() {
    let (_dir, server, mut c) = serve("sem-stale", &[STALE]).await;
    let mut session = RawSession::start(&server.address(), "sem-stale", &[("slow", "1")], 4).await;
    start(&mut c, "stale", "st-1", json!({})).await.expect("start");
    // Attempt 1 is never answered in time; attempt 2 (after the timeout) succeeds.
    let first = session.next_task(WAIT).await;
    assert_eq!(first.attempt, 1);
    // The timed-out attempt is cancelled on the stream (the worker is told), then retried.
    let mut cancelled = Vec::new();
    let second = loop {
        match session.next(WAIT).await {
            Some(pb::server_message::Kind::Task(t)) if t.attempt == 2 => break t,
            Some(pb::server_message::Kind::Cancel(x)) => cancelled.push(x.token),
            other => panic!("expected attempt 2 or a cancel, got {other:?}"),
        }
    };
    assert_eq!(cancelled, std::slice::from_ref(&first.token));
    session.complete(&second.token, json!({"attempt": 2})).await;
    history_until(&mut c, "st-1", WAIT, |h| h.iter().any(|e| e.event_type == "AwaitStarted")).await;
    // Now attempt 1's answer arrives: the unit is resolved, so it is kept, never applied.
    session.complete(&first.token, json!({"attempt": 1})).await;
    history_until(&mut c, "st-1", WAIT, |h| h.iter().any(|e| e.event_type == "StaleResultIgnored"))
        .await;
    signal(&mut c, "st-1", "go", Value::Null).await;
    let (status, h) = finished(&mut c, "st-1").await;
    assert_eq!(status, pb::ExecutionStatus::Completed, "{}", summary(&h));
    let (_, failed) = one(&h, "StepAttemptFailed", "slow");
    assert_eq!(
        (failed["attempt"].clone(), failed["error"]["code"].clone()),
        (json!(1), json!("TIMEOUT"))
    );
    let (ok_at, ok) = one(&h, "StepSucceeded", "slow");
    assert_eq!(ok["output"], json!({"attempt": 2}));
    let (stale_at, stale) = one(&h, "StaleResultIgnored", "slow");
    assert!(ok_at < stale_at);
    assert_eq!(stale["token"], first.token.as_str());
    let (_, end) = one(&h, "WorkflowCompleted", "");
    assert_eq!(end["output"], json!({"attempt": 2}));
}
