//! Worker pools and sticky workers in claims (issue 27; migration 0014): a row requiring
//! labels goes only to a worker whose labels hold them, a sticky row only to its worker
//! until its sticky timeout has passed, then to any. Both claims apply the rule.

use crate::support::{flow_task, start_batch, task, Backend};
use orbit_engine::{FairKey, Flow, StickyWorker};
use orbit_store::ClaimFilter;
use std::collections::BTreeMap;

fn labels(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
    pairs.iter().map(|(k, v)| ((*k).to_string(), (*v).to_string())).collect()
}

fn worker(pairs: &[(&str, &str)]) -> ClaimFilter {
    ClaimFilter::names(&["t".into()]).with_labels(labels(pairs))
}

fn needs(pairs: &[(&str, &str)]) -> Flow {
    Flow { labels: labels(pairs), ..Flow::default() }
}

fn sticky(worker: &str, timeout_ms: u64) -> Flow {
    Flow { sticky: Some(StickyWorker { worker: worker.into(), timeout_ms }), ..Flow::default() }
}

fn steps(rows: &[orbit_store::TaskRow]) -> Vec<&str> {
    rows.iter().map(|r| r.unit_key.as_str()).collect()
}

pub async fn labelled_rows_go_only_to_workers_with_the_labels(b: &dyn Backend) {
    let store = b.open().await;
    let mut batch = start_batch("e1", "node-a");
    batch.tasks_to_insert = vec![
        flow_task("gpu", "t", needs(&[("pool", "gpu")])),
        flow_task("gpu-eu", "t", needs(&[("pool", "gpu"), ("region", "eu")])),
        task("any", "t"),
    ];
    store.commit(batch).await.unwrap();

    // No labels, or other values: only the unlabelled row.
    let plain = ClaimFilter::names(&["t".into()]);
    assert_eq!(steps(&store.claim_matching(&plain, 10, "fe", "s0", "w0").await.unwrap()), ["any"]);
    let cpu = worker(&[("pool", "cpu"), ("region", "eu")]);
    assert!(store.claim_matching(&cpu, 10, "fe", "s1", "w1").await.unwrap().is_empty());
    // A worker whose labels hold `pool: gpu` but not the region: the first row only.
    let gpu_us = worker(&[("pool", "gpu"), ("region", "us"), ("zone", "a")]);
    let got = store.claim_matching(&gpu_us, 10, "fe", "s2", "w2").await.unwrap();
    assert_eq!(steps(&got), ["gpu"]);
    assert_eq!(got[0].flow.as_ref().map(|f| f.labels.clone()), Some(labels(&[("pool", "gpu")])));
    // A superset of the required pairs takes the last.
    let gpu_eu = worker(&[("pool", "gpu"), ("region", "eu"), ("zone", "b")]);
    let got = store.claim_matching(&gpu_eu, 10, "fe", "s3", "w3").await.unwrap();
    assert_eq!(steps(&got), ["gpu-eu"]);

    // The flow claim applies the same rule to limited rows.
    let fair = |pairs: &[(&str, &str)]| Flow {
        fairness: Some(FairKey { key: "g/a".into(), weight: 1 }),
        ..needs(pairs)
    };
    let mut batch = start_batch("e2", "node-a");
    batch.tasks_to_insert = vec![flow_task("fair-gpu", "t", fair(&[("pool", "gpu")]))];
    store.commit(batch).await.unwrap();
    let got = store.claim_limited(&cpu, 10, "fe", "s1", "w1").await.unwrap();
    assert!(got.rows.is_empty() && !got.blocked, "not for it, and not held by a limit");
    let got = store.claim_limited(&gpu_us, 10, "fe", "s2", "w2").await.unwrap();
    assert_eq!(steps(&got.rows), ["fair-gpu"]);
}

pub async fn sticky_rows_wait_for_their_worker_until_the_timeout(b: &dyn Backend) {
    let store = b.open().await;
    let mut batch = start_batch("e1", "node-a");
    batch.tasks_to_insert = vec![
        flow_task("held", "t", sticky("w1", 3_600_000)),
        // A timeout of 0: past as soon as it is queued.
        flow_task("free", "t", sticky("w1", 0)),
    ];
    store.commit(batch).await.unwrap();

    let filter = ClaimFilter::names(&["t".into()]);
    // Another worker: only the row whose timeout has passed.
    let got = store.claim_matching(&filter, 10, "fe", "s2", "w2").await.unwrap();
    assert_eq!(steps(&got), ["free"]);
    assert!(store.claim_matching(&filter, 10, "fe", "s2", "w2").await.unwrap().is_empty());
    // Its own worker takes the held one.
    let got = store.claim_matching(&filter, 10, "fe", "s1", "w1").await.unwrap();
    assert_eq!(steps(&got), ["held"]);
    assert_eq!(got[0].worker_id.as_deref(), Some("w1"));

    // The flow claim too.
    let limited = |timeout_ms| Flow {
        fairness: Some(FairKey { key: "g/a".into(), weight: 1 }),
        ..sticky("w1", timeout_ms)
    };
    let mut batch = start_batch("e2", "node-a");
    batch.tasks_to_insert =
        vec![flow_task("l-held", "t", limited(3_600_000)), flow_task("l-free", "t", limited(0))];
    store.commit(batch).await.unwrap();
    let got = store.claim_limited(&filter, 10, "fe", "s2", "w2").await.unwrap();
    assert_eq!(steps(&got.rows), ["l-free"]);
    let got = store.claim_limited(&filter, 10, "fe", "s1", "w1").await.unwrap();
    assert_eq!(steps(&got.rows), ["l-held"]);
}
