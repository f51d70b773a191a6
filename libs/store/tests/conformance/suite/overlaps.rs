//! Writes of one batch that meet the same row end as if written in the contract's order
//! (results done before units cancelled, units cancelled before offers queued, timers set
//! before timers deleted), and a new execution's row is what its first commit leaves. Each
//! batch here continues a predictable history, so PostgreSQL writes it in one statement,
//! where the writes all see the rows as they were before it.

use crate::support::{ev, scheduled, start_batch, task, timer, Backend};
use orbit_engine::Status;
use orbit_store::{CommitBatch, NewTask, ProjectionUpdate, TaskState};

/// The next step of `e1` (epoch 1): one event at `seq`.
fn step(seq: u64) -> CommitBatch {
    CommitBatch {
        execution_id: "e1".into(),
        run: 1,
        expected_epoch: Some(1),
        events: vec![ev(seq, scheduled("x"))],
        ..CommitBatch::default()
    }
}

/// A handed result that failed its attempt: its row is done and the unit's rows cancelled
/// in one batch. The row stays done; the unit's other offer is cancelled.
pub async fn a_result_applied_with_its_units_cancellation_stays_done(b: &dyn Backend) {
    let store = b.open().await;
    let mut start = start_batch("e1", "node-a");
    start.tasks_to_insert = vec![task("s", "t")];
    store.commit(start).await.unwrap();
    let claimed = store.claim_tasks(&["t".into()], 10, "fe", "s1", "w").await.unwrap();
    let token = claimed[0].token.clone().unwrap();
    let second = NewTask { offer: 2, ..task("s", "t") };
    store.commit(CommitBatch { tasks_to_insert: vec![second], ..step(3) }).await.unwrap();
    let apply = CommitBatch {
        tasks_done: vec![token.clone()],
        units_to_cancel: vec!["s".into()],
        ..step(4)
    };
    assert_eq!(store.commit(apply).await.unwrap().last_seq, 4);
    let row = store.task_by_token(&token).await.unwrap().unwrap();
    assert_eq!(row.state, TaskState::Done, "done first, so the cancel leaves it done");
    let left = store.claim_tasks(&["t".into()], 10, "fe", "s1", "w").await.unwrap();
    assert!(left.is_empty(), "the unit's queued offer was cancelled: {left:?}");
}

/// An offer already queued, offered again by the batch that cancels its unit: cancelled,
/// and the offer is skipped (no new row).
pub async fn an_offer_queued_again_with_its_unit_cancelled_stays_cancelled(b: &dyn Backend) {
    let store = b.open().await;
    let mut start = start_batch("e1", "node-a");
    start.tasks_to_insert = vec![task("s", "t")];
    assert_eq!(store.commit(start).await.unwrap().task_ids.len(), 1);
    let again = CommitBatch {
        units_to_cancel: vec!["s".into()],
        tasks_to_insert: vec![task("s", "t")],
        ..step(3)
    };
    let outcome = store.commit(again).await.unwrap();
    assert!(outcome.task_ids.is_empty(), "the offer was there already: {outcome:?}");
    let left = store.claim_tasks(&["t".into()], 10, "fe", "s1", "w").await.unwrap();
    assert!(left.is_empty(), "cancelled, not queued: {left:?}");
}

/// A key set and deleted by one batch ends deleted, whether it existed or not; the other
/// keys are set.
pub async fn a_timer_set_and_deleted_by_one_batch_is_gone(b: &dyn Backend) {
    let store = b.open().await;
    let mut start = start_batch("e1", "node-a");
    start.timers_to_upsert = vec![timer("old", 100), timer("kept", 200)];
    store.commit(start).await.unwrap();
    let batch = CommitBatch {
        timers_to_upsert: vec![timer("old", 50), timer("new", 60), timer("later", 300)],
        timers_to_delete: vec!["old".into(), "new".into()],
        ..step(3)
    };
    store.commit(batch).await.unwrap();
    assert_eq!(store.next_timer_at().await.unwrap(), Some(200));
    let fired = store.fire_due_timers(10_000, 10).await.unwrap();
    let keys: Vec<&str> = fired.iter().map(|(t, _)| t.key.as_str()).collect();
    assert_eq!(keys, ["kept", "later"]);
}

/// The first commit of an execution stores it as the commit leaves it: the last seq of its
/// events and the projection (retention included), and the next commit continues it.
pub async fn a_new_execution_is_stored_as_its_first_commit_leaves_it(b: &dyn Backend) {
    let store = b.open().await;
    let plain = store.commit(start_batch("e0", "node-a")).await.unwrap();
    let row = store.get_execution("e0").await.unwrap().unwrap();
    assert_eq!((plain.last_seq, row.last_seq, row.status), (2, 2, Status::Running));
    let mut start = start_batch("e1", "node-a");
    start.events.push(ev(3, scheduled("s")));
    start.projection = Some(ProjectionUpdate {
        status: Status::Completed,
        updated_at_ms: 2_000,
        closed_at_ms: Some(2_000),
        delete_after_ms: Some(5_000),
        failed_step: None,
        error_code: None,
    });
    assert_eq!(store.commit(start).await.unwrap().last_seq, 3);
    let row = store.get_execution("e1").await.unwrap().unwrap();
    assert_eq!(
        (row.last_seq, row.status, row.updated_at_ms, row.closed_at_ms, row.created_at_ms),
        (3, Status::Completed, 2_000, Some(2_000), 1_000)
    );
    assert_eq!(store.commit(step(4)).await.unwrap().last_seq, 4);
    assert_eq!(store.get_execution("e1").await.unwrap().unwrap().last_seq, 4);
    assert_eq!(store.delete_expired(4_999, 10).await.unwrap().executions, 0, "not yet due");
    assert_eq!(store.delete_expired(5_001, 10).await.unwrap().executions, 1);
    assert!(store.get_execution("e1").await.unwrap().is_none());
}
