//! Batches (`StartBatch`, issue 26 item 5) through the real `orbit dev` binary: 60
//! executions of v1 (`a → b → c`) wait in step `b` (no worker serves it yet), then
//!
//! * a dry run to v3 (unsafe for them) answers every execution UNSAFE and creates nothing;
//! * a batch to v3 records 60 FAILED items with `MIGRATION_UNSAFE` and writes no event;
//! * a batch to v2 at one execution per second is cancelled after its first item: it ends
//!   CANCELLED, acted on fewer than 60, and every execution it recorded migrated is on v2;
//! * `orbit batch start ... --wait` (the CLI) migrates the rest to v2, a retry with its
//!   request id answers the same batch; each execution has exactly one
//!   `DefinitionMigrated`, and once a worker of `b`, `c`, `d` arrives every one completes
//!   through v2's path.

// Tests read their environment (ORBIT_PYTHON, the database URL) and the wall clock
// (unique names, deadlines of real processes) directly.
#![allow(clippy::disallowed_methods)]

mod common;

use common::batches::{batch_until, describe, items, migrate_request, start_batch};
use common::evolving::{cli, count, v1, v2, v3, version_of, worker};
use common::{history, history_until, register, result, start, Server, TempDir};
use orbit_api::v1 as pb;
use orbit_worker::Worker;
use serde_json::json;
use std::time::Duration;
use tokio_util::sync::CancellationToken;

const EXECUTIONS: usize = 60;
const WAIT: Duration = Duration::from_secs(120);

fn ended(b: &pb::Batch) -> bool {
    b.state() != pb::BatchState::Running
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn batches_migrate_many_executions_in_orbit_dev() {
    let dir = TempDir::new("batches-dev");
    let server = Server::start(&dir.0.join("orbit.db"), &[]).await;
    let mut c = server.client().await;
    let address = server.address();
    register(&mut c, &v1("bulk")).await;
    let ids: Vec<String> = (0..EXECUTIONS).map(|i| format!("bulk-{i:03}")).collect();
    for (i, id) in ids.iter().enumerate() {
        start(&mut c, "bulk", id, json!({"n": i})).await.expect("start");
    }
    let stop = CancellationToken::new();
    worker(Worker::builder(address.clone()), "only-a", &["work.a"], &stop);
    for id in &ids {
        history_until(&mut c, id, WAIT, |h| {
            h.iter().any(|e| e.event_type == "StepSucceeded" && e.step == "a")
        })
        .await;
    }
    register(&mut c, &v2("bulk")).await;
    register(&mut c, &v3("bulk")).await;
    let before: Vec<usize> = {
        let mut lens = Vec::new();
        for id in &ids {
            lens.push(history(&mut c, id).await.len());
        }
        lens
    };

    // A dry run to v3: every execution UNSAFE, named; nothing is created or written.
    let mut dry = migrate_request("bulk", "1", "3", 0);
    dry.dry_run = true;
    let answer = start_batch(&mut c, dry).await;
    assert_eq!((answer.batch_id.as_str(), answer.dry_run_total), ("", EXECUTIONS as u64));
    assert_eq!(answer.dry_run_items.len(), EXECUTIONS);
    for (item, id) in answer.dry_run_items.iter().zip(&ids) {
        assert_eq!(&item.execution_id, id, "by execution id");
        assert!(!item.safe && item.code.is_empty(), "{item:?}");
        let unsafe_steps: Vec<_> =
            item.changes.iter().filter(|ch| !ch.safe).map(|ch| ch.step.as_str()).collect();
        assert_eq!(unsafe_steps, ["a", "b"], "{item:?}");
    }
    let listed = c.list_batches(pb::ListBatchesRequest::default()).await.expect("list");
    assert!(listed.into_inner().batches.is_empty(), "a dry run creates no batch");

    // A batch to v3: every item FAILED with MIGRATION_UNSAFE, no event written.
    let refused = start_batch(&mut c, migrate_request("bulk", "1", "3", 1000)).await;
    assert!(refused.created);
    let refused_id = refused.batch_id.clone();
    let b = batch_until(&mut c, &refused_id, WAIT, "ended", ended).await;
    assert_eq!(b.state(), pb::BatchState::Completed, "{b:?}");
    assert_eq!((b.total, b.done, b.failed, b.succeeded, b.skipped), (60, 60, 60, 0, 0), "{b:?}");
    let failed = items(&mut c, &refused_id, true).await;
    assert_eq!(failed.len(), EXECUTIONS);
    for (item, id) in failed.iter().zip(&ids) {
        assert_eq!((&item.execution_id, item.outcome()), (id, pb::BatchItemOutcome::Failed));
        assert_eq!((item.code.as_str(), item.seq), ("MIGRATION_UNSAFE", 0), "{item:?}");
        assert!(item.message.contains("renamed_from"), "the refusal says why: {item:?}");
    }
    for (id, len) in ids.iter().zip(&before) {
        assert_eq!(history(&mut c, id).await.len(), *len, "{id}: a refused batch writes nothing");
    }
    let (exit, out, stderr) =
        cli(server.port, "batch", &["describe", &refused_id, "--items", "--failed"]);
    assert_eq!(exit, 0, "{stderr}");
    assert_eq!(out["state"], "COMPLETED", "{out}");
    assert_eq!(out["items"].as_array().map(Vec::len), Some(EXECUTIONS), "{out}");
    assert_eq!(out["items"][0]["code"], "MIGRATION_UNSAFE", "{out}");

    // A batch to v2 at one execution a second, cancelled after its first item: it sends
    // nothing more, and what it recorded is what happened.
    let slow = start_batch(&mut c, migrate_request("bulk", "1", "2", 1)).await;
    let slow_id = slow.batch_id.clone();
    batch_until(&mut c, &slow_id, WAIT, "started", |b| b.done >= 1).await;
    let cancel = pb::CancelBatchRequest { batch_id: slow_id.clone(), reason: "enough".into() };
    let cancelled = c.cancel_batch(cancel).await.expect("cancel").into_inner();
    assert!(cancelled.cancelled);
    let again = pb::CancelBatchRequest { batch_id: slow_id.clone(), reason: "again".into() };
    assert!(!c.cancel_batch(again).await.expect("cancel again").into_inner().cancelled);
    // The runner records what it sent before the cancel, then leaves nothing pending.
    let deadline = std::time::Instant::now() + WAIT;
    let slow_items = loop {
        let all = items(&mut c, &slow_id, false).await;
        if all.iter().all(|i| i.outcome() != pb::BatchItemOutcome::Pending) {
            break all;
        }
        assert!(std::time::Instant::now() < deadline, "items stay pending: {all:?}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    let b = describe(&mut c, &slow_id).await;
    assert_eq!((b.state(), b.reason.as_str()), (pb::BatchState::Cancelled, "enough"), "{b:?}");
    assert!(b.done >= 1 && b.done < 10, "a cancel stops the batch: {b:?}");
    assert_eq!(slow_items.len() as u64, b.done, "{slow_items:?}");
    let mut on_v2 = 0;
    for id in &ids {
        if version_of(&mut c, id).await == "2" {
            on_v2 += 1;
        }
    }
    assert_eq!(on_v2, b.succeeded, "what the batch recorded migrated is exactly what migrated");
    let unknown = pb::DescribeBatchRequest { batch_id: "nope".into() };
    let missing = c.describe_batch(unknown).await.expect_err("no such batch");
    assert_eq!(common::code(&missing), "BATCH_NOT_FOUND");

    // The CLI migrates the rest (version 1 only) and follows it to the end.
    let args = [
        "start",
        "--workflow",
        "bulk",
        "--version",
        "1",
        "--migrate-to",
        "2",
        "--rate",
        "200",
        "--request-id",
        "rest",
        "--wait",
    ];
    let (exit, out, stderr) = cli(server.port, "batch", &args);
    assert_eq!(exit, 0, "{stderr}");
    assert_eq!((out["state"].as_str(), out["created"].as_bool()), (Some("COMPLETED"), Some(true)));
    let rest = EXECUTIONS as u64 - on_v2;
    assert_eq!(
        (out["done"].as_u64(), out["succeeded"].as_u64()),
        (Some(rest), Some(rest)),
        "{out}"
    );
    assert!(stderr.contains(&format!("COMPLETED {rest}/{rest} done")), "progress: {stderr}");
    let (exit, retry, _) = cli(server.port, "batch", &args);
    assert_eq!((exit, &retry["batch_id"], &retry["created"]), (0, &out["batch_id"], &json!(false)));
    let (_, listed, _) = cli(server.port, "batch", &["list"]);
    assert_eq!(listed["batches"].as_array().map(Vec::len), Some(3), "{listed}");

    // Every execution migrated once and completes through v2's path.
    worker(Worker::builder(address.clone()), "the-rest", &["work.b", "work.c", "work.d"], &stop);
    for (i, id) in ids.iter().enumerate() {
        let (status, output) = result(&mut c, id, WAIT).await;
        assert_eq!(status, pb::ExecutionStatus::Completed, "{id}: {output}");
        assert_eq!(output, json!({"from": {"d": i}, "v": 2}), "{id}");
        let h = history(&mut c, id).await;
        assert_eq!(count(&h, "DefinitionMigrated"), 1, "{id}");
    }
    stop.cancel();
}

/// `orbit dev` SIGKILLed in the middle of a batch of 300 migrations and started again on the
/// same database: the batch resumes from its cursor (its lease ends or is taken back) and
/// completes; every execution has exactly one `DefinitionMigrated` and one SUCCEEDED item.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_batch_survives_a_sigkill_of_orbit_dev() {
    const PARKED_V1: &str =
        "name: parked\nversion: \"1\"\nsignals: { go: null }\nsteps:\n  - { id: wait, await: go }\n";
    const PARKED_V2: &str = "name: parked\nversion: \"2\"\nsignals: { go: null }\nsteps:\n  \
                             - { id: wait, await: go }\noutput: \"${{ steps.wait.output }}\"\n";
    const N: usize = 300;
    let dir = TempDir::new("batches-kill");
    let db = dir.0.join("orbit.db");
    let mut server = Server::start(&db, &[]).await;
    let port = server.port;
    let mut c = server.client().await;
    register(&mut c, PARKED_V1).await;
    for i in 0..N {
        start(&mut c, "parked", &format!("parked-{i:03}"), json!({})).await.expect("start");
    }
    register(&mut c, PARKED_V2).await;
    let started = start_batch(&mut c, migrate_request("parked", "1", "2", 100)).await;
    let id = started.batch_id.clone();
    let before = batch_until(&mut c, &id, WAIT, "past 100", |b| b.done >= 100).await;
    assert!(before.done < N as u64, "killed in the middle: {before:?}");
    server.kill9();

    let server = Server::start_on(&db, port, &[]).await;
    let mut c = server.client().await;
    let b = batch_until(&mut c, &id, WAIT, "ended", ended).await;
    let n = N as u64;
    assert_eq!(b.state(), pb::BatchState::Completed, "{b:?}");
    assert_eq!((b.done, b.succeeded, b.failed, b.skipped), (n, n, 0, 0), "{b:?}");
    let recorded = items(&mut c, &id, false).await;
    assert_eq!(recorded.len(), N, "one item per execution");
    for i in 0..N {
        let h = history(&mut c, &format!("parked-{i:03}")).await;
        assert_eq!(count(&h, "DefinitionMigrated"), 1, "parked-{i:03} migrated once");
    }
}
