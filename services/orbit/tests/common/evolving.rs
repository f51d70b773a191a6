//! What the evolve tests share (migrate, batches, hints): the three versions of the
//! `a → b → c` workflow they migrate between, the worker that serves them, the
//! `MigrateExecution` call, the CLI with JSON output, and small history reads.

use orbit_api::v1 as pb;
use orbit_api::v1::workflow_service_client::WorkflowServiceClient;
use orbit_worker::{TaskContext, TaskFailure, WorkerBuilder};
use serde_json::{json, Value};
use std::time::Duration;
use tokio_util::sync::CancellationToken;
use tonic::transport::Channel;

/// Version 1 of workflow `name`: `a → b → c`, `c`'s input `{from: b's output, v: 1}`.
pub fn v1(name: &str) -> String {
    format!(
        r#"
name: {name}
version: "1"
tasks: {{ work.a: {{}}, work.b: {{}}, work.c: {{}} }}
steps:
  - {{ id: a, task: work.a, input: "${{{{ input.n }}}}" }}
  - {{ id: b, needs: [a], task: work.b, input: "${{{{ steps.a.output }}}}" }}
  - {{ id: c, needs: [b], task: work.c, input: {{ from: "${{{{ steps.b.output }}}}", v: 1 }} }}
output: "${{{{ steps.c.output }}}}"
"#
    )
}

/// Version 2: a step `d` added after `b`; `c` now needs it and its input changed (safe
/// while `b` runs).
pub fn v2(name: &str) -> String {
    format!(
        r#"
name: {name}
version: "2"
tasks: {{ work.a: {{}}, work.b: {{}}, work.c: {{}}, work.d: {{}} }}
steps:
  - {{ id: a, task: work.a, input: "${{{{ input.n }}}}" }}
  - {{ id: b, needs: [a], task: work.b, input: "${{{{ steps.a.output }}}}" }}
  - {{ id: d, needs: [b], task: work.d, input: "${{{{ steps.b.output }}}}" }}
  - {{ id: c, needs: [d], task: work.c, input: {{ from: "${{{{ steps.d.output }}}}", v: 2 }} }}
output: "${{{{ steps.c.output }}}}"
"#
    )
}

/// Version 3: the completed step `a` renamed to `first` without `renamed_from` (unsafe).
pub fn v3(name: &str) -> String {
    format!(
        r#"
name: {name}
version: "3"
tasks: {{ work.a: {{}}, work.b: {{}}, work.c: {{}} }}
steps:
  - {{ id: first, task: work.a, input: "${{{{ input.n }}}}" }}
  - {{ id: b, needs: [first], task: work.b, input: "${{{{ steps.first.output }}}}" }}
  - {{ id: c, needs: [b], task: work.c, input: {{ from: "${{{{ steps.b.output }}}}", v: 3 }} }}
output: "${{{{ steps.c.output }}}}"
"#
    )
}

/// A worker serving `tasks` (each returns its input; `work.d` wraps it as `{"d": input}`).
pub fn worker(builder: WorkerBuilder, worker_id: &str, tasks: &[&str], stop: &CancellationToken) {
    let mut builder = builder
        .worker_id(worker_id)
        .max_concurrency(16)
        .reconnect_backoff(Duration::from_millis(50), Duration::from_millis(500));
    for task in tasks {
        let wrap = *task == "work.d";
        builder = builder.task(*task, "1", move |ctx: TaskContext| async move {
            let input = ctx.input().clone();
            Ok::<Value, TaskFailure>(if wrap { json!({"d": input}) } else { input })
        });
    }
    let w = builder.build().expect("worker");
    let stop = stop.clone();
    tokio::spawn(async move { w.run(stop).await });
}

/// `MigrateExecution` of `id` to `to`.
pub async fn migrate(
    c: &mut WorkflowServiceClient<Channel>,
    id: &str,
    to: &str,
    dry_run: bool,
) -> Result<pb::MigrateExecutionResponse, tonic::Status> {
    let request = pb::MigrateExecutionRequest {
        execution_id: id.into(),
        to_version: to.into(),
        dry_run,
        reason: "issue 26 test".into(),
        request_id: String::new(),
    };
    c.migrate_execution(request).await.map(tonic::Response::into_inner)
}

/// The version the execution runs now.
pub async fn version_of(c: &mut WorkflowServiceClient<Channel>, id: &str) -> String {
    let request = pb::DescribeExecutionRequest { execution_id: id.into(), run: 0, at_seq: 0 };
    let described = c.describe_execution(request).await.expect("describe").into_inner();
    described.execution.and_then(|e| e.info).expect("info").version
}

/// `orbit COMMAND ARGS --address ... --output json`: (exit code, stdout JSON, stderr).
pub fn cli(port: u16, command: &str, args: &[&str]) -> (i32, Value, String) {
    let mut cmd = std::process::Command::new(env!("CARGO_BIN_EXE_orbit"));
    cmd.arg(command).args(args);
    cmd.args(["--address", &format!("http://127.0.0.1:{port}"), "--output", "json"]);
    let out = cmd.output().expect("run the orbit CLI");
    let stdout = String::from_utf8_lossy(&out.stdout).to_string();
    let value = serde_json::from_str(stdout.trim()).unwrap_or(Value::Null);
    (out.status.code().unwrap_or(-1), value, String::from_utf8_lossy(&out.stderr).to_string())
}

/// How many events of this type a history holds.
pub fn count(events: &[pb::HistoryEvent], event_type: &str) -> usize {
    events.iter().filter(|e| e.event_type == event_type).count()
}
