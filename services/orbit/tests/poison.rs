//! Poison quarantine on `orbit dev`, through the real binary: an execution whose processing
//! panics, or kills the process, is parked as SUSPENDED after `--max-failures` failures,
//! visible in describe; the server and every other execution keep going; an operator
//! resumes or terminates it with the CLI.
//!
//! The poison is made deterministic with the debug-only fault injection
//! (`ORBIT_FAULT_INJECT=panic-on-signal:NAME,abort-on-signal:NAME`).

// Tests read their environment (ORBIT_PYTHON, the database URL) and the wall clock
// (unique names, deadlines of real processes) directly.
#![allow(clippy::disallowed_methods)]

mod common;

use common::*;
use orbit_api::v1 as pb;
use orbit_api::v1::workflow_service_client::WorkflowServiceClient;
use serde_json::{json, Value};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};
use tonic::transport::Channel;

const WORKFLOW: &str = r#"
name: poisoned
version: "1"
signals: { go: null, boom: null, kaboom: null }
steps:
  - { id: wait, await: go }
output: "${{ steps.wait.output }}"
"#;

/// The default of `--max-failures`.
const MAX_FAILURES: u32 = 3;

/// `orbit dev` with the fault injection set (or not), without waiting for it.
fn spawn_dev(db: &Path, port: u16, inject: Option<&str>) -> Child {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_orbit"));
    cmd.args(["dev", "--db"])
        .arg(db)
        .args(["--listen", &format!("127.0.0.1:{port}"), "--log", "warn"])
        .env_remove("ORBIT_FAULT_INJECT")
        .stdout(Stdio::null())
        .stderr(Stdio::inherit());
    if let Some(rules) = inject {
        cmd.env("ORBIT_FAULT_INJECT", rules);
    }
    cmd.spawn().expect("spawn orbit dev")
}

/// Waits until the server answers; `None` when the process ended first.
async fn ready(child: &mut Child, port: u16) -> Option<WorkflowServiceClient<Channel>> {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        if child.try_wait().expect("try_wait").is_some() {
            return None;
        }
        if let Ok(mut c) = WorkflowServiceClient::connect(format!("http://127.0.0.1:{port}")).await
        {
            if c.list_workflows(pb::ListWorkflowsRequest::default()).await.is_ok() {
                return Some(c);
            }
        }
        assert!(Instant::now() < deadline, "orbit dev did not become ready");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

async fn describe(c: &mut WorkflowServiceClient<Channel>, id: &str) -> pb::ExecutionDescription {
    let req = pb::DescribeExecutionRequest { execution_id: id.into(), run: 0, at_seq: 0 };
    c.describe_execution(req).await.expect("describe").into_inner().execution.expect("execution")
}

fn status_of(d: &pb::ExecutionDescription) -> pb::ExecutionStatus {
    d.info.as_ref().map_or(pb::ExecutionStatus::Unspecified, |i| i.status())
}

/// Polls describe until `id` has `status`, bounded.
async fn wait_status(
    c: &mut WorkflowServiceClient<Channel>,
    id: &str,
    status: pb::ExecutionStatus,
    within: Duration,
) -> pb::ExecutionDescription {
    let deadline = Instant::now() + within;
    loop {
        let d = describe(c, id).await;
        if status_of(&d) == status {
            return d;
        }
        assert!(Instant::now() < deadline, "{id} is {:?}, not {status:?}", status_of(&d));
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// Sends a signal without waiting for the owner's reply (a poisoned one never gets one).
fn signal_in_background(c: &WorkflowServiceClient<Channel>, id: &str, name: &str) {
    let mut c = c.clone();
    let req = pb::SignalExecutionRequest {
        execution_id: id.into(),
        name: name.into(),
        payload: None,
        request_id: String::new(),
    };
    tokio::spawn(async move {
        let _ = c.signal_execution(req).await;
    });
}

async fn signal(c: &mut WorkflowServiceClient<Channel>, id: &str, name: &str) {
    let req = pb::SignalExecutionRequest {
        execution_id: id.into(),
        name: name.into(),
        payload: Some(orbit_server_kit::payload::json_to_proto(json!({"by": name}))),
        request_id: String::new(),
    };
    c.signal_execution(req).await.unwrap_or_else(|e| panic!("signal {name} to {id}: {e}"));
}

/// `orbit execution ARGS --address ... --output json`: (exit code, stdout JSON or text).
fn cli(port: u16, args: &[&str]) -> (i32, Value, String) {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_orbit"));
    cmd.arg("execution").args(args).args([
        "--address",
        &format!("http://127.0.0.1:{port}"),
        "--output",
        "json",
    ]);
    let out = cmd.output().expect("run the orbit CLI");
    let stdout = String::from_utf8_lossy(&out.stdout).to_string();
    let stderr = String::from_utf8_lossy(&out.stderr).to_string();
    let value = serde_json::from_str(stdout.trim()).unwrap_or(Value::Null);
    (out.status.code().unwrap_or(-1), value, stderr)
}

async fn complete_others(c: &mut WorkflowServiceClient<Channel>, ids: &[String]) {
    for id in ids {
        signal(c, id, "go").await;
    }
    for id in ids {
        let (status, output) = result(c, id, Duration::from_secs(30)).await;
        assert_eq!(status, pb::ExecutionStatus::Completed, "{id}: {output}");
        assert_eq!(output, json!({"by": "go"}));
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_panicking_signal_parks_its_execution_and_the_operator_resumes_or_terminates_it() {
    let dir = TempDir::new("poison-panic");
    let db = dir.0.join("orbit.db");
    let port = free_port();
    let mut child = ChildGuard(spawn_dev(&db, port, Some("panic-on-signal:boom")));
    let mut c = ready(&mut child.0, port).await.expect("orbit dev serves");
    register(&mut c, WORKFLOW).await;
    for id in ["victim", "ok-1", "ok-2", "ok-3", "idle"] {
        start(&mut c, "poisoned", id, json!({})).await.expect("start");
    }

    signal_in_background(&c, "victim", "boom");
    let d = wait_status(&mut c, "victim", pb::ExecutionStatus::Suspended, Duration::from_secs(60))
        .await;
    let s = d.suspension.expect("a SUSPENDED execution says why");
    assert_eq!(s.failures, MAX_FAILURES, "{s:?}");
    assert!(s.reason.contains("fault injection: panic on signal `boom`"), "{s:?}");
    assert!(s.entry_seq > 0);
    assert!(child.0.try_wait().unwrap().is_none(), "the server survived the panics");
    // Listed as SUSPENDED too.
    let listed = c
        .list_executions(pb::ListExecutionsRequest {
            statuses: vec![pb::ExecutionStatus::Suspended.into()],
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner();
    let ids: Vec<&str> = listed.executions.iter().map(|e| e.execution_id.as_str()).collect();
    assert_eq!(ids, ["victim"]);

    // Every other execution keeps going.
    let others: Vec<String> = ["ok-1", "ok-2", "ok-3"].map(String::from).to_vec();
    complete_others(&mut c, &others).await;

    // Operator errors.
    let (code, _, err) = cli(port, &["resume", "idle"]);
    assert_ne!(code, 0);
    assert!(err.contains("EXECUTION_NOT_SUSPENDED"), "{err}");
    let (code, _, err) = cli(port, &["resume", "no-such-execution"]);
    assert_eq!(code, 3, "not found: {err}");
    assert!(err.contains("EXECUTION_NOT_FOUND"), "{err}");
    let (code, _, err) = cli(port, &["resume", "ok-1"]);
    assert_ne!(code, 0);
    assert!(err.contains("EXECUTION_FINISHED"), "{err}");

    // Resume retries the entry: the fault is still there, so it is parked again.
    let (code, out, err) = cli(port, &["resume", "victim"]);
    assert_eq!(code, 0, "{err}");
    assert_eq!(out["entry_seq"], json!(s.entry_seq));
    assert_eq!(out["failures"], json!(MAX_FAILURES));
    let d = wait_status(&mut c, "victim", pb::ExecutionStatus::Suspended, Duration::from_secs(60))
        .await;
    assert_eq!(d.suspension.expect("suspension").entry_seq, s.entry_seq);

    // The same server without the fault: resume, and the entry is applied.
    drop(c);
    drop(child);
    let mut child = ChildGuard(spawn_dev(&db, port, None));
    let mut c = ready(&mut child.0, port).await.expect("orbit dev serves");
    let d = describe(&mut c, "victim").await;
    assert_eq!(status_of(&d), pb::ExecutionStatus::Suspended, "parking is durable");
    let (code, _, err) = cli(port, &["resume", "victim"]);
    assert_eq!(code, 0, "{err}");
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let d = describe(&mut c, "victim").await;
        if d.buffered_signals.get("boom") == Some(&1) {
            assert_eq!(status_of(&d), pb::ExecutionStatus::Running);
            assert!(d.suspension.is_none());
            break;
        }
        assert!(Instant::now() < deadline, "the poisoned signal was not applied: {d:?}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    signal(&mut c, "victim", "go").await;
    let (status, _) = result(&mut c, "victim", Duration::from_secs(30)).await;
    assert_eq!(status, pb::ExecutionStatus::Completed);

    // Terminate: an open execution ends FAILED / TERMINATED; repeating it is a no-op.
    let (code, out, err) = cli(port, &["terminate", "idle", "--reason", "poisoned"]);
    assert_eq!(code, 0, "{err}");
    assert_eq!(out["terminated"], json!(true));
    let (status, error) = result(&mut c, "idle", Duration::from_secs(30)).await;
    assert_eq!(status, pb::ExecutionStatus::Failed);
    assert_eq!(error, json!("TERMINATED: poisoned"));
    let (code, again, err) = cli(port, &["terminate", "idle"]);
    assert_eq!(code, 0, "{err}");
    assert_eq!(
        (again["terminated"].clone(), again["seq"].clone()),
        (json!(false), out["seq"].clone())
    );
    let (code, _, err) = cli(port, &["terminate", "ok-2"]);
    assert_ne!(code, 0);
    assert!(err.contains("EXECUTION_FINISHED"), "{err}");
    let (_, _, err) = cli(port, &["resume", "idle"]);
    assert!(err.contains("EXECUTION_FINISHED"), "{err}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_aborting_signal_is_parked_after_restarts_and_a_suspended_one_can_be_terminated() {
    let dir = TempDir::new("poison-abort");
    let db = dir.0.join("orbit.db");
    let port = free_port();
    let inject = Some("abort-on-signal:kaboom");
    let mut child = ChildGuard(spawn_dev(&db, port, inject));
    let mut c = ready(&mut child.0, port).await.expect("orbit dev serves");
    register(&mut c, WORKFLOW).await;
    for id in ["victim", "ok-1", "ok-2"] {
        start(&mut c, "poisoned", id, json!({})).await.expect("start");
    }
    signal_in_background(&c, "victim", "kaboom");
    let deadline = Instant::now() + Duration::from_secs(30);
    while child.0.try_wait().unwrap().is_none() {
        assert!(Instant::now() < deadline, "the injected abort did not kill the server");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    drop(c);

    // Restarted as a supervisor would, until it stays up with the execution parked.
    let mut died_after_restart = 0;
    let mut c = loop {
        assert!(
            died_after_restart <= MAX_FAILURES,
            "still dying after {died_after_restart} restarts"
        );
        let mut next = ChildGuard(spawn_dev(&db, port, inject));
        let Some(mut c) = ready(&mut next.0, port).await else {
            died_after_restart += 1;
            continue;
        };
        let deadline = Instant::now() + Duration::from_secs(30);
        let parked = loop {
            if next.0.try_wait().unwrap().is_some() {
                break false;
            }
            let req =
                pb::DescribeExecutionRequest { execution_id: "victim".into(), run: 0, at_seq: 0 };
            // An error means it is dying right now: the next round sees the exit.
            if let Ok(r) = c.describe_execution(req).await {
                let d = r.into_inner().execution.expect("execution");
                if status_of(&d) == pb::ExecutionStatus::Suspended {
                    break true;
                }
            }
            assert!(Instant::now() < deadline, "neither parked nor dead");
            tokio::time::sleep(Duration::from_millis(100)).await;
        };
        if parked {
            child = next;
            break c;
        }
        died_after_restart += 1;
    };
    eprintln!("poison test: {died_after_restart} restarts died before the execution was parked");
    assert!(died_after_restart <= MAX_FAILURES, "{died_after_restart} restarts died");
    let d = describe(&mut c, "victim").await;
    let s = d.suspension.expect("suspension");
    assert_eq!(s.failures, MAX_FAILURES, "{s:?}");
    assert!(s.reason.contains("process ended"), "{s:?}");

    // The server serves: the others complete, new work runs, it stays up.
    let others: Vec<String> = ["ok-1", "ok-2"].map(String::from).to_vec();
    complete_others(&mut c, &others).await;
    start(&mut c, "poisoned", "after", json!({})).await.expect("start after");
    complete_others(&mut c, &["after".to_string()]).await;
    assert!(child.0.try_wait().unwrap().is_none(), "the server stays up");

    // Terminate the parked one without running the poisoned entry.
    let (code, out, err) = cli(port, &["terminate", "victim", "--reason", "aborts the owner"]);
    assert_eq!(code, 0, "{err}");
    assert_eq!(out["terminated"], json!(true));
    let (status, error) = result(&mut c, "victim", Duration::from_secs(30)).await;
    assert_eq!(status, pb::ExecutionStatus::Failed);
    assert_eq!(error, json!("TERMINATED: aborts the owner"));
    assert!(describe(&mut c, "victim").await.suspension.is_none());
    assert!(child.0.try_wait().unwrap().is_none(), "the server stays up after terminate");
}

// ------------------------------------------------------------------------------------
// Item 4: the internal OwnerService validates like the public API, and a child start must
// match a relation the parent's own history holds.

const VICTIM: &str = r#"
name: victim
version: "1"
signals: { w: null }
steps:
  - { id: w, await: w }
output: "${{ steps.w.output }}"
"#;

const QUICK: &str = r#"
name: quick
version: "1"
steps:
  - { id: c, compute: "${{ 1 }}" }
output: "${{ steps.c.output }}"
"#;

const PARENT: &str = r#"
name: parent
version: "1"
steps:
  - { id: kid, workflow: victim@1 }
output: "${{ steps.kid.output }}"
"#;

type OwnerClient =
    orbit_api::internal::v1::owner_service_client::OwnerServiceClient<tonic::transport::Channel>;

fn internal_start(id: &str, workflow: &str) -> orbit_api::internal::v1::StartExecutionRequest {
    orbit_api::internal::v1::StartExecutionRequest {
        memo: None,
        execution_id: id.into(),
        workflow: workflow.into(),
        ..Default::default()
    }
}

async fn refused(
    owner: &mut OwnerClient,
    req: orbit_api::internal::v1::StartExecutionRequest,
) -> String {
    let status = owner.start_execution(req).await.expect_err("refused");
    code(&status)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn owner_service_refuses_what_the_frontend_refuses_and_forged_children() {
    let dir = TempDir::new("poison-internal");
    let server = Server::start(&dir.0.join("orbit.db"), &[]).await;
    let mut c = server.client().await;
    for doc in [VICTIM, QUICK, PARENT] {
        register(&mut c, doc).await;
    }
    // `orbit dev` serves the internal OwnerService on the same port.
    let mut owner = OwnerClient::connect(server.address()).await.expect("connect");

    // Ids, sizes and existence, with the codes the frontend answers.
    assert_eq!(refused(&mut owner, internal_start("", "quick")).await, "INVALID_ARGUMENT");
    assert_eq!(refused(&mut owner, internal_start("a/b", "quick")).await, "INVALID_ARGUMENT");
    assert_eq!(
        refused(&mut owner, internal_start(&"x".repeat(10_000), "quick")).await,
        "INVALID_ARGUMENT"
    );
    assert_eq!(refused(&mut owner, internal_start("a\u{7}b", "quick")).await, "INVALID_ARGUMENT");
    assert_eq!(refused(&mut owner, internal_start("w-1", "")).await, "INVALID_ARGUMENT");
    assert_eq!(refused(&mut owner, internal_start("w-1", "nope")).await, "WORKFLOW_NOT_FOUND");
    let mut big = internal_start("big-1", "quick");
    big.input = Some(orbit_server_kit::payload::json_to_proto(json!("x".repeat(3 * 1024 * 1024))));
    assert_eq!(refused(&mut owner, big).await, "PAYLOAD_TOO_LARGE");
    let mut hash = internal_start("h-1", "quick");
    hash.definition_hash = "not-the-hash".into();
    assert_eq!(refused(&mut owner, hash).await, "INVALID_ARGUMENT");
    let mut root = internal_start("r-1", "quick");
    root.root_id = "someone-else".into();
    assert_eq!(refused(&mut owner, root).await, "INVALID_ARGUMENT");
    let mut orphan = internal_start("nobody/w", "quick");
    orphan.parent_id = "nobody".into();
    assert_eq!(refused(&mut owner, orphan).await, "INVALID_ARGUMENT");
    for id in ["a/b", "big-1", "h-1", "r-1", "nobody/w"] {
        let req = pb::DescribeExecutionRequest { execution_id: id.into(), run: 0, at_seq: 0 };
        let status = c.describe_execution(req).await.expect_err("nothing was created");
        assert_eq!(code(&status), "EXECUTION_NOT_FOUND", "{id}");
    }
    // The correct hash is accepted.
    let hash = c
        .get_workflow(pb::GetWorkflowRequest { name: "quick".into(), version: String::new() })
        .await
        .unwrap()
        .into_inner();
    let mut good = internal_start("good-1", "quick");
    good.definition_hash = hash.workflow.map(|w| w.definition_hash).unwrap_or_default();
    assert!(owner.start_execution(good).await.expect("a matching hash").into_inner().created);

    // A forged child id `V/w` cannot complete victim V's `await` step `w`.
    start(&mut c, "victim", "V", json!({})).await.unwrap();
    let mut forged = internal_start("V/w", "quick");
    forged.parent_id = "V".into();
    assert_eq!(refused(&mut owner, forged).await, "INVALID_ARGUMENT");

    // A real child relation is accepted (idempotently), with the parent's workflow only.
    start(&mut c, "parent", "P", json!({})).await.unwrap();
    let deadline = Instant::now() + Duration::from_secs(30);
    let child = loop {
        let d = describe(&mut c, "P").await;
        if let Some(k) = d.pending_children.first() {
            break k.child_execution_id.clone();
        }
        assert!(Instant::now() < deadline, "the parent started no child");
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    let mut wrong = internal_start(&child, "quick");
    wrong.parent_id = "P".into();
    assert_eq!(refused(&mut owner, wrong).await, "INVALID_ARGUMENT");
    let mut again = internal_start(&child, "victim");
    again.parent_id = "P".into();
    let again = owner.start_execution(again).await.expect("the real child").into_inner();
    assert!(!again.created, "it exists already");

    // V is untouched: still waiting, and its step completes only by its own signal.
    tokio::time::sleep(Duration::from_millis(500)).await;
    let d = describe(&mut c, "V").await;
    assert_eq!(status_of(&d), pb::ExecutionStatus::Running);
    assert_eq!(d.pending_awaits.len(), 1, "{d:?}");
    signal(&mut c, "V", "w").await;
    let (status, output) = result(&mut c, "V", Duration::from_secs(30)).await;
    assert_eq!((status, output), (pb::ExecutionStatus::Completed, json!({"by": "w"})));
}

// ------------------------------------------------------------------------------------
// A child start that kills the process: the parent's commit asked for it, so every restart
// would start it again. It is counted like an entry and parked before its first decision.

const BAD_CHILD: &str = r#"
name: bad
version: "1"
steps:
  - { id: c, compute: "${{ 1 }}" }
output: "${{ steps.c.output }}"
"#;

const BAD_PARENT: &str = r#"
name: bad-parent
version: "1"
steps:
  - { id: kid, workflow: bad@1 }
output: "${{ steps.kid.output }}"
"#;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_child_start_that_kills_the_process_is_parked_and_terminating_it_fails_the_parent() {
    let dir = TempDir::new("poison-child");
    let db = dir.0.join("orbit.db");
    let port = free_port();
    // Registered and started without the fault, so only the child's start aborts.
    let mut first = ChildGuard(spawn_dev(&db, port, None));
    let mut c = ready(&mut first.0, port).await.expect("orbit dev serves");
    register(&mut c, BAD_CHILD).await;
    register(&mut c, BAD_PARENT).await;
    register(&mut c, WORKFLOW).await;
    start(&mut c, "poisoned", "bystander", json!({})).await.unwrap();
    drop(c);
    drop(first);

    let inject = Some("abort-on-start:bad");
    let mut child = ChildGuard(spawn_dev(&db, port, inject));
    let mut c = ready(&mut child.0, port).await.expect("orbit dev serves");
    let _ = start(&mut c, "bad-parent", "P", json!({})).await;
    let deadline = Instant::now() + Duration::from_secs(30);
    while child.0.try_wait().unwrap().is_none() {
        assert!(Instant::now() < deadline, "the injected abort did not kill the server");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let mut died_after_restart = 0;
    let (mut c, kid) = loop {
        assert!(
            died_after_restart <= MAX_FAILURES,
            "still dying after {died_after_restart} restarts"
        );
        let mut next = ChildGuard(spawn_dev(&db, port, inject));
        let Some(mut c) = ready(&mut next.0, port).await else {
            died_after_restart += 1;
            continue;
        };
        let deadline = Instant::now() + Duration::from_secs(30);
        let kid = loop {
            if next.0.try_wait().unwrap().is_some() {
                break None;
            }
            let listed = c
                .list_executions(pb::ListExecutionsRequest {
                    statuses: vec![pb::ExecutionStatus::Suspended.into()],
                    ..Default::default()
                })
                .await;
            // An error means it is dying right now: the next round sees the exit.
            if let Ok(l) = listed {
                if let Some(e) = l.into_inner().executions.first() {
                    break Some(e.execution_id.clone());
                }
            }
            assert!(Instant::now() < deadline, "neither parked nor dead");
            tokio::time::sleep(Duration::from_millis(100)).await;
        };
        match kid {
            Some(kid) => {
                child = next;
                break (c, kid);
            }
            None => died_after_restart += 1,
        }
    };
    eprintln!("poison child test: {died_after_restart} restarts died before the child was parked");
    assert!(kid.starts_with("P/"), "the parked one is P's child: {kid}");
    let d = describe(&mut c, &kid).await;
    assert_eq!(d.suspension.expect("suspension").failures, MAX_FAILURES);
    assert_eq!(status_of(&describe(&mut c, "P").await), pb::ExecutionStatus::Running);
    complete_others(&mut c, &["bystander".to_string()]).await;

    // Terminating the child fails the parent's step, as a failed child does.
    let (code, _, err) = cli(port, &["terminate", &kid, "--reason", "bad child"]);
    assert_eq!(code, 0, "{err}");
    let (status, error) = result(&mut c, "P", Duration::from_secs(30)).await;
    assert_eq!(status, pb::ExecutionStatus::Failed, "{error}");
    assert!(error.as_str().is_some_and(|e| e.contains("CHILD_FAILED")), "{error}");
    assert!(child.0.try_wait().unwrap().is_none(), "the server stays up");
}
