//! The coordination tables: task claims and results, timers and the inbox.

use crate::support::{applied, cancel, complete, decoded, signal};
use crate::support::{ev, start, start_batch, task, timer, Backend};
use orbit_engine::Event;
use orbit_store::{CommitBatch, InboxDone, InboxStatus, Store, StoreError, TaskState};
use orbit_store::{InboxKind, InboxMessage};
use serde_json::json;
use std::collections::HashSet;
use std::sync::Arc;

pub async fn concurrent_claimers_never_share_a_row(b: &dyn Backend) {
    let store = b.open().await;
    let mut batch = start_batch("e1", "node-a");
    batch.tasks_to_insert = (0..50).map(|i| task(&format!("u{i}"), "work")).collect();
    // Inserting the same offers again is a no-op.
    let again = CommitBatch {
        execution_id: "e1".into(),
        run: 1,
        expected_epoch: Some(1),
        tasks_to_insert: batch.tasks_to_insert.clone(),
        ..CommitBatch::default()
    };
    assert_eq!(store.commit(batch).await.unwrap().task_ids.len(), 50);
    assert!(store.commit(again).await.unwrap().task_ids.is_empty());

    let claimer = |name: &'static str, store: Arc<dyn Store>| {
        tokio::spawn(async move {
            let mut got = Vec::new();
            loop {
                let rows = store.claim_tasks(&["work".into()], 3, name, name, "w").await.unwrap();
                if rows.is_empty() {
                    return got;
                }
                for r in rows {
                    assert_eq!(
                        (r.state, r.claimed_by.as_deref()),
                        (TaskState::Claimed, Some(name))
                    );
                    got.push((r.id, r.token.unwrap()));
                }
            }
        })
    };
    let (a, b2) = (claimer("fe-a", Arc::clone(&store)), claimer("fe-b", Arc::clone(&store)));
    let (a, b2) = (a.await.unwrap(), b2.await.unwrap());
    let ids: HashSet<u64> = a.iter().chain(&b2).map(|(id, _)| *id).collect();
    let tokens: HashSet<&String> = a.iter().chain(&b2).map(|(_, t)| t).collect();
    assert_eq!(a.len() + b2.len(), 50, "every row claimed exactly once");
    assert_eq!((ids.len(), tokens.len()), (50, 50));
    // Each claim told the owner, in the same transaction.
    let inbox = store.pending_inbox(Some("e1"), 100).await.unwrap();
    assert_eq!(inbox.iter().filter(|e| e.kind == InboxKind::Dispatched.as_str()).count(), 50);
    let claimed: HashSet<&str> = a.iter().chain(&b2).map(|(_, t)| t.as_str()).collect();
    for message in decoded(&inbox) {
        let InboxMessage::Dispatched(d) = message else { panic!("{message:?}") };
        assert!(claimed.contains(d.token.as_str()) && ids.contains(&d.task_id), "{d:?}");
        assert!(d.claimed_by.starts_with("fe-"), "{d:?}");
    }
}

pub async fn completing_a_task_records_the_result_once(b: &dyn Backend) {
    let store = b.open().await;
    let mut batch = start_batch("e1", "node-a");
    batch.tasks_to_insert = vec![task("charge", "payments.charge")];
    store.commit(batch).await.unwrap();
    let claimed = store.claim_tasks(&["payments.charge".into()], 1, "fe", "s1", "w").await.unwrap();
    let token = claimed[0].token.clone().unwrap();
    let report = complete(json!(42));
    let first = store.complete_task_row(&token, "w", Some(report.clone())).await.unwrap().unwrap();
    assert!(first.newly_done);
    assert_eq!((first.task.state, first.task.execution_id.as_str()), (TaskState::Done, "e1"));
    let seq = first.inbox_seq.unwrap();
    let inbox = store.pending_inbox(Some("e1"), 10).await.unwrap();
    let entry = inbox.iter().find(|e| e.seq == seq).unwrap();
    assert_eq!(
        (entry.kind.as_str(), entry.token.as_deref()),
        (InboxKind::Complete.as_str(), Some(token.as_str()))
    );
    assert_eq!(entry.payload, json!({"output": 42}));
    // A duplicate result is still recorded for the owner (who ignores it), never re-done.
    let second = store.complete_task_row(&token, "w", Some(report)).await.unwrap().unwrap();
    assert!(!second.newly_done);
    assert!(store.complete_task_row("no-such-token", "w", None).await.unwrap().is_none());
}

/// Tokens are 128 random bits, bound to the claiming worker: another worker's result is
/// refused (nothing written), the claiming worker's is recorded.
pub async fn only_the_claiming_worker_completes_a_task(b: &dyn Backend) {
    let store = b.open().await;
    let mut batch = start_batch("e1", "node-a");
    batch.tasks_to_insert = vec![task("charge", "payments.charge")];
    store.commit(batch).await.unwrap();
    let claimed =
        store.claim_tasks(&["payments.charge".into()], 5, "fe", "s1", "worker-a").await.unwrap();
    let token = claimed[0].token.clone().unwrap();
    assert_eq!(token.len(), 32, "{token}");
    assert!(token.chars().all(|c| c.is_ascii_hexdigit()), "{token}");
    assert_eq!(claimed[0].worker_id.as_deref(), Some("worker-a"));
    let dispatched = store.pending_inbox(Some("e1"), 10).await.unwrap();
    assert_eq!(dispatched.len(), 1);
    assert_eq!(dispatched[0].payload["worker_id"], json!("worker-a"));

    let report = complete(json!(1));
    let forged =
        store.complete_task_row(&token, "worker-b", Some(report.clone())).await.unwrap().unwrap();
    assert!(!forged.newly_done);
    assert_eq!(forged.inbox_seq, None);
    assert_eq!(forged.task.state, TaskState::Claimed, "the row is untouched");
    assert_eq!(forged.task.worker_id.as_deref(), Some("worker-a"));
    assert_eq!(store.pending_inbox(Some("e1"), 10).await.unwrap().len(), 1, "nothing written");

    let real = store.complete_task_row(&token, "worker-a", Some(report)).await.unwrap().unwrap();
    assert!(real.newly_done);
    assert!(real.inbox_seq.is_some());
}

pub async fn timers_come_due_in_order(b: &dyn Backend) {
    let store = b.open().await;
    assert_eq!(store.next_timer_at().await.unwrap(), None);
    for (id, timers) in [("e1", vec![("a", 300), ("b", 100)]), ("e2", vec![("a", 200), ("z", 900)])]
    {
        let mut batch = start_batch(id, "node-a");
        batch.timers_to_upsert = timers.into_iter().map(|(k, at)| timer(k, at)).collect();
        store.commit(batch).await.unwrap();
    }
    let due = store.due_timers(300, 10).await.unwrap();
    let order: Vec<_> = due.iter().map(|t| (t.execution_id.as_str(), t.key.as_str())).collect();
    assert_eq!(order, [("e1", "b"), ("e2", "a"), ("e1", "a")]);
    assert_eq!(due[0].payload, json!({"key": "b"}));
    assert_eq!(store.due_timers(300, 2).await.unwrap().len(), 2);
    assert!(store.due_timers(99, 10).await.unwrap().is_empty());
    assert_eq!(store.next_timer_at().await.unwrap(), Some(100));

    // Upserting a key moves the timer; deleting removes it.
    let batch = CommitBatch {
        execution_id: "e1".into(),
        run: 1,
        timers_to_upsert: vec![timer("b", 1_000)],
        timers_to_delete: vec!["a".into()],
        ..CommitBatch::default()
    };
    store.commit(batch).await.unwrap();
    let keys: Vec<_> = store
        .due_timers(u64::MAX >> 2, 10)
        .await
        .unwrap()
        .into_iter()
        .map(|t| (t.execution_id, t.key, t.fire_at_ms))
        .collect();
    assert_eq!(
        keys,
        [
            ("e2".into(), "a".into(), 200),
            ("e2".into(), "z".into(), 900),
            ("e1".into(), "b".into(), 1_000)
        ]
    );
}

pub async fn inbox_replies_reach_waiting_callers(b: &dyn Backend) {
    let store = b.open().await;
    start(store.as_ref(), "e1").await;
    let s1 = store.enqueue_inbox("e1", &signal("go")).await.unwrap();
    let s2 = store.enqueue_inbox("e2", &cancel("x")).await.unwrap();
    let s3 = store.enqueue_inbox("e1", &signal("go")).await.unwrap();
    assert!(s1 < s2 && s2 < s3);
    let all: Vec<u64> =
        store.pending_inbox(None, 10).await.unwrap().iter().map(|e| e.seq).collect();
    assert_eq!(all, [s1, s2, s3]);
    let mine: Vec<u64> =
        store.pending_inbox(Some("e1"), 10).await.unwrap().iter().map(|e| e.seq).collect();
    assert_eq!(mine, [s1, s3]);
    assert_eq!(store.pending_inbox(None, 1).await.unwrap().len(), 1);
    assert_eq!(store.inbox_result(s1).await.unwrap(), InboxStatus::Pending);

    let batch = CommitBatch {
        execution_id: "e1".into(),
        run: 1,
        expected_epoch: Some(1),
        events: vec![ev(3, Event::SignalReceived { name: "go".into(), payload: json!({}) })],
        tasks_done: Vec::new(),
        inbox_done: vec![
            InboxDone { seq: s1, result: None },
            InboxDone { seq: s3, result: Some(applied(1)) },
        ],
        ..CommitBatch::default()
    };
    store.commit(batch).await.unwrap();
    assert_eq!(store.inbox_result(s1).await.unwrap(), InboxStatus::Done(None));
    assert_eq!(store.inbox_result(s3).await.unwrap(), InboxStatus::Done(Some(applied(1))));
    assert!(store.pending_inbox(Some("e1"), 10).await.unwrap().is_empty());
    assert!(matches!(store.inbox_result(s3 + 100).await, Err(StoreError::NotFound(_))));
}

pub async fn due_timers_fire_into_the_inbox_once(b: &dyn Backend) {
    let store = b.open().await;
    let mut batch = start_batch("e1", "node-a");
    batch.timers_to_upsert = vec![timer("late", 500), timer("early", 100), timer("later", 900)];
    store.commit(batch).await.unwrap();
    let fired = store.fire_due_timers(600, 10).await.unwrap();
    let keys: Vec<_> = fired.iter().map(|(t, _)| t.key.as_str()).collect();
    assert_eq!(keys, ["early", "late"]);
    let inbox = store.pending_inbox(Some("e1"), 10).await.unwrap();
    assert_eq!(inbox.len(), 2);
    assert_eq!(inbox[0].seq, fired[0].1);
    assert_eq!(inbox[0].kind, InboxKind::Timer.as_str());
    assert_eq!(inbox[0].payload["key"], json!("early"));
    assert_eq!(inbox[0].payload["payload"], json!({"key": "early"}));
    let InboxMessage::Timer(t) = &decoded(&inbox)[0] else { panic!("a timer entry") };
    assert_eq!((t.key.as_str(), t.fire_at, &t.payload), ("early", 100, &json!({"key": "early"})));
    assert!(store.fire_due_timers(600, 10).await.unwrap().is_empty(), "a timer fires once");
    assert_eq!(store.next_timer_at().await.unwrap(), Some(900));
}

pub async fn queue_backlog_counts_queued_rows_per_task(b: &dyn Backend) {
    let store = b.open().await;
    assert!(store.queue_backlog().await.unwrap().is_empty());
    let mut batch = start_batch("e1", "node-a");
    batch.tasks_to_insert =
        vec![task("a1", "alpha"), task("a2", "alpha"), task("a3", "alpha"), task("b1", "beta")];
    store.commit(batch).await.unwrap();
    let claimed = store.claim_tasks(&["alpha".into()], 1, "fe", "s1", "w").await.unwrap();
    assert_eq!(claimed.len(), 1);

    let backlog = store.queue_backlog().await.unwrap();
    let summary: Vec<_> =
        backlog.iter().map(|q| (q.task.as_str(), q.task_version.as_str(), q.queued)).collect();
    assert_eq!(summary, [("alpha", "1", 2), ("beta", "1", 1)], "claimed rows are not backlog");
    assert!(backlog.iter().all(|q| q.oldest_created_at_ms > 0));

    store.claim_tasks(&["alpha".into(), "beta".into()], 10, "fe", "s1", "w").await.unwrap();
    assert!(store.queue_backlog().await.unwrap().is_empty());
}

/// A signal or cancel with a request id is written once per execution and kind: a retry
/// gets the first entry's seq (and so its reply), even after it was applied, and the
/// done-row sweep keeps such entries until their execution is deleted.
pub async fn request_ids_make_inbox_commands_idempotent(b: &dyn Backend) {
    let store = b.open().await;
    start(store.as_ref(), "e1").await;
    start(store.as_ref(), "e2").await;
    let with_id = |message: InboxMessage, id: &str| match message {
        InboxMessage::Signal(mut s) => {
            s.request_id = Some(id.into());
            InboxMessage::Signal(s)
        }
        InboxMessage::Cancel(mut c) => {
            c.request_id = Some(id.into());
            InboxMessage::Cancel(c)
        }
        other => other,
    };
    let first = store.enqueue_inbox("e1", &with_id(signal("go"), "r-1")).await.unwrap();
    let retry = store.enqueue_inbox("e1", &with_id(signal("go"), "r-1")).await.unwrap();
    assert_eq!(retry, first, "a retry answers the first entry");
    let pending = store.pending_inbox(Some("e1"), 10).await.unwrap();
    assert_eq!(pending.len(), 1, "the retry wrote nothing: {pending:?}");
    // Another request id, another kind, another execution, or none: each a new entry.
    let other_id = store.enqueue_inbox("e1", &with_id(signal("go"), "r-2")).await.unwrap();
    let other_kind = store.enqueue_inbox("e1", &with_id(cancel("x"), "r-1")).await.unwrap();
    let other_exec = store.enqueue_inbox("e2", &with_id(signal("go"), "r-1")).await.unwrap();
    let plain_1 = store.enqueue_inbox("e1", &signal("go")).await.unwrap();
    let plain_2 = store.enqueue_inbox("e1", &signal("go")).await.unwrap();
    let seqs: HashSet<u64> = [first, other_id, other_kind, other_exec, plain_1, plain_2].into();
    assert_eq!(seqs.len(), 6, "distinct entries");
    // The request id stays in the payload the owner reads.
    let decoded_first = decoded(&store.pending_inbox(Some("e1"), 1).await.unwrap());
    let InboxMessage::Signal(s) = &decoded_first[0] else { panic!("a signal") };
    assert_eq!(s.request_id.as_deref(), Some("r-1"));

    // Applied: a retry still gets the first entry, now with the owner's reply.
    let pending = store.pending_inbox(Some("e1"), 10).await.unwrap();
    let apply = CommitBatch {
        execution_id: "e1".into(),
        run: 1,
        expected_epoch: Some(1),
        events: vec![ev(3, Event::SignalReceived { name: "go".into(), payload: json!({}) })],
        tasks_done: Vec::new(),
        inbox_done: pending
            .iter()
            .map(|e| InboxDone { seq: e.seq, result: Some(applied(3)) })
            .collect(),
        ..CommitBatch::default()
    };
    store.commit(apply).await.unwrap();
    let late = store.enqueue_inbox("e1", &with_id(signal("go"), "r-1")).await.unwrap();
    assert_eq!(late, first);
    assert_eq!(store.inbox_result(late).await.unwrap(), InboxStatus::Done(Some(applied(3))));
    assert!(store.pending_inbox(Some("e1"), 10).await.unwrap().is_empty());

    // The sweep deletes applied entries without a request id, keeps the others.
    tokio::time::sleep(std::time::Duration::from_millis(5)).await;
    let swept = store.delete_done_rows(0, 500).await.unwrap();
    assert_eq!(swept.inbox, 2, "the two plain signals go");
    for kept in [first, other_id, other_kind] {
        assert!(
            matches!(store.inbox_result(kept).await.unwrap(), InboxStatus::Done(Some(_))),
            "entry {kept} with a request id is kept"
        );
    }
    assert!(matches!(store.inbox_result(plain_1).await, Err(StoreError::NotFound(_))));
    let again = store.enqueue_inbox("e1", &with_id(signal("go"), "r-1")).await.unwrap();
    assert_eq!(again, first, "recognised after the sweep too");
    // Concurrent retries write one entry between them.
    let racers: Vec<_> = (0..8)
        .map(|_| {
            let store = store.clone();
            let message = with_id(signal("go"), "r-race");
            tokio::spawn(async move { store.enqueue_inbox("e2", &message).await.unwrap() })
        })
        .collect();
    let mut raced = HashSet::new();
    for r in racers {
        raced.insert(r.await.unwrap());
    }
    assert_eq!(raced.len(), 1, "concurrent retries share one entry: {raced:?}");
}
