//! Worker results handed straight to the owner (`Owner::report_result`, issue 14), against
//! a real SQLite store: one commit records the result, its events and the task row done;
//! the same result again, a result from another worker, an unknown token and a result
//! for an execution whose owner was fenced are all refused with nothing written (the
//! frontend then takes the inbox route).

mod support;

use orbit_engine::Event;
use orbit_owner::Owner;
use orbit_store::inbox::{Complete, Fail};
use orbit_store::{InboxMessage, Store, TaskRow, TaskState};
use serde_json::json;
use std::sync::Arc;
use support::{assert_replays, owner, run, start, store};
use tokio_util::sync::CancellationToken;

const TWO: &str = "name: two\nversion: '1'\ntasks: { greet: {} }\nsteps:\n  - { id: a, task: greet }\n  - { id: b, task: greet, needs: [a] }\noutput: '${{ steps.b.output }}'\n";

/// Claims the one queued `greet` task for worker `w` and lets the owner record the
/// dispatch.
async fn claim(store: &Arc<dyn Store>, owner: &Owner) -> TaskRow {
    let mut rows =
        store.claim_tasks(&["greet".to_string()], 10, "frontend-1", "s1", "w").await.unwrap();
    assert_eq!(rows.len(), 1, "one task queued");
    owner.wake().await;
    rows.remove(0)
}

fn complete(token: &str, output: serde_json::Value) -> InboxMessage {
    InboxMessage::Complete(Complete { token: token.into(), output })
}

async fn history_len(store: &Arc<dyn Store>, id: &str) -> usize {
    store.load_history(id, 1).await.unwrap().len()
}

async fn row_state(store: &Arc<dyn Store>, token: &str) -> TaskState {
    store.task_by_token(token).await.unwrap().unwrap().state
}

/// A running owner on node `node` (stopped by the token) holding `e1` of `two`, its first
/// `greet` task claimed for worker `w`.
struct Claimed {
    _dir: tempfile::TempDir,
    store: Arc<dyn Store>,
    owner: Owner,
    stop: CancellationToken,
    token: String,
}

async fn claimed(node: &str) -> Claimed {
    let dir = tempfile::tempdir().unwrap();
    let store = store(&dir, &[TWO]).await;
    let owner = owner(&store, node);
    let stop = CancellationToken::new();
    run(&owner, &stop);
    owner.start(start("e1", "two")).await.unwrap();
    let token = claim(&store, &owner).await.token.unwrap();
    Claimed { _dir: dir, store, owner, stop, token }
}

#[tokio::test]
async fn a_handed_result_commits_with_its_events_once() {
    let Claimed { _dir, store, owner, stop, token } = claimed("dev").await;
    let recorded =
        owner.report_result("e1".into(), "w".into(), complete(&token, json!(1))).await.unwrap();
    assert!(recorded, "the result of the attempt in flight is taken");
    // The same commit marked the row done, recorded the step and queued the next task.
    assert_eq!(row_state(&store, &token).await, TaskState::Done);
    let history = store.load_history("e1", 1).await.unwrap();
    assert!(history
        .iter()
        .any(|e| matches!(&e.event, Event::StepSucceeded { step, .. } if step == "a")));
    assert!(store.pending_inbox_owned("dev", &[], 100).await.unwrap().is_empty());
    let len = history.len();

    // Handed again (a worker that missed its ack): not in flight any more, nothing written.
    let again =
        owner.report_result("e1".into(), "w".into(), complete(&token, json!(2))).await.unwrap();
    assert!(!again, "a result already applied is not taken twice");
    assert_eq!(history_len(&store, "e1").await, len);

    // The second step fails for good: the failure is handed over the same way.
    let second = claim(&store, &owner).await;
    let token2 = second.token.clone().unwrap();
    let error = orbit_engine::TaskError::fatal("BROKEN", "no luck");
    let fail = InboxMessage::Fail(Fail { token: token2.clone(), error });
    assert!(owner.report_result("e1".into(), "w".into(), fail).await.unwrap());
    assert_eq!(row_state(&store, &token2).await, TaskState::Done);
    let row = store.get_execution("e1").await.unwrap().unwrap();
    assert_eq!(row.status, orbit_engine::Status::Failed);
    assert_replays(&store, &owner, "e1").await;
    stop.cancel();
}

#[tokio::test]
async fn results_the_owner_cannot_vouch_for_are_not_taken_and_nothing_is_written() {
    let Claimed { _dir, store, owner, stop, token } = claimed("dev").await;
    let len = history_len(&store, "e1").await;

    // Another worker than the one the attempt was dispatched to.
    let other = owner.report_result("e1".into(), "x".into(), complete(&token, json!(1)));
    assert!(!other.await.unwrap());
    // An unknown token, and a known token under another execution id.
    assert!(!owner
        .report_result("e1".into(), "w".into(), complete("nope", json!(1)))
        .await
        .unwrap());
    assert!(!owner
        .report_result("e2".into(), "w".into(), complete(&token, json!(1)))
        .await
        .unwrap());
    // Not a result at all.
    let signal = support::signal_message("s", json!({}));
    assert!(!owner.report_result("e1".into(), "w".into(), signal).await.unwrap());
    assert_eq!(history_len(&store, "e1").await, len);
    assert_eq!(row_state(&store, &token).await, TaskState::Claimed);
    stop.cancel();
}

#[tokio::test]
async fn a_fenced_owner_records_no_handed_result() {
    let Claimed { _dir, store, owner, stop, token } = claimed("A").await;
    let len = history_len(&store, "e1").await;

    // Another node takes the tree over (epoch + 1) while A still holds it in memory.
    let taken = store.take_over_root("e1", "A", "B").await.unwrap();
    assert_eq!(taken.len(), 1);
    let recorded =
        owner.report_result("e1".into(), "w".into(), complete(&token, json!(1))).await.unwrap();
    assert!(!recorded, "the commit is fenced by the epoch: the result must take the inbox");
    assert_eq!(history_len(&store, "e1").await, len);
    assert_eq!(row_state(&store, &token).await, TaskState::Claimed);
    assert!(!owner.held().await.contains(&"e1".to_string()), "the fenced owner let it go");
    stop.cancel();
}

/// Through `OwnerService.ReportResult` (the trait a frontend calls, in process or over
/// gRPC): a typed failure is recorded with exactly the worker's code, message, retryable
/// flag and details; an earlier release's kind + JSON payload is still taken.
#[tokio::test]
async fn report_result_records_typed_and_legacy_results() {
    use orbit_api::internal::v1::owner_service_server::OwnerService;
    use orbit_api::internal::v1::report_result_request::Result as WireResult;
    use orbit_api::internal::v1::ReportResultRequest;
    use orbit_server_kit::payload::json_to_proto;

    let Claimed { _dir, store, owner, stop, token } = claimed("dev").await;
    // The first step, an earlier release's frontend: kind + payload, no `result`.
    let legacy = ReportResultRequest {
        execution_id: "e1".into(),
        token: token.clone(),
        worker_id: "w".into(),
        kind: "complete".into(),
        payload: json!({"output": {"hello": "world"}}).to_string(),
        ..ReportResultRequest::default()
    };
    let answer = OwnerService::report_result(&owner, tonic::Request::new(legacy)).await.unwrap();
    assert!(answer.into_inner().recorded);
    let history = store.load_history("e1", 1).await.unwrap();
    assert!(history.iter().any(|e| matches!(&e.event,
        Event::StepSucceeded { step, output, .. } if step == "a" && *output == json!({"hello": "world"}))));

    // The second step, a current frontend: the typed error only.
    let token2 = claim(&store, &owner).await.token.unwrap();
    let details = json!({"card": "visa", "tries": [1, 2.5], "note": null});
    let typed = ReportResultRequest {
        execution_id: "e1".into(),
        token: token2.clone(),
        worker_id: "w".into(),
        result: Some(WireResult::Error(orbit_api::v1::TaskError {
            code: "CARD_DECLINED".into(),
            message: "the card was declined".into(),
            retryable: false,
            details: Some(json_to_proto(details.clone())),
        })),
        ..ReportResultRequest::default()
    };
    let answer = OwnerService::report_result(&owner, tonic::Request::new(typed)).await.unwrap();
    assert!(answer.into_inner().recorded);
    assert_eq!(row_state(&store, &token2).await, TaskState::Done);
    let history = store.load_history("e1", 1).await.unwrap();
    let recorded = history
        .iter()
        .find_map(|e| match &e.event {
            Event::StepAttemptFailed { step, error, .. } if step == "b" => Some(error.clone()),
            _ => None,
        })
        .expect("the attempt's failure is in the history");
    let expected = orbit_engine::TaskError {
        code: "CARD_DECLINED".into(),
        message: "the card was declined".into(),
        retryable: false,
        details: Some(details),
    };
    assert_eq!(recorded, expected);
    assert_replays(&store, &owner, "e1").await;
    stop.cancel();
}
