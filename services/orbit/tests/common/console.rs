//! The web console from a test: JSON calls to `/ui/api` over plain HTTP/1.0 (no client
//! library), a scenario leaving executions in every state the pages show, and the headless
//! Chromium run of `tests/console/console.mjs` (Debian's `chromium`, `playwright-core`
//! from `npm ci`; scripts/test.sh installs both).

// Tests read their environment (ORBIT_PYTHON, the database URL) and the wall clock
// (unique names, deadlines of real processes) directly.
#![allow(clippy::disallowed_methods)]

use super::*;
use orbit_api::v1::schedule_service_client::ScheduleServiceClient;
use orbit_worker::{TaskContext, TaskFailure, Worker};
use serde_json::json;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio_util::sync::CancellationToken;

/// The demo workflow: one task (`mode` says how the worker answers), then an await for the
/// `approve` signal (`mode: wait`), a long sleep (`mode: sleep`), or a task no worker
/// serves (`mode: queued`, a backlog for the task queues page).
pub const DEMO: &str = r#"
name: console-demo
version: "1"
input: { type: object, required: [mode], properties: { mode: { type: string } } }
tasks:
  demo.work: { version: "1" }
  demo.lonely: { version: "1" }
signals:
  approve: { type: object }
queries:
  mode: ${{ input.mode }}
steps:
  - id: work
    task: demo.work
    input: { mode: "${{ input.mode }}" }
    retry: { max_attempts: 2, initial_interval: 200ms }
  - id: approval
    needs: [work]
    when: ${{ input.mode == "wait" || input.mode == "cancel" }}
    await: approve
    timeout: 1h
  - id: pause
    needs: [approval]
    when: ${{ input.mode == "sleep" }}
    sleep: 1h
  - id: lonely
    needs: [pause]
    when: ${{ input.mode == "queued" }}
    task: demo.lonely
output: ${{ steps.work.output }}
"#;

/// The ids the scenario leaves, by what they show.
pub const COMPLETED: &str = "demo-ok";
pub const RETRIED: &str = "demo-flaky";
pub const FAILED: &str = "demo-fail";
pub const WAITING: &str = "demo-wait";
pub const CANCELLED: &str = "demo-cancel";
pub const SLEEPING: &str = "demo-sleep";
pub const QUEUED: &str = "demo-queued";
pub const SCHEDULE: &str = "demo-hourly";
pub const WORKER_ID: &str = "console-worker";

/// A workflow to repair from the page (issue 26, reset and fork): `prepare` (computed by the
/// server), then `check`, whose worker has a bug until the test fixes it
/// ([`repair_worker`]), so an execution fails in `check` with `prepare` done.
pub const REPAIR: &str = r#"
name: console-repair
version: "1"
tasks:
  demo.check: { version: "1" }
steps:
  - id: prepare
    compute: "${{ input.order }}"
  - id: check
    needs: [prepare]
    task: demo.check
    input: { order: "${{ steps.prepare.output }}" }
output: ${{ steps.check.output }}
"#;

/// [`REPAIR`] v2: a step added after `check` (safe for a run reset to `check`).
pub const REPAIR_V2: &str = r#"
name: console-repair
version: "2"
tasks:
  demo.check: { version: "1" }
steps:
  - id: prepare
    compute: "${{ input.order }}"
  - id: check
    needs: [prepare]
    task: demo.check
    input: { order: "${{ steps.prepare.output }}" }
  - id: notify
    needs: [check]
    compute: "${{ 'checked' }}"
output: ${{ steps.check.output }}
"#;

/// [`REPAIR`] v3: the completed `prepare` renamed without `renamed_from` (unsafe for a run
/// reset to `check`, where `prepare` is kept).
pub const REPAIR_V3: &str = r#"
name: console-repair
version: "3"
tasks:
  demo.check: { version: "1" }
steps:
  - id: setup
    compute: "${{ input.order }}"
  - id: check
    needs: [setup]
    task: demo.check
    input: { order: "${{ steps.setup.output }}" }
output: ${{ steps.check.output }}
"#;

/// The [`REPAIR`] execution the page resets.
pub const REPAIRED: &str = "demo-repair";
pub const REPAIR_WORKER_ID: &str = "console-repair-worker";

const WAIT: Duration = Duration::from_secs(60);

/// A workflow the page migrates with a batch (issue 26, batches in the console): each
/// execution computes `prepare`, then waits for the `go` signal.
pub const BATCHED: &str = r#"
name: console-batch
version: "1"
signals:
  go: { type: object }
steps:
  - id: prepare
    compute: "${{ input.n }}"
  - id: wait
    needs: [prepare]
    await: go
    timeout: 1h
output: ${{ steps.prepare.output }}
"#;

/// [`BATCHED`] v2: a step added after the await (a safe migration for a waiting execution).
pub const BATCHED_V2: &str = r#"
name: console-batch
version: "2"
signals:
  go: { type: object }
steps:
  - id: prepare
    compute: "${{ input.n }}"
  - id: wait
    needs: [prepare]
    await: go
    timeout: 1h
  - id: done
    needs: [wait]
    compute: "${{ 'v2' }}"
output: ${{ steps.prepare.output }}
"#;

/// The [`BATCHED`] executions the page's batch migrates.
pub const BATCH_IDS: [&str; 3] = ["batch-a", "batch-b", "batch-c"];

/// Starts the [`BATCH_IDS`] on [`BATCHED`] v1, waits until each waits for its signal, then
/// registers [`BATCHED_V2`].
/// An execution whose step names a rate limit the server does not define yet, so it waits
/// on it (issue 27): the page defines it from the Rate limits page and the step runs.
pub const METERED: &str = r#"
name: console-metered
version: "1"
tasks: { demo.work: { version: "1" } }
search_attributes: { account: keyword }
search: { account: "${{ input.account }}" }
steps:
  - id: meter
    task: demo.work
    input: { mode: "ok" }
    rate_limit: { name: console-api }
    concurrency: { key: "${{ input.account }}", limit: 1 }
    priority: 2
    on: { pool: console }
output: ${{ steps.meter.output }}
"#;

/// The execution of [`METERED`].
pub const METERED_ID: &str = "demo-metered";

/// Starts [`METERED`]'s execution and waits until it is queued on its rate limit.
pub async fn flow_scenario(c: &mut WorkflowServiceClient<Channel>) {
    register(c, METERED).await;
    start(c, "console-metered", METERED_ID, json!({"account": "acme"})).await.expect("start");
}

pub async fn batch_scenario(c: &mut WorkflowServiceClient<Channel>) {
    register(c, BATCHED).await;
    for (n, id) in BATCH_IDS.iter().enumerate() {
        start(c, "console-batch", id, json!({"n": n})).await.expect("start");
    }
    for id in BATCH_IDS {
        history_until(c, id, WAIT, |events| events.iter().any(|e| e.event_type == "AwaitStarted"))
            .await;
    }
    register(c, BATCHED_V2).await;
}

/// A worker serving `demo.work`: `fail` fails every attempt (retryable, so the retry shows),
/// `flaky` fails the first attempt only, anything else succeeds.
pub fn worker(address: &str, token: Option<&str>, stop: &CancellationToken) {
    let mut builder = Worker::builder(address.to_string())
        .worker_id(WORKER_ID)
        .max_concurrency(8)
        .label("pool", "console");
    if let Some(t) = token {
        builder = builder.bearer_token(t);
    }
    let w = builder
        .task("demo.work", "1", |ctx: TaskContext| async move {
            let mode = ctx.input()["mode"].as_str().unwrap_or_default().to_string();
            match mode.as_str() {
                "fail" => {
                    Err(TaskFailure::retryable("DEMO_FAILED", "the demo task failed on purpose"))
                }
                "flaky" if ctx.attempt() == 1 => {
                    Err(TaskFailure::retryable("DEMO_FLAKY", "first attempt fails"))
                }
                _ => Ok::<Value, TaskFailure>(json!({"mode": mode, "attempt": ctx.attempt()})),
            }
        })
        .build()
        .expect("worker");
    let stop = stop.clone();
    tokio::spawn(async move { w.run(stop).await });
}

/// A worker serving `demo.check` of [`REPAIR`]: it fails (not retryable) until `fixed`,
/// then answers the order checked.
pub fn repair_worker(address: &str, fixed: Arc<AtomicBool>, stop: &CancellationToken) {
    let w = Worker::builder(address.to_string())
        .worker_id(REPAIR_WORKER_ID)
        .task("demo.check", "1", move |ctx: TaskContext| {
            let fixed = fixed.load(Ordering::SeqCst);
            async move {
                if fixed {
                    Ok::<Value, TaskFailure>(json!({"checked": ctx.input()["order"].clone()}))
                } else {
                    Err(TaskFailure::fatal(
                        "DEMO_BUG",
                        "demo.check has a bug until the test fixes it",
                    ))
                }
            }
        })
        .build()
        .expect("repair worker");
    let stop = stop.clone();
    tokio::spawn(async move { w.run(stop).await });
}

/// Registers the demo, starts one execution per state and waits until each is there; a
/// paused hourly schedule of the demo exists too. Workers must be running.
pub async fn scenario(
    c: &mut WorkflowServiceClient<Channel>,
    s: &mut ScheduleServiceClient<Channel>,
) {
    register(c, DEMO).await;
    for (id, mode) in [
        (COMPLETED, "ok"),
        (RETRIED, "flaky"),
        (FAILED, "fail"),
        (WAITING, "wait"),
        (CANCELLED, "cancel"),
        (SLEEPING, "sleep"),
        (QUEUED, "queued"),
    ] {
        start(c, "console-demo", id, json!({"mode": mode})).await.expect("start");
    }
    for (id, status) in [
        (COMPLETED, pb::ExecutionStatus::Completed),
        (RETRIED, pb::ExecutionStatus::Completed),
        (FAILED, pb::ExecutionStatus::Failed),
    ] {
        assert_eq!(result(c, id, WAIT).await.0, status, "{id}");
    }
    // The cancelled one is cancelled once it waits (the await is in its history).
    history_until(c, CANCELLED, WAIT, |events| {
        events.iter().any(|e| e.event_type == "AwaitStarted")
    })
    .await;
    c.cancel_execution(pb::CancelExecutionRequest {
        execution_id: CANCELLED.into(),
        reason: "cancelled by the console test".into(),
        request_id: String::new(),
    })
    .await
    .expect("cancel");
    assert_eq!(result(c, CANCELLED, WAIT).await.0, pb::ExecutionStatus::Cancelled);
    history_until(c, WAITING, WAIT, |events| events.iter().any(|e| e.event_type == "AwaitStarted"))
        .await;
    history_until(c, SLEEPING, WAIT, |events| {
        events.iter().any(|e| e.event_type == "TimerStarted")
    })
    .await;
    history_until(c, QUEUED, WAIT, |events| events.iter().any(|e| e.step == "lonely")).await;
    let spec = pb::ScheduleSpec {
        trigger: Some(pb::schedule_spec::Trigger::Interval(prost_types::Duration {
            seconds: 3600,
            nanos: 0,
        })),
        ..pb::ScheduleSpec::default()
    };
    s.create_schedule(pb::CreateScheduleRequest {
        schedule_id: SCHEDULE.into(),
        spec: Some(spec),
        action: Some(pb::ScheduleAction {
            workflow: "console-demo".into(),
            version: String::new(),
            input: Some(json_to_proto(json!({"mode": "ok"}))),
        }),
        paused: true,
    })
    .await
    .expect("create schedule");
}

/// `method` (`WorkflowService/ListExecutions`) of orbit.v1 through the console's gateway at
/// `admin` (`host:port`) with `body`, and `token` as bearer: (HTTP status, JSON body).
pub async fn api(admin: &str, method: &str, body: &Value, token: Option<&str>) -> (u16, Value) {
    let (status, text) =
        http(admin, "POST", &format!("/ui/api/orbit.v1.{method}"), &body.to_string(), token).await;
    let json =
        serde_json::from_str(&text).unwrap_or_else(|e| panic!("{method}: not JSON ({e}): {text}"));
    (status, json)
}

/// One HTTP/1.0 request with a JSON body (bounded to 30 s): status and body.
pub async fn http(
    admin: &str,
    method: &str,
    path: &str,
    body: &str,
    token: Option<&str>,
) -> (u16, String) {
    http_typed(admin, method, path, "application/json", body, token).await
}

/// [`http`] with the given `Content-Type`.
pub async fn http_typed(
    admin: &str,
    method: &str,
    path: &str,
    content_type: &str,
    body: &str,
    token: Option<&str>,
) -> (u16, String) {
    let fetch = async {
        let mut stream = tokio::net::TcpStream::connect(admin).await.expect("connect admin port");
        let auth = token.map(|t| format!("Authorization: Bearer {t}\r\n")).unwrap_or_default();
        let request = format!(
            "{method} {path} HTTP/1.0\r\nHost: {admin}\r\nContent-Type: {content_type}\r\n{auth}Content-Length: {}\r\nConnection: close\r\n\r\n{body}",
            body.len()
        );
        stream.write_all(request.as_bytes()).await.expect("write");
        let mut raw = Vec::new();
        stream.read_to_end(&mut raw).await.expect("read");
        let text = String::from_utf8_lossy(&raw).to_string();
        let (head, body) = text.split_once("\r\n\r\n").expect("an HTTP answer");
        let status = head.split_whitespace().nth(1).and_then(|s| s.parse().ok()).expect("status");
        (status, body.to_string())
    };
    tokio::time::timeout(Duration::from_secs(30), fetch).await.expect("admin port answers in 30 s")
}

/// The folder of the browser tests' package.
pub fn browser_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/console")
}

/// Runs `console.mjs` with `args` against the console at `admin`, screenshots into `shots`
/// (bounded to 5 minutes). Panics with the install commands when Chromium or the package is
/// missing, and with the script's output when it fails.
pub fn run_browser(admin: &str, shots: &Path, args: &[&str]) {
    run_browser_script("console.mjs", admin, shots, args);
}

/// Runs `script` (a file of `tests/console/`) as [`run_browser`] runs `console.mjs`.
pub fn run_browser_script(script: &str, admin: &str, shots: &Path, args: &[&str]) {
    let chromium = std::env::var("CHROMIUM").unwrap_or_else(|_| "/usr/bin/chromium".into());
    assert!(
        Path::new(&chromium).exists(),
        "headless Chromium is missing: apt-get install -y chromium (or set CHROMIUM)"
    );
    let dir = browser_dir();
    assert!(
        dir.join("node_modules/playwright-core").exists(),
        "playwright-core is missing: (cd {} && npm ci)",
        dir.display()
    );
    let mut cmd = Command::new("node");
    cmd.current_dir(&dir)
        .arg(script)
        .arg(format!("http://{admin}"))
        .arg(shots)
        .args(args)
        .env("CHROMIUM", &chromium);
    let (ok, out, err) = run_bounded(&mut cmd, Duration::from_secs(300));
    assert!(ok, "browser test failed:\n{out}\n{err}");
    eprintln!("{out}");
}
