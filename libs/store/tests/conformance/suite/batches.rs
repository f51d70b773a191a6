//! Batch jobs: creation is idempotent by id and request id, one scheduler holds a batch at
//! a time and another takes it over when the lease ends, an item is begun (pending + cursor)
//! and recorded (outcome + counters) in one transaction each and counted once, a lost lease
//! writes nothing, cancel stops new items but lets the holder record those in flight, and
//! the targets page by execution id over workflow, version and status, and over a list
//! query ANDed with the caller's workflow patterns; finished jobs past their retention are
//! deleted with their items, running ones never.

use crate::support::{created, ev, execution_row, Backend};
use orbit_store::{
    BatchAction, BatchItem, BatchRow, BatchSelector, BatchSpec, BatchState, CommitBatch,
    ItemOutcome, NewOwner, ProjectionUpdate, Store,
};

fn spec(workflow: &str) -> BatchSpec {
    BatchSpec {
        selector: BatchSelector {
            workflow: workflow.into(),
            version: Some("v1".into()),
            statuses: vec!["RUNNING".into()],
            query: None,
            workflows: None,
        },
        action: BatchAction::Migrate { to_version: "v2".into() },
        rate_per_second: 50,
        reason: "fix".into(),
    }
}

fn item(batch: &str, execution: &str, outcome: ItemOutcome, code: &str) -> BatchItem {
    BatchItem {
        batch_id: batch.into(),
        execution_id: execution.into(),
        outcome,
        code: code.into(),
        message: format!("{execution} {}", outcome.as_str()),
        seq: u64::from(outcome == ItemOutcome::Succeeded) * 7,
    }
}

/// Create (by id, by request id), get, list newest first, cancel.
pub async fn batches_are_created_once_and_cancelled(b: &dyn Backend) {
    let store = b.open().await;
    let mut first = BatchRow::new("b-1", &spec("order"), 3, 100);
    first.request_id = Some("req-1".into());
    let (row, created) = store.create_batch(&first).await.unwrap();
    assert!(created);
    assert_eq!(
        (row.state, row.total, row.done, row.cursor.as_deref()),
        (BatchState::Running, 3, 0, None)
    );
    assert_eq!(BatchSpec::from_json(&row.spec).unwrap(), spec("order"));
    let mut retry = BatchRow::new("b-2", &spec("order"), 9, 200);
    retry.request_id = Some("req-1".into());
    let (again, created) = store.create_batch(&retry).await.unwrap();
    assert!(!created, "the request id exists: nothing is inserted");
    assert_eq!(again, row, "the first batch answers the retry");
    assert_eq!(store.get_batch("b-2").await.unwrap(), None);
    let (_, created) = store.create_batch(&BatchRow::new("b-1", &spec("x"), 0, 5)).await.unwrap();
    assert!(!created, "the id exists");
    store.create_batch(&BatchRow::new("b-3", &spec("order"), 0, 300)).await.unwrap();
    let ids = |rows: Vec<BatchRow>| rows.into_iter().map(|r| r.batch_id).collect::<Vec<_>>();
    assert_eq!(ids(store.list_batches(None, 10).await.unwrap()), ["b-3", "b-1"]);
    assert_eq!(ids(store.list_batches(Some("b-3"), 10).await.unwrap()), ["b-1"]);

    let cancelled = store.cancel_batch("b-1", "stop", 400).await.unwrap().unwrap();
    assert_eq!((cancelled.state, cancelled.reason.as_str()), (BatchState::Cancelled, "stop"));
    let again = store.cancel_batch("b-1", "again", 500).await.unwrap().unwrap();
    assert_eq!((again.reason.as_str(), again.updated_at_ms), ("stop", 400), "unchanged");
    assert_eq!(store.cancel_batch("nope", "x", 1).await.unwrap(), None);
    assert_eq!(
        store.lease_batch("s1", 1_000, 100).await.unwrap().map(|r| r.batch_id).as_deref(),
        Some("b-3"),
        "a cancelled batch is never leased"
    );
}

/// One holder at a time; the lease runs out and another takes over; the holder renews.
pub async fn a_batch_is_leased_by_one_scheduler_at_a_time(b: &dyn Backend) {
    let store = b.open().await;
    store.create_batch(&BatchRow::new("b-1", &spec("order"), 0, 100)).await.unwrap();
    let held = store.lease_batch("s1", 1_000, 500).await.unwrap().unwrap();
    assert_eq!((held.lease_holder.as_deref(), held.lease_until_ms), (Some("s1"), Some(1_500)));
    assert_eq!(store.lease_batch("s2", 1_200, 500).await.unwrap(), None, "held by s1");
    let renewed = store.renew_batch_lease("b-1", "s1", 1_400, 500).await.unwrap().unwrap();
    assert_eq!(renewed.lease_until_ms, Some(1_900));
    assert_eq!(store.renew_batch_lease("b-1", "s2", 1_400, 500).await.unwrap(), None);
    assert_eq!(store.lease_batch("s2", 1_800, 500).await.unwrap(), None, "renewed");
    let again = store.lease_batch("s1", 1_800, 500).await.unwrap().unwrap();
    assert_eq!(again.lease_holder.as_deref(), Some("s1"), "the holder takes its own back");
    let taken = store.lease_batch("s2", 2_300, 500).await.unwrap().unwrap();
    assert_eq!(taken.lease_holder.as_deref(), Some("s2"), "the lease ran out: taken over");
    assert!(!store.begin_batch_item("b-1", "s1", "e1", 2_301).await.unwrap(), "s1 lost it");
    assert!(!store.finish_batch("b-1", "s1", Some(BatchState::Completed), 2_302).await.unwrap());
    assert!(store.finish_batch("b-1", "s2", None, 2_303).await.unwrap(), "released");
    let row = store.get_batch("b-1").await.unwrap().unwrap();
    assert_eq!((row.state, row.lease_holder), (BatchState::Running, None));
    assert!(store.lease_batch("s3", 2_304, 500).await.unwrap().is_some(), "free again");
}

/// Begin and record: cursor, counters, each item once; a lost lease writes nothing;
/// finishing COMPLETED fixes `total`.
pub async fn batch_items_are_begun_and_recorded_once(b: &dyn Backend) {
    let store = b.open().await;
    store.create_batch(&BatchRow::new("b-1", &spec("order"), 5, 100)).await.unwrap();
    store.lease_batch("s1", 1_000, 10_000).await.unwrap().unwrap();
    for id in ["e1", "e2", "e3"] {
        assert!(store.begin_batch_item("b-1", "s1", id, 1_001).await.unwrap());
    }
    assert!(store.begin_batch_item("b-1", "s1", "e2", 1_002).await.unwrap(), "again: kept");
    let row = store.get_batch("b-1").await.unwrap().unwrap();
    assert_eq!(row.cursor.as_deref(), Some("e3"), "the cursor never moves back");
    let pending =
        store.list_batch_items("b-1", None, Some(ItemOutcome::Pending), 10).await.unwrap();
    assert_eq!(
        pending.iter().map(|i| i.execution_id.as_str()).collect::<Vec<_>>(),
        ["e1", "e2", "e3"]
    );

    let ok = item("b-1", "e1", ItemOutcome::Succeeded, "");
    let row = store.record_batch_item("s1", &ok, 1_010).await.unwrap().unwrap();
    assert_eq!((row.done, row.succeeded, row.failed, row.skipped), (1, 1, 0, 0));
    let row = store.record_batch_item("s1", &ok, 1_011).await.unwrap().unwrap();
    assert_eq!(row.done, 1, "recorded once, counted once");
    let unsafe_item = item("b-1", "e2", ItemOutcome::Failed, "MIGRATION_UNSAFE");
    let row = store.record_batch_item("s1", &unsafe_item, 1_012).await.unwrap().unwrap();
    assert_eq!((row.done, row.failed), (2, 1));
    let lost = item("b-1", "e3", ItemOutcome::Skipped, "EXECUTION_FINISHED");
    assert_eq!(store.record_batch_item("s2", &lost, 1_013).await.unwrap(), None, "not held");
    assert_eq!(store.get_batch("b-1").await.unwrap().unwrap().done, 2, "nothing written");
    let unknown = item("b-1", "e9", ItemOutcome::Succeeded, "");
    let row = store.record_batch_item("s1", &unknown, 1_014).await.unwrap().unwrap();
    assert_eq!(row.done, 2, "an item never begun is not counted");

    let cancelled = store.cancel_batch("b-1", "stop", 1_015).await.unwrap().unwrap();
    assert_eq!(cancelled.state, BatchState::Cancelled);
    assert!(!store.begin_batch_item("b-1", "s1", "e4", 1_016).await.unwrap(), "cancelled");
    let row = store.record_batch_item("s1", &lost, 1_017).await.unwrap().unwrap();
    assert_eq!((row.done, row.skipped), (3, 1), "an item in flight is still recorded");
    let items = store.list_batch_items("b-1", None, None, 10).await.unwrap();
    assert_eq!(items[0], ok);
    assert_eq!(items[1], unsafe_item);
    assert_eq!(items[2], lost);
    let failed = store.list_batch_items("b-1", None, Some(ItemOutcome::Failed), 10).await.unwrap();
    assert_eq!(failed, vec![unsafe_item]);
    let page = store.list_batch_items("b-1", Some("e1"), None, 1).await.unwrap();
    assert_eq!(page.len(), 1);
    assert_eq!(page[0].execution_id, "e2");
    assert!(store.finish_batch("b-1", "s1", Some(BatchState::Completed), 1_018).await.unwrap());
    let row = store.get_batch("b-1").await.unwrap().unwrap();
    assert_eq!((row.state, row.total), (BatchState::Cancelled, 5), "a cancel stays");

    store.create_batch(&BatchRow::new("b-2", &spec("order"), 7, 2_000)).await.unwrap();
    store.lease_batch("s1", 2_000, 10_000).await.unwrap().unwrap();
    store.begin_batch_item("b-2", "s1", "e1", 2_001).await.unwrap();
    store
        .record_batch_item("s1", &item("b-2", "e1", ItemOutcome::Succeeded, ""), 2_002)
        .await
        .unwrap();
    assert!(store.finish_batch("b-2", "s1", Some(BatchState::Completed), 2_003).await.unwrap());
    let row = store.get_batch("b-2").await.unwrap().unwrap();
    assert_eq!(
        (row.state, row.total, row.done, row.lease_holder),
        (BatchState::Completed, 1, 1, None)
    );
}

/// Retention: a finished job (completed, cancelled) whose last change is at or before the
/// cutoff goes with its items, the items first and the job last, in batches of the limit; a
/// later-finished job and a running job stay whatever their age.
pub async fn finished_batches_past_retention_are_deleted_with_their_items(b: &dyn Backend) {
    let store = b.open().await;
    // b-old: completed at 1_010 with 3 items; b-cut: cancelled at 1_020 (no item);
    // b-new: completed at 5_010; b-run: running since 100 with one item.
    for (id, at) in [("b-old", 1_000), ("b-new", 5_000)] {
        store.create_batch(&BatchRow::new(id, &spec("order"), 3, at)).await.unwrap();
        store.lease_batch("s1", at, 10_000).await.unwrap().unwrap();
        let n = if id == "b-old" { 3 } else { 1 };
        for e in 0..n {
            let e = format!("e{e}");
            assert!(store.begin_batch_item(id, "s1", &e, at + 1).await.unwrap());
            let done = item(id, &e, ItemOutcome::Succeeded, "");
            store.record_batch_item("s1", &done, at + 2).await.unwrap().unwrap();
        }
        assert!(store.finish_batch(id, "s1", Some(BatchState::Completed), at + 10).await.unwrap());
    }
    store.create_batch(&BatchRow::new("b-cut", &spec("order"), 0, 1_019)).await.unwrap();
    store.cancel_batch("b-cut", "stop", 1_020).await.unwrap().unwrap();
    store.create_batch(&BatchRow::new("b-run", &spec("order"), 1, 100)).await.unwrap();
    store.lease_batch("s2", 100, 100_000).await.unwrap().unwrap();
    assert!(store.begin_batch_item("b-run", "s2", "e0", 101).await.unwrap());

    let none = store.delete_finished_batches(1_009, 10).await.unwrap();
    assert_eq!(none, orbit_store::BatchesDeleted::default(), "nothing finished by 1_009");
    // A limit of 2: b-old's items two at a time, and b-cut (which has none); b-old's row
    // goes once its items are gone (in the same call on SQLite, whose statements see each
    // other; in the next on PostgreSQL, whose one statement sees one snapshot).
    let mut deleted = orbit_store::BatchesDeleted::default();
    for _ in 0..4 {
        let d = store.delete_finished_batches(1_020, 2).await.unwrap();
        deleted.items += d.items;
        deleted.batches += d.batches;
        if store.get_batch("b-old").await.unwrap().is_none() {
            assert!(
                store.list_batch_items("b-old", None, None, 10).await.unwrap().is_empty(),
                "a job's row goes only after its items"
            );
        }
    }
    assert_eq!((deleted.items, deleted.batches), (3, 2), "b-old's 3 items, b-old and b-cut");
    assert!(store.get_batch("b-old").await.unwrap().is_none());
    assert!(store.get_batch("b-cut").await.unwrap().is_none());
    assert_eq!(store.get_batch("b-new").await.unwrap().unwrap().state, BatchState::Completed);
    assert_eq!(store.list_batch_items("b-new", None, None, 10).await.unwrap().len(), 1);
    let later = store.delete_finished_batches(u64::MAX / 2, 10).await.unwrap();
    assert_eq!(later.items, 1, "b-new's item");
    let again = store.delete_finished_batches(u64::MAX / 2, 10).await.unwrap();
    assert_eq!(later.batches + again.batches, 1, "then b-new");
    assert_eq!(again.items, 0);
    assert!(store.get_batch("b-new").await.unwrap().is_none());
    let run = store.get_batch("b-run").await.unwrap().unwrap();
    assert_eq!(run.state, BatchState::Running, "a running job is never deleted");
    assert_eq!(store.list_batch_items("b-run", None, None, 10).await.unwrap().len(), 1);
}

async fn add(store: &dyn Store, id: &str, workflow: &str, version: &str, closed: bool) {
    let mut row = execution_row(id, 1_000);
    row.workflow = workflow.into();
    row.version = version.into();
    let batch = CommitBatch {
        execution_id: id.into(),
        run: 1,
        new_execution: Some(row),
        new_owner: Some(NewOwner { root_id: id.into(), node_id: "n".into() }),
        events: vec![ev(1, created(id, 1))],
        projection: closed.then_some(ProjectionUpdate {
            status: orbit_engine::Status::Completed,
            updated_at_ms: 2_000,
            closed_at_ms: Some(2_000),
            delete_after_ms: None,
            failed_step: None,
            error_code: None,
        }),
        ..CommitBatch::default()
    };
    store.commit(batch).await.unwrap();
}

/// The selector filters by workflow, version and status, in execution-id order.
pub async fn batch_targets_page_by_execution_id(b: &dyn Backend) {
    let store = b.open().await;
    add(store.as_ref(), "e3", "order", "v1", false).await;
    add(store.as_ref(), "e1", "order", "v1", false).await;
    add(store.as_ref(), "e2", "order", "v2", false).await;
    add(store.as_ref(), "e4", "order", "v1", true).await;
    add(store.as_ref(), "e5", "refund", "v1", false).await;
    add(store.as_ref(), "e6", "order", "v1", false).await;
    let selector = spec("order").selector;
    assert_eq!(store.batch_targets(&selector, None, 10).await.unwrap(), ["e1", "e3", "e6"]);
    assert_eq!(store.batch_targets(&selector, Some("e1"), 1).await.unwrap(), ["e3"]);
    assert_eq!(store.batch_targets(&selector, Some("e6"), 10).await.unwrap(), Vec::<String>::new());
    assert_eq!(store.count_batch_targets(&selector).await.unwrap(), 3);
    let any_version = BatchSelector {
        version: None,
        statuses: vec!["RUNNING".into(), "COMPLETED".into()],
        ..selector
    };
    assert_eq!(
        store.batch_targets(&any_version, None, 10).await.unwrap(),
        ["e1", "e2", "e3", "e4", "e6"]
    );
    assert_eq!(store.count_batch_targets(&any_version).await.unwrap(), 5);
}

/// A query selects alone (no workflow, no statuses) or ANDed with the other parts, the
/// caller's patterns bound it (`*` any run; `_`, `%`, `?` match themselves), and the walk
/// pages after the cursor in execution-id order.
pub async fn batch_targets_walk_a_query_within_the_patterns(b: &dyn Backend) {
    let store = b.open().await;
    add(store.as_ref(), "q3", "billing.charge", "v1", false).await;
    add(store.as_ref(), "q1", "billing.refund", "v1", false).await;
    add(store.as_ref(), "q2", "shipping.pack", "v1", false).await;
    add(store.as_ref(), "q4", "billing.charge", "v2", true).await;
    add(store.as_ref(), "q5", "billingXcharge", "v1", false).await;
    add(store.as_ref(), "q6", "billing_charge", "v1", false).await;
    let by_query = |q: &str| BatchSelector { query: Some(q.into()), ..BatchSelector::default() };
    let running = by_query("status = 'RUNNING'");
    assert_eq!(
        store.batch_targets(&running, None, 10).await.unwrap(),
        ["q1", "q2", "q3", "q5", "q6"]
    );
    assert_eq!(store.batch_targets(&running, Some("q2"), 2).await.unwrap(), ["q3", "q5"]);
    assert_eq!(store.count_batch_targets(&running).await.unwrap(), 5);
    let billing = by_query("workflow STARTS_WITH 'billing.' AND NOT status = 'RUNNING'");
    assert_eq!(store.batch_targets(&billing, None, 10).await.unwrap(), ["q4"]);
    // ANDed with the statuses and the workflow.
    let anded = BatchSelector {
        workflow: "billing.charge".into(),
        statuses: vec!["RUNNING".into()],
        ..by_query("version = 'v1' OR version = 'v2'")
    };
    assert_eq!(store.batch_targets(&anded, None, 10).await.unwrap(), ["q3"]);
    // The caller's patterns: `billing.*` never reaches `shipping.pack`, nor the ids whose
    // workflow only matches the pattern if `.` or `_` were wildcards.
    let restricted = BatchSelector { workflows: Some(vec!["billing.*".into()]), ..running.clone() };
    assert_eq!(store.batch_targets(&restricted, None, 10).await.unwrap(), ["q1", "q3"]);
    assert_eq!(store.count_batch_targets(&restricted).await.unwrap(), 2);
    let literal = BatchSelector { workflows: Some(vec!["billing_c*".into()]), ..running.clone() };
    assert_eq!(store.batch_targets(&literal, None, 10).await.unwrap(), ["q6"]);
    let two = BatchSelector {
        workflows: Some(vec!["shipping.pack".into(), "*.refund".into()]),
        ..running.clone()
    };
    assert_eq!(store.batch_targets(&two, None, 10).await.unwrap(), ["q1", "q2"]);
    let nothing = BatchSelector { workflows: Some(vec![]), ..running.clone() };
    assert_eq!(store.count_batch_targets(&nothing).await.unwrap(), 0);
    // Case matters on both backends (SQLite's LIKE would ignore it).
    let upper = BatchSelector { workflows: Some(vec!["BILLING.*".into()]), ..running };
    assert_eq!(store.count_batch_targets(&upper).await.unwrap(), 0);
}
