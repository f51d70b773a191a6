//! Schedules: create is idempotent by id, lists page by id, updates drop claims, claims are
//! leases that concurrent schedulers never share, and a fire is recorded only under its
//! claim.

use crate::support::Backend;
use orbit_store::{ScheduleFire, ScheduleRow, ScheduleUpdate, Store};
use std::collections::HashSet;
use std::sync::Arc;

fn schedule(id: &str, workflow: &str, due: u64) -> ScheduleRow {
    ScheduleRow {
        schedule_id: id.into(),
        workflow: workflow.into(),
        spec: format!("{{\"id\":\"{id}\"}}"),
        next_fire_at_ms: Some(due),
        due_at_ms: Some(due),
        remaining: Some(3),
        created_at_ms: 10,
        updated_at_ms: 10,
        ..ScheduleRow::default()
    }
}

/// Create, get, list (filtered, paged), update, pause/resume, delete.
pub async fn schedules_are_managed_by_id(b: &dyn Backend) {
    let store = b.open().await;
    let (row, created) = store.create_schedule(&schedule("b", "nightly", 100)).await.unwrap();
    assert!(created);
    assert_eq!((row.remaining, row.paused, row.fired_count), (Some(3), false, 0));
    let mut other = schedule("b", "other", 5);
    other.spec = "{}".into();
    let (again, created) = store.create_schedule(&other).await.unwrap();
    assert!(!created, "the id exists: nothing is inserted");
    assert_eq!(again, row, "the stored row comes back unchanged");
    store.create_schedule(&schedule("a", "hourly", 100)).await.unwrap();
    store.create_schedule(&schedule("c", "nightly", 100)).await.unwrap();
    let ids = |rows: Vec<ScheduleRow>| rows.into_iter().map(|r| r.schedule_id).collect::<Vec<_>>();
    assert_eq!(ids(store.list_schedules(None, None, 10).await.unwrap()), ["a", "b", "c"]);
    assert_eq!(ids(store.list_schedules(None, Some("a"), 1).await.unwrap()), ["b"]);
    assert_eq!(ids(store.list_schedules(Some("nightly"), None, 10).await.unwrap()), ["b", "c"]);

    let update = ScheduleUpdate {
        schedule_id: "b".into(),
        workflow: "weekly".into(),
        spec: "{\"v\":2}".into(),
        next_fire_at_ms: Some(500),
        due_at_ms: Some(510),
        remaining: None,
        now_ms: 20,
    };
    let updated = store.update_schedule(&update).await.unwrap().unwrap();
    assert_eq!(
        (updated.workflow.as_str(), updated.spec.as_str(), updated.due_at_ms, updated.remaining),
        ("weekly", "{\"v\":2}", Some(510), None)
    );
    assert_eq!(updated.created_at_ms, 10);
    let missing = ScheduleUpdate { schedule_id: "zz".into(), ..update };
    assert_eq!(store.update_schedule(&missing).await.unwrap(), None);

    let paused = store.set_schedule_paused("b", true, "maintenance", 30).await.unwrap().unwrap();
    assert_eq!((paused.paused, paused.note.as_str()), (true, "maintenance"));
    let resumed = store.set_schedule_paused("b", false, "", 31).await.unwrap().unwrap();
    assert_eq!((resumed.paused, resumed.note.as_str(), resumed.due_at_ms), (false, "", Some(510)));
    assert_eq!(store.set_schedule_paused("zz", true, "", 1).await.unwrap(), None);

    assert!(store.delete_schedule("b").await.unwrap());
    assert!(!store.delete_schedule("b").await.unwrap());
    assert_eq!(store.get_schedule("b").await.unwrap(), None);
}

/// Concurrent claimers take disjoint due rows; paused and future rows are not due; a lease
/// that ran out is taken again; the next due time counts a live lease.
pub async fn due_schedules_are_claimed_once_per_lease(b: &dyn Backend) {
    let store = b.open().await;
    const ROWS: usize = 40;
    for i in 0..ROWS {
        store.create_schedule(&schedule(&format!("s{i:02}"), "w", 100 + i as u64)).await.unwrap();
    }
    store.create_schedule(&schedule("future", "w", 5_000)).await.unwrap();
    store.create_schedule(&schedule("paused", "w", 50)).await.unwrap();
    store.set_schedule_paused("paused", true, "", 1).await.unwrap();
    assert_eq!(store.next_schedule_due_at().await.unwrap(), Some(100));
    assert_eq!(store.count_due_schedules(1_000).await.unwrap(), ROWS as u64);

    let claimer = |name: &'static str, store: Arc<dyn Store>| {
        tokio::spawn(async move {
            let mut got = Vec::new();
            loop {
                let rows = store.claim_due_schedules(1_000, name, 10_000, 3).await.unwrap();
                if rows.is_empty() {
                    return got;
                }
                got.extend(rows.into_iter().map(|r| r.schedule_id));
            }
        })
    };
    let handles =
        [claimer("a", store.clone()), claimer("b", store.clone()), claimer("c", store.clone())];
    let mut all = Vec::new();
    for h in handles {
        all.extend(h.await.unwrap());
    }
    let unique: HashSet<_> = all.iter().cloned().collect();
    assert_eq!((all.len(), unique.len()), (ROWS, ROWS), "each due row claimed exactly once");
    assert!(!unique.contains("future") && !unique.contains("paused"));
    // Every due row is held until 11_000: the next due time is the future row's.
    assert_eq!(store.next_schedule_due_at().await.unwrap(), Some(5_000));
    assert!(store
        .claim_due_schedules(10_999, "d", 10_000, 100)
        .await
        .unwrap()
        .iter()
        .all(|r| r.schedule_id == "future"));
    // After the lease, another scheduler takes the rows again.
    let retaken = store.claim_due_schedules(11_000, "e", 10_000, 100).await.unwrap();
    assert_eq!(retaken.len(), ROWS);
}

/// A fire is written only by the claim's holder; a release makes the row due again; a
/// manual start is counted; an update drops the claim.
pub async fn a_fire_is_recorded_only_under_its_claim(b: &dyn Backend) {
    let store = b.open().await;
    store.create_schedule(&schedule("s", "w", 100)).await.unwrap();
    let fire = |claimer: &str| ScheduleFire {
        schedule_id: "s".into(),
        claimer: claimer.into(),
        next_fire_at_ms: Some(200),
        due_at_ms: Some(205),
        last_fire_at_ms: Some(100),
        last_execution_id: Some("s:100".into()),
        fired: 1,
        skipped: 2,
        last_error: None,
        remaining: Some(2),
        buffered: vec![150],
        pause: None,
        now_ms: 120,
    };
    assert!(!store.finish_schedule_fire(&fire("a")).await.unwrap(), "no claim held");
    assert_eq!(store.claim_due_schedules(110, "a", 1_000, 10).await.unwrap().len(), 1);
    // The lease ran out and b took the row: a's late write changes nothing.
    assert_eq!(store.claim_due_schedules(1_110, "b", 1_000, 10).await.unwrap().len(), 1);
    assert!(!store.finish_schedule_fire(&fire("a")).await.unwrap());
    assert!(store.finish_schedule_fire(&fire("b")).await.unwrap());
    assert!(!store.finish_schedule_fire(&fire("b")).await.unwrap(), "the claim is dropped");
    let row = store.get_schedule("s").await.unwrap().unwrap();
    assert_eq!(
        (
            row.next_fire_at_ms,
            row.due_at_ms,
            row.last_fire_at_ms,
            row.fired_count,
            row.skipped_count
        ),
        (Some(200), Some(205), Some(100), 1, 2)
    );
    assert_eq!(
        (row.remaining, row.buffered.clone(), row.last_execution_id.as_deref()),
        (Some(2), vec![150], Some("s:100"))
    );

    // A failed fire: released, due again later, the error recorded.
    assert_eq!(store.claim_due_schedules(300, "a", 1_000, 10).await.unwrap().len(), 1);
    assert!(store.release_schedule_claim("s", "a", 400, "UNAVAILABLE: owner", 301).await.unwrap());
    let row = store.get_schedule("s").await.unwrap().unwrap();
    assert_eq!((row.due_at_ms, row.last_error.as_deref()), (Some(400), Some("UNAVAILABLE: owner")));
    assert!(store.claim_due_schedules(399, "a", 1_000, 10).await.unwrap().is_empty());

    // Pause on failure through the fire; a trigger counts without a claim.
    assert_eq!(store.claim_due_schedules(400, "a", 1_000, 10).await.unwrap().len(), 1);
    let failed = ScheduleFire {
        pause: Some("paused: s:100 failed".into()),
        fired: 0,
        skipped: 0,
        last_fire_at_ms: None,
        last_execution_id: None,
        ..fire("a")
    };
    assert!(store.finish_schedule_fire(&failed).await.unwrap());
    let row = store.get_schedule("s").await.unwrap().unwrap();
    assert_eq!(
        (row.paused, row.note.as_str(), row.last_error),
        (true, "paused: s:100 failed", None)
    );
    assert!(store.record_schedule_start("s", "s:manual", 500).await.unwrap());
    assert!(!store.record_schedule_start("missing", "x", 500).await.unwrap());
    let row = store.get_schedule("s").await.unwrap().unwrap();
    assert_eq!((row.fired_count, row.last_execution_id.as_deref()), (2, Some("s:manual")));

    // An update drops a claim: the holder's fire is refused.
    store.set_schedule_paused("s", false, "", 501).await.unwrap();
    assert_eq!(store.claim_due_schedules(600, "a", 1_000, 10).await.unwrap().len(), 1);
    let update = ScheduleUpdate {
        schedule_id: "s".into(),
        workflow: "w".into(),
        spec: "{}".into(),
        next_fire_at_ms: Some(900),
        due_at_ms: Some(900),
        remaining: None,
        now_ms: 601,
    };
    store.update_schedule(&update).await.unwrap();
    assert!(!store.finish_schedule_fire(&fire("a")).await.unwrap());
    assert_eq!(store.get_schedule("s").await.unwrap().unwrap().buffered, Vec::<u64>::new());
}

/// `ListExecutions` filters by the schedule that started an execution, page by page.
pub async fn executions_list_by_schedule(b: &dyn Backend) {
    let store = b.open().await;
    for (i, schedule) in [Some("s"), None, Some("s"), Some("t"), Some("s")].iter().enumerate() {
        let id = format!("e{i}");
        let mut batch = crate::support::start_batch(&id, "node-a");
        if let Some(row) = batch.new_execution.as_mut() {
            row.schedule_id = schedule.map(str::to_string);
            row.created_at_ms = 1_000 + i as u64;
        }
        store.commit(batch).await.unwrap();
    }
    let filter = |token: Option<String>| orbit_store::ExecutionFilter {
        schedule_id: Some("s".into()),
        page_size: 2,
        page_token: token,
        ..orbit_store::ExecutionFilter::default()
    };
    let first = store.list_executions(filter(None)).await.unwrap();
    let ids: Vec<_> = first.executions.iter().map(|e| e.execution_id.as_str()).collect();
    assert_eq!(ids, ["e4", "e2"], "newest first, only schedule s");
    let second = store.list_executions(filter(first.next_page_token)).await.unwrap();
    let ids: Vec<_> = second.executions.iter().map(|e| e.execution_id.as_str()).collect();
    assert_eq!(ids, ["e0"]);
    assert_eq!(second.next_page_token, None);
}
