//! Updates (issue 13, item 1) through the real `orbit dev`: an update answers its reply and
//! is in the history; a validator's refusal records nothing and answers `UPDATE_REJECTED`;
//! a retried `request_id` answers the first reply without a second event; an update of a
//! finished execution answers `EXECUTION_FINISHED`; `orbit execution update` prints the reply.

mod common;

use common::*;
use orbit_api::v1 as pb;
use orbit_api::v1::workflow_service_client::WorkflowServiceClient;
use orbit_server_kit::payload::{json_to_proto, proto_to_json};
use serde_json::{json, Value};
use std::process::Command;
use std::time::Duration;
use tonic::transport::Channel;

const STEP: Duration = Duration::from_secs(20);

/// Waits for `go`; the `add` update answers from its args and the execution's input.
const WORKFLOW: &str = r#"
name: updatable
version: "1"
signals: { go: null }
updates:
  add:
    input: { type: object, required: [n], properties: { n: { type: integer } } }
    validator: "${{ args.n > 0 }}"
    reply: "${{ {'sum': args.n + input.base} }}"
steps:
  - { id: w, await: go }
"#;

fn count(events: &[pb::HistoryEvent], event_type: &str) -> usize {
    events.iter().filter(|e| e.event_type == event_type).count()
}

async fn update(
    c: &mut WorkflowServiceClient<Channel>,
    id: &str,
    n: Value,
    request_id: &str,
) -> Result<(Value, u64), tonic::Status> {
    let request = pb::UpdateExecutionRequest {
        execution_id: id.into(),
        name: "add".into(),
        args: Some(json_to_proto(json!({ "n": n }))),
        request_id: request_id.into(),
        start: None,
    };
    let r = c.update_execution(request).await?.into_inner();
    let result = r.result.map(proto_to_json).transpose().expect("a JSON reply");
    Ok((result.unwrap_or(Value::Null), r.seq))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn updates_reply_refuse_deduplicate_and_end_with_the_execution() {
    let dir = TempDir::new("updates");
    let server = Server::start(&dir.0.join("orbit.db"), &[]).await;
    let mut c = server.client().await;
    register(&mut c, WORKFLOW).await;
    start(&mut c, "updatable", "upd-1", json!({"base": 10})).await.expect("start");

    // Applied: the reply, and the seq of its UpdateAccepted.
    let (reply, seq) = update(&mut c, "upd-1", json!(5), "u-1").await.expect("update");
    assert_eq!(reply, json!({"sum": 15}));
    let h = history(&mut c, "upd-1").await;
    let accepted = h.iter().find(|e| e.event_type == "UpdateAccepted").expect("accepted");
    assert_eq!(accepted.seq, seq);
    assert_eq!(count(&h, "UpdateCompleted"), 1, "{h:?}");

    // Retried with the same id: the first reply, nothing recorded. The same id with other
    // args is another request: REQUEST_ID_REUSED, nothing recorded (issue 30, item 10).
    let retry = update(&mut c, "upd-1", json!(5), "u-1").await.expect("retry");
    assert_eq!(retry, (json!({"sum": 15}), seq));
    let reused = update(&mut c, "upd-1", json!(6), "u-1").await.expect_err("other args");
    assert_eq!(code(&reused), "REQUEST_ID_REUSED", "{reused:?}");
    // The validator says no: UPDATE_REJECTED, nothing recorded.
    let before = history(&mut c, "upd-1").await.len();
    let refused = update(&mut c, "upd-1", json!(0), "u-2").await.expect_err("rejected");
    assert_eq!(code(&refused), "UPDATE_REJECTED", "{refused:?}");
    assert_eq!(refused.code(), tonic::Code::FailedPrecondition);
    let bad = update(&mut c, "upd-1", json!("x"), "").await.expect_err("bad args");
    assert_eq!(code(&bad), "INVALID_INPUT", "{bad:?}");
    let h = history(&mut c, "upd-1").await;
    assert_eq!(h.len(), before, "refusals record nothing: {h:?}");
    assert_eq!((count(&h, "UpdateAccepted"), count(&h, "UpdateCompleted")), (1, 1));

    // The CLI prints the reply.
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_orbit"));
    cmd.args(["execution", "update", "upd-1", "add", "--args", r#"{"n": 2}"#]).args([
        "--output",
        "json",
        "--address",
        &server.address(),
    ]);
    let (ok, out, err) = run_bounded(&mut cmd, Duration::from_secs(30));
    assert!(ok, "{out}\n{err}");
    let printed: Value = serde_json::from_str(out.trim()).expect(&out);
    assert_eq!(printed["result"], json!({"sum": 12}), "{out}");

    // Finished: the retry still answers the first reply, a new update is refused.
    c.signal_execution(pb::SignalExecutionRequest {
        execution_id: "upd-1".into(),
        name: "go".into(),
        payload: None,
        request_id: String::new(),
    })
    .await
    .expect("signal");
    let (status, _) = result(&mut c, "upd-1", STEP).await;
    assert_eq!(status, pb::ExecutionStatus::Completed);
    let late = update(&mut c, "upd-1", json!(5), "u-1").await.expect("late retry");
    assert_eq!(late, (json!({"sum": 15}), seq));
    let finished = update(&mut c, "upd-1", json!(5), "u-3").await.expect_err("finished");
    assert_eq!(code(&finished), "EXECUTION_FINISHED", "{finished:?}");
    let h = history(&mut c, "upd-1").await;
    assert_eq!(count(&h, "UpdateAccepted"), 2, "the first update and the CLI's: {h:?}");
}
