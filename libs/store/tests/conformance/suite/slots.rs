//! Workflow-level concurrency slots (issue 27; `orbit_store::slots`): a commit's acquire
//! takes a free slot (a `slot_granted` entry for its own execution) or queues; a release
//! grants the freed slot to the oldest waiter, in start order; `cancel_newest` cancels the
//! new execution, `cancel_in_progress` the oldest holder; and two commits racing for the
//! last slot of a key on separate connections never both get it.

use crate::support::{start, Backend};
use orbit_definition::OnLimit;
use orbit_store::slots::SlotOp;
use orbit_store::{CommitBatch, Store};

fn slots(id: &str, op: SlotOp) -> CommitBatch {
    CommitBatch {
        execution_id: id.into(),
        run: 1,
        expected_epoch: Some(1),
        slots: vec![op],
        ..CommitBatch::default()
    }
}

fn acquire(id: &str, key: &str, on_limit: OnLimit) -> CommitBatch {
    slots(id, SlotOp::Acquire { key: key.into(), limit: 1, on_limit })
}

fn release(id: &str, key: &str) -> CommitBatch {
    slots(id, SlotOp::Release { keys: vec![key.into()] })
}

/// The kinds of `id`'s pending entries, in order.
async fn entries(store: &dyn Store, id: &str) -> Vec<String> {
    let pending = store.pending_inbox(Some(id), 100).await.expect("pending inbox");
    pending.into_iter().map(|e| e.kind).collect()
}

pub async fn slots_are_granted_in_start_order_and_released_to_the_next(b: &dyn Backend) {
    let store = b.open().await;
    for id in ["a", "b", "c"] {
        start(store.as_ref(), id).await;
        store.commit(acquire(id, "w/k", OnLimit::Queue)).await.expect("acquire");
    }
    assert_eq!(entries(store.as_ref(), "a").await, ["slot_granted"]);
    assert!(entries(store.as_ref(), "b").await.is_empty(), "b waits");
    assert!(entries(store.as_ref(), "c").await.is_empty(), "c waits");
    // Asking again (a continued run) while holding is granted again; a waiter keeps waiting.
    store.commit(acquire("a", "w/k", OnLimit::Queue)).await.expect("again");
    assert_eq!(entries(store.as_ref(), "a").await, ["slot_granted", "slot_granted"]);
    store.commit(release("a", "w/k")).await.expect("release a");
    assert_eq!(entries(store.as_ref(), "b").await, ["slot_granted"], "the oldest waiter");
    assert!(entries(store.as_ref(), "c").await.is_empty());
    store.commit(release("b", "w/k")).await.expect("release b");
    assert_eq!(entries(store.as_ref(), "c").await, ["slot_granted"]);
    // A waiter that closes leaves the queue without a grant.
    start(store.as_ref(), "d").await;
    store.commit(acquire("d", "w/k", OnLimit::Queue)).await.expect("acquire d");
    store.commit(release("d", "w/k")).await.expect("d gives up");
    store.commit(release("c", "w/k")).await.expect("release c");
    assert!(entries(store.as_ref(), "d").await.is_empty());
}

pub async fn cancel_modes_cancel_the_newest_or_the_oldest(b: &dyn Backend) {
    let store = b.open().await;
    for id in ["a", "b", "c"] {
        start(store.as_ref(), id).await;
    }
    store.commit(acquire("a", "w/n", OnLimit::CancelNewest)).await.expect("a");
    store.commit(acquire("b", "w/n", OnLimit::CancelNewest)).await.expect("b");
    assert_eq!(entries(store.as_ref(), "b").await, ["cancel"], "the newest is cancelled");
    store.commit(acquire("c", "w/n", OnLimit::CancelInProgress)).await.expect("c");
    assert_eq!(entries(store.as_ref(), "a").await, ["slot_granted", "cancel"], "the oldest");
    assert!(entries(store.as_ref(), "c").await.is_empty(), "waits until the holder closes");
    store.commit(release("a", "w/n")).await.expect("a closes");
    assert_eq!(entries(store.as_ref(), "c").await, ["slot_granted"]);
}

pub async fn racing_commits_never_both_take_the_last_slot(b: &dyn Backend) {
    let store = b.open().await;
    for round in 0..10 {
        let (x, y, key) = (format!("x{round}"), format!("y{round}"), format!("w/race{round}"));
        start(store.as_ref(), &x).await;
        start(store.as_ref(), &y).await;
        let (s1, s2) = (store.clone(), store.clone());
        let (bx, by) = (acquire(&x, &key, OnLimit::Queue), acquire(&y, &key, OnLimit::Queue));
        let (rx, ry) = tokio::join!(
            tokio::spawn(async move { s1.commit(bx).await }),
            tokio::spawn(async move { s2.commit(by).await }),
        );
        rx.expect("join").expect("x acquires");
        ry.expect("join").expect("y acquires");
        let granted =
            entries(store.as_ref(), &x).await.len() + entries(store.as_ref(), &y).await.len();
        assert_eq!(granted, 1, "round {round}: exactly one holder");
    }
}
