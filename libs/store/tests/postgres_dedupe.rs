//! Start dedupe on PostgreSQL (issue 27 item 6), what the conformance suite cannot state:
//! two stores (two processes' connection pools), racing on one key, make one window.
//!
//! Uses a fresh database on `ORBIT_TEST_DATABASE_URL` (see `conformance/pg.rs`).

// Tests read their environment (the database URL) directly.
#![allow(clippy::disallowed_methods)]

#[path = "conformance/pg.rs"]
mod pg;
#[allow(dead_code)]
#[path = "conformance/support.rs"]
mod support;

use orbit_store::dedupe::Keep;
use orbit_store::roles::*;
use orbit_store::{DedupeStart, PgStore};
use pg::PgBackend;
use std::sync::Arc;
use tokio::sync::Barrier;

/// Keys raced, each by both stores at once.
const KEYS: u64 = 20;

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn two_stores_racing_on_a_key_make_one_window() {
    let backend = PgBackend::new("dedupe_race");
    let first = backend.connect().await;
    first.migrate().await.unwrap();
    let stores: [Arc<PgStore>; 2] = [Arc::new(first), Arc::new(backend.connect().await)];
    for keep in [Keep::First, Keep::Last] {
        for k in 0..KEYS {
            let barrier = Arc::new(Barrier::new(2));
            let mut set = tokio::task::JoinSet::new();
            for (i, store) in stores.iter().enumerate() {
                let (store, barrier) = (store.clone(), barrier.clone());
                let start = DedupeStart {
                    workflow: "shop".into(),
                    key: format!("{}-{k}", keep.as_str()),
                    keep,
                    execution_id: format!("{}-{k}-{i}", keep.as_str()),
                    version: "1".into(),
                    definition_hash: "sha256:1".into(),
                    input: serde_json::json!({"from": i}),
                    memo: None,
                    priority: 0,
                    window_ms: 60_000,
                    max_delay_ms: 600_000,
                };
                set.spawn(async move {
                    barrier.wait().await;
                    store.claim_dedupe(&start, 1_000).await.unwrap()
                });
            }
            let claims = set.join_all().await;
            assert_eq!(claims.iter().filter(|c| c.claimed).count(), 1, "{keep:?} key {k}");
            assert_eq!(claims[0].row.execution_id, claims[1].row.execution_id);
        }
    }
}
