//! Poison quarantine inside one owner over SQLite: a panic in one execution's engine work
//! drops only that execution from the pass (the other commits in the same pass), is counted,
//! and parks the execution after `max_failures`; its entries are then skipped while the
//! others keep flowing. The panic comes from the debug-only fault injection.

mod support;

use support::*;
use tokio_util::sync::CancellationToken;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_panic_drops_only_its_execution_and_parks_it_after_max_failures() {
    // Read once per process: this test binary holds this one test.
    std::env::set_var(orbit_owner::FAULT_INJECT_ENV, "panic-on-signal:boom");
    let dir = tempfile::tempdir().unwrap();
    let store = store(&dir, &[TWO_SIGNALS]).await;
    let owner = owner(&store, "owner-1");
    let stop = CancellationToken::new();
    let _loop = run(&owner, &stop);
    owner.start(start("a", "two")).await.unwrap();
    owner.start(start("b", "two")).await.unwrap();

    // Both entries are pending before the pass, so one pass takes them together.
    let bad = signal(&store, "a", "boom").await;
    let good = signal(&store, "b", "one").await;
    owner.wake().await;
    assert_eq!(reply(&store, good).await["ok"], true, "b committed in the pass a panicked in");
    assert!(pending(&store, bad).await, "a's entry is not applied");
    let faults = store.faults(&["a".into()]).await.unwrap();
    assert_eq!((faults[0].failures, faults[0].inbox_seq), (1, Some(bad)));
    assert!(faults[0].reason.contains("fault injection"), "{:?}", faults[0]);
    assert_eq!(owner.quarantine_stats().panics, 1);

    // Each later pass is one more counted attempt; the third failure parks it.
    owner.wake().await;
    assert_eq!(
        store.get_execution("a").await.unwrap().unwrap().status,
        orbit_engine::Status::Running
    );
    owner.wake().await;
    let row = store.get_execution("a").await.unwrap().unwrap();
    assert_eq!(row.status, orbit_engine::Status::Suspended);
    let faults = store.faults(&["a".into()]).await.unwrap();
    assert!(faults[0].parked());
    assert_eq!(faults[0].failures, 3);
    assert!(pending(&store, bad).await, "the offending entry is neither applied nor deleted");
    let stats = owner.quarantine_stats();
    assert_eq!((stats.panics, stats.parked), (3, 1));

    // Parked: its entries are skipped, the others flow.
    let later = signal(&store, "a", "one").await;
    let b2 = signal(&store, "b", "two").await;
    owner.wake().await;
    assert_eq!(reply(&store, b2).await["ok"], true);
    assert_eq!(
        store.get_execution("b").await.unwrap().unwrap().status,
        orbit_engine::Status::Completed
    );
    assert!(pending(&store, later).await);
    assert_eq!(owner.quarantine_stats().panics, 3, "no more attempts while parked");
    stop.cancel();
}
