//! Time travel: `DescribeExecution` and `QueryExecution` with `at_seq` answer as of any
//! history seq of a run, through the real binary (`orbit dev`):
//!
//! * a run of three task steps `a → b → c` with a query counting the finished steps is
//!   described and queried at every seq of its history: each answer equals what the test
//!   folds itself from that prefix of `GetHistory` (status, every unit's status, output;
//!   the query's count of `StepSucceeded` events so far), the last seq answers like "now",
//!   and the seq after it is refused `INVALID_ARGUMENT` naming the last one;
//! * a run migrated from v1 to v2 (a step `d` added after `b`) is described before its
//!   `DefinitionMigrated` with version 1, v1's hash, v1's query and no unit `d`, and at its
//!   last seq with version 2, v2's query and `d` run;
//! * the CLI's `execution describe --at` and `execution query --at`, and the Rust client's
//!   `describe_at` and `query_at`, give the same answers.

// Tests read the wall clock (deadlines of real processes) directly.
#![allow(clippy::disallowed_methods)]

mod common;

use common::{history, history_until, register, result, run_bounded, start, Server, TempDir};
use orbit_api::v1 as pb;
use orbit_api::v1::workflow_service_client::WorkflowServiceClient;
use orbit_engine::{HistoryEvent, Origin, State};
use orbit_server_kit::payload::{proto_to_json, struct_to_json_object};
use orbit_worker::{TaskContext, TaskFailure, Worker};
use serde_json::{json, Value};
use std::process::Command;
use std::time::Duration;
use tokio_util::sync::CancellationToken;
use tonic::transport::Channel;

/// Three steps in a row; `progress` counts the finished ones.
const STEPS: &str = r#"
name: travelling
version: "1"
tasks: { work.a: {}, work.b: {}, work.c: {} }
queries:
  progress: "${{ [steps.a.output, steps.b.output, steps.c.output].filter(o, o != null).size() }}"
steps:
  - { id: a, task: work.a, input: "${{ input.n }}" }
  - { id: b, needs: [a], task: work.b, input: "${{ steps.a.output }}" }
  - { id: c, needs: [b], task: work.c, input: "${{ steps.b.output }}" }
output: "${{ steps.c.output }}"
"#;

/// The migration's v1: `which` names the version a query was evaluated against.
const V1: &str = r#"
name: migrating
version: "1"
tasks: { work.a: {}, work.b: {}, work.c: {} }
queries:
  which: "${{ 'v1' }}"
steps:
  - { id: a, task: work.a, input: "${{ input.n }}" }
  - { id: b, needs: [a], task: work.b, input: "${{ steps.a.output }}" }
  - { id: c, needs: [b], task: work.c, input: "${{ steps.b.output }}" }
output: "${{ steps.c.output }}"
"#;

/// v2: a step `d` added after `b`.
const V2: &str = r#"
name: migrating
version: "2"
tasks: { work.a: {}, work.b: {}, work.c: {}, work.d: {} }
queries:
  which: "${{ 'v2' }}"
steps:
  - { id: a, task: work.a, input: "${{ input.n }}" }
  - { id: b, needs: [a], task: work.b, input: "${{ steps.a.output }}" }
  - { id: d, needs: [b], task: work.d, input: "${{ steps.b.output }}" }
  - { id: c, needs: [d], task: work.c, input: "${{ steps.d.output }}" }
output: "${{ steps.c.output }}"
"#;

const WAIT: Duration = Duration::from_secs(60);

/// A worker serving `tasks`, each returning its input.
fn worker(address: &str, worker_id: &str, tasks: &[&str], stop: &CancellationToken) {
    let mut builder = Worker::builder(address.to_string())
        .worker_id(worker_id)
        .max_concurrency(4)
        .reconnect_backoff(Duration::from_millis(50), Duration::from_millis(500));
    for task in tasks {
        builder = builder.task(*task, "1", |ctx: TaskContext| async move {
            Ok::<Value, TaskFailure>(ctx.input().clone())
        });
    }
    let w = builder.build().expect("worker");
    let stop = stop.clone();
    tokio::spawn(async move { w.run(stop).await });
}

/// A `GetHistory` event back in the engine's form, to fold it here.
fn engine_event(e: &pb::HistoryEvent) -> HistoryEvent {
    let mut fields = struct_to_json_object(e.payload.clone().unwrap_or_default()).expect("payload");
    fields.insert("type".into(), json!(e.event_type));
    let event = serde_json::from_value(Value::Object(fields))
        .unwrap_or_else(|err| panic!("event {} ({}) does not decode: {err}", e.seq, e.event_type));
    let ts = e.timestamp.unwrap_or_default();
    let timestamp_ms = u64::try_from(ts.seconds).expect("timestamp") * 1000
        + u64::try_from(ts.nanos).expect("timestamp") / 1_000_000;
    // The fold does not look at the origin.
    HistoryEvent { seq: e.seq, timestamp_ms, origin: Origin::Recorded, event }
}

async fn describe_at(
    c: &mut WorkflowServiceClient<Channel>,
    id: &str,
    at_seq: u64,
) -> Result<pb::ExecutionDescription, tonic::Status> {
    let request = pb::DescribeExecutionRequest { execution_id: id.into(), run: 0, at_seq };
    let response = c.describe_execution(request).await?.into_inner();
    Ok(response.execution.expect("a description"))
}

async fn query_at(
    c: &mut WorkflowServiceClient<Channel>,
    id: &str,
    name: &str,
    at_seq: u64,
) -> Result<(Value, u64), tonic::Status> {
    let request =
        pb::QueryExecutionRequest { execution_id: id.into(), name: name.into(), run: 0, at_seq };
    let response = c.query_execution(request).await?.into_inner();
    let value = response.result.map_or(Value::Null, |v| proto_to_json(v).expect("json"));
    Ok((value, response.as_of_seq))
}

/// (key, status) of every unit, sorted by key.
fn units(d: &pb::ExecutionDescription) -> Vec<(String, pb::UnitStatus)> {
    let mut units: Vec<_> = d.units.iter().map(|u| (u.key.clone(), u.status())).collect();
    units.sort();
    units
}

/// (key, status) of every unit of a folded state, in the wire's words, sorted by key.
fn folded_units(state: &State) -> Vec<(String, pb::UnitStatus)> {
    state.units.iter().map(|(k, u)| (k.clone(), orbit_wire::unit_status(u.status))).collect()
}

fn info(d: &pb::ExecutionDescription) -> &pb::ExecutionInfo {
    d.info.as_ref().expect("info")
}

/// Asserts that the description at `seq` is the fold of the history's prefix up to it.
fn assert_is_the_fold(d: &pb::ExecutionDescription, prefix: &[HistoryEvent], seq: u64) {
    let state = State::from_history(prefix);
    let i = info(d);
    assert_eq!(i.last_seq, seq, "{d:?}");
    assert_eq!(i.status(), orbit_wire::execution_status(state.status()), "at {seq}: {d:?}");
    assert_eq!(units(d), folded_units(&state), "units at {seq}");
    assert_eq!(
        (i.version.as_str(), i.definition_hash.as_str()),
        (&*state.version, &*state.definition_hash)
    );
    let output = d.output.clone().map(|v| proto_to_json(v).expect("json"));
    let folded = (state.status() == orbit_engine::Status::Completed).then(|| state.output.clone());
    assert_eq!(output, folded.flatten(), "output at {seq}");
    let open = state.units.values().filter(|u| !u.status.is_resolved()).count();
    assert_eq!(d.pending_tasks.len(), open, "pending tasks at {seq}: {d:?}");
}

/// The description without what only the projection knows (see `DescribeExecution`).
fn without_projection_times(mut d: pb::ExecutionDescription) -> pb::ExecutionDescription {
    if let Some(i) = d.info.as_mut() {
        i.updated_at = None;
        i.closed_at = None;
    }
    d
}

fn assert_refused_past(status: &tonic::Status, last: u64) {
    assert_eq!(status.code(), tonic::Code::InvalidArgument, "{status:?}");
    assert!(status.message().contains("at_seq"), "names the field: {}", status.message());
    let names_last = status.message().contains(&format!("last seq is {last}"));
    assert!(names_last, "names the last seq {last}: {}", status.message());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_seq_of_a_run_answers_as_its_prefix_folds() {
    let dir = TempDir::new("time-travel");
    let server = Server::start(&dir.0.join("orbit.db"), &[]).await;
    let mut c = server.client().await;
    register(&mut c, STEPS).await;
    let stop = CancellationToken::new();
    worker(&server.address(), "abc", &["work.a", "work.b", "work.c"], &stop);
    start(&mut c, "travelling", "tt-1", json!({"n": 7})).await.expect("start");
    let (status, output) = result(&mut c, "tt-1", WAIT).await;
    assert_eq!((status, output), (pb::ExecutionStatus::Completed, json!(7)));
    stop.cancel();

    let events: Vec<HistoryEvent> =
        history(&mut c, "tt-1").await.iter().map(engine_event).collect();
    let last = events.last().expect("events").seq;
    let seqs: Vec<u64> = events.iter().map(|e| e.seq).collect();
    assert_eq!(seqs, (1..=last).collect::<Vec<_>>(), "a run's seqs have no gaps");
    let mut progress_seen = Vec::new();
    for (i, event) in events.iter().enumerate() {
        let seq = event.seq;
        let prefix = &events[..=i];
        let d = describe_at(&mut c, "tt-1", seq).await.expect("describe at");
        assert_is_the_fold(&d, prefix, seq);
        let done = prefix
            .iter()
            .filter(|e| matches!(e.event, orbit_engine::Event::StepSucceeded { .. }))
            .count();
        let (value, as_of) = query_at(&mut c, "tt-1", "progress", seq).await.expect("query at");
        assert_eq!((value.clone(), as_of), (json!(done), seq), "progress at {seq}");
        if progress_seen.last() != Some(&value) {
            progress_seen.push(value);
        }
    }
    assert_eq!(progress_seen, [json!(0), json!(1), json!(2), json!(3)], "the query moved");

    // The last seq is now, but for what only the projection knows.
    let now = describe_at(&mut c, "tt-1", 0).await.expect("describe now");
    let at_last = describe_at(&mut c, "tt-1", last).await.expect("describe at last");
    assert_eq!((info(&at_last).status(), units(&at_last)), (info(&now).status(), units(&now)));
    assert_eq!(without_projection_times(at_last), without_projection_times(now));
    let (value, as_of) = query_at(&mut c, "tt-1", "progress", 0).await.expect("query now");
    assert_eq!((value, as_of), (json!(3), last));

    // Past the end is refused, naming the last seq.
    let refused = describe_at(&mut c, "tt-1", last + 1).await.expect_err("past the end");
    assert_refused_past(&refused, last);
    let refused = query_at(&mut c, "tt-1", "progress", last + 1).await.expect_err("past the end");
    assert_refused_past(&refused, last);

    // The CLI: the same answers at a seq in the middle, and the same refusal.
    let middle = last / 2;
    let d = describe_at(&mut c, "tt-1", middle).await.expect("describe at");
    let shown = cli(&server, &["describe", "tt-1", "--at", &middle.to_string()]);
    assert_eq!(shown["info"]["last_seq"], json!(middle), "{shown}");
    let status =
        info(&d).status().as_str_name().trim_start_matches("EXECUTION_STATUS_").to_string();
    assert_eq!(shown["info"]["status"], json!(status), "{shown}");
    let keys: Vec<&str> = d.units.iter().map(|u| u.key.as_str()).collect();
    let shown_keys: Vec<&str> = shown["units"]
        .as_array()
        .expect("units")
        .iter()
        .filter_map(|u| u["key"].as_str())
        .collect();
    assert_eq!(shown_keys, keys, "{shown}");
    let (expected, _) = query_at(&mut c, "tt-1", "progress", middle).await.expect("query at");
    let queried = cli(&server, &["query", "tt-1", "progress", "--at", &middle.to_string()]);
    assert_eq!(queried, json!({"result": expected, "as_of_seq": middle}));
    let mut past = cli_command(&server, &["describe", "tt-1", "--at", &(last + 1).to_string()]);
    let (ok, _, stderr) = run_bounded(&mut past, WAIT);
    assert!(!ok && stderr.contains(&format!("last seq is {last}")), "{stderr}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_migrated_run_is_described_with_the_version_it_had_then() {
    let dir = TempDir::new("time-travel-migrate");
    let server = Server::start(&dir.0.join("orbit.db"), &[]).await;
    let mut c = server.client().await;
    let v1 = register(&mut c, V1).await;
    start(&mut c, "migrating", "mig-1", json!({"n": 3})).await.expect("start");
    let stop = CancellationToken::new();
    worker(&server.address(), "only-a", &["work.a"], &stop);
    let succeeded_a =
        |h: &[pb::HistoryEvent]| h.iter().any(|e| e.event_type == "StepSucceeded" && e.step == "a");
    history_until(&mut c, "mig-1", WAIT, succeeded_a).await;
    let v2 = register(&mut c, V2).await;
    let request = pb::MigrateExecutionRequest {
        execution_id: "mig-1".into(),
        to_version: "2".into(),
        ..Default::default()
    };
    let migrated = c.migrate_execution(request).await.expect("migrate").into_inner();
    assert!(migrated.migrated, "{migrated:?}");
    worker(&server.address(), "the-rest", &["work.b", "work.c", "work.d"], &stop);
    let (status, output) = result(&mut c, "mig-1", WAIT).await;
    assert_eq!((status, output), (pb::ExecutionStatus::Completed, json!(3)));
    stop.cancel();

    let h = history(&mut c, "mig-1").await;
    let at = h.iter().find(|e| e.event_type == "DefinitionMigrated").expect("migrated").seq;
    assert_eq!(at, migrated.seq);
    let last = h.last().expect("events").seq;
    let events: Vec<HistoryEvent> = h.iter().map(engine_event).collect();

    let before = describe_at(&mut c, "mig-1", at - 1).await.expect("describe before");
    assert_is_the_fold(&before, &events[..usize::try_from(at - 1).expect("seq")], at - 1);
    assert_eq!(
        (info(&before).version.as_str(), info(&before).definition_hash.as_str()),
        ("1", v1.definition_hash.as_str())
    );
    assert!(before.units.iter().all(|u| u.step != "d"), "no d before: {before:?}");
    let (which, _) = query_at(&mut c, "mig-1", "which", at - 1).await.expect("query before");
    assert_eq!(which, json!("v1"), "v1's query before the migration");
    // The Rust client's `describe_at` and `query_at` say the same.
    let client = orbit_worker::client::Client::connect(&server.address()).await.expect("client");
    assert_eq!(client.describe_at("mig-1", at - 1).await.expect("describe_at"), before);
    assert_eq!(client.query_at("mig-1", "which", at - 1).await.expect("query_at"), which);

    let after = describe_at(&mut c, "mig-1", at).await.expect("describe at the migration");
    assert_eq!(info(&after).version, "2");
    let (which, _) = query_at(&mut c, "mig-1", "which", at).await.expect("query at");
    assert_eq!(which, json!("v2"));

    let end = describe_at(&mut c, "mig-1", last).await.expect("describe at last");
    assert_is_the_fold(&end, &events, last);
    assert_eq!(
        (info(&end).version.as_str(), info(&end).definition_hash.as_str()),
        ("2", v2.definition_hash.as_str())
    );
    let d = end.units.iter().find(|u| u.step == "d").expect("d ran");
    assert_eq!(d.status(), pb::UnitStatus::Succeeded);
    let (which, _) = query_at(&mut c, "mig-1", "which", last).await.expect("query at last");
    assert_eq!(which, json!("v2"));
}

/// `orbit execution ARGS --output json --address ...`.
fn cli_command(server: &Server, args: &[&str]) -> Command {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_orbit"));
    cmd.arg("execution").args(args).args(["--output", "json", "--address", &server.address()]);
    cmd
}

/// Runs [`cli_command`], which must succeed; its JSON output.
fn cli(server: &Server, args: &[&str]) -> Value {
    let (ok, stdout, stderr) = run_bounded(&mut cli_command(server, args), WAIT);
    assert!(ok, "orbit execution {args:?} failed: {stderr}");
    serde_json::from_str(stdout.trim()).unwrap_or_else(|e| panic!("{e}: {stdout}"))
}
