//! A batch cancel by query of 10,000 executions on the split topology (PostgreSQL, 2
//! frontends, 2 owners, 2 schedulers) through an owner and a scheduler SIGKILL (issue 28's
//! must-show): [`executions`] executions of `parked` wait for a signal, with [`OTHERS`] more
//! whose ids the query does not match. A batch cancels
//! `workflow = 'parked' AND execution_id STARTS_WITH 'acme-'` at [`RATE`] a second; past a
//! quarter owner-1 is SIGKILLed (owner-2 takes its executions over, their cancels wait in
//! the inbox meanwhile), past a half the scheduler holding the batch's lease is SIGKILLed
//! (the other takes the batch over when the lease runs out, from the cursor).
//!
//! Then: the batch completes with every execution succeeded, each selected execution has
//! exactly one `CancelRequested` and ends `CANCELLED`, each has one item, nothing is
//! pending, and the others were never touched. The count is `ORBIT_TEST_BATCH_EXECUTIONS`
//! (default 10,000); the times of the starts and of the batch are printed.

// Tests read their environment (the count, the database URL) and the wall clock (deadlines
// and the printed times) directly.
#![allow(clippy::disallowed_methods)]

mod common;

use common::batches::{batch_until, describe};
use common::cluster::{psql, Topology, FAST};
use orbit_api::v1 as pb;
use serde_json::json;
use std::time::{Duration, Instant};

const PARKED: &str = r#"
name: parked
version: "1"
signals: { go: null }
steps:
  - { id: wait, await: go }
"#;

/// The executions the query must not select (same workflow, other ids).
const OTHERS: usize = 50;
/// Concurrent starters (bounded: each waits for its start's answer).
const STARTERS: usize = 32;
/// The batch's rate (executions per second), high enough for the most in flight
/// (`orbit_scheduler::BATCH_MAX_IN_FLIGHT`, a tenth of the rate): the replies' round
/// trips, not the rate, set the pace.
const RATE: u32 = 640;
/// The slowest a batch may go on a busy 2-core host (executions per second): bounds the
/// waits, asserts nothing about speed.
const SLOWEST: u64 = 40;
/// The lease of a batch (`orbit_scheduler::BATCH_LEASE_MS`) and the node timeout of
/// [`FAST`]: what a takeover waits for at most.
const TAKEOVER: Duration = Duration::from_secs(10 + 2);

/// How many executions the batch cancels: `ORBIT_TEST_BATCH_EXECUTIONS`, default 10,000.
fn executions() -> usize {
    std::env::var("ORBIT_TEST_BATCH_EXECUTIONS").ok().and_then(|v| v.parse().ok()).unwrap_or(10_000)
}

fn one(topo: &Topology, sql: &str) -> String {
    psql(topo, sql).into_iter().next().unwrap_or_default()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_batch_cancel_by_query_cancels_each_once_through_kills() {
    let n = executions();
    let topo = Topology::start("batchq", 2, 2, 2, FAST);
    let mut c = topo.client(0).await;
    common::register(&mut c, PARKED).await;

    let began = Instant::now();
    let mut starters = tokio::task::JoinSet::new();
    for s in 0..STARTERS {
        // Alternate the two frontends.
        let mut c = topo.client(s % 2).await;
        starters.spawn(async move {
            for i in (s..n + OTHERS).step_by(STARTERS) {
                let id = if i < n { format!("acme-{i:05}") } else { format!("other-{i:05}") };
                common::start(&mut c, "parked", &id, json!({})).await.expect("start");
            }
        });
    }
    while let Some(done) = starters.join_next().await {
        done.expect("starter");
    }
    let starting = began.elapsed();
    eprintln!("started {} executions in {starting:?}", n + OTHERS);

    // Each phase is bounded by the whole batch at the slowest pace plus the takeovers.
    let phase = Duration::from_secs(n as u64 / SLOWEST) + 3 * TAKEOVER;
    let request = pb::StartBatchRequest {
        selector: Some(pb::BatchSelector {
            query: "workflow = 'parked' AND execution_id STARTS_WITH 'acme-'".into(),
            ..Default::default()
        }),
        action: Some(pb::BatchAction {
            action: Some(pb::batch_action::Action::Cancel(pb::BatchCancel {
                reason: "outage".into(),
            })),
        }),
        rate_per_second: RATE,
        reason: "batch by query, through kills".into(),
        ..Default::default()
    };
    let batch_began = Instant::now();
    let started = c.start_batch(request).await.expect("start the batch").into_inner();
    let id = started.batch_id.clone();
    assert_eq!(started.batch.as_ref().map(|b| b.total), Some(n as u64), "the count at start");

    batch_until(&mut c, &id, phase, "past a quarter", |b| b.done >= n as u64 / 4).await;
    topo.signal("owner-1", "KILL");
    batch_until(&mut c, &id, phase, "past a half", |b| b.done >= n as u64 / 2).await;
    let holder = one(&topo, &format!("SELECT lease_holder FROM batches WHERE batch_id = '{id}'"));
    let schedulers: Vec<String> = topo.of("scheduler").iter().map(|n| n.node_id.clone()).collect();
    assert!(schedulers.contains(&holder), "a scheduler holds the batch: {holder:?}");
    topo.signal(&holder, "KILL");
    let at_kill = describe(&mut c, &id).await;

    let b =
        batch_until(&mut c, &id, phase, "ended", |b| b.state() != pb::BatchState::Running).await;
    let batch_time = batch_began.elapsed();
    eprintln!(
        "batch of {n} cancels ended in {batch_time:?} (at the scheduler kill: {} done)",
        at_kill.done
    );
    assert_eq!(b.state(), pb::BatchState::Completed, "{b:?}");
    let total = n as u64;
    assert_eq!(
        (b.total, b.done, b.succeeded, b.failed, b.skipped),
        (total, total, total, 0, 0),
        "{b:?}"
    );

    // One item per execution, each succeeded; one CancelRequested per execution.
    let recorded = one(
        &topo,
        &format!(
            "SELECT COUNT(*) || ',' || COUNT(DISTINCT execution_id) || ',' || \
             COUNT(*) FILTER (WHERE outcome = 'SUCCEEDED') FROM batch_items WHERE batch_id = '{id}'"
        ),
    );
    assert_eq!(recorded, format!("{n},{n},{n}"), "each item once, succeeded");
    let requested = one(
        &topo,
        "SELECT COUNT(*) || ',' || COUNT(DISTINCT execution_id) || ',' || \
         COUNT(*) FILTER (WHERE execution_id NOT LIKE 'acme-%') FROM history_events \
         WHERE event_type = 'CancelRequested'",
    );
    assert_eq!(requested, format!("{n},{n},0"), "one CancelRequested per selected execution");
    // Every selected execution ends CANCELLED (its owner closes it after the request).
    common::poll_until(
        phase,
        || "not every selected execution is CANCELLED".into(),
        async || {
            let cancelled = one(
                &topo,
                "SELECT COUNT(*) FROM executions WHERE execution_id LIKE 'acme-%' \
                 AND status = 'CANCELLED'",
            );
            (cancelled == n.to_string()).then_some(())
        },
    )
    .await;
    let others = one(
        &topo,
        "SELECT COUNT(*) FROM executions WHERE execution_id LIKE 'other-%' AND status = 'RUNNING'",
    );
    assert_eq!(others, OTHERS.to_string(), "the executions the query does not match run on");
}
