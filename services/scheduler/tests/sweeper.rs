//! The sweeper's round on a real SQLite store: it keeps taking full batches until one comes
//! back short, so a backlog larger than a batch is cleared in one round, every sweep in turn.

use orbit_scheduler::{Sweeper, SweeperConfig};
use orbit_store::roles::*;
use orbit_store::{CommitBatch, ExecutionRow, NewOwner, ProjectionUpdate, SqliteStore};
use std::sync::Arc;
use std::time::Duration;
use tokio_util::sync::CancellationToken;

fn closed(id: &str) -> CommitBatch {
    CommitBatch {
        execution_id: id.into(),
        run: 1,
        new_execution: Some(ExecutionRow {
            execution_id: id.into(),
            run: 1,
            root_id: id.into(),
            parent_id: None,
            workflow: "w".into(),
            version: "1".into(),
            definition_hash: "h".into(),
            status: orbit_engine::Status::Running,
            schedule_id: None,
            created_at_ms: 1_000,
            updated_at_ms: 1_000,
            closed_at_ms: None,
            last_seq: 0,
            failed_step: None,
            error_code: None,
        }),
        new_owner: Some(NewOwner { root_id: id.into(), node_id: "owner-1".into() }),
        projection: Some(ProjectionUpdate {
            status: orbit_engine::Status::Completed,
            updated_at_ms: 2_000,
            closed_at_ms: Some(2_000),
            delete_after_ms: Some(3_000),
            failed_step: None,
            error_code: None,
        }),
        ..CommitBatch::default()
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_round_clears_a_backlog_of_several_batches() {
    let dir = tempfile::tempdir().unwrap();
    let store = Arc::new(SqliteStore::open_and_migrate(dir.path().join("s.db")).await.unwrap());
    let open = CommitBatch { projection: None, ..closed("running") };
    store.commit(open).await.unwrap();
    for i in 0..120 {
        store.commit(closed(&format!("e{i:03}"))).await.unwrap();
    }
    let cfg = SweeperConfig {
        tree_batch: 50,
        pause: Duration::from_millis(1),
        done_grace: Duration::from_secs(60),
        ..SweeperConfig::default()
    };
    let sweeper = Sweeper::new(store.clone(), cfg, orbit_owner::Clock::from_fn(|| 10_000));
    let swept = sweeper.round(&CancellationToken::new()).await.unwrap();
    assert_eq!(swept.owners, 120, "owners of the closed trees, in three batches");
    assert_eq!(swept.expired.executions, 120, "expired trees, in three batches");
    assert!(store.get_execution("e119").await.unwrap().is_none());
    assert!(store.get_execution("running").await.unwrap().is_some());
    assert!(store.get_owner("running").await.unwrap().is_some());
    let again = sweeper.round(&CancellationToken::new()).await.unwrap();
    assert_eq!(again, orbit_scheduler::Swept::default(), "nothing left");
}

/// The sixth sweep: a batch job that finished longer than `batch_retention` ago goes with
/// its items (more items than one batch of rows, in one round); a job that finished later,
/// and a running one, stay.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn finished_batch_jobs_past_their_retention_are_deleted() {
    use orbit_store::{
        BatchAction, BatchItem, BatchRow, BatchSelector, BatchSpec, BatchState, ItemOutcome,
    };
    let dir = tempfile::tempdir().unwrap();
    let store = Arc::new(SqliteStore::open_and_migrate(dir.path().join("s.db")).await.unwrap());
    let spec = BatchSpec {
        selector: BatchSelector {
            workflow: "w".into(),
            version: None,
            statuses: vec![],
            query: None,
            workflows: None,
        },
        action: BatchAction::Cancel { reason: String::new() },
        rate_per_second: 100,
        reason: "r".into(),
    };
    // "old" finishes at 1_100 with 25 items; "new" at 8_100; "run" never.
    for (id, at, items) in [("old", 1_000, 25), ("new", 8_000, 1), ("run", 500, 1)] {
        store.create_batch(&BatchRow::new(id, &spec, items, at)).await.unwrap();
        store.lease_batch(id, at, 100_000).await.unwrap().unwrap();
        for e in 0..items {
            let e = format!("e{e:02}");
            assert!(store.begin_batch_item(id, id, &e, at + 1).await.unwrap());
            let item = BatchItem {
                batch_id: id.into(),
                execution_id: e,
                outcome: ItemOutcome::Succeeded,
                code: String::new(),
                message: String::new(),
                seq: 1,
            };
            store.record_batch_item(id, &item, at + 2).await.unwrap().unwrap();
        }
        if id != "run" {
            let done = Some(BatchState::Completed);
            assert!(store.finish_batch(id, id, done, at + 100).await.unwrap());
        }
    }
    let cfg = SweeperConfig {
        row_batch: 10,
        pause: Duration::from_millis(1),
        batch_retention: Duration::from_secs(5),
        ..SweeperConfig::default()
    };
    // Now 7_000: "old" finished 5.9 s ago (past 5 s), "new" not yet.
    let sweeper = Sweeper::new(store.clone(), cfg, orbit_owner::Clock::from_fn(|| 7_000));
    let swept = sweeper.round(&CancellationToken::new()).await.unwrap();
    assert_eq!((swept.batches.batches, swept.batches.items), (1, 25), "old, in three batches");
    assert!(store.get_batch("old").await.unwrap().is_none());
    assert!(store.list_batch_items("old", None, None, 100).await.unwrap().is_empty());
    assert_eq!(store.get_batch("new").await.unwrap().unwrap().state, BatchState::Completed);
    assert_eq!(store.get_batch("run").await.unwrap().unwrap().state, BatchState::Running);
    assert_eq!(store.list_batch_items("run", None, None, 10).await.unwrap().len(), 1);
}
