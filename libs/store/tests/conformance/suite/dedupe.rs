//! Debounce and singleton starts (`dedupe:`): a key's window collapses starts into one
//! execution id (`keep: first` keeps the first start, `keep: last` the latest, its fire time
//! pushed but bounded), due debounces become fires leased until finished, and ended
//! windows are swept.

use crate::support::Backend;
use orbit_store::dedupe::Keep;
use orbit_store::{DedupeStart, Store};
use serde_json::json;
use std::sync::Arc;

const WINDOW: u64 = 1_000;

/// Start `n` of a key: its input is `{"n": n}`, its memo `{"memo": n}`, but start 3 gives
/// no memo (the memo goes with the input, so a kept start without one leaves none).
fn start(key: &str, keep: Keep, id: &str, n: u64) -> DedupeStart {
    DedupeStart {
        workflow: "shop".into(),
        key: key.into(),
        keep,
        execution_id: id.into(),
        version: "1".into(),
        definition_hash: "sha256:1".into(),
        input: json!({"n": n}),
        memo: (n != 3).then(|| json!({"memo": n})),
        priority: 0,
        window_ms: WINDOW,
        max_delay_ms: 3 * WINDOW,
    }
}

/// `keep: first`: the first start opens the window; starts inside it get its id and row
/// (first input kept); the first start after it opens a new window.
pub async fn dedupe_first_collapses_within_the_window(b: &dyn Backend) {
    let store = b.open().await;
    let first = store.claim_dedupe(&start("k", Keep::First, "e1", 1), 10_000).await.unwrap();
    assert!(first.claimed);
    assert_eq!((first.row.execution_id.as_str(), first.row.window_end_ms), ("e1", 11_000));
    for (id, at) in [("e2", 10_001), ("e3", 10_999)] {
        let c = store.claim_dedupe(&start("k", Keep::First, id, 2), at).await.unwrap();
        assert!(!c.claimed, "{id} is inside the window");
        assert_eq!(c.row, first.row, "the first start's row, unchanged");
    }
    let other = store.claim_dedupe(&start("other", Keep::First, "o1", 1), 10_500).await.unwrap();
    assert!(other.claimed, "keys are independent");
    let after = store.claim_dedupe(&start("k", Keep::First, "e4", 4), 11_000).await.unwrap();
    assert!(after.claimed, "the window ended at 11000");
    assert_eq!((after.row.first_at_ms, after.row.input.clone()), (11_000, json!({"n": 4})));
    assert_eq!(after.row.memo, Some(json!({"memo": 4})), "the memo goes with the input");
    assert_eq!(store.pending_start("e1").await.unwrap(), None, "a first start is not pending");
}

/// `keep: last`: each start replaces the input and pushes the fire time to now + window,
/// never past the first start + the longest delay; the id is the first start's.
pub async fn dedupe_last_keeps_the_latest_input_and_bounds_the_delay(b: &dyn Backend) {
    let store = b.open().await;
    let c = store.claim_dedupe(&start("k", Keep::Last, "e1", 1), 10_000).await.unwrap();
    assert!(c.claimed);
    assert_eq!(store.pending_start("e1").await.unwrap(), Some(11_000));
    let c = store.claim_dedupe(&start("k", Keep::Last, "e2", 2), 10_800).await.unwrap();
    assert!(!c.claimed);
    assert_eq!((c.row.execution_id.as_str(), c.row.window_end_ms), ("e1", 11_800));
    assert_eq!(c.row.input, json!({"n": 2}));
    assert_eq!(c.row.memo, Some(json!({"memo": 2})), "the latest start's memo, with its input");
    // Pushed each time, but never past 10000 + 3000.
    let c = store.claim_dedupe(&start("k", Keep::Last, "e3", 3), 12_500).await.unwrap();
    assert_eq!((c.row.window_end_ms, c.row.first_at_ms), (13_000, 10_000));
    assert_eq!(c.row.memo, None, "start 3 gave no memo: none is kept beside its input");
    assert_eq!(store.pending_start("e1").await.unwrap(), Some(13_000));
    assert_eq!(store.next_debounce_at().await.unwrap(), Some(13_000));
    // A `keep: first` start meeting a pending debounce collapses into it, changing nothing.
    let f = store.claim_dedupe(&start("k", Keep::First, "e4", 4), 12_600).await.unwrap();
    assert!(!f.claimed);
    assert_eq!((f.row.keep, f.row.input.clone()), (Keep::Last, json!({"n": 3})));
}

/// Due debounces move to the fires, which are leased: a second claim inside the lease
/// gets nothing, one after it gets the fire again; finishing forgets it. After the move, a
/// start of the key opens a new debounce.
pub async fn due_debounces_are_fired_under_a_lease(b: &dyn Backend) {
    let store = b.open().await;
    store.claim_dedupe(&start("a", Keep::Last, "ea", 1), 10_000).await.unwrap();
    store.claim_dedupe(&start("a", Keep::Last, "x", 2), 10_100).await.unwrap();
    store.claim_dedupe(&start("b", Keep::Last, "eb", 1), 10_700).await.unwrap();
    assert!(store.claim_debounce_fires(11_099, 500, 10).await.unwrap().is_empty(), "not due");
    let fires = store.claim_debounce_fires(11_100, 500, 10).await.unwrap();
    assert_eq!(fires.len(), 1);
    let f = &fires[0];
    assert_eq!((f.execution_id.as_str(), f.workflow.as_str()), ("ea", "shop"));
    assert_eq!((f.input.clone(), f.fire_at_ms, f.version.as_str()), (json!({"n": 2}), 11_100, "1"));
    assert_eq!(f.memo, Some(json!({"memo": 2})), "the fire carries the last start's memo");
    assert_eq!(store.pending_start("ea").await.unwrap(), Some(11_100), "being fired");
    // The key is free again: a new start opens a new debounce with its own id.
    let again = store.claim_dedupe(&start("a", Keep::Last, "ea2", 3), 11_200).await.unwrap();
    assert!(again.claimed);
    assert!(store.claim_debounce_fires(11_599, 500, 10).await.unwrap().is_empty(), "leased");
    let retried = store.claim_debounce_fires(11_600, 500, 10).await.unwrap();
    assert_eq!(retried.len(), 1, "ea's lease ran out; eb is not due");
    assert_eq!(retried[0].execution_id, "ea");
    assert_eq!(retried[0].memo, Some(json!({"memo": 2})), "a retried fire keeps the memo");
    let b_fire = store.claim_debounce_fires(11_700, 500, 10).await.unwrap();
    assert_eq!(b_fire.iter().map(|f| f.execution_id.as_str()).collect::<Vec<_>>(), ["eb"]);
    assert!(store.finish_debounce_fire("ea").await.unwrap());
    assert!(!store.finish_debounce_fire("ea").await.unwrap());
    assert_eq!(store.pending_start("ea").await.unwrap(), None);
    assert_eq!(store.next_debounce_at().await.unwrap(), Some(12_200), "ea2 due, eb's lease");
}

/// The sweep deletes `keep: first` rows whose window ended, in bounded batches, and
/// nothing else.
pub async fn ended_dedupe_windows_are_swept(b: &dyn Backend) {
    let store = b.open().await;
    for (i, key) in ["a", "b", "c"].iter().enumerate() {
        let at = 10_000 + i as u64;
        store.claim_dedupe(&start(key, Keep::First, key, 1), at).await.unwrap();
    }
    store.claim_dedupe(&start("d", Keep::Last, "d", 1), 10_000).await.unwrap();
    assert_eq!(store.sweep_start_dedupe(10_999, 10).await.unwrap(), 0);
    assert_eq!(store.sweep_start_dedupe(11_002, 2).await.unwrap(), 2);
    assert_eq!(store.sweep_start_dedupe(11_002, 2).await.unwrap(), 1);
    assert_eq!(store.sweep_start_dedupe(20_000, 10).await.unwrap(), 0, "pending debounces stay");
    assert_eq!(store.pending_start("d").await.unwrap(), Some(11_000));
}

/// Concurrent claims of one key (through the store's connection pool): one opens the
/// window, every other gets its id.
pub async fn concurrent_dedupe_claims_have_one_winner(b: &dyn Backend) {
    let store: Arc<dyn Store> = b.open().await;
    for keep in [Keep::First, Keep::Last] {
        let mut set = tokio::task::JoinSet::new();
        for i in 0..8u64 {
            let store = store.clone();
            let key = format!("k-{}", keep.as_str());
            set.spawn(async move {
                store.claim_dedupe(&start(&key, keep, &format!("e{i}"), i), 10_000).await.unwrap()
            });
        }
        let claims: Vec<_> = set.join_all().await;
        assert_eq!(claims.iter().filter(|c| c.claimed).count(), 1, "{keep:?}");
        let winner = claims.iter().find(|c| c.claimed).map(|c| c.row.execution_id.clone());
        assert!(claims.iter().all(|c| Some(&c.row.execution_id) == winner.as_ref()));
    }
}
