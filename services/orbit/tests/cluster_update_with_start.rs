//! Starts on the split topology (real frontend and owner processes, PostgreSQL).
//!
//! Update-with-start: the start crosses processes (`OwnerService.StartExecution` with its
//! update), and the owner records the update's acceptance in the commit that creates the
//! execution.
//!
//! * A missing execution is created with the update accepted at seq 2, before its first
//!   decision; the reply comes back through the frontend; a retry through the other
//!   frontend with the same `request_id` answers the same reply and records nothing.
//! * A refused update (validator) creates nothing: no history, no projection, no owners row.

//!
//! A frontend's cached versions (issue 25): a start of the latest version reads no versions
//! on a frontend that read them before, and still starts a version registered since through
//! another frontend (the owner's commit checks the count the frontend saw).

mod common;

use common::cluster::*;
use orbit_api::v1 as pb;
use orbit_server_kit::payload::{json_to_proto, proto_to_json};
use serde_json::{json, Value};
use std::time::Duration;

const TALLY: &str = r#"
name: tally
version: "1"
signals: { close: null }
updates:
  add:
    input: { type: object, required: [n], properties: { n: { type: integer } } }
    validator: "${{ args.n > 0 }}"
    steps:
      - { id: doubled, compute: "${{ args.n + args.n }}" }
    reply: "${{ {'doubled': steps.doubled.output, 'base': input.base} }}"
steps:
  - { id: wait, await: close }
"#;

fn update(id: &str, n: i64, request_id: &str) -> tonic::Request<pb::UpdateExecutionRequest> {
    let mut r = tonic::Request::new(pb::UpdateExecutionRequest {
        execution_id: id.into(),
        name: "add".into(),
        args: Some(json_to_proto(json!({ "n": n }))),
        request_id: request_id.into(),
        start: Some(pb::StartExecutionRequest {
            workflow: "tally".into(),
            input: Some(json_to_proto(json!({"base": 10}))),
            ..Default::default()
        }),
    });
    r.set_timeout(Duration::from_secs(30));
    r
}

fn reply(r: &pb::UpdateExecutionResponse) -> Value {
    r.result.clone().map(proto_to_json).transpose().expect("JSON").unwrap_or(Value::Null)
}

fn rows(topo: &Topology, table: &str, id: &str) -> String {
    let sql = format!("SELECT count(*) FROM {table} WHERE execution_id = '{id}'");
    psql(topo, &sql).concat()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn update_with_start_is_one_commit_across_frontend_and_owner() {
    let topo = Topology::start("updstart", 2, 1, 1, FAST);
    let mut c = topo.client(0).await;
    let mut other = topo.client(1).await;
    common::register(&mut c, TALLY).await;

    let first = c.update_execution(update("t-new", 4, "u-1")).await.expect("created").into_inner();
    assert!(first.created);
    assert_eq!((reply(&first), first.seq, first.run), (json!({"doubled": 8, "base": 10}), 2, 1));
    let h = common::history(&mut c, "t-new").await;
    let head: Vec<(u64, &str)> = h.iter().take(3).map(|e| (e.seq, e.event_type.as_str())).collect();
    assert_eq!(
        head,
        [(1, "WorkflowCreated"), (2, "UpdateAccepted"), (3, "WorkflowStarted")],
        "{h:#?}"
    );
    assert_eq!(h[0].timestamp, h[1].timestamp, "one commit: {h:#?}");

    // The retry (another frontend; the execution exists, so the update goes through the
    // inbox): the first reply, nothing recorded.
    let again = other.update_execution(update("t-new", 4, "u-1")).await.expect("retry");
    let again = again.into_inner();
    assert_eq!((again.created, reply(&again), again.seq), (false, reply(&first), 2));
    let after = common::history(&mut c, "t-new").await;
    let n = |t: &str| after.iter().filter(|e| e.event_type == t).count();
    assert_eq!((n("WorkflowCreated"), n("UpdateAccepted"), n("UpdateCompleted")), (1, 1, 1));

    // Refused by the validator: nothing at all is stored.
    let e = c.update_execution(update("t-refused", 0, "u-2")).await.unwrap_err();
    let code = orbit_server_kit::OrbitError::from_status(&e).map(|o| o.code.as_str().to_string());
    assert_eq!(code.as_deref(), Some("UPDATE_REJECTED"), "{e:?}");
    for table in ["executions", "history_events", "owners"] {
        assert_eq!(rows(&topo, table, "t-refused"), "0", "{table}");
    }
}

/// Calls of the versions read (`definition_versions`) in the topology's database so far.
fn versions_reads(topo: &Topology) -> u64 {
    let sql = format!(
        "CREATE EXTENSION IF NOT EXISTS pg_stat_statements; \
         SELECT coalesce(sum(s.calls), 0) FROM pg_stat_statements s \
         JOIN pg_database d ON d.oid = s.dbid \
         WHERE d.datname = '{}' AND s.query LIKE 'SELECT version, definition_hash%'",
        topo.database
    );
    let (ok, out, err) = common::run_bounded(
        std::process::Command::new("psql").arg(&topo.admin_url).args(["-qtAc", &sql]),
        Duration::from_secs(30),
    );
    assert!(ok, "psql (is pg_stat_statements loaded? scripts/pg.sh preloads it): {err}");
    out.trim().parse().expect("a count")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cached_latest_version_reads_nothing_and_misses_no_registration() {
    let topo = Topology::start("cachedlatest", 2, 1, 1, FAST);
    let mut a = topo.client(0).await;
    let mut b = topo.client(1).await;
    common::register(&mut a, TALLY).await;
    let start = |id: &str| pb::StartExecutionRequest {
        workflow: "tally".into(),
        execution_id: id.into(),
        input: Some(json_to_proto(json!({"base": 1}))),
        ..Default::default()
    };
    let version = |r: tonic::Response<pb::StartExecutionResponse>| r.into_inner().version;

    // b reads the versions once; its next start reads none.
    assert_eq!(version(b.start_execution(start("c-1")).await.expect("start")), "1");
    let read = versions_reads(&topo);
    assert_eq!(version(b.start_execution(start("c-2")).await.expect("start")), "1");
    assert_eq!(versions_reads(&topo), read, "the second start read the versions again");

    // Version 2 registered through a: b's cached list misses it, and 2 starts all the same.
    common::register(&mut a, &TALLY.replace("version: \"1\"", "version: \"2\"")).await;
    assert_eq!(version(b.start_execution(start("c-3")).await.expect("start")), "2");
    assert_eq!(version(b.start_execution(start("c-4")).await.expect("start")), "2");
    let rows =
        psql(&topo, "SELECT version FROM executions WHERE execution_id LIKE 'c-%' ORDER BY 1");
    assert_eq!(rows, ["1", "1", "2", "2"]);
}
