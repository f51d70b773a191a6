//! A batch survives crashes (the split on PostgreSQL: 1 frontend, 2 owners, 2 schedulers):
//! 1,000 executions wait for a signal; a batch migrates them to v2 at 100 a second. When
//! its counters pass 250, owner-1 is SIGKILLed (owner-2 takes its executions over; their
//! commands wait in the inbox meanwhile); past 500, the scheduler holding the batch's lease
//! is SIGKILLed (the other one takes the batch over when the lease runs out). The batch
//! completes with 1,000 succeeded items, each execution has exactly one
//! `DefinitionMigrated`, no item is recorded twice or left pending, and the scheduler that
//! took over started from the cursor (its run began with the progress already recorded).

mod common;

use common::batches::{batch_until, migrate_request, start_batch};
use common::cluster::{psql, Topology, FAST};
use orbit_api::v1 as pb;
use serde_json::json;
use std::time::Duration;

const V1: &str = r#"
name: parked
version: "1"
signals: { go: null }
steps:
  - { id: wait, await: go }
"#;

/// The same steps with an output: a safe migration that records one event.
const V2: &str = r#"
name: parked
version: "2"
signals: { go: null }
steps:
  - { id: wait, await: go }
output: "${{ steps.wait.output }}"
"#;

const EXECUTIONS: usize = 1000;
const STARTERS: usize = 16;
/// Bounds each wait: the lease (10 s) and the node timeout (2 s) with room for a busy host.
const WAIT: Duration = Duration::from_secs(90);

/// `text` without its ANSI colour escapes (`ESC [ ... m`).
fn plain(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut chars = text.chars();
    while let Some(ch) = chars.next() {
        if ch == '\u{1b}' {
            for next in chars.by_ref() {
                if next == 'm' {
                    break;
                }
            }
        } else {
            out.push(ch);
        }
    }
    out
}

fn one(topo: &Topology, sql: &str) -> String {
    psql(topo, sql).into_iter().next().unwrap_or_default()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_batch_completes_once_through_owner_and_scheduler_kills() {
    let topo = Topology::start("batches", 1, 2, 2, FAST);
    let mut c = topo.client(0).await;
    common::register(&mut c, V1).await;
    let mut starters = tokio::task::JoinSet::new();
    for s in 0..STARTERS {
        let mut c = c.clone();
        starters.spawn(async move {
            for i in (s..EXECUTIONS).step_by(STARTERS) {
                let id = format!("parked-{i:04}");
                common::start(&mut c, "parked", &id, json!({})).await.expect("start");
            }
        });
    }
    while let Some(done) = starters.join_next().await {
        done.expect("starter");
    }
    common::register(&mut c, V2).await;

    let started = start_batch(&mut c, migrate_request("parked", "1", "2", 100)).await;
    let id = started.batch_id.clone();
    assert_eq!(started.batch.as_ref().map(|b| b.total), Some(EXECUTIONS as u64));

    batch_until(&mut c, &id, WAIT, "past 250", |b| b.done >= 250).await;
    topo.signal("owner-1", "KILL");
    batch_until(&mut c, &id, WAIT, "past 500", |b| b.done >= 500).await;
    let holder = one(&topo, &format!("SELECT lease_holder FROM batches WHERE batch_id = '{id}'"));
    let schedulers: Vec<String> = topo.of("scheduler").iter().map(|n| n.node_id.clone()).collect();
    assert!(schedulers.contains(&holder), "a scheduler holds the batch: {holder:?}");
    topo.signal(&holder, "KILL");
    let at_kill = common::batches::describe(&mut c, &id).await;
    let survivor = schedulers.iter().find(|s| **s != holder).expect("another scheduler").clone();

    let b = batch_until(&mut c, &id, WAIT, "ended", |b| b.state() != pb::BatchState::Running).await;
    assert_eq!(b.state(), pb::BatchState::Completed, "{b:?}");
    let n = EXECUTIONS as u64;
    assert_eq!((b.total, b.done, b.succeeded, b.failed, b.skipped), (n, n, n, 0, 0), "{b:?}");

    // Exactly one migration per execution, one item per execution, nothing pending.
    let migrated = one(
        &topo,
        "SELECT COUNT(*) || ',' || COUNT(DISTINCT execution_id) FROM history_events \
         WHERE event_type = 'DefinitionMigrated'",
    );
    assert_eq!(migrated, format!("{n},{n}"), "one DefinitionMigrated per execution");
    let recorded = one(
        &topo,
        &format!(
            "SELECT COUNT(*) || ',' || COUNT(DISTINCT execution_id) || ',' || \
             COUNT(*) FILTER (WHERE outcome = 'SUCCEEDED') FROM batch_items WHERE batch_id = '{id}'"
        ),
    );
    assert_eq!(recorded, format!("{n},{n},{n}"), "each item once, succeeded");
    let versions = one(&topo, "SELECT string_agg(DISTINCT version, ',') FROM executions");
    assert_eq!(versions, "2", "every execution runs v2");
    // Each item's seq is its execution's DefinitionMigrated.
    let mismatched = one(
        &topo,
        &format!(
            "SELECT COUNT(*) FROM batch_items i LEFT JOIN history_events h \
             ON h.execution_id = i.execution_id AND h.seq = i.seq \
             AND h.event_type = 'DefinitionMigrated' WHERE i.batch_id = '{id}' AND h.seq IS NULL"
        ),
    );
    assert_eq!(mismatched, "0", "every item names its execution's migration");

    // The survivor took the batch over and went on from what was recorded.
    let log = plain(&topo.log(&survivor));
    let resumed = log
        .lines()
        .find(|l| l.contains("running a batch") && l.contains(&id))
        .unwrap_or_else(|| panic!("{survivor} never ran the batch:\n{log}"));
    let done_at_takeover: u64 = resumed
        .split("done=")
        .nth(1)
        .and_then(|rest| rest.split(|ch: char| !ch.is_ascii_digit()).next())
        .and_then(|d| d.parse().ok())
        .unwrap_or_else(|| panic!("no progress in {resumed:?}"));
    assert!(
        done_at_takeover >= at_kill.done.min(500) && done_at_takeover < n,
        "{survivor} resumed from the cursor ({done_at_takeover} done then, {} at the kill)",
        at_kill.done
    );
    assert!(resumed.contains("cursor=\"parked-"), "it started after a cursor: {resumed}");
}
