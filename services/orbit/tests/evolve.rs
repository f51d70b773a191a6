//! Issue 26: migrating running executions to another version of their workflow with a
//! checked graph diff, through the real binary — `orbit dev` (SQLite) and the split
//! (PostgreSQL, 2 frontends, 2 owners):
//!
//! * 50 executions of v1 (`a → b → c`) wait in step `b` (no worker serves it yet);
//! * v3, which renames the completed step `a` without `renamed_from` (and so changes the
//!   queued `b`'s input), is refused: the dry run names exactly those two differences as
//!   UNSAFE, the migration fails with `MIGRATION_UNSAFE` and writes nothing (the history and
//!   the version stay as they were);
//! * every execution migrates to v2 (a step `d` added after `b`, `c`'s input changed): one
//!   `DefinitionMigrated` each, a second call is a no-op; then a worker of `b`, `c` and `d`
//!   arrives and every execution completes through v2's path (`d` ran, `c` got its new
//!   input), and the admin replay check passes across the migration.

// Tests read their environment (ORBIT_PYTHON, the database URL) and the wall clock
// (unique names, deadlines of real processes) directly.
#![allow(clippy::disallowed_methods)]

mod common;

use common::evolving::{cli, count, migrate, v1, v2, v3, version_of, worker};
use common::{channel_to, history, history_until, register, result, start, Server, TempDir};
use orbit_api::v1 as pb;
use orbit_api::v1::admin_service_client::AdminServiceClient;
use orbit_api::v1::workflow_service_client::WorkflowServiceClient;
use orbit_worker::{Worker, WorkerBuilder};
use serde_json::json;
use std::time::Duration;
use tokio_util::sync::CancellationToken;
use tonic::transport::Channel;

const EXECUTIONS: usize = 50;
const WAIT: Duration = Duration::from_secs(120);

fn succeeded(events: &[pb::HistoryEvent], step: &str) -> bool {
    events.iter().any(|e| e.event_type == "StepSucceeded" && e.step == step)
}

/// The scenario of the module docs, on any server: `workers` builds a worker connected to
/// it, `admin` is its admin client.
async fn scenario(
    c: &mut WorkflowServiceClient<Channel>,
    admin: &mut AdminServiceClient<Channel>,
    workers: impl Fn() -> WorkerBuilder,
    cli_port: Option<u16>,
) {
    register(c, &v1("evolving")).await;
    let ids: Vec<String> = (0..EXECUTIONS).map(|i| format!("evolve-{i}")).collect();
    for (i, id) in ids.iter().enumerate() {
        start(c, "evolving", id, json!({"n": i})).await.expect("start");
    }
    let stop = CancellationToken::new();
    worker(workers(), "only-a", &["work.a"], &stop);
    // Every execution is waiting in step 2: `a` succeeded, `b` queued for a worker.
    for id in &ids {
        history_until(c, id, WAIT, |h| succeeded(h, "a")).await;
    }
    register(c, &v2("evolving")).await;
    register(c, &v3("evolving")).await;

    // v3 is unsafe for them; the migration is refused and writes nothing.
    let before = history(c, &ids[0]).await;
    let dry = migrate(c, &ids[0], "3", true).await.expect("dry run to v3");
    assert!(!dry.safe && !dry.migrated, "{dry:?}");
    // The completed `a` disappears without `renamed_from`, and the queued `b` would read
    // another input: both are named, nothing else.
    let unsafe_changes: Vec<_> = dry
        .changes
        .iter()
        .filter(|ch| !ch.safe)
        .map(|ch| (ch.kind.as_str(), ch.step.as_str()))
        .collect();
    assert_eq!(unsafe_changes, [("removed", "a"), ("input_changed", "b")], "{dry:?}");
    let first = dry.changes.iter().find(|ch| ch.step == "a").expect("a");
    assert!(first.reason.contains("renamed_from"), "the reason says what to do: {first:?}");
    let refused = migrate(c, &ids[0], "3", false).await.expect_err("v3 is refused");
    assert_eq!(refused.code(), tonic::Code::FailedPrecondition, "{refused:?}");
    let code = refused.metadata().get("orbit-error-code").and_then(|v| v.to_str().ok());
    assert_eq!(code, Some("MIGRATION_UNSAFE"), "{refused:?}");
    assert!(refused.message().contains('a'), "the refusal names the step: {}", refused.message());
    assert_eq!(history(c, &ids[0]).await, before, "a refused migration writes nothing");
    assert_eq!(version_of(c, &ids[0]).await, "1");
    // The CLI says the same: the dry run prints the diff (exit 0), the migration fails with
    // the code (exit 4: a server error other than not found or invalid).
    if let Some(port) = cli_port {
        let (exit, out, _) =
            cli(port, "execution", &["migrate", &ids[1], "--to", "3", "--dry-run"]);
        assert_eq!(
            (exit, &out["safe"], &out["migrated"]),
            (0, &json!(false), &json!(false)),
            "{out}"
        );
        let (exit, _, stderr) = cli(port, "execution", &["migrate", &ids[1], "--to", "3"]);
        assert_eq!(exit, 4, "{stderr}");
        assert!(stderr.contains("MIGRATION_UNSAFE"), "{stderr}");
    }
    // An unknown version is refused as such.
    let missing = migrate(c, &ids[0], "9", false).await.expect_err("no v9");
    assert_eq!(missing.code(), tonic::Code::NotFound, "{missing:?}");

    // v2 is safe: every execution migrates once.
    for id in &ids {
        let dry = migrate(c, id, "2", true).await.expect("dry run to v2");
        assert!(dry.safe, "{id}: {dry:?}");
        let kinds: Vec<_> =
            dry.changes.iter().map(|ch| (ch.kind.as_str(), ch.step.as_str())).collect();
        assert!(kinds.contains(&("added", "d")), "{id}: {kinds:?}");
        let done = migrate(c, id, "2", false).await.unwrap_or_else(|e| panic!("{id}: {e:?}"));
        assert!(done.migrated && done.seq > 0 && done.run == 1, "{id}: {done:?}");
        assert_eq!((done.from_version.as_str(), done.to_version.as_str()), ("1", "2"));
        let again = migrate(c, id, "2", false).await.expect("again");
        assert!(
            !again.migrated && again.seq == 0,
            "{id}: a second migration is a no-op: {again:?}"
        );
        assert_eq!(version_of(c, id).await, "2");
    }

    // The worker of the rest arrives: each completes through v2's path.
    worker(workers(), "the-rest", &["work.b", "work.c", "work.d"], &stop);
    for (i, id) in ids.iter().enumerate() {
        let (status, output) = result(c, id, WAIT).await;
        assert_eq!(status, pb::ExecutionStatus::Completed, "{id}: {output}");
        assert_eq!(output, json!({"from": {"d": i}, "v": 2}), "{id}");
        let h = history(c, id).await;
        assert_eq!(count(&h, "DefinitionMigrated"), 1, "{id}");
        assert!(succeeded(&h, "d"), "{id}: the added step ran");
        let replay = pb::ReplayRequest { execution_id: id.clone(), run: 0 };
        let r = admin.replay(replay).await.expect("replay").into_inner();
        assert!(r.ok, "{id}: replay across the migration diverged: {:?}", r.divergence);
    }
    stop.cancel();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn running_executions_migrate_in_orbit_dev() {
    let dir = TempDir::new("evolve-dev");
    let server = Server::start(&dir.0.join("orbit.db"), &[]).await;
    let mut c = server.client().await;
    let mut admin = AdminServiceClient::new(channel_to(&server.address()).await);
    let address = server.address();
    scenario(&mut c, &mut admin, || Worker::builder(address.clone()), Some(server.port)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn running_executions_migrate_on_the_split() {
    use common::cluster::{shared_tls, shared_token, Topology, FAST};
    let topo = Topology::start("evolve", 2, 2, 1, FAST);
    let mut c = topo.client(0).await;
    let admin_channel = topo.tls().endpoint(&topo.frontends()[1]).expect("endpoint");
    let mut admin = AdminServiceClient::new(admin_channel.connect().await.expect("connect"));
    let endpoints = topo.worker_endpoints();
    scenario(
        &mut c,
        &mut admin,
        || {
            let builder = Worker::builder(endpoints.clone()).tls(shared_tls());
            match shared_token() {
                Some(token) => builder.bearer_token(token),
                None => builder,
            }
        },
        None,
    )
    .await;
}
