//! Poison quarantine: fault counts, parking and unparking (migration 0003).

use crate::support::start;
use crate::support::{resume, signal};
use orbit_store::InboxKind;
use orbit_store::{FaultNote, StoreError, SUSPENDED};

fn note(id: &str, seq: Option<u64>, add: u32, reason: &str) -> FaultNote {
    FaultNote { execution_id: id.into(), inbox_seq: seq, reason: reason.into(), add }
}

pub async fn faults_count_per_entry_and_restart_when_the_entry_moves(
    b: &dyn crate::support::Backend,
) {
    let store = b.open().await;
    assert!(store.faults(&["e1".into()]).await.unwrap().is_empty(), "no row for a healthy one");
    let rows = store.note_faults(vec![note("e1", Some(7), 1, "attempt")]).await.unwrap();
    assert_eq!((rows[0].failures, rows[0].inbox_seq), (1, Some(7)));
    let rows = store
        .note_faults(vec![note("e1", Some(7), 1, "again"), note("e2", None, 1, "child")])
        .await
        .unwrap();
    assert_eq!(rows.len(), 2);
    assert_eq!((rows[0].execution_id.as_str(), rows[0].failures), ("e1", 2));
    assert_eq!((rows[1].execution_id.as_str(), rows[1].failures), ("e2", 1));
    // add = 0 only replaces the reason.
    let rows = store.note_faults(vec![note("e1", Some(7), 0, "panicked: boom")]).await.unwrap();
    assert_eq!((rows[0].failures, rows[0].reason.as_str()), (2, "panicked: boom"));
    // Another first pending entry: progress was made, the count starts again.
    let rows = store.note_faults(vec![note("e1", Some(9), 1, "attempt")]).await.unwrap();
    assert_eq!((rows[0].failures, rows[0].inbox_seq), (1, Some(9)));
    assert!(!rows[0].parked());
    store.clear_faults(&["e1".into(), "e2".into(), "nope".into()]).await.unwrap();
    assert!(store.faults(&["e1".into(), "e2".into()]).await.unwrap().is_empty());
}

pub async fn parking_suspends_skips_entries_and_unparking_restores(
    b: &dyn crate::support::Backend,
) {
    let store = b.open().await;
    start(store.as_ref(), "e1").await;
    start(store.as_ref(), "e2").await;
    let poison = store.enqueue_inbox("e1", &signal("x")).await.unwrap();
    store.enqueue_inbox("e2", &signal("y")).await.unwrap();
    store.note_faults(vec![note("e1", Some(poison), 2, "died")]).await.unwrap();

    // Fenced like a commit.
    let stale = store.park_execution(note("e1", Some(poison), 1, "x"), Some(5), 2_000).await;
    assert!(matches!(stale, Err(StoreError::Fenced(_))), "{stale:?}");
    let missing = store.park_execution(note("zz", Some(1), 1, "x"), None, 2_000).await;
    assert!(matches!(missing, Err(StoreError::NotFound(_))), "{missing:?}");

    let row = store.park_execution(note("e1", Some(poison), 1, "died 3 times"), Some(1), 2_000);
    let row = row.await.unwrap();
    assert!(row.parked());
    assert_eq!(
        (row.failures, row.inbox_seq, row.reason.as_str()),
        (3, Some(poison), "died 3 times")
    );
    assert_eq!(row.resume_status.as_deref(), Some("RUNNING"));
    let e1 = store.get_execution("e1").await.unwrap().unwrap();
    assert_eq!((e1.status.as_str(), e1.updated_at_ms), (SUSPENDED, 2_000));

    // A parked row ignores notes; its entries are skipped except resume/terminate.
    let rows = store.note_faults(vec![note("e1", Some(poison), 1, "other")]).await.unwrap();
    assert_eq!((rows[0].failures, rows[0].reason.as_str()), (3, "died 3 times"));
    let pending = store.pending_inbox_owned("node-a", &[], 100).await.unwrap();
    assert_eq!(pending.iter().map(|e| e.execution_id.as_str()).collect::<Vec<_>>(), ["e2"]);
    let resume = store.enqueue_inbox("e1", &resume()).await.unwrap();
    let pending = store.pending_inbox_owned("node-a", &["e1".into()], 100).await.unwrap();
    let kinds: Vec<(&str, &str)> =
        pending.iter().map(|e| (e.execution_id.as_str(), e.kind.as_str())).collect();
    assert_eq!(kinds, [("e2", InboxKind::Signal.as_str()), ("e1", InboxKind::Resume.as_str())]);
    assert_eq!(pending[1].seq, resume);
    // The offending entry is neither applied nor deleted.
    assert_eq!(store.pending_inbox(Some("e1"), 10).await.unwrap()[0].seq, poison);

    // Parking again keeps the status to restore.
    let again = store.park_execution(note("e1", Some(poison), 0, "again"), Some(1), 2_500);
    assert_eq!(again.await.unwrap().resume_status.as_deref(), Some("RUNNING"));

    assert!(matches!(
        store.unpark_execution("e1", Some(4), 3_000).await,
        Err(StoreError::Fenced(_))
    ));
    let removed = store.unpark_execution("e1", Some(1), 3_000).await.unwrap().unwrap();
    assert_eq!(removed.failures, 3);
    let e1 = store.get_execution("e1").await.unwrap().unwrap();
    assert_eq!((e1.status.as_str(), e1.updated_at_ms), ("RUNNING", 3_000));
    assert!(store.faults(&["e1".into()]).await.unwrap().is_empty(), "mark and count cleared");
    let pending = store.pending_inbox_owned("node-a", &[], 100).await.unwrap();
    assert_eq!(pending.len(), 3, "the entries are pending again");
    // Unparking what is not parked changes nothing.
    assert_eq!(store.unpark_execution("e1", Some(1), 4_000).await.unwrap(), None);
    assert_eq!(store.get_execution("e1").await.unwrap().unwrap().updated_at_ms, 3_000);
}
