//! The owner's start with an initial update (update-with-start) against a real SQLite
//! store: the update's acceptance is committed with `WorkflowCreated`, a refused update
//! stores nothing, an existing execution records no update from a start, and the same
//! update id arriving later through the inbox is answered with the first acceptance.

mod support;

use orbit_owner::{InitialUpdate, StartRequest};
use orbit_store::inbox::Update;
use orbit_store::{InboxMessage, Store};
use serde_json::{json, Value};
use std::sync::Arc;
use support::*;
use tokio_util::sync::CancellationToken;

const CART: &str = r#"
name: cart
version: "1"
signals: { done: {} }
updates:
  add:
    input: { type: object, required: [n], properties: { n: { type: integer } } }
    validator: "${{ args.n > 0 }}"
    reply: "${{ args.n + input.base }}"
steps:
  - { id: w, await: done }
"#;

fn with_update(id: &str, n: i64, update_id: Option<&str>) -> StartRequest {
    StartRequest {
        input: json!({"base": 10}),
        fork: None,
        priority: None,
        memo: None,
        update: Some(InitialUpdate {
            name: "add".into(),
            args: json!({ "n": n }),
            update_id: update_id.map(str::to_string),
        }),
        ..start(id, "cart")
    }
}

async fn types(store: &Arc<dyn Store>, id: &str) -> Vec<&'static str> {
    store.load_history(id, 1).await.unwrap().iter().map(|h| h.event.type_name()).collect()
}

#[tokio::test]
async fn the_update_is_committed_with_the_start_or_nothing_is() {
    let dir = tempfile::tempdir().unwrap();
    let store = store(&dir, &[CART]).await;
    let owner = owner(&store, "n1");
    let stop = CancellationToken::new();
    let _run = run(&owner, &stop);

    let started = owner.start(with_update("c1", 2, Some("u1"))).await.unwrap();
    assert!(started.created);
    assert_eq!(started.update_seq, 2);
    let history = store.load_history("c1", 1).await.unwrap();
    assert_eq!(
        types(&store, "c1").await[..4],
        ["WorkflowCreated", "UpdateAccepted", "UpdateCompleted", "WorkflowStarted"]
    );
    // One pass wrote them: the same `now`.
    assert!(history.iter().all(|h| h.timestamp_ms == history[0].timestamp_ms));
    assert_eq!(orbit_engine::update::reply(&[history[2].event.clone()]), Some(&json!(12)));
    assert_replays(&store, &owner, "c1").await;

    // Refused: no execution, no owners row; the id stays free.
    let e = owner.start(with_update("c2", 0, Some("u2"))).await.unwrap_err();
    assert_eq!(e.code.as_str(), "UPDATE_REJECTED");
    assert!(store.get_execution("c2").await.unwrap().is_none());
    assert!(store.load_history("c2", 1).await.unwrap().is_empty());
    assert!(owner.start(start("c2", "cart")).await.unwrap().created);

    // Existing: the start records no update (the caller sends it through the inbox).
    let before = types(&store, "c1").await.len();
    let again = owner.start(with_update("c1", 3, Some("u3"))).await.unwrap();
    assert_eq!((again.created, again.update_seq), (false, 0));
    assert_eq!(types(&store, "c1").await.len(), before);

    // The first call's update id through the inbox (a caller's retry): answered with the
    // first acceptance, nothing recorded; a new id is applied.
    let message = |request_id: &str| {
        InboxMessage::Update(Update {
            name: "add".into(),
            args: json!({"n": 2}),
            request_id: Some(request_id.into()),
        })
    };
    let retry = store.enqueue_inbox("c1", &message("u1")).await.unwrap();
    let fresh = store.enqueue_inbox("c1", &message("u4")).await.unwrap();
    owner.wake().await;
    let answer: Value = reply(&store, retry).await;
    assert_eq!((answer["seq"].as_u64(), answer.get("update")), (Some(2), None), "{answer}");
    assert_eq!(reply(&store, fresh).await["update"], json!(12));
    let h = types(&store, "c1").await;
    assert_eq!(h.iter().filter(|t| **t == "UpdateAccepted").count(), 2, "{h:?}");
    assert_eq!(h.len(), before + 2);
    stop.cancel();
}
