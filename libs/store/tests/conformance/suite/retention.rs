//! Retention: applied rows go after their grace, owners rows of closed quiet trees go (and
//! late entries for them are answered), expired trees go with every row, one execution can
//! be deleted on demand. Grace periods use the store's clock; the cases pass 0 (and wait a
//! few ms so "older than now" holds) or a minute (nothing that young may go).

// Tests read their environment (ORBIT_PYTHON, the database URL) and the wall clock
// (unique names, deadlines of real processes) directly.
#![allow(clippy::disallowed_methods)]

use crate::support::{applied, complete, signal};
use crate::support::{ev, scheduled, start_batch, task, timer, Backend};
use orbit_engine::ErrorCode;
use orbit_store::InboxReply;
use orbit_store::{
    CommitBatch, DeleteOutcome, InboxDone, InboxStatus, NewOwner, ProjectionUpdate, Store,
    StoreError,
};
use serde_json::json;
use std::time::Duration;

const MINUTE: u64 = 60_000;
/// A `delete_after` that never comes.
const NEVER: u64 = i64::MAX.unsigned_abs();

/// Past "now" on every backend's clock by a few ms.
async fn tick() {
    tokio::time::sleep(Duration::from_millis(30)).await;
}

fn now_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
}

/// Starts `id` in `root`'s tree, owned by node-a; its parent is `id` without its last
/// `/segment` (`p/c/g` is a child of `p/c`).
async fn start(store: &dyn Store, id: &str, root: &str) {
    let mut batch = start_batch(id, "node-a");
    if let Some(row) = batch.new_execution.as_mut() {
        row.root_id = root.into();
        row.status = orbit_engine::Status::Running;
        row.parent_id = id.rsplit_once('/').map(|(parent, _)| parent.to_string());
    }
    batch.new_owner = Some(NewOwner { root_id: root.into(), node_id: "node-a".into() });
    store.commit(batch).await.unwrap();
}

/// Closes `id` (its third event) at `closed_at`, deletable after `delete_after`.
async fn close(store: &dyn Store, id: &str, closed_at: u64, delete_after: u64) {
    let batch = CommitBatch {
        execution_id: id.into(),
        run: 1,
        expected_epoch: Some(1),
        events: vec![ev(3, scheduled("end"))],
        projection: Some(ProjectionUpdate {
            status: orbit_engine::Status::Completed,
            updated_at_ms: closed_at,
            closed_at_ms: Some(closed_at),
            delete_after_ms: Some(delete_after),
            failed_step: None,
            error_code: None,
        }),
        ..CommitBatch::default()
    };
    store.commit(batch).await.unwrap();
}

pub async fn applied_rows_are_deleted_after_their_grace(b: &dyn Backend) {
    let store = b.open().await;
    start(&*store, "a1", "a1").await;
    let mut batch = CommitBatch {
        execution_id: "a1".into(),
        run: 1,
        expected_epoch: Some(1),
        tasks_to_insert: vec![task("s1", "t.one")],
        ..CommitBatch::default()
    };
    batch.events = vec![ev(3, scheduled("s1"))];
    store.commit(batch).await.unwrap();
    let claimed = store.claim_tasks(&["t.one".into()], 10, "fe-1", "sess-1", "w-1").await.unwrap();
    let token = claimed[0].token.clone().unwrap();
    let report = complete(json!(1));
    let done = store.complete_task_row(&token, "w-1", Some(report)).await.unwrap().unwrap();
    let pending = store.pending_inbox(Some("a1"), 10).await.unwrap();
    assert_eq!(pending.len(), 2, "the claim's `dispatched` entry and the result");
    let apply = CommitBatch {
        execution_id: "a1".into(),
        run: 1,
        expected_epoch: Some(1),
        tasks_done: Vec::new(),
        inbox_done: pending
            .iter()
            .map(|e| InboxDone { seq: e.seq, result: Some(applied(1)) })
            .collect(),
        ..CommitBatch::default()
    };
    store.commit(apply).await.unwrap();
    let signal = store.enqueue_inbox("a1", &signal("go")).await.unwrap();
    tick().await;

    let young = store.delete_done_rows(MINUTE, 500).await.unwrap();
    assert_eq!((young.inbox, young.tasks), (0, 0), "nothing applied a minute ago yet");
    let first = store.delete_done_rows(0, 1).await.unwrap();
    assert_eq!((first.inbox, first.tasks), (1, 1), "the batch bound holds per table");
    let rest = store.delete_done_rows(0, 500).await.unwrap();
    assert_eq!((rest.inbox, rest.tasks), (1, 0));
    assert!(matches!(
        store.inbox_result(done.inbox_seq.unwrap()).await,
        Err(StoreError::NotFound(_))
    ));
    assert!(store.task_by_token(&token).await.unwrap().is_none());
    assert_eq!(store.inbox_result(signal).await.unwrap(), InboxStatus::Pending, "pending stays");
    assert!(store.get_execution("a1").await.unwrap().is_some(), "the execution stays");
}

pub async fn owners_of_closed_quiet_trees_are_released(b: &dyn Backend) {
    let store = b.open().await;
    let long_ago = 1_000;
    // r1: root and child closed, quiet -> released. r2: child still running. r3: a pending
    // entry. r4: running. r5: closed just now (younger than the grace).
    for (id, root) in [("r1", "r1"), ("r1/c", "r1"), ("r2", "r2"), ("r2/c", "r2")] {
        start(&*store, id, root).await;
    }
    for id in ["r3", "r4", "r5"] {
        start(&*store, id, id).await;
    }
    for id in ["r1", "r1/c", "r2", "r3"] {
        close(&*store, id, long_ago, NEVER).await;
    }
    close(&*store, "r5", now_ms(), NEVER).await;
    let r3_entry = store.enqueue_inbox("r3", &signal("x")).await.unwrap();

    let released = store.release_closed_owners(MINUTE, 50).await.unwrap();
    assert_eq!((released.trees, released.owners, released.answered), (1, 2, 0));
    assert!(store.get_owner("r1").await.unwrap().is_none());
    assert!(store.get_owner("r1/c").await.unwrap().is_none());
    for kept in ["r2", "r2/c", "r3", "r4", "r5"] {
        assert!(store.get_owner(kept).await.unwrap().is_some(), "{kept} keeps its owner");
    }
    assert_eq!(store.inbox_result(r3_entry).await.unwrap(), InboxStatus::Pending);

    // A commit that still holds r1 is fenced: the row it was fenced by is gone.
    let stale = CommitBatch {
        execution_id: "r1".into(),
        run: 1,
        expected_epoch: Some(1),
        events: vec![ev(4, scheduled("late"))],
        ..CommitBatch::default()
    };
    assert!(matches!(store.commit(stale).await, Err(StoreError::Fenced(_))));

    // A late entry for the released tree has no owner to apply it: it is answered.
    let late = store.enqueue_inbox("r1/c", &signal("x")).await.unwrap();
    let again = store.release_closed_owners(MINUTE, 50).await.unwrap();
    assert_eq!((again.trees, again.answered), (0, 1));
    let InboxStatus::Done(Some(reply)) = store.inbox_result(late).await.unwrap() else {
        panic!("the late entry is answered");
    };
    assert!(
        matches!(&reply, InboxReply::Refused { code: ErrorCode::ExecutionFinished, .. }),
        "{reply:?}"
    );
    assert_eq!(reply, orbit_store::finished_reply());
    assert_eq!(store.inbox_result(r3_entry).await.unwrap(), InboxStatus::Pending, "r3 is owned");
}

pub async fn expired_trees_are_deleted_with_every_row(b: &dyn Backend) {
    let store = b.open().await;
    // t1 (with a child and a second run) expires at 5000; t2 too but its child runs;
    // t3 expires at 10000; t4 runs.
    for (id, root) in [("t1", "t1"), ("t1/c", "t1"), ("t2", "t2"), ("t2/c", "t2")] {
        start(&*store, id, root).await;
    }
    for id in ["t3", "t4"] {
        start(&*store, id, id).await;
    }
    let side_rows = CommitBatch {
        execution_id: "t1/c".into(),
        run: 1,
        expected_epoch: Some(1),
        events: vec![ev(3, scheduled("s"))],
        tasks_to_insert: vec![task("s", "t.side")],
        timers_to_upsert: vec![timer("next", 99_000)],
        ..CommitBatch::default()
    };
    store.commit(side_rows).await.unwrap();
    let next_run = CommitBatch {
        execution_id: "t1".into(),
        run: 2,
        expected_epoch: Some(1),
        events: vec![ev(1, scheduled("again"))],
        ..CommitBatch::default()
    };
    store.commit(next_run).await.unwrap();
    store.enqueue_inbox("t1/c", &signal("x")).await.unwrap();
    let close_run2 = CommitBatch {
        execution_id: "t1".into(),
        run: 2,
        expected_epoch: Some(1),
        events: vec![ev(2, scheduled("end"))],
        projection: Some(ProjectionUpdate {
            status: orbit_engine::Status::Completed,
            updated_at_ms: 2_000,
            closed_at_ms: Some(2_000),
            delete_after_ms: Some(5_000),
            failed_step: None,
            error_code: None,
        }),
        ..CommitBatch::default()
    };
    store.commit(close_run2).await.unwrap();
    let close_child = CommitBatch {
        execution_id: "t1/c".into(),
        run: 1,
        expected_epoch: Some(1),
        events: vec![ev(4, scheduled("end"))],
        projection: Some(ProjectionUpdate {
            status: orbit_engine::Status::Failed,
            updated_at_ms: 2_000,
            closed_at_ms: Some(2_000),
            delete_after_ms: Some(5_000),
            failed_step: None,
            error_code: None,
        }),
        ..CommitBatch::default()
    };
    store.commit(close_child).await.unwrap();
    close(&*store, "t2", 2_000, 5_000).await;
    close(&*store, "t3", 2_000, 10_000).await;

    assert_eq!(store.delete_expired(4_999, 50).await.unwrap().executions, 0, "not yet due");
    let gone = store.delete_expired(6_000, 50).await.unwrap();
    assert_eq!(gone.executions, 2, "t1 and its child; t2's child still runs");
    assert_eq!(gone.events, 2 + 2 + 4, "both runs of t1 and the child's history");
    assert_eq!((gone.tasks, gone.timers, gone.owners, gone.inbox), (1, 1, 2, 1));
    for id in ["t1", "t1/c"] {
        assert!(store.get_execution(id).await.unwrap().is_none());
        assert!(store.get_owner(id).await.unwrap().is_none());
        assert!(store.pending_inbox(Some(id), 10).await.unwrap().is_empty());
    }
    assert!(store.load_history("t1", 1).await.unwrap().is_empty());
    assert!(store.load_history("t1", 2).await.unwrap().is_empty());
    assert!(store.due_timers(u64::MAX / 2, 10).await.unwrap().is_empty());
    for kept in ["t2", "t2/c", "t3", "t4"] {
        assert!(store.get_execution(kept).await.unwrap().is_some(), "{kept} stays");
    }
    assert_eq!(store.load_history("t3", 1).await.unwrap().len(), 3);

    let later = store.delete_expired(20_000, 50).await.unwrap();
    assert_eq!(later.executions, 1, "t3");
    assert!(store.get_execution("t3").await.unwrap().is_none());
}

pub async fn expired_trees_go_in_bounded_batches_each_once(b: &dyn Backend) {
    let store = b.open().await;
    for i in 0..12 {
        let id = format!("x{i:02}");
        start(&*store, &id, &id).await;
        close(&*store, &id, 2_000, 3_000 + i).await;
    }
    // Four sweepers at once, three trees per batch: every tree is deleted exactly once.
    let mut sweepers = Vec::new();
    for _ in 0..4 {
        let store = store.clone();
        sweepers.push(tokio::spawn(async move {
            let mut total = 0;
            loop {
                let n = store.delete_expired(10_000, 3).await.unwrap().executions;
                assert!(n <= 3, "a batch holds at most its bound: {n}");
                if n == 0 {
                    return total;
                }
                total += n;
            }
        }));
    }
    let mut total = 0;
    for s in sweepers {
        total += s.await.unwrap();
    }
    assert_eq!(total, 12);
    let page = store.list_executions(orbit_store::ExecutionFilter::default()).await.unwrap();
    assert!(page.executions.is_empty(), "{:?}", page.executions);
}

pub async fn delete_execution_refuses_open_trees_and_is_idempotent(b: &dyn Backend) {
    let store = b.open().await;
    for (id, root) in [("p", "p"), ("p/c", "p"), ("p/c/g", "p")] {
        start(&*store, id, root).await;
    }
    close(&*store, "p/c/g", 2_000, NEVER).await;
    close(&*store, "p/c", 2_000, NEVER).await;
    assert_eq!(
        store.delete_execution("p").await.unwrap(),
        DeleteOutcome::NotFinished(vec!["p".into()])
    );
    assert!(store.get_execution("p/c").await.unwrap().is_some(), "refused: nothing deleted");
    let DeleteOutcome::Deleted(child) = store.delete_execution("p/c").await.unwrap() else {
        panic!("a closed child is deleted");
    };
    assert_eq!((child.executions, child.owners, child.events), (2, 2, 6), "p/c and p/c/g");
    assert!(store.get_execution("p/c/g").await.unwrap().is_none());
    assert_eq!(store.delete_execution("p/c").await.unwrap(), DeleteOutcome::NotFound);
    close(&*store, "p", 2_000, NEVER).await;
    let DeleteOutcome::Deleted(root) = store.delete_execution("p").await.unwrap() else {
        panic!("a closed tree is deleted");
    };
    assert_eq!((root.executions, root.owners), (1, 1));
    assert_eq!(store.delete_execution("p").await.unwrap(), DeleteOutcome::NotFound);
    assert_eq!(store.delete_execution("never").await.unwrap(), DeleteOutcome::NotFound);
}
