//! Issue 26: a migration hint through the real binary (`orbit dev`). Executions of v1 have
//! completed `a` (output `{n}`) and wait for a signal; v2's task `work.a` returns a new
//! shape (`{value: {n}}`, its output contract says so) and `b` reads it. Without a hint the
//! migration is refused (`MIGRATION_UNSAFE`, the output contract); v3 is v2 plus
//! `migrations: [{from: "1", outputs: {a: ...}}]`: its dry run names `output_mapped` as
//! safe, the migration records the mapped output in `DefinitionMigrated.outputs`, and after
//! the signal `b` receives the mapped shape, the execution completes and the admin replay
//! check passes across the migration.

// Tests read the wall clock (deadlines of real processes) directly.
#![allow(clippy::disallowed_methods)]

mod common;

use common::evolving::migrate;
use common::{channel_to, history, history_until, register, result, start, Server, TempDir};
use orbit_api::v1 as pb;
use orbit_api::v1::admin_service_client::AdminServiceClient;
use orbit_server_kit::payload::struct_to_json_object;
use orbit_worker::{TaskContext, TaskFailure, Worker};
use serde_json::{json, Value};
use std::time::Duration;
use tokio_util::sync::CancellationToken;

const V1: &str = r#"
name: hinted
version: "1"
tasks: { work.a: {}, work.b: {} }
signals: { go: null }
steps:
  - { id: a, task: work.a, input: { n: "${{ input.n }}" } }
  - { id: g, await: go }
  - { id: b, needs: [a, g], task: work.b, input: "${{ steps.a.output.n }}" }
output: "${{ steps.b.output }}"
"#;

/// `work.a` returns `{value: {n}}` now, and `b` reads `value.n`.
fn v(version: &str, migrations: &str) -> String {
    format!(
        r#"
name: hinted
version: "{version}"
tasks:
  work.a: {{ output: {{ type: object, required: [value], properties: {{ value: {{ type: object, required: [n] }} }} }} }}
  work.b: {{}}
signals: {{ go: null }}
steps:
  - {{ id: a, task: work.a, input: {{ n: "${{{{ input.n }}}}" }} }}
  - {{ id: g, await: go }}
  - {{ id: b, needs: [a, g], task: work.b, input: "${{{{ steps.a.output.value.n }}}}" }}
output: "${{{{ steps.b.output }}}}"
{migrations}"#
    )
}

const HINT: &str =
    "migrations:\n  - from: \"1\"\n    outputs:\n      a: { value: \"${{ output }}\" }\n";
const WAIT: Duration = Duration::from_secs(120);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hint_maps_a_completed_steps_output_to_the_new_shape() {
    let dir = TempDir::new("hints-dev");
    let server = Server::start(&dir.0.join("orbit.db"), &[]).await;
    let mut c = server.client().await;
    let mut admin = AdminServiceClient::new(channel_to(&server.address()).await);
    register(&mut c, V1).await;
    let stop = CancellationToken::new();
    let w = Worker::builder(server.address())
        .worker_id("hints")
        .task("work.a", "1", |ctx: TaskContext| async move {
            Ok::<Value, TaskFailure>(ctx.input().clone())
        })
        .task("work.b", "1", |ctx: TaskContext| async move {
            Ok::<Value, TaskFailure>(json!({"b": ctx.input().clone()}))
        })
        .build()
        .expect("worker");
    let token = stop.clone();
    tokio::spawn(async move { w.run(token).await });
    start(&mut c, "hinted", "h-1", json!({"n": 5})).await.expect("start");
    history_until(&mut c, "h-1", WAIT, |h| {
        h.iter().any(|e| e.event_type == "StepSucceeded" && e.step == "a")
    })
    .await;
    register(&mut c, &v("2", "")).await;
    register(&mut c, &v("3", HINT)).await;

    let refused = migrate(&mut c, "h-1", "2", false).await.expect_err("no hint");
    let code = refused.metadata().get("orbit-error-code").and_then(|v| v.to_str().ok());
    assert_eq!(code, Some("MIGRATION_UNSAFE"), "{refused:?}");
    let dry = migrate(&mut c, "h-1", "3", true).await.expect("dry run");
    assert!(dry.safe, "{dry:?}");
    assert!(
        dry.changes.iter().any(|ch| ch.kind == "output_mapped" && ch.step == "a" && ch.safe),
        "{dry:?}"
    );
    let done = migrate(&mut c, "h-1", "3", false).await.expect("migrate");
    assert!(done.migrated, "{done:?}");
    let h = history(&mut c, "h-1").await;
    let migrated = h.iter().find(|e| e.event_type == "DefinitionMigrated").expect("migrated");
    let fields = Value::Object(struct_to_json_object(migrated.payload.clone().unwrap()).unwrap());
    assert_eq!(fields["outputs"], json!({"a": {"value": {"n": 5}}}), "{fields}");

    let signal = pb::SignalExecutionRequest {
        execution_id: "h-1".into(),
        name: "go".into(),
        ..Default::default()
    };
    c.signal_execution(signal).await.expect("signal");
    let (status, output) = result(&mut c, "h-1", WAIT).await;
    assert_eq!((status, output), (pb::ExecutionStatus::Completed, json!({"b": 5})));
    let replay = pb::ReplayRequest { execution_id: "h-1".into(), run: 0 };
    let r = admin.replay(replay).await.expect("replay").into_inner();
    assert!(r.ok, "replay across the hinted migration diverged: {:?}", r.divergence);
    stop.cancel();
}
