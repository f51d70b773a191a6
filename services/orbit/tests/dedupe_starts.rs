//! Debounce and singleton starts (`dedupe:`, issue 27 item 6; docs/flow-control.md,
//! "Debounce and singleton starts") through the real `orbit dev` binary:
//!
//! - `keep: first`: starts of one key inside the window return the first start's
//!   execution (`created: false`, one execution in the list), a start naming its own
//!   `execution_id` bypasses the dedupe, and the first start after the window creates a
//!   second execution; the CLI says a start was collapsed;
//! - `keep: last`: every start of the key returns one reserved id (only the first with
//!   `created: true`), `DescribeExecution` of it is `EXECUTION_PENDING_START` until it
//!   fires, and once the key is quiet for the window the execution runs with the last
//!   input and records the last start's memo;
//! - a pending debounce survives a SIGKILL of `orbit dev`: after the restart the execution
//!   is still created, with the last input.
//!
//! Windows are 1–2 s; every wait is bounded by a deadline derived from the window (the
//! longest debounce delay is 10 windows) plus the scheduler's lease.

// Tests read the wall clock (the window's deadlines) directly.
#![allow(clippy::disallowed_methods)]

mod common;

use common::evolving::cli;
use common::*;
use orbit_api::v1 as pb;
use orbit_api::v1::workflow_service_client::WorkflowServiceClient;
use serde_json::{json, Value};
use std::collections::BTreeSet;
use std::time::{Duration, Instant};
use tonic::transport::Channel;

const SINGLETON: &str = r#"
name: singleton
version: "1"
dedupe: { key: "${{ input.account }}", window: 2s }
steps:
  - id: echo
    compute: "${{ input }}"
output: "${{ steps.echo.output }}"
"#;

const DEBOUNCED: &str = r#"
name: debounced
version: "1"
dedupe: { key: "${{ input.account }}", window: 1s, keep: last }
steps:
  - id: echo
    compute: "${{ input }}"
output: "${{ steps.echo.output }}"
"#;

/// The singleton's window.
const FIRST_WINDOW: Duration = Duration::from_secs(2);

/// The debounce's window.
const LAST_WINDOW: Duration = Duration::from_secs(1);

/// How long a debounce may take to become an execution: its longest delay (10 windows),
/// the scheduler's lease of a fire, and room for a busy machine.
fn debounce_deadline() -> Duration {
    LAST_WINDOW * 10 + Duration::from_millis(orbit_scheduler::DEBOUNCE_LEASE_MS) + RESULT_WAIT
}

/// A bound for a created execution's result.
const RESULT_WAIT: Duration = Duration::from_secs(30);

async fn executions_of(c: &mut WorkflowServiceClient<Channel>, workflow: &str) -> Vec<String> {
    let request = pb::ListExecutionsRequest {
        workflow: workflow.into(),
        page_size: 100,
        ..Default::default()
    };
    let page = c.list_executions(request).await.expect("list").into_inner();
    page.executions.into_iter().map(|e| e.execution_id).collect()
}

/// Describes `id` until it exists (a debounce fired), bounded by `within`.
/// A start of `debounced` for account `a` with input `{account, n}` and memo `{"start": n}`.
async fn start_with_memo(
    c: &mut WorkflowServiceClient<Channel>,
    n: u64,
) -> pb::StartExecutionResponse {
    let memo = json!({"start": n});
    let Value::Object(memo) = memo else { unreachable!("an object literal") };
    let request = pb::StartExecutionRequest {
        memo: Some(orbit_server_kit::payload::json_object_to_struct(memo)),
        workflow: "debounced".into(),
        version: String::new(),
        input: Some(orbit_server_kit::payload::json_to_proto(json!({"account": "a", "n": n}))),
        execution_id: String::new(),
        priority: 0,
    };
    c.start_execution(request).await.expect("start").into_inner()
}

async fn wait_created(c: &mut WorkflowServiceClient<Channel>, id: &str, within: Duration) {
    poll_until(
        within,
        || format!("{id} was not created"),
        async || {
            let request =
                pb::DescribeExecutionRequest { execution_id: id.into(), run: 0, at_seq: 0 };
            match c.describe_execution(request).await {
                Ok(_) => Some(()),
                Err(s) => {
                    assert_eq!(code(&s), "EXECUTION_PENDING_START", "{s:?}");
                    None
                }
            }
        },
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn keep_first_collapses_the_window_into_one_execution() {
    let dir = TempDir::new("dedupe-first");
    let server = Server::start(&dir.0.join("orbit.db"), &[]).await;
    let mut c = server.client().await;
    register(&mut c, SINGLETON).await;

    let before = Instant::now();
    let first = start(&mut c, "singleton", "", json!({"account": "a", "n": 0})).await.unwrap();
    assert!(first.created);
    // The executions the starts created, and when the latest window of key `a` opened at
    // the latest (the answer of the start that opened it).
    let mut created = BTreeSet::from([first.execution_id.clone()]);
    let mut a_opened = Instant::now();
    // Every start answered before `before + window` was claimed inside the first window
    // (which opened after `before`): it must be collapsed.
    let mut inside = 0;
    for n in 1..5 {
        let again = start(&mut c, "singleton", "", json!({"account": "a", "n": n})).await.unwrap();
        if Instant::now() < before + FIRST_WINDOW {
            inside += 1;
            assert!(!again.created, "start {n} inside the window");
            assert_eq!(again.execution_id, first.execution_id);
        } else if again.created {
            created.insert(again.execution_id);
            a_opened = Instant::now();
        }
    }
    assert!(inside > 0, "no start landed inside the {FIRST_WINDOW:?} window");
    // Another key, and a start naming its own id, are not collapsed.
    let other = start(&mut c, "singleton", "", json!({"account": "b"})).await.unwrap();
    assert!(other.created && other.execution_id != first.execution_id);
    let named = start(&mut c, "singleton", "named-1", json!({"account": "a"})).await.unwrap();
    assert!(named.created, "an explicit execution_id bypasses dedupe");
    created.extend([other.execution_id, named.execution_id]);
    // The CLI says whether the start was collapsed.
    let (exit, out, err) =
        cli(server.port, "execution", &["start", "singleton", "--input", r#"{"account": "a"}"#]);
    assert_eq!(exit, 0, "{err}");
    assert_eq!(out["collapsed"], json!(out["created"] == json!(false)), "{out}");
    if out["created"] == json!(true) {
        created.insert(out["execution_id"].as_str().unwrap_or_default().to_string());
        a_opened = Instant::now();
    }
    let (status, output) = result(&mut c, &first.execution_id, RESULT_WAIT).await;
    assert_eq!(status, pb::ExecutionStatus::Completed);
    assert_eq!(output, json!({"account": "a", "n": 0}), "the first start's input");

    // After the window, the key opens a new one.
    let window_over = a_opened + FIRST_WINDOW + Duration::from_millis(50);
    tokio::time::sleep(window_over.saturating_duration_since(Instant::now())).await;
    let after = start(&mut c, "singleton", "", json!({"account": "a", "n": 9})).await.unwrap();
    assert!(after.created, "the window ended");
    assert!(!created.contains(&after.execution_id));
    created.insert(after.execution_id);
    let ids: BTreeSet<String> = executions_of(&mut c, "singleton").await.into_iter().collect();
    assert_eq!(ids, created, "one execution per window, per key, per named id");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn keep_last_runs_once_with_the_last_input() {
    let dir = TempDir::new("dedupe-last");
    let server = Server::start(&dir.0.join("orbit.db"), &[]).await;
    let mut c = server.client().await;
    register(&mut c, DEBOUNCED).await;

    let first = start_with_memo(&mut c, 1).await;
    assert!(first.created, "the first start reserves the id");
    let mut last_sent = Instant::now();
    for n in 2..=4 {
        let again = start_with_memo(&mut c, n).await;
        last_sent = Instant::now();
        assert!(!again.created);
        assert_eq!(again.execution_id, first.execution_id);
    }
    // Inside the window after the last start, the id is reserved, not missing.
    let request = pb::DescribeExecutionRequest {
        execution_id: first.execution_id.clone(),
        run: 0,
        at_seq: 0,
    };
    let described = c.describe_execution(request).await;
    if last_sent.elapsed() < LAST_WINDOW {
        let status = described.expect_err("not created yet");
        assert_eq!(code(&status), "EXECUTION_PENDING_START", "{status:?}");
        assert_eq!(status.code(), tonic::Code::FailedPrecondition);
        let watched = c.watch_execution(result_watch(&first.execution_id)).await;
        if last_sent.elapsed() < LAST_WINDOW {
            let status = watched.expect_err("not created yet");
            assert_eq!(code(&status), "EXECUTION_PENDING_START", "{status:?}");
        }
    }
    wait_created(&mut c, &first.execution_id, debounce_deadline()).await;
    let (status, output) = result(&mut c, &first.execution_id, RESULT_WAIT).await;
    assert_eq!(status, pb::ExecutionStatus::Completed);
    assert_eq!(output, json!({"account": "a", "n": 4}), "the last start's input");
    let request = pb::DescribeExecutionRequest {
        execution_id: first.execution_id.clone(),
        run: 0,
        at_seq: 0,
    };
    let described = c.describe_execution(request).await.expect("describe").into_inner();
    let memo = described
        .memo
        .map(|m| orbit_server_kit::payload::struct_to_json_object(m).expect("a memo converts"));
    assert_eq!(memo.map(Value::Object), Some(json!({"start": 4})), "the last start's memo");
    assert_eq!(executions_of(&mut c, "debounced").await, std::slice::from_ref(&first.execution_id));
    // The debounce fired: the key starts a new one.
    let next = start(&mut c, "debounced", "", json!({"account": "a", "n": 5})).await.unwrap();
    assert!(next.created && next.execution_id != first.execution_id);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pending_debounce_survives_a_kill_of_orbit_dev() {
    let dir = TempDir::new("dedupe-kill");
    let db = dir.0.join("orbit.db");
    let mut server = Server::start(&db, &[]).await;
    let port = server.port;
    let mut c = server.client().await;
    register(&mut c, DEBOUNCED).await;
    let first = start(&mut c, "debounced", "", json!({"account": "k", "n": 1})).await.unwrap();
    let second = start(&mut c, "debounced", "", json!({"account": "k", "n": 2})).await.unwrap();
    assert_eq!(second.execution_id, first.execution_id);
    server.kill9();
    let server = Server::start_on(&db, port, &[]).await;
    let mut c = server.client().await;
    wait_created(&mut c, &first.execution_id, debounce_deadline()).await;
    let (status, output): (pb::ExecutionStatus, Value) =
        result(&mut c, &first.execution_id, RESULT_WAIT).await;
    assert_eq!(status, pb::ExecutionStatus::Completed);
    assert_eq!(output, json!({"account": "k", "n": 2}));
}
