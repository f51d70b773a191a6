//! An update against a paused owner on the split topology (real processes, PostgreSQL):
//! the execution's owner is frozen with `SIGSTOP` while an update goes through a frontend.
//!
//! * The caller gets `DEADLINE_EXCEEDED` (or `UNAVAILABLE`) by its deadline instead of
//!   hanging, and the update stays queued: nothing is lost.
//! * Resumed with `SIGCONT` before the node timeout, the owner applies it; taken over by the
//!   other owner after the node timeout, the new owner applies it; either way a retry with
//!   the same `request_id` answers the one reply, and the history holds exactly one
//!   `UpdateAccepted` / `UpdateCompleted` pair (also after the fenced owner wakes up).

// Tests read their environment (ORBIT_PYTHON, the database URL) and the wall clock
// (unique names, deadlines of real processes) directly.
#![allow(clippy::disallowed_methods)]

mod common;

use common::cluster::*;
use orbit_api::v1 as pb;
use orbit_api::v1::workflow_service_client::WorkflowServiceClient;
use orbit_server_kit::payload::{json_to_proto, proto_to_json};
use serde_json::{json, Value};
use std::time::{Duration, Instant};
use tonic::transport::Channel;

/// `FAST` sets a 2 s node timeout.
const NODE_TIMEOUT: Duration = Duration::from_secs(2);
/// The bound on any wait for the update once an owner can apply it.
const WAIT: Duration = Duration::from_secs(60);

/// The handler's steps produce the reply (read from the history once they finish).
const TALLY: &str = r#"
name: tally
version: "1"
signals: { close: null }
updates:
  add:
    input: { type: object, required: [n], properties: { n: { type: integer } } }
    steps:
      - { id: doubled, compute: "${{ args.n + args.n }}" }
    reply: "${{ {'doubled': steps.doubled.output, 'base': input.base} }}"
steps:
  - { id: wait, await: close }
"#;

fn update(
    id: &str,
    n: i64,
    request_id: &str,
    deadline: Duration,
) -> tonic::Request<pb::UpdateExecutionRequest> {
    let mut r = tonic::Request::new(pb::UpdateExecutionRequest {
        execution_id: id.into(),
        name: "add".into(),
        args: Some(json_to_proto(json!({ "n": n }))),
        request_id: request_id.into(),
        start: None,
    });
    r.set_timeout(deadline);
    r
}

fn owner_of(topo: &Topology, id: &str) -> String {
    let rows = psql(topo, &format!("SELECT node_id FROM owners WHERE execution_id = '{id}'"));
    rows.into_iter().next().unwrap_or_else(|| panic!("no owners row for {id}"))
}

/// The (UpdateAccepted, UpdateCompleted) counts of `id`'s history.
async fn pairs(c: &mut WorkflowServiceClient<Channel>, id: &str) -> (usize, usize) {
    let h = common::history(c, id).await;
    let n = |t: &str| h.iter().filter(|e| e.event_type == t).count();
    (n("UpdateAccepted"), n("UpdateCompleted"))
}

/// Sends the update to a paused owner: the call answers by its deadline with a code that
/// says to retry, and the entry stays queued.
async fn refused_while_paused(
    c: &mut WorkflowServiceClient<Channel>,
    id: &str,
    deadline: Duration,
) {
    let began = Instant::now();
    let e = c.update_execution(update(id, 4, "u-1", deadline)).await.unwrap_err();
    assert!(matches!(e.code(), tonic::Code::DeadlineExceeded | tonic::Code::Unavailable), "{e:?}");
    if let Some(orbit) = orbit_server_kit::OrbitError::from_status(&e) {
        assert!(matches!(orbit.code.as_str(), "DEADLINE_EXCEEDED" | "UNAVAILABLE"), "{e:?}");
    }
    // Bounded by the deadline, not by the pause (with a wide margin for a busy machine).
    assert!(began.elapsed() < deadline * 10, "answered after {:?}", began.elapsed());
}

/// Retries with the same `request_id` until an owner applied the update; returns the reply.
async fn retried(c: &mut WorkflowServiceClient<Channel>, id: &str) -> (Value, u64) {
    let until = Instant::now() + WAIT;
    loop {
        match c.update_execution(update(id, 4, "u-1", Duration::from_secs(10))).await {
            Ok(r) => {
                let r = r.into_inner();
                let result = r.result.map(proto_to_json).transpose().expect("JSON");
                return (result.unwrap_or(Value::Null), r.seq);
            }
            Err(e) if Instant::now() < until => {
                assert!(
                    matches!(e.code(), tonic::Code::DeadlineExceeded | tonic::Code::Unavailable),
                    "only a retryable answer while the owner recovers: {e:?}"
                );
            }
            Err(e) => panic!("the update was not applied within {WAIT:?}: {e:?}"),
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_update_to_a_paused_owner_is_applied_once_on_resume_or_takeover() {
    let topo = Topology::start("updpause", 1, 2, 1, FAST);
    let mut c = topo.client(0).await;
    common::register(&mut c, TALLY).await;
    let want = json!({"doubled": 8, "base": 10});

    // Resumed before the node timeout: the same owner applies the queued update.
    common::start(&mut c, "tally", "t-resume", json!({"base": 10})).await.expect("start");
    let owner = owner_of(&topo, "t-resume");
    topo.signal(&owner, "STOP");
    refused_while_paused(&mut c, "t-resume", Duration::from_millis(800)).await;
    topo.signal(&owner, "CONT");
    let (reply, seq) = retried(&mut c, "t-resume").await;
    assert_eq!(reply, want);
    assert_eq!(retried(&mut c, "t-resume").await, (want.clone(), seq), "the one reply");
    assert_eq!(pairs(&mut c, "t-resume").await, (1, 1));

    // Paused past the node timeout: the other owner takes over and applies it.
    common::start(&mut c, "tally", "t-takeover", json!({"base": 10})).await.expect("start");
    let owner = owner_of(&topo, "t-takeover");
    topo.signal(&owner, "STOP");
    refused_while_paused(&mut c, "t-takeover", Duration::from_secs(1)).await;
    let began = Instant::now();
    while owner_of(&topo, "t-takeover") == owner {
        assert!(began.elapsed() < NODE_TIMEOUT * 10, "no takeover of t-takeover");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let (reply, seq) = retried(&mut c, "t-takeover").await;
    assert_eq!(reply, want);
    assert_eq!(pairs(&mut c, "t-takeover").await, (1, 1));
    // The fenced owner wakes up: nothing is applied twice, the retry still answers the same.
    topo.signal(&owner, "CONT");
    for id in ["t-resume", "t-takeover"] {
        common::scenario::signal(&mut c, id, "close", json!({})).await;
        let (status, _) = common::result(&mut c, id, WAIT).await;
        assert_eq!(status, pb::ExecutionStatus::Completed, "{id}");
    }
    assert_eq!(retried(&mut c, "t-takeover").await, (want, seq));
    assert_eq!(pairs(&mut c, "t-takeover").await, (1, 1));
    assert_eq!(pairs(&mut c, "t-resume").await, (1, 1));
}
