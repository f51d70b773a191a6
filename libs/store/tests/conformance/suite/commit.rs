//! The commit contract: one transaction, contiguous history, fencing, no partial writes.

use crate::support::{applied, signal};
use crate::support::{created, ev, scheduled, start, start_batch, task, timer, Backend};
use orbit_engine::Event;
use orbit_store::{
    CommitBatch, DefinitionChange, InboxDone, InboxStatus, ProjectionUpdate, Store, StoreError,
    TaskState,
};
use serde_json::json;

pub async fn commit_writes_everything_in_one_transaction(b: &dyn Backend) {
    let store = b.open().await;
    let seq = store.enqueue_inbox("e1", &signal("go")).await.unwrap();
    let mut batch = start_batch("e1", "node-a");
    batch.events.push(ev(3, scheduled("charge")));
    batch.tasks_to_insert = vec![task("charge", "payments.charge"), task("ship", "shipping")];
    batch.timers_to_upsert = vec![timer("workflow_timeout", 50_000)];
    batch.inbox_done = vec![InboxDone { seq, result: Some(applied(1)) }];
    batch.projection = Some(ProjectionUpdate {
        status: orbit_engine::Status::Running,
        updated_at_ms: 1_003,
        closed_at_ms: None,
        delete_after_ms: None,
        failed_step: None,
        error_code: None,
    });
    let outcome = store.commit(batch).await.unwrap();
    assert_eq!(outcome.last_seq, 3);
    assert_eq!(outcome.task_ids.len(), 2);

    let history = store.load_history("e1", 1).await.unwrap();
    assert_eq!(history.iter().map(|h| h.seq).collect::<Vec<_>>(), [1, 2, 3]);
    assert_eq!(history[0].event, created("e1", 1));
    let row = store.get_execution("e1").await.unwrap().unwrap();
    assert_eq!((row.last_seq, row.updated_at_ms, row.status.as_str()), (3, 1_003, "RUNNING"));
    let owner = store.get_owner("e1").await.unwrap().unwrap();
    assert_eq!((owner.node_id.as_str(), owner.epoch), ("node-a", 1));
    assert_eq!(store.next_timer_at().await.unwrap(), Some(50_000));
    assert_eq!(store.inbox_result(seq).await.unwrap(), InboxStatus::Done(Some(applied(1))));
    let claimed =
        store.claim_tasks(&["payments.charge".into()], 10, "fe-1", "s-1", "w").await.unwrap();
    assert_eq!(claimed.len(), 1);
    assert_eq!(claimed[0].unit_key, "charge");
    assert_eq!(claimed[0].input, json!({"step": "charge"}));

    // Cancelling units (a claimed and a queued row), moving and deleting timers, closing the
    // projection.
    let batch = CommitBatch {
        execution_id: "e1".into(),
        run: 1,
        expected_epoch: Some(1),
        events: vec![ev(4, Event::StepCancelled { step: "ship".into() })],
        units_to_cancel: vec!["charge".into(), "ship".into()],
        timers_to_upsert: vec![timer("retry:charge", 7_000)],
        timers_to_delete: vec!["workflow_timeout".into(), "never-existed".into()],
        projection: Some(ProjectionUpdate {
            status: orbit_engine::Status::Cancelled,
            updated_at_ms: 1_004,
            closed_at_ms: Some(1_004),
            delete_after_ms: None,
            failed_step: None,
            error_code: None,
        }),
        ..CommitBatch::default()
    };
    store.commit(batch).await.unwrap();
    assert!(store
        .claim_tasks(&["shipping".into()], 10, "fe-1", "s-1", "w")
        .await
        .unwrap()
        .is_empty());
    assert_eq!(store.next_timer_at().await.unwrap(), Some(7_000));
    let row = store.get_execution("e1").await.unwrap().unwrap();
    assert_eq!(
        (row.status.as_str(), row.closed_at_ms, row.last_seq),
        ("CANCELLED", Some(1_004), 4)
    );
    // The claimed row was cancelled too: the worker's late result still finds it.
    let token = claimed[0].token.clone().unwrap();
    let done = store.complete_task_row(&token, "w", None).await.unwrap().unwrap();
    assert_eq!(done.task.state, TaskState::Done);
}

/// Snapshot of everything a batch for `e1` could have touched.
async fn snapshot(store: &dyn Store) -> String {
    let history = store.load_history("e1", 1).await.unwrap();
    let row = store.get_execution("e1").await.unwrap();
    let owner = store.get_owner("e1").await.unwrap();
    let inbox = store.pending_inbox(None, 100).await.unwrap();
    let timers = store.due_timers(u64::MAX >> 2, 100).await.unwrap();
    format!("{history:?}\n{row:?}\n{owner:?}\n{inbox:?}\n{timers:?}")
}

pub async fn refused_batches_leave_nothing_behind(b: &dyn Backend) {
    let store = b.open().await;
    // A new execution whose events do not start at 1 creates nothing, not even the row.
    let mut bad_start = start_batch("e1", "node-a");
    bad_start.events[0].seq = 2;
    let err = store.commit(bad_start).await.unwrap_err();
    assert!(matches!(err, StoreError::Conflict(_)), "{err:?}");
    assert!(store.get_execution("e1").await.unwrap().is_none());
    assert!(store.get_owner("e1").await.unwrap().is_none());

    start(store.as_ref(), "e1").await;
    let seq = store.enqueue_inbox("e1", &signal("go")).await.unwrap();
    let before = snapshot(store.as_ref()).await;
    let full = |events, epoch| CommitBatch {
        execution_id: "e1".into(),
        run: 1,
        expected_epoch: epoch,
        events,
        projection: Some(ProjectionUpdate {
            status: orbit_engine::Status::Completed,
            updated_at_ms: 9,
            closed_at_ms: Some(9),
            delete_after_ms: None,
            failed_step: None,
            error_code: None,
        }),
        tasks_to_insert: vec![task("charge", "payments.charge")],
        timers_to_upsert: vec![timer("t", 5)],
        tasks_done: Vec::new(),
        inbox_done: vec![InboxDone { seq, result: None }],
        ..CommitBatch::default()
    };
    // Wrong seq (a gap), a repeated seq, a stale epoch, an inbox entry of another execution.
    let cases = [
        full(vec![ev(4, scheduled("charge"))], Some(1)),
        full(vec![ev(3, scheduled("a")), ev(3, scheduled("b"))], Some(1)),
        full(vec![ev(3, scheduled("charge"))], Some(7)),
    ];
    for batch in cases {
        assert!(store.commit(batch).await.is_err());
        assert_eq!(snapshot(store.as_ref()).await, before);
    }
    let other = store.enqueue_inbox("e2", &signal("go")).await.unwrap();
    let before = snapshot(store.as_ref()).await;
    let mut foreign = full(vec![ev(3, scheduled("charge"))], Some(1));
    foreign.inbox_done.push(InboxDone { seq: other, result: None });
    let err = store.commit(foreign).await.unwrap_err();
    assert!(matches!(err, StoreError::Conflict(_)), "{err:?}");
    assert_eq!(snapshot(store.as_ref()).await, before);
    assert!(store
        .claim_tasks(&["payments.charge".into()], 10, "fe", "s", "w")
        .await
        .unwrap()
        .is_empty());

    // The same batch, correct, applies; applying its inbox entry again is refused.
    store.commit(full(vec![ev(3, scheduled("charge"))], Some(1))).await.unwrap();
    let again = full(vec![ev(4, scheduled("again"))], Some(1));
    assert!(matches!(store.commit(again).await, Err(StoreError::Conflict(_))));
    assert_eq!(store.load_history("e1", 1).await.unwrap().len(), 3);
}

pub async fn fencing_rejects_a_stale_epoch(b: &dyn Backend) {
    let store = b.open().await;
    start(store.as_ref(), "e1").await;
    let taken = store.take_over_root("e1", "node-a", "node-b").await.unwrap();
    assert_eq!(taken, [("e1".to_string(), 2)]);
    let owner = store.get_owner("e1").await.unwrap().unwrap();
    assert_eq!((owner.node_id.as_str(), owner.epoch), ("node-b", 2));

    let append = |seq, epoch| CommitBatch {
        execution_id: "e1".into(),
        run: 1,
        expected_epoch: Some(epoch),
        events: vec![ev(seq, scheduled("s"))],
        ..CommitBatch::default()
    };
    let err = store.commit(append(3, 1)).await.unwrap_err();
    assert!(matches!(err, StoreError::Fenced(_)), "{err:?}");
    store.commit(append(3, 2)).await.unwrap();

    // No owners row at all: every fenced write is refused.
    let mut unowned = start_batch("e2", "node-a");
    unowned.new_owner = None;
    store.commit(unowned).await.unwrap();
    let mut batch = append(3, 1);
    batch.execution_id = "e2".into();
    assert!(matches!(store.commit(batch).await, Err(StoreError::Fenced(_))));
    // A second start of the same owner row is refused as well.
    start(store.as_ref(), "e3").await;
    let mut twice = start_batch("e3", "node-a");
    twice.new_execution = None;
    twice.events.clear();
    assert!(matches!(store.commit(twice).await, Err(StoreError::Fenced(_))));
    assert_eq!(store.get_owner("e3").await.unwrap().unwrap().epoch, 1);
}

pub async fn duplicate_execution_is_refused(b: &dyn Backend) {
    let store = b.open().await;
    start(store.as_ref(), "e1").await;
    let err = store.commit(start_batch("e1", "node-b")).await.unwrap_err();
    assert!(matches!(err, StoreError::ExecutionExists(_)), "{err:?}");
    assert_eq!(store.get_owner("e1").await.unwrap().unwrap().node_id, "node-a");
    // Appending to an execution that does not exist is NotFound.
    let orphan = CommitBatch {
        execution_id: "nope".into(),
        run: 1,
        events: vec![ev(1, created("nope", 1))],
        ..CommitBatch::default()
    };
    assert!(matches!(store.commit(orphan).await, Err(StoreError::NotFound(_))));
}

/// A start that took its workflow's latest version from a list of versions
/// (`CommitBatch::versions_seen`, a frontend's cached list) is refused, writing nothing,
/// once another version was registered; with the current count it commits, alone (on
/// PostgreSQL the one-statement commit) and beside another batch of the same execution (the
/// two-round-trip commit, which reads the counts).
pub async fn a_start_checks_the_versions_it_saw(b: &dyn Backend) {
    let store = b.open().await;
    store.put_definition("order", "v1", "h1", "doc").await.unwrap();
    let seen =
        |id: &str, n: u32| CommitBatch { versions_seen: Some(n), ..start_batch(id, "node-a") };
    store.commit(seen("e1", 1)).await.unwrap();

    store.put_definition("order", "v2", "h2", "doc").await.unwrap();
    let err = store.commit(seen("e2", 1)).await.unwrap_err();
    assert!(matches!(&err, StoreError::DefinitionChanged(w) if w == "order"), "{err:?}");
    assert_eq!(store.get_execution("e2").await.unwrap(), None);
    assert_eq!(store.get_owner("e2").await.unwrap(), None);
    assert!(store.load_history("e2", 1).await.unwrap().is_empty());
    // Checked before the id: a taken id with a stale list is refused for the list.
    let err = store.commit(seen("e1", 1)).await.unwrap_err();
    assert!(matches!(err, StoreError::DefinitionChanged(_)), "{err:?}");

    store.commit(seen("e2", 2)).await.unwrap();
    let next = CommitBatch {
        execution_id: "e3".into(),
        run: 1,
        expected_epoch: Some(1),
        events: vec![ev(3, scheduled("charge"))],
        ..CommitBatch::default()
    };
    store.commit_all(vec![seen("e3", 2), next.clone()]).await.unwrap();
    assert_eq!(store.get_execution("e3").await.unwrap().unwrap().last_seq, 3);
    let err = store.commit_all(vec![seen("e4", 1), next]).await.unwrap_err();
    assert!(matches!(err, StoreError::DefinitionChanged(_)), "{err:?}");
    assert_eq!(store.get_execution("e4").await.unwrap(), None);
}

pub async fn continue_as_new_starts_a_new_run(b: &dyn Backend) {
    let store = b.open().await;
    start(store.as_ref(), "e1").await;
    let end_run = CommitBatch {
        execution_id: "e1".into(),
        run: 1,
        expected_epoch: Some(1),
        events: vec![ev(
            3,
            Event::WorkflowContinuedAsNew { next_run: 2, input: json!({}), resume: None },
        )],
        ..CommitBatch::default()
    };
    store.commit(end_run).await.unwrap();
    let next_run = CommitBatch {
        execution_id: "e1".into(),
        run: 2,
        expected_epoch: Some(1),
        events: vec![ev(1, created("e1", 2)), ev(2, Event::WorkflowStarted {})],
        ..CommitBatch::default()
    };
    assert_eq!(store.commit(next_run).await.unwrap().last_seq, 2);
    assert_eq!(store.load_history("e1", 1).await.unwrap().len(), 3);
    assert_eq!(store.load_history("e1", 2).await.unwrap().len(), 2);
    let row = store.get_execution("e1").await.unwrap().unwrap();
    assert_eq!((row.run, row.last_seq), (2, 2));
    // The finished run is closed for writing.
    let late = CommitBatch {
        execution_id: "e1".into(),
        run: 1,
        events: vec![ev(4, scheduled("x"))],
        ..CommitBatch::default()
    };
    assert!(matches!(store.commit(late).await, Err(StoreError::Conflict(_))));
}

pub async fn a_migration_moves_the_projection_to_the_new_definition(b: &dyn Backend) {
    let store = b.open().await;
    start(store.as_ref(), "e1").await;
    let before = store.get_execution("e1").await.unwrap().unwrap();
    // A commit without a definition change leaves version and hash alone.
    let plain = CommitBatch {
        execution_id: "e1".into(),
        run: 1,
        expected_epoch: Some(1),
        events: vec![ev(3, scheduled("s"))],
        ..CommitBatch::default()
    };
    store.commit(plain).await.unwrap();
    let row = store.get_execution("e1").await.unwrap().unwrap();
    assert_eq!(
        (row.version.as_str(), row.definition_hash.as_str()),
        (before.version.as_str(), before.definition_hash.as_str())
    );
    // With one, in the same transaction as its events.
    let migrated = CommitBatch {
        execution_id: "e1".into(),
        run: 1,
        expected_epoch: Some(1),
        events: vec![ev(4, scheduled("t"))],
        definition: Some(DefinitionChange {
            version: "2.0.0".into(),
            definition_hash: "sha256:migrated".into(),
        }),
        ..CommitBatch::default()
    };
    assert_eq!(store.commit(migrated).await.unwrap().last_seq, 4);
    let row = store.get_execution("e1").await.unwrap().unwrap();
    assert_eq!((row.version.as_str(), row.definition_hash.as_str()), ("2.0.0", "sha256:migrated"));
    assert_eq!((row.run, row.last_seq, row.status), (before.run, 4, before.status));
    // A fenced migration changes nothing.
    let stale = CommitBatch {
        execution_id: "e1".into(),
        run: 1,
        expected_epoch: Some(7),
        events: vec![ev(5, scheduled("u"))],
        definition: Some(DefinitionChange { version: "3".into(), definition_hash: "x".into() }),
        ..CommitBatch::default()
    };
    assert!(matches!(store.commit(stale).await, Err(StoreError::Fenced(_))));
    let row = store.get_execution("e1").await.unwrap().unwrap();
    assert_eq!(row.version, "2.0.0");
}
