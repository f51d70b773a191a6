//! Long loops continue as new by themselves (issue 29 item 2) through the real `orbit dev`
//! binary with a real Rust worker: a top-level `repeat` of one task step, 60 iterations
//! under `limits.max_history_events: 150`, chains runs (each ended `CONTINUED_AS_NEW`
//! with a resume state, each under the limit); the step before the loop runs once, the
//! iterations are continuous over the runs, the result is the uninterrupted loop's, and
//! `DescribeExecution` / `GetHistory` of the latest run show where it started from.

mod common;

use common::kinds::*;
use common::*;
use orbit_api::v1 as pb;
use orbit_server_kit::payload::proto_to_json;
use orbit_worker::{TaskContext, TaskFailure, Worker};
use serde_json::{json, Value};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;
use tokio_util::sync::CancellationToken;

/// The bound on the run's result: 60 task round trips on a busy machine.
const WAIT: Duration = Duration::from_secs(120);

const LIMIT: usize = 150;
const ITERATIONS: u64 = 60;

const LONG: &str = r#"
name: long-loop
version: "1"
limits: { max_history_events: 150 }
tasks: { prepare: null, work: null, finish: null }
steps:
  - id: prepare
    task: prepare
    input: { base: "${{ input.base }}" }
  - id: count
    repeat:
      steps:
        - id: work
          task: work
          input: { n: "${{ iteration }}", base: "${{ steps.prepare.output.base }}" }
      until: "${{ output.n + 1.0 >= input.iterations }}"
      max_iterations: 100
      output: "${{ {'n': iteration, 'sum': (previous == null ? 0.0 : previous.sum) + steps.work.output} }}"
  - id: finish
    task: finish
    input: "${{ steps.count.output }}"
output: "${{ {'prepared': steps.prepare.output.base, 'count': steps.count.output, 'finish': steps.finish.output} }}"
"#;

/// `prepare` echoes its input (counting its calls), `work` answers its iteration, `finish`
/// the sum it was given.
fn worker(address: &str, stop: &CancellationToken, prepared: &Arc<AtomicU64>) {
    let prepared = prepared.clone();
    let w = Worker::builder(address.to_string())
        .worker_id("language-long-loops")
        .max_concurrency(4)
        .task("prepare", "1", move |ctx: TaskContext| {
            let prepared = prepared.clone();
            async move {
                prepared.fetch_add(1, Ordering::SeqCst);
                Ok::<Value, TaskFailure>(ctx.input().clone())
            }
        })
        .task("work", "1", |ctx: TaskContext| async move { Ok(ctx.input()["n"].clone()) })
        .task("finish", "1", |ctx: TaskContext| async move { Ok(ctx.input()["sum"].clone()) })
        .build()
        .expect("worker");
    let stop = stop.clone();
    tokio::spawn(async move { w.run(stop).await });
}

async fn run_history(
    c: &mut pb::workflow_service_client::WorkflowServiceClient<tonic::transport::Channel>,
    id: &str,
    run: u32,
) -> Vec<pb::HistoryEvent> {
    let mut events = Vec::new();
    let mut page_token = String::new();
    loop {
        let page = c
            .get_history(pb::GetHistoryRequest {
                execution_id: id.into(),
                run,
                page_size: 0,
                page_token: page_token.clone(),
            })
            .await
            .expect("get history")
            .into_inner();
        assert_eq!(page.run, run);
        events.extend(page.events);
        if page.next_page_token.is_empty() {
            return events;
        }
        page_token = page.next_page_token;
    }
}

async fn describe(
    c: &mut pb::workflow_service_client::WorkflowServiceClient<tonic::transport::Channel>,
    id: &str,
    run: u32,
) -> pb::ExecutionDescription {
    let request = pb::DescribeExecutionRequest { execution_id: id.into(), run, at_seq: 0 };
    let response = c.describe_execution(request).await.expect("describe").into_inner();
    response.execution.expect("a description")
}

/// The execution's result once a run ends other than CONTINUED_AS_NEW, watched across
/// the runs (`follow_continue_as_new`: one result per run).
async fn final_result(
    c: &mut pb::workflow_service_client::WorkflowServiceClient<tonic::transport::Channel>,
    id: &str,
) -> (pb::ExecutionStatus, Value) {
    let watch = pb::WatchExecutionRequest { follow_continue_as_new: true, ..result_watch(id) };
    let fut = async {
        let mut stream = c.watch_execution(watch).await.expect("watch").into_inner();
        while let Some(msg) = stream.message().await.expect("watch stream") {
            let Some(pb::watch_execution_response::Kind::Result(r)) = msg.kind else { continue };
            let status = r.status();
            if status == pb::ExecutionStatus::ContinuedAsNew {
                continue;
            }
            let output = r.output.and_then(|o| proto_to_json(o).ok()).unwrap_or(Value::Null);
            return (status, output);
        }
        panic!("the watch of {id} ended without a final result");
    };
    tokio::time::timeout(WAIT, fut).await.unwrap_or_else(|_| panic!("no result within {WAIT:?}"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_long_loop_continues_as_new_through_the_server() {
    let dir = TempDir::new("language-long-loops");
    let server = Server::start(&dir.0.join("orbit.db"), &[]).await;
    let mut c = server.client().await;
    register(&mut c, LONG).await;
    let stop = CancellationToken::new();
    let prepared = Arc::new(AtomicU64::new(0));
    worker(&server.address(), &stop, &prepared);

    let input = json!({"base": 7, "iterations": ITERATIONS});
    start(&mut c, "long-loop", "long-1", input.clone()).await.expect("start");
    let (status, output) = final_result(&mut c, "long-1").await;
    assert_eq!(status, pb::ExecutionStatus::Completed, "{output}");
    let sum = (0..ITERATIONS).sum::<u64>() as f64;
    assert_eq!(output["prepared"].as_f64(), Some(7.0), "{output}");
    assert_eq!(output["count"]["n"].as_f64(), Some((ITERATIONS - 1) as f64), "{output}");
    assert_eq!(output["count"]["sum"].as_f64(), Some(sum), "{output}");
    assert_eq!(output["finish"].as_f64(), Some(sum), "{output}");
    assert_eq!(prepared.load(Ordering::SeqCst), 1, "the step before the loop ran once");

    // The run chain: the latest run is the last of several, each earlier one continued.
    let latest = describe(&mut c, "long-1", 0).await;
    let info = latest.info.clone().expect("info");
    assert_eq!(info.status(), pb::ExecutionStatus::Completed);
    let runs = info.run;
    assert!(runs >= 2, "{runs} runs");
    let mut iterations = Vec::new();
    let mut next = 0;
    for run in 1..=runs {
        let h = run_history(&mut c, "long-1", run).await;
        assert!(h.len() <= LIMIT, "run {run} has {} events", h.len());
        assert!(h.iter().all(|e| e.event_type != "LimitExceeded"));
        let first = event_payload(&h[0]);
        assert_eq!(h[0].event_type, "WorkflowCreated");
        assert_eq!(first["input"], input);
        if run == 1 {
            assert!(first.get("resume").is_none(), "{first}");
        } else {
            assert_eq!(first["resume"]["repeat"], json!("count"));
            assert_eq!(first["resume"]["iteration"].as_u64(), Some(next));
            assert_eq!(first["resume"]["units"]["prepare"]["status"], json!("succeeded"));
        }
        let kinds = kinds(&h);
        for (kind, unit) in &kinds {
            if kind == "StepSucceeded" && unit.starts_with("count[") && unit.ends_with(']') {
                iterations.push(unit.clone());
            }
        }
        assert_eq!(has(&kinds, "StepScheduled", "prepare"), run == 1);
        let last = h.last().expect("events");
        if run < runs {
            assert_eq!(last.event_type, "WorkflowContinuedAsNew");
            let end = event_payload(last);
            assert_eq!(end["next_run"].as_u64(), Some(u64::from(run) + 1));
            let resumed = end["resume"]["iteration"].as_u64().expect("a resume");
            assert!(resumed > next, "iterations go on: {resumed} after {next}");
            next = resumed;
            let described = describe(&mut c, "long-1", run).await;
            let status = described.info.expect("info").status();
            assert_eq!(status, pb::ExecutionStatus::ContinuedAsNew);
        } else {
            assert_eq!(last.event_type, "WorkflowCompleted");
        }
    }
    let want: Vec<String> = (0..ITERATIONS).map(|i| format!("count[{i}]")).collect();
    assert_eq!(iterations, want);

    // The latest run's description holds the carried steps and the iterations it ran.
    let units: Vec<(String, pb::UnitStatus)> =
        latest.units.iter().map(|u| (u.key.clone(), u.status())).collect();
    let status_of = |key: &str| units.iter().find(|(k, _)| k == key).map(|(_, s)| *s);
    assert_eq!(status_of("prepare"), Some(pb::UnitStatus::Succeeded), "{units:?}");
    assert_eq!(status_of("count"), Some(pb::UnitStatus::Succeeded), "{units:?}");
    assert_eq!(status_of("finish"), Some(pb::UnitStatus::Succeeded), "{units:?}");
    let last = format!("count[{}]", ITERATIONS - 1);
    assert_eq!(status_of(&last), Some(pb::UnitStatus::Succeeded), "{units:?}");
    assert_eq!(status_of("count[0].work"), None, "run 1's iterations are not carried");
    stop.cancel();
}
