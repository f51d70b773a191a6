//! Task hand-off (issue 14) as `orbit dev` wires it: the owner queues a new task already
//! claimed for a matching worker session in the commit that queues it and hands it over
//! after the commit; a hand-off whose session is gone by then is redelivered at once and
//! completes exactly once. Real SQLite store, real owner, the frontend's own server.

mod support;

use orbit_api::v1::server_message::Task;
use orbit_api::v1::worker_message::{Complete, Kind as WorkerKind};
use orbit_api::v1::*;
use orbit_frontend::FrontendConfig;
use orbit_server_kit::payload::json_to_proto;
use orbit_store::{Handoff, NewTask, TaskClaim, TaskRow};
use serde_json::json;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;
use support::{next_task, open_session, say, Harness, Outbound};
use tokio::sync::{mpsc, Notify};

/// Three steps of one task, each on the previous one's output: each result's commit queues
/// the next task.
fn chain(task: &str) -> String {
    format!(
        r#"
name: chain-{task}
version: "1"
tasks:
  {task}: {{ version: "1" }}
steps:
  - {{ id: a, task: {task}, input: {{}} }}
  - {{ id: b, task: {task}, input: "${{{{ steps.a.output }}}}" }}
  - {{ id: c, task: {task}, input: "${{{{ steps.b.output }}}}" }}
output: ${{{{ steps.c.output }}}}
"#
    )
}

fn config() -> FrontendConfig {
    FrontendConfig { node_id: "fe-handoff".into(), ..FrontendConfig::default() }
}

async fn register(h: &mut Harness, task: &str) {
    let req = RegisterWorkflowRequest { document: chain(task), format: 0 };
    h.workflows.register_workflow(req).await.unwrap();
}

async fn start(h: &mut Harness, task: &str, id: &str) {
    let req = StartExecutionRequest {
        workflow: format!("chain-{task}"),
        input: Some(json_to_proto(json!({}))),
        execution_id: id.into(),
        ..Default::default()
    };
    h.workflows.start_execution(req).await.unwrap();
}

/// A worker session for `task` with `credits`.
async fn worker(
    h: &mut Harness,
    id: &str,
    task: &str,
    credits: u32,
) -> (Outbound, tonic::Streaming<ServerMessage>) {
    open_session(&mut h.workers, id, task, 8, credits).await
}

async fn complete(tx: &Outbound, task: &Task) {
    let complete = Complete { token: task.token.clone(), output: Some(json_to_proto(json!({}))) };
    tx.send(say(WorkerKind::Complete(complete))).await.unwrap();
}

async fn history(h: &mut Harness, id: &str) -> Vec<HistoryEvent> {
    let req = GetHistoryRequest {
        execution_id: id.into(),
        run: 0,
        page_size: 0,
        page_token: String::new(),
    };
    h.workflows.get_history(req).await.unwrap().into_inner().events
}

async fn until_completed(h: &mut Harness, id: &str) -> Vec<HistoryEvent> {
    for _ in 0..400 {
        let events = history(h, id).await;
        if events.iter().any(|e| e.event_type == "WorkflowCompleted") {
            return events;
        }
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
    panic!("execution {id} did not complete: {:?}", history(h, id).await);
}

fn handed_off(task: &str) -> u64 {
    orbit_metrics::get().tasks_handed_off.with_label_values(&[task]).get()
}

#[tokio::test]
async fn each_next_step_is_handed_to_the_waiting_session() {
    let (mut h, _frontend) = support::handoff_harness(config(), |h| h).await;
    let task = "handoff.chain";
    register(&mut h, task).await;
    let (tx, mut inbound) = worker(&mut h, "w1", task, 100).await;
    let before = handed_off(task);
    for i in 0..3 {
        let id = format!("chain-{i}");
        start(&mut h, task, &id).await;
        for step in ["a", "b", "c"] {
            let t = next_task(&mut inbound).await;
            assert_eq!((t.execution_id.as_str(), t.step.as_str()), (id.as_str(), step));
            assert_eq!((t.attempt, t.redelivery), (1, false));
            complete(&tx, &t).await;
        }
        let events = until_completed(&mut h, &id).await;
        let succeeded = events.iter().filter(|e| e.event_type == "StepSucceeded").count();
        assert_eq!(succeeded, 3, "each step applied once");
    }
    // The session waits with free credits and nothing queued: at least every step after
    // the first of each execution (queued by the previous step's result) is handed off.
    let handed = handed_off(task) - before;
    assert!(handed >= 6, "handed off {handed} of 9 tasks");
}

/// Delegates to the frontend's hand-off, but holds the first hand-over of step `b` until
/// the test has ended the session it was reserved for.
struct SessionGone {
    inner: Arc<dyn Handoff>,
    held: AtomicBool,
    reserved: mpsc::UnboundedSender<TaskRow>,
    ended: Arc<Notify>,
}

impl Handoff for SessionGone {
    fn reserve(&self, execution_id: &str, task: &NewTask) -> Option<TaskClaim> {
        self.inner.reserve(execution_id, task)
    }

    fn settle(&self, claimed: Vec<TaskRow>, unused: Vec<TaskClaim>) {
        let (held, now): (Vec<_>, Vec<_>) = claimed
            .into_iter()
            .partition(|r| r.unit_key == "b" && !self.held.swap(true, Ordering::SeqCst));
        self.inner.settle(now, unused);
        if held.is_empty() {
            return;
        }
        for row in &held {
            let _ = self.reserved.send(row.clone());
        }
        let (inner, ended) = (self.inner.clone(), self.ended.clone());
        tokio::spawn(async move {
            ended.notified().await;
            inner.settle(held, Vec::new());
        });
    }
}

#[tokio::test]
async fn a_task_handed_to_a_session_that_ended_is_redelivered_and_completes_once() {
    let (reserved_tx, mut reserved) = mpsc::unbounded_channel();
    let ended = Arc::new(Notify::new());
    let gate = ended.clone();
    let (mut h, frontend) = support::handoff_harness(config(), move |inner| {
        Arc::new(SessionGone {
            inner,
            held: AtomicBool::new(false),
            reserved: reserved_tx,
            ended: gate,
        })
    })
    .await;

    let task = "handoff.lost";
    register(&mut h, task).await;
    let (tx, mut inbound) = worker(&mut h, "w-first", task, 100).await;
    start(&mut h, task, "lost-1").await;
    // Step `a` reaches the worker (claimed or handed off); its result's commit queues `b`,
    // handed to the same session, which the worker ends before it is delivered.
    let a = next_task(&mut inbound).await;
    assert_eq!(a.step, "a");
    complete(&tx, &a).await;
    let row = tokio::time::timeout(Duration::from_secs(10), reserved.recv())
        .await
        .expect("step b handed off")
        .unwrap();
    assert_eq!((row.execution_id.as_str(), row.unit_key.as_str()), ("lost-1", "b"));
    assert_eq!(row.worker_id.as_deref(), Some("w-first"));
    drop(tx);
    drop(inbound);
    for _ in 0..400 {
        if frontend.open_sessions() == 0 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert_eq!(frontend.open_sessions(), 0, "the first worker's session ended");
    ended.notify_one();

    // Another worker gets `b` again at once (far within the session timeout): the same
    // attempt's idempotency key, offered again.
    let (tx2, mut inbound2) = worker(&mut h, "w-second", task, 100).await;
    let b = next_task(&mut inbound2).await;
    if b.step != "b" {
        let events = history(&mut h, "lost-1").await;
        let steps: Vec<_> =
            events.iter().map(|e| (e.seq, e.event_type.clone(), e.step.clone())).collect();
        panic!("got {b:?}; history {steps:?}");
    }
    assert_eq!(b.idempotency_key, row.idempotency_key, "same idempotency key");
    assert!(b.redelivery, "offered before");
    assert_ne!(Some(b.token.as_str()), row.token.as_deref(), "a new claim");
    complete(&tx2, &b).await;
    let c = next_task(&mut inbound2).await;
    if c.step != "c" {
        let events = history(&mut h, "lost-1").await;
        let steps: Vec<_> =
            events.iter().map(|e| (e.seq, e.event_type.clone(), e.step.clone())).collect();
        panic!("got {c:?}; history {steps:?}");
    }
    complete(&tx2, &c).await;

    let events = until_completed(&mut h, "lost-1").await;
    let of = |kind: &str, step: &str| {
        events.iter().filter(|e| e.event_type == kind && e.step == step).count()
    };
    assert_eq!(of("StepAttemptUncertain", "b"), 1, "the lost hand-off: {events:?}");
    assert_eq!(of("StepSucceeded", "b"), 1, "applied exactly once");
    assert_eq!(of("StepSucceeded", "a") + of("StepSucceeded", "c"), 2);
}
