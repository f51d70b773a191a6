//! Flow control in `orbit dev` (issue 27; docs/flow-control.md), through the real binary
//! and raw worker sessions driven by hand, so every claim is seen:
//!
//! - a concurrency key with `limit: 1` lets one attempt per key run; the others wait,
//!   `DescribeExecution` says why (`FLOW_WAIT_CONCURRENCY`, the scoped key), and the next
//!   one is delivered as soon as the running one's result is recorded — while another
//!   key's attempt runs beside it;
//! - an inline rate limit starts at most `limit` attempts per aligned window, the rest
//!   say `FLOW_WAIT_RATE_LIMIT`;
//! - a named limit: an attempt that references an unknown name waits until
//!   `SetRateLimit` defines it (set, list and delete through the admin API, the CLI, and
//!   `--rate-limit` at start), and a delete of an unknown name is `RATE_LIMIT_NOT_FOUND`;
//! - priorities: with 20 priority-5 attempts queued, a priority-1 execution's attempt is
//!   the first a worker gets, a step's own `priority:` beats the start's, and a start
//!   priority of 7 is `INVALID_ARGUMENT`;
//! - a fairness key: a tenant that queues 3 tasks behind another's 10 shares the worker's
//!   slots with it (least running first), not after it;
//! - the Rust, Python and TypeScript clients set, list and delete named limits and start
//!   with a priority.

// Tests read their environment and the wall clock (the database's claim times) directly.
#![allow(clippy::disallowed_methods)]

mod common;

use common::*;
use orbit_api::v1 as pb;
use orbit_api::v1::admin_service_client::AdminServiceClient;
use serde_json::{json, Value};
use std::process::Command;
use std::time::Duration;

const SERIAL: &str = r#"
name: serial
version: "1"
tasks: { work: {} }
steps:
  - id: a
    task: work
    input: "${{ input }}"
    concurrency: { key: "${{ input.account }}", limit: 1 }
output: "${{ steps.a.output }}"
"#;

const METERED: &str = r#"
name: metered
version: "1"
tasks: { work: {} }
steps:
  - id: a
    task: work
    input: "${{ input }}"
    rate_limit: { limit: 3, per: 2s }
output: "${{ steps.a.output }}"
"#;

const PARTNER: &str = r#"
name: partner
version: "1"
tasks: { work: {} }
steps:
  - id: a
    task: work
    input: "${{ input }}"
    rate_limit: { name: partner-api }
output: "${{ steps.a.output }}"
"#;

const RANKED: &str = r#"
name: ranked
version: "1"
priority: 4
tasks: { work: {} }
steps:
  - id: a
    task: work
    input: "${{ input }}"
output: "${{ steps.a.output }}"
"#;

const URGENT_STEP: &str = r#"
name: urgent-step
version: "1"
tasks: { work: {} }
steps:
  - id: a
    task: work
    input: "${{ input }}"
    priority: "${{ input.p }}"
output: "${{ steps.a.output }}"
"#;

/// Bounds every wait for something the server does at once (a delivery after a result,
/// a described state): generous for a busy machine.
const WAIT: Duration = Duration::from_secs(20);

async fn start_p(
    c: &mut pb::workflow_service_client::WorkflowServiceClient<tonic::transport::Channel>,
    workflow: &str,
    id: &str,
    input: Value,
    priority: u32,
) -> Result<pb::StartExecutionResponse, tonic::Status> {
    c.start_execution(pb::StartExecutionRequest {
        workflow: workflow.into(),
        input: Some(orbit_server_kit::payload::json_to_proto(input)),
        execution_id: id.into(),
        priority,
        ..Default::default()
    })
    .await
    .map(tonic::Response::into_inner)
}

/// The pending task of `id`'s step `a`, once `check` holds for it (bounded).
async fn pending_until(
    c: &mut pb::workflow_service_client::WorkflowServiceClient<tonic::transport::Channel>,
    id: &str,
    check: impl Fn(&pb::PendingTask) -> bool,
) -> pb::PendingTask {
    pending_task_until(c, id, WAIT, |t| t.unit == "a" && check(t)).await
}

/// The next task delivered to `w`, skipping the acks of results sent before (bounded).
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

fn input_of(task: &pb::server_message::Task) -> Value {
    task.input
        .clone()
        .and_then(|v| orbit_server_kit::payload::proto_to_json(v).ok())
        .unwrap_or(Value::Null)
}

#[tokio::test]
async fn a_concurrency_key_runs_one_attempt_per_key_and_says_why_the_others_wait() {
    let dir = TempDir::new("flow-key");
    let server = Server::start(&dir.0.join("db"), &[]).await;
    let mut c = server.client().await;
    register(&mut c, SERIAL).await;
    for (id, account) in
        [("acme-1", "acme"), ("acme-2", "acme"), ("acme-3", "acme"), ("zen-1", "zen")]
    {
        start(&mut c, "serial", id, json!({"account": account, "id": id})).await.expect("start");
    }
    let mut w = RawSession::start(&server.address(), "w", &[("work", "")], 10).await;
    let first = next_task(&mut w, WAIT).await;
    let second = next_task(&mut w, WAIT).await;
    let mut got: Vec<String> =
        [&first, &second].iter().map(|t| input_of(t)["id"].to_string()).collect();
    got.sort();
    assert_eq!(got, ["\"acme-1\"", "\"zen-1\""], "one attempt per key, in queue order");
    // The other two wait for the key, and say so.
    for id in ["acme-2", "acme-3"] {
        let t =
            pending_until(&mut c, id, |t| t.waiting_on == pb::FlowWait::Concurrency as i32).await;
        assert_eq!(t.concurrency_key, "serial.a/acme");
        assert_eq!(t.state, pb::PendingTaskState::Queued as i32);
    }
    // Nothing more comes while acme-1 runs (10 credits are free).
    let extra = tokio::time::timeout(Duration::from_millis(500), w.rx.message()).await;
    assert!(
        !matches!(&extra, Ok(Ok(Some(m))) if matches!(m.kind, Some(pb::server_message::Kind::Task(_)))),
        "a second acme attempt was delivered while one ran: {extra:?}"
    );
    // Its result frees the key: acme-2 comes next, then acme-3.
    let acme1 = if input_of(&first)["id"] == "acme-1" { &first } else { &second };
    w.complete(&acme1.token, json!("done")).await;
    let next = next_task(&mut w, WAIT).await;
    assert_eq!(input_of(&next)["id"], "acme-2");
    w.complete(&next.token, json!("done")).await;
    let last = next_task(&mut w, WAIT).await;
    assert_eq!(input_of(&last)["id"], "acme-3");
    w.complete(&last.token, json!("done")).await;
    let zen = if input_of(&first)["id"] == "zen-1" { &first } else { &second };
    w.complete(&zen.token, json!("done")).await;
    for id in ["acme-1", "acme-2", "acme-3", "zen-1"] {
        let (status, _) = result(&mut c, id, WAIT).await;
        assert_eq!(status, pb::ExecutionStatus::Completed, "{id}");
    }
}

#[tokio::test]
async fn an_inline_rate_limit_starts_at_most_its_limit_per_window() {
    let dir = TempDir::new("flow-rate");
    let db = dir.0.join("db");
    let server = Server::start(&db, &[]).await;
    let mut c = server.client().await;
    register(&mut c, METERED).await;
    let ids: Vec<String> = (0..7).map(|i| format!("m-{i}")).collect();
    for id in &ids {
        start(&mut c, "metered", id, json!({"id": id})).await.expect("start");
    }
    let mut w = RawSession::start(&server.address(), "w", &[("work", "")], 10).await;
    // Every task is completed as it arrives; the limit alone spaces them.
    for _ in &ids {
        let t = next_task(&mut w, Duration::from_secs(30)).await;
        w.complete(&t.token, json!("ok")).await;
    }
    for id in &ids {
        let (status, _) = result(&mut c, id, WAIT).await;
        assert_eq!(status, pb::ExecutionStatus::Completed, "{id}");
    }
    // Claims per aligned 2 s window, from the rows (the clock the claims used).
    let conn = rusqlite::Connection::open(&db).expect("open the database");
    let mut stmt = conn
        .prepare(
            "SELECT claimed_at / 2000, count(*) FROM task_queue WHERE claimed_at IS NOT NULL \
             GROUP BY 1 ORDER BY 1",
        )
        .expect("prepare");
    let windows: Vec<(i64, i64)> = stmt
        .query_map([], |r| Ok((r.get(0)?, r.get(1)?)))
        .expect("query")
        .map(|r| r.expect("row"))
        .collect();
    assert_eq!(windows.iter().map(|w| w.1).sum::<i64>(), 7, "{windows:?}");
    assert!(windows.iter().all(|w| w.1 <= 3), "a window started more than 3: {windows:?}");
    assert!(windows.len() >= 3, "7 starts at 3 per window need 3 windows: {windows:?}");
}

#[tokio::test]
async fn a_named_limit_is_set_listed_and_deleted_and_holds_attempts_until_defined() {
    let dir = TempDir::new("flow-named");
    let server = Server::start(&dir.0.join("db"), &["--rate-limit", "batch-api=10/1m"]).await;
    let mut c = server.client().await;
    let mut admin = AdminServiceClient::new(channel_to(&server.address()).await);
    // From the flag.
    let listed = admin.list_rate_limits(pb::ListRateLimitsRequest::default()).await.expect("list");
    let names: Vec<(String, u32)> =
        listed.into_inner().rate_limits.into_iter().map(|l| (l.name, l.limit)).collect();
    assert_eq!(names, [("batch-api".to_string(), 10)]);

    register(&mut c, PARTNER).await;
    start(&mut c, "partner", "p-1", json!({"id": "p-1"})).await.expect("start");
    let mut w = RawSession::start(&server.address(), "w", &[("work", "")], 4).await;
    let t = pending_until(&mut c, "p-1", |t| t.waiting_on == pb::FlowWait::RateLimit as i32).await;
    assert_eq!(t.rate_limit_key, "partner-api");

    // Defined through the CLI: the attempt is delivered.
    let cli = |args: &[&str]| {
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_orbit"));
        cmd.args(args).args(["--address", &server.address()]);
        run_bounded(&mut cmd, Duration::from_secs(30))
    };
    let (ok, out, err) =
        cli(&["admin", "rate-limit", "set", "partner-api", "--limit", "2", "--per", "1m"]);
    assert!(ok, "rate-limit set: {out}\n{err}");
    let task = next_task(&mut w, WAIT).await;
    assert_eq!(input_of(&task)["id"], "p-1");
    w.complete(&task.token, json!("ok")).await;
    assert_eq!(result(&mut c, "p-1", WAIT).await.0, pb::ExecutionStatus::Completed);

    let (ok, out, err) = cli(&["admin", "rate-limit", "list"]);
    assert!(ok && out.contains("partner-api") && out.contains("batch-api"), "list: {out}\n{err}");
    let (ok, out, err) = cli(&["admin", "rate-limit", "delete", "partner-api"]);
    assert!(ok, "delete: {out}\n{err}");
    let gone = admin
        .delete_rate_limit(pb::DeleteRateLimitRequest { name: "partner-api".into() })
        .await
        .expect_err("deleted twice");
    assert_eq!(code(&gone), "RATE_LIMIT_NOT_FOUND");
    let bad = admin
        .set_rate_limit(pb::SetRateLimitRequest {
            rate_limit: Some(pb::RateLimit { name: "x".into(), limit: 0, ..Default::default() }),
        })
        .await
        .expect_err("limit 0");
    assert_eq!(bad.code(), tonic::Code::InvalidArgument);
}

#[tokio::test]
async fn a_higher_priority_is_dispatched_first() {
    let dir = TempDir::new("flow-priority");
    let server = Server::start(&dir.0.join("db"), &[]).await;
    let mut c = server.client().await;
    register(&mut c, RANKED).await;
    register(&mut c, URGENT_STEP).await;
    let bad = start_p(&mut c, "ranked", "bad", json!({}), 7).await.expect_err("priority 7");
    assert_eq!(bad.code(), tonic::Code::InvalidArgument);
    for i in 0..20 {
        start_p(&mut c, "ranked", &format!("bulk-{i}"), json!({"id": format!("bulk-{i}")}), 5)
            .await
            .expect("start");
    }
    // The workflow's priority (4) beats the bulk's 5 from the start request.
    start(&mut c, "ranked", "default", json!({"id": "default"})).await.expect("start");
    start_p(&mut c, "ranked", "urgent", json!({"id": "urgent"}), 1).await.expect("start");
    // The step's own priority (2) beats its start's 5.
    start_p(&mut c, "urgent-step", "step", json!({"id": "step", "p": 2}), 5).await.expect("start");
    let t =
        pending_until(&mut c, "urgent", |t| t.state == pb::PendingTaskState::Queued as i32).await;
    assert_eq!(t.priority, 1);
    pending_until(&mut c, "step", |t| t.priority == 2).await;

    // One credit at a time: the order of delivery is the order of the queue.
    let mut w = RawSession::start(&server.address(), "w", &[("work", "")], 1).await;
    let mut order = Vec::new();
    for _ in 0..4 {
        let t = next_task(&mut w, WAIT).await;
        order.push(input_of(&t)["id"].as_str().unwrap_or_default().to_string());
        w.complete(&t.token, json!("ok")).await;
        w.tx.send(credits(1)).await.expect("credit");
    }
    assert_eq!(order[..3], ["urgent", "step", "default"], "{order:?}");
    assert_eq!(order[3], "bulk-0", "{order:?}");
}

const FAIR: &str = r#"
name: fair
version: "1"
tasks: { work: {} }
steps:
  - id: a
    task: work
    input: "${{ input }}"
    fairness: { key: "${{ input.tenant }}" }
output: "${{ steps.a.output }}"
"#;

#[tokio::test]
async fn a_fairness_key_interleaves_a_late_tenant_with_an_early_backlog() {
    let dir = TempDir::new("flow-fair");
    let server = Server::start(&dir.0.join("db"), &[]).await;
    let mut c = server.client().await;
    register(&mut c, FAIR).await;
    // Tenant A's backlog first, then tenant B's few: queued before any worker.
    for (tenant, n) in [("A", 10), ("B", 3)] {
        for i in 0..n {
            let id = format!("{tenant}-{i}");
            start(&mut c, "fair", &id, json!({"tenant": tenant, "id": id})).await.expect("start");
        }
    }
    pending_until(&mut c, "B-2", |t| t.state == pb::PendingTaskState::Queued as i32).await;
    // Four slots: the tenants share them (least running first), so B is served beside A's
    // backlog instead of after it.
    let mut w = RawSession::start(&server.address(), "w", &[("work", "")], 4).await;
    let mut got = Vec::new();
    for _ in 0..4 {
        got.push(next_task(&mut w, WAIT).await);
    }
    let id =
        |t: &pb::server_message::Task| input_of(t)["id"].as_str().unwrap_or_default().to_string();
    let mut first: Vec<String> = got.iter().map(id).collect();
    first.sort();
    assert_eq!(first, ["A-0", "A-1", "B-0", "B-1"], "two slots each");
    // A-0 done: A runs 1, B 2, so A's next; then B-0 done: B runs 1, A 2, so B's next.
    for (done, next) in [("A-0", "A-2"), ("B-0", "B-2"), ("A-1", "A-3")] {
        let t = got.iter().find(|t| id(t) == done).expect("running").token.clone();
        w.complete(&t, json!("ok")).await;
        w.tx.send(credits(1)).await.expect("credit");
        let n = next_task(&mut w, WAIT).await;
        assert_eq!(id(&n), next, "after {done}");
        got.push(n);
    }
}

/// The Python client's half of [`the_clients_set_rate_limits_and_start_with_a_priority`]:
/// sets, lists and deletes a named limit, starts with a priority and describes it.
const PY_CLIENT: &str = r#"
import json, sys
from orbit_worker import Client

address = sys.argv[1]
out = {}
with Client(address) as c:
    out["set"] = c.set_rate_limit("py-api", 7, 30)
    out["listed"] = [r["name"] for r in c.list_rate_limits()]
    c.delete_rate_limit("py-api")
    try:
        c.delete_rate_limit("py-api")
        out["again"] = "deleted twice"
    except Exception as e:  # the client raises the grpc error as it came
        out["again"] = e.code().name
    c.start("ranked", {"id": "py"}, execution_id="py-prio", priority=1)
    tasks = c.describe("py-prio").get("pendingTasks", [])
    out["priority"] = [t.get("priority") for t in tasks]
    try:
        c.start("ranked", {}, execution_id="py-bad", priority=9)
        out["bad"] = "accepted"
    except ValueError:
        out["bad"] = "ValueError"
print(json.dumps(out))
"#;

#[tokio::test]
async fn the_clients_set_rate_limits_and_start_with_a_priority() {
    let dir = TempDir::new("flow-clients");
    let server = Server::start(&dir.0.join("db"), &[]).await;
    let mut c = server.client().await;
    register(&mut c, RANKED).await;

    // The Rust client.
    let client = orbit_worker::client::Client::connect(&server.address()).await.expect("connect");
    let set = client
        .set_rate_limit("rust-api", 3, Duration::from_secs(10))
        .await
        .expect("set a rate limit");
    assert_eq!((set.name.as_str(), set.limit), ("rust-api", 3));
    let names: Vec<String> =
        client.list_rate_limits().await.expect("list").into_iter().map(|r| r.name).collect();
    assert_eq!(names, ["rust-api"]);
    client.delete_rate_limit("rust-api").await.expect("delete");
    assert!(client.delete_rate_limit("rust-api").await.is_err(), "deleted twice");
    let start = orbit_worker::client::Start::new("ranked", &json!({"id": "rust"}))
        .execution_id("rust-prio")
        .priority(1);
    client.start_with(start).await.expect("start with a priority");
    let d = client.describe("rust-prio").await.expect("describe");
    let priorities: Vec<u32> = d.pending_tasks.iter().map(|t| t.priority).collect();
    assert_eq!(priorities, [1], "{d:?}");

    // The Python client.
    python::check_sdk("");
    let mut script = Command::new(python::python());
    script.args(["-c", PY_CLIENT, &server.address()]);
    let (ok, stdout, stderr) = run_bounded(&mut script, Duration::from_secs(120));
    assert!(ok, "the Python client script failed:\n{stderr}");
    let out: Value =
        serde_json::from_str(stdout.lines().last().unwrap_or_default()).expect("json line");
    assert_eq!(out["set"]["name"], "py-api", "{out}");
    assert_eq!(out["set"]["limit"], 7, "{out}");
    assert_eq!(out["listed"], json!(["py-api"]), "{out}");
    assert_eq!(out["again"], "NOT_FOUND", "{out}");
    assert_eq!(out["priority"], json!([1]), "{out}");
    assert_eq!(out["bad"], "ValueError", "{out}");

    // The TypeScript client (the package scripts/test.sh builds).
    let sdk = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../sdks/typescript");
    let dist = sdk.join("dist/index.js");
    assert!(
        dist.exists(),
        "the TypeScript SDK is not built: cd sdks/typescript && npm ci && npm run build"
    );
    let script = TS_CLIENT.replace("DIST", &dist.display().to_string());
    let mut node = Command::new(std::env::var("NODE").unwrap_or_else(|_| "node".into()));
    node.args(["--input-type=module", "-e", &script, &server.address()]);
    let (ok, stdout, stderr) = run_bounded(&mut node, Duration::from_secs(120));
    assert!(ok, "the TypeScript client script failed:\n{stderr}");
    let out: Value =
        serde_json::from_str(stdout.lines().last().unwrap_or_default()).expect("json line");
    assert_eq!(out["set"], json!(["ts-api", 4]), "{out}");
    assert_eq!(out["listed"], json!(["ts-api"]), "{out}");
    assert_eq!(out["again"], 5, "NOT_FOUND: {out}");
    assert_eq!(out["priority"], json!([1]), "{out}");
    assert_eq!(out["bad"], "RangeError", "{out}");
}

/// The TypeScript client's half (DIST: the built package): as [`PY_CLIENT`].
const TS_CLIENT: &str = r#"
import { OrbitClient } from 'DIST';
const c = new OrbitClient({ address: process.argv[1] });
const out = {};
const set = await c.setRateLimit('ts-api', 4, 60000);
out.set = [set.name, set.limit];
out.listed = (await c.listRateLimits()).map((r) => r.name);
await c.deleteRateLimit('ts-api');
try { await c.deleteRateLimit('ts-api'); out.again = 'deleted twice'; } catch (e) { out.again = e.code; }
await c.start('ranked', { id: 'ts' }, { executionId: 'ts-prio', priority: 1 });
const d = await c.describe('ts-prio');
out.priority = d.pendingTasks.map((t) => t.priority);
try { await c.start('ranked', {}, { executionId: 'ts-bad', priority: 9 }); out.bad = 'accepted'; } catch (e) { out.bad = e.constructor.name; }
c.close();
console.log(JSON.stringify(out));
"#;
