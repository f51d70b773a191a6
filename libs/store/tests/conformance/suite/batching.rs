//! Several executions in one transaction, cancellation by unit, inbox entries written by a
//! commit, and the claims a restarted frontend finds.

use crate::support::cancel;
use crate::support::{ev, scheduled, start, start_batch, task, Backend};
use orbit_store::InboxKind;
use orbit_store::{CommitBatch, NewInbox, TaskState};

pub async fn commit_all_is_all_or_nothing(b: &dyn Backend) {
    let store = b.open().await;
    let good = start_batch("a", "node-a");
    let mut bad = start_batch("b", "node-a");
    bad.events[1].seq = 7; // not contiguous: the whole call must fail
    assert!(store.commit_all(vec![good.clone(), bad]).await.is_err());
    assert!(store.get_execution("a").await.unwrap().is_none(), "nothing of the good batch remains");
    let outcomes = store.commit_all(vec![good, start_batch("b", "node-a")]).await.unwrap();
    assert_eq!(outcomes.len(), 2);
    assert!(store.get_execution("b").await.unwrap().is_some());
}

pub async fn units_are_cancelled_before_new_offers_and_inbox_entries_are_written(b: &dyn Backend) {
    let store = b.open().await;
    start(store.as_ref(), "p").await;
    start(store.as_ref(), "c").await;
    let offer = CommitBatch {
        execution_id: "p".into(),
        run: 1,
        events: vec![ev(3, scheduled("s"))],
        tasks_to_insert: vec![task("s", "t")],
        ..CommitBatch::default()
    };
    store.commit(offer).await.unwrap();
    let first = store.claim_tasks(&["t".into()], 10, "fe-1", "sess", "w").await.unwrap();
    assert_eq!(first.len(), 1);
    assert_eq!(
        store.claimed_tasks("fe-1").await.unwrap().len(),
        1,
        "a restarted frontend finds its claim"
    );
    // A redelivery: cancel the unit's rows, queue a new offer, and tell another execution.
    let mut again = task("s", "t");
    again.offer = 2;
    let redeliver = CommitBatch {
        execution_id: "p".into(),
        run: 1,
        units_to_cancel: vec!["s".into()],
        tasks_to_insert: vec![again],
        inbox_to_insert: vec![NewInbox { execution_id: "c".into(), message: cancel("x") }],
        ..CommitBatch::default()
    };
    store.commit(redeliver).await.unwrap();
    assert!(store.claimed_tasks("fe-1").await.unwrap().is_empty(), "the old claim was cancelled");
    let second = store.claim_tasks(&["t".into()], 10, "fe-1", "sess", "w").await.unwrap();
    assert_eq!(second.len(), 1, "the new offer survived the cancel");
    assert_eq!(second[0].offer, 2);
    assert_eq!(second[0].state, TaskState::Claimed);
    let inbox = store.pending_inbox(Some("c"), 10).await.unwrap();
    assert_eq!(inbox.iter().filter(|e| e.kind == InboxKind::Cancel.as_str()).count(), 1);
}

pub async fn a_failing_call_does_not_spoil_concurrent_ones(b: &dyn Backend) {
    let store = b.open().await;
    let mut calls = Vec::new();
    for i in 0..40 {
        let store = store.clone();
        calls.push(tokio::spawn(async move {
            let mut batch = start_batch(&format!("e{i}"), "node-a");
            if i % 10 == 3 {
                batch.events[1].seq = 9; // refused
            }
            store.commit(batch).await
        }));
    }
    for (i, call) in calls.into_iter().enumerate() {
        let outcome = call.await.unwrap();
        let exists = store.get_execution(&format!("e{i}")).await.unwrap().is_some();
        assert_eq!(outcome.is_ok(), i % 10 != 3, "e{i}");
        assert_eq!(exists, i % 10 != 3, "e{i}: written exactly when accepted");
    }
}

pub async fn commit_all_applies_batches_of_one_execution_in_order(b: &dyn Backend) {
    let store = b.open().await;
    // One call: e1 starts with an offer and a timer, a later batch of e1 cancels the unit
    // and deletes the timer, e2 starts in between, and a third e1 batch queues a new offer.
    let mut first = start_batch("e1", "node-a");
    first.tasks_to_insert = vec![task("s", "t")];
    first.timers_to_upsert = vec![crate::support::timer("retry", 500)];
    let second = CommitBatch {
        execution_id: "e1".into(),
        run: 1,
        expected_epoch: Some(1),
        events: vec![ev(3, scheduled("s"))],
        units_to_cancel: vec!["s".into()],
        timers_to_delete: vec!["retry".into()],
        ..CommitBatch::default()
    };
    let mut again = task("s", "t");
    again.offer = 2;
    let third = CommitBatch {
        execution_id: "e1".into(),
        run: 1,
        expected_epoch: Some(1),
        events: vec![ev(4, scheduled("s2"))],
        tasks_to_insert: vec![again],
        ..CommitBatch::default()
    };
    let outcomes =
        store.commit_all(vec![first, start_batch("e2", "node-b"), second, third]).await.unwrap();
    let seqs: Vec<u64> = outcomes.iter().map(|o| o.last_seq).collect();
    assert_eq!(seqs, [2, 2, 3, 4], "each outcome is the run's last seq after its batch");
    assert_eq!((outcomes[0].task_ids.len(), outcomes[3].task_ids.len()), (1, 1));
    assert_eq!(store.get_execution("e1").await.unwrap().unwrap().last_seq, 4);
    assert_eq!(store.next_timer_at().await.unwrap(), None, "the later batch deleted it");
    let claimed = store.claim_tasks(&["t".into()], 10, "fe", "s", "w").await.unwrap();
    let offers: Vec<u32> = claimed.iter().map(|t| t.offer).collect();
    assert_eq!(offers, [2], "the first offer was cancelled by the later batch");
    assert_eq!(store.get_owner("e2").await.unwrap().unwrap().node_id, "node-b");
}

/// A result the owner applied without an inbox entry (`tasks_done`): its claimed row is
/// done in the commit, before the unit's rows are cancelled; a row of another execution, or
/// one no longer claimed, is left as it is, and nothing of it goes to the inbox.
pub async fn tasks_done_marks_only_claimed_rows_of_the_execution(b: &dyn Backend) {
    let store = b.open().await;
    for id in ["e1", "e2"] {
        let mut batch = start_batch(id, "node-a");
        batch.tasks_to_insert = vec![task("s", "t"), task("u", "t")];
        store.commit(batch).await.unwrap();
    }
    let rows = store.claim_tasks(&["t".into()], 10, "fe", "s1", "w").await.unwrap();
    assert_eq!(rows.len(), 4);
    let token = |id: &str, unit: &str| {
        let row = rows.iter().find(|r| r.execution_id == id && r.unit_key == unit).unwrap();
        row.token.clone().unwrap()
    };
    let (s1, u1, s2) = (token("e1", "s"), token("e1", "u"), token("e2", "s"));
    // `u` of e1 is released first: no longer claimed when the commit names it.
    let done = store.complete_task_row(&u1, "w", None).await.unwrap().unwrap();
    assert!(done.newly_done);
    let pending = store.pending_inbox(Some("e1"), 100).await.unwrap().len();
    let apply = CommitBatch {
        execution_id: "e1".into(),
        run: 1,
        expected_epoch: Some(1),
        // e2's token under e1 is not e1's row; the unit `s` is cancelled in the same batch.
        tasks_done: vec![s1.clone(), u1.clone(), s2.clone()],
        units_to_cancel: vec!["s".into()],
        ..CommitBatch::default()
    };
    store.commit(apply).await.unwrap();
    let state = |t: String| {
        let store = store.clone();
        async move { store.task_by_token(&t).await.unwrap().unwrap().state }
    };
    assert_eq!(state(s1).await, TaskState::Done, "done first, so the cancel leaves it done");
    assert_eq!(state(u1).await, TaskState::Done);
    assert_eq!(state(s2).await, TaskState::Claimed, "another execution's row is untouched");
    assert_eq!(store.pending_inbox(Some("e1"), 100).await.unwrap().len(), pending);
    // A fenced commit marks nothing.
    let (t2u, fenced) = (
        token("e2", "u"),
        CommitBatch {
            execution_id: "e2".into(),
            run: 1,
            expected_epoch: Some(9),
            tasks_done: vec![token("e2", "u")],
            ..CommitBatch::default()
        },
    );
    assert!(store.commit(fenced).await.is_err());
    assert_eq!(state(t2u).await, TaskState::Claimed);
}
