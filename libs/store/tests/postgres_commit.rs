//! The owner's usual PostgreSQL commit is ONE statement (the lock check, every write and the
//! NOTIFYs as CTEs of one `WITH`): counted with `pg_stat_statements` (scripts/pg.sh preloads
//! it), heard with `LISTEN`, and never redone when the batch's writes meet the same rows.
//! When its check or a write fails it writes nothing and the commit is redone in two round
//! trips, which refuse with the exact error.
//!
//! Each test uses a fresh database on `ORBIT_TEST_DATABASE_URL` (see `conformance/pg.rs`).

// Tests read their environment (the database URL) directly.
#![allow(clippy::disallowed_methods)]

#[path = "conformance/pg.rs"]
mod pg;
#[allow(dead_code)]
#[path = "conformance/support.rs"]
mod support;

use futures_util::StreamExt;
use orbit_store::roles::*;
use orbit_store::{Change, CommitBatch, InboxDone, PgStore, StoreError, TaskClaim, TaskState};
use pg::{admin_url, PgBackend};
use std::time::Duration;
use support::{applied, ev, scheduled, signal, start_batch, task, timer};
use tokio::sync::mpsc;
use tokio_postgres::{AsyncMessage, Client, NoTls};

/// A bound for every single wait in these tests.
const WAIT: Duration = Duration::from_secs(10);

async fn bounded<T>(what: &str, f: impl std::future::Future<Output = T>) -> T {
    tokio::time::timeout(WAIT, f).await.unwrap_or_else(|_| panic!("{what}: no result in {WAIT:?}"))
}

async fn migrated(case: &str) -> (PgBackend, PgStore) {
    let db = PgBackend::new(case);
    let store = db.connect().await;
    store.migrate().await.unwrap();
    (db, store)
}

/// A client whose notifications go to the returned channel.
async fn listener(url: &str) -> (Client, mpsc::UnboundedReceiver<(String, String)>) {
    let (client, mut connection) = tokio_postgres::connect(url, NoTls).await.unwrap();
    let (tx, rx) = mpsc::unbounded_channel();
    tokio::spawn(async move {
        let mut messages = futures_util::stream::poll_fn(move |cx| connection.poll_message(cx));
        while let Some(Ok(message)) = messages.next().await {
            if let AsyncMessage::Notification(n) = message {
                let _ = tx.send((n.channel().to_string(), n.payload().to_string()));
            }
        }
    });
    (client, rx)
}

/// The next step of `id` (epoch 1): one event at `seq`.
fn step(id: &str, seq: u64) -> CommitBatch {
    CommitBatch {
        execution_id: id.into(),
        run: 1,
        expected_epoch: Some(1),
        events: vec![ev(seq, scheduled("x"))],
        ..CommitBatch::default()
    }
}

/// The statements `database` ran since the last reset (calls, text), `BEGIN`/`COMMIT`
/// left out, as `services/orbit/tests/cluster_idle.rs` counts them.
async fn statements(admin: &Client, database: &str) -> Vec<(i64, String)> {
    let rows = admin
        .query(
            "SELECT s.calls, s.query FROM pg_stat_statements s
             JOIN pg_database d ON d.oid = s.dbid
             WHERE d.datname = $1 AND s.query NOT IN ('BEGIN', 'COMMIT', 'ROLLBACK')
             ORDER BY s.calls DESC",
            &[&database],
        )
        .await
        .unwrap();
    rows.iter().map(|r| (r.get(0), r.get(1))).collect()
}

async fn reset(admin: &Client, database: &str) {
    admin
        .execute(
            "SELECT pg_stat_statements_reset(0, d.oid, 0) FROM pg_database d WHERE d.datname = $1",
            &[&database],
        )
        .await
        .unwrap();
}

/// A typical step: the result of the step applied (its row done), its events with the
/// projection, the next step's offer queued, and the NOTIFYs: one statement, on a
/// connection that runs its shape for the first time (unprepared, prepared alongside) and
/// on one that runs its prepared statement.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_step_commit_is_one_statement() {
    let (db, store) = migrated("one_statement").await;
    let (admin, admin_conn) = tokio_postgres::connect(&admin_url(), NoTls).await.unwrap();
    tokio::spawn(admin_conn);
    admin.batch_execute("CREATE EXTENSION IF NOT EXISTS pg_stat_statements").await.unwrap();
    admin.query("SELECT count(*) FROM pg_stat_statements", &[]).await.expect(
        "pg_stat_statements is not loaded: start PostgreSQL with scripts/pg.sh (restart a \
         cluster it started before: scripts/pg.sh stop && scripts/pg.sh start)",
    );
    let mut tokens = Vec::new();
    for id in ["e1", "e2"] {
        let mut start = start_batch(id, "node-a");
        start.tasks_to_insert = vec![task("a", "t")];
        store.commit(start).await.unwrap();
    }
    for row in store.claim_tasks(&["t".into()], 10, "fe", "s", "w").await.unwrap() {
        tokens.push((row.execution_id.clone(), row.token.clone().unwrap()));
    }
    tokens.sort();
    for (id, token) in &tokens {
        let step = CommitBatch {
            tasks_done: vec![token.clone()],
            tasks_to_insert: vec![task("b", "t")],
            projection: Some(orbit_store::ProjectionUpdate {
                status: orbit_engine::Status::Running,
                updated_at_ms: 3_000,
                closed_at_ms: None,
                delete_after_ms: None,
                failed_step: None,
                error_code: None,
            }),
            ..step(id, 3)
        };
        reset(&admin, db.name()).await;
        let outcome = store.commit(step).await.unwrap();
        assert_eq!((outcome.last_seq, outcome.task_ids.len()), (3, 1));
        let ran = statements(&admin, db.name()).await;
        let calls: i64 = ran.iter().map(|(calls, _)| calls).sum();
        assert_eq!(calls, 1, "{id}: one statement, BEGIN/COMMIT aside: {ran:#?}");
        assert!(ran[0].1.starts_with("WITH chk AS MATERIALIZED ("), "{ran:#?}");
        let row = store.task_by_token(token).await.unwrap().unwrap();
        assert_eq!(row.state, TaskState::Done);
    }
    assert_eq!(store.commits_redone(), 0);
    let queued = store.claim_tasks(&["t".into()], 10, "fe", "s", "w").await.unwrap();
    assert_eq!(queued.iter().filter(|t| t.unit_key == "b").count(), 2);
}

/// The NOTIFYs of the one statement are sent: a plain `SELECT` in a `WITH` runs only when
/// read, so a commit whose NOTIFYs were left unread would wake nobody.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_one_statement_notifies() {
    let (db, store) = migrated("one_statement_notifies").await;
    let (listening, mut heard) = listener(db.url()).await;
    listening.batch_execute("LISTEN orbit_changes; LISTEN orbit_tasks").await.unwrap();
    let mut start = start_batch("e1", "node-a");
    start.tasks_to_insert = vec![task("a", "t")];
    store.commit(start.clone()).await.unwrap();
    // Only events: the change is all there is to announce.
    let next = step("e1", 3);
    store.commit(next.clone()).await.unwrap();
    assert_eq!(store.commits_redone(), 0);
    let mut want = vec![
        ("orbit_changes".to_string(), Change::of_batch(&start).encode()),
        ("orbit_tasks".to_string(), String::new()),
        ("orbit_changes".to_string(), Change::of_batch(&next).encode()),
    ];
    while !want.is_empty() {
        let got = bounded("a notification", heard.recv()).await.expect("listener ended");
        let at = want.iter().position(|w| *w == got);
        assert!(at.is_some(), "unexpected {got:?}, waiting for {want:?}");
        want.remove(at.unwrap_or_default());
    }
}

/// The rows one statement both locks (its check) and writes, and the writes of one batch
/// that meet the same row: all in one statement, none redone, each as written in order.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_batch_whose_writes_meet_the_same_rows_is_still_one_statement() {
    let (_db, store) = migrated("one_statement_overlaps").await;
    let mut start = start_batch("e1", "node-a");
    start.tasks_to_insert = vec![task("s", "t")];
    start.timers_to_upsert = vec![timer("old", 100)];
    assert_eq!(store.commit(start).await.unwrap().last_seq, 2);
    let token = store.claim_tasks(&["t".into()], 1, "fe", "s", "w").await.unwrap()[0]
        .token
        .clone()
        .unwrap();
    let go = store.enqueue_inbox("e1", &signal("go")).await.unwrap();
    // The executions row and the inbox entry are locked by the check, then written; the
    // claimed row is done and its unit cancelled; a timer is set and deleted; the offer of
    // the cancelled unit is queued again.
    let batch = CommitBatch {
        inbox_done: vec![InboxDone { seq: go, result: Some(applied(3)) }],
        tasks_done: vec![token.clone()],
        units_to_cancel: vec!["s".into()],
        tasks_to_insert: vec![task("s", "t"), task("u", "t")],
        timers_to_upsert: vec![timer("old", 50), timer("new", 70)],
        timers_to_delete: vec!["old".into()],
        ..step("e1", 3)
    };
    let outcome = store.commit(batch).await.unwrap();
    assert_eq!((outcome.last_seq, outcome.task_ids.len()), (3, 1), "{outcome:?}");
    assert_eq!(store.commits_redone(), 0, "every commit went in one statement");
    assert_eq!(store.get_execution("e1").await.unwrap().unwrap().last_seq, 3);
    let pending = store.pending_inbox(Some("e1"), 10).await.unwrap();
    assert!(pending.iter().all(|e| e.seq != go), "applied: {pending:?}");
    assert_eq!(store.task_by_token(&token).await.unwrap().unwrap().state, TaskState::Done);
    assert_eq!(store.next_timer_at().await.unwrap(), Some(70));
    let queued = store.claim_tasks(&["t".into()], 10, "fe", "s", "w").await.unwrap();
    let units: Vec<&str> = queued.iter().map(|t| t.unit_key.as_str()).collect();
    assert_eq!(units, ["u"], "the offer of `s` was there (done): skipped");
    assert_eq!(store.commit(step("e1", 4)).await.unwrap().last_seq, 4);
    assert_eq!(store.commits_redone(), 0);
}

/// A write that fails inside the one statement (a hand-off of an offer queued before) and a
/// check that fails (a stale epoch): nothing of the statement is written, and the redone
/// commit refuses exactly; the connection is usable after.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failed_one_statement_writes_nothing_and_is_redone() {
    let (_db, store) = migrated("one_statement_fails").await;
    let mut start = start_batch("e1", "node-a");
    start.tasks_to_insert = vec![task("a", "t")];
    store.commit(start).await.unwrap();
    let handoff = CommitBatch {
        tasks_to_insert: vec![task("a", "t")],
        task_claims: vec![TaskClaim {
            unit: "a".into(),
            attempt: 1,
            offer: 1,
            claimer: "fe".into(),
            session: "s".into(),
            worker_id: "w".into(),
            token: "tok-a".into(),
        }],
        timers_to_upsert: vec![timer("t", 10)],
        ..step("e1", 3)
    };
    let refused = store.commit(handoff).await;
    assert!(matches!(refused, Err(StoreError::Conflict(_))), "{refused:?}");
    assert_eq!(store.commits_redone(), 1);
    assert_eq!(store.task_by_token("tok-a").await.unwrap(), None);
    assert_eq!(store.next_timer_at().await.unwrap(), None, "nothing of it was written");
    assert_eq!(store.load_history("e1", 1).await.unwrap().len(), 2);

    let stale = CommitBatch { expected_epoch: Some(2), ..step("e1", 3) };
    let refused = store.commit(stale).await;
    assert!(matches!(refused, Err(StoreError::Fenced(_))), "{refused:?}");
    assert_eq!(store.commits_redone(), 2);
    assert_eq!(store.load_history("e1", 1).await.unwrap().len(), 2);
    assert_eq!(store.commit(step("e1", 3)).await.unwrap().last_seq, 3);
    assert_eq!(store.commits_redone(), 2);
}

/// The commit that ends an execution (its events and projection, its last result done, no
/// new task) runs its connection's generic plan once PostgreSQL has made five custom ones,
/// like the other shapes. While its generic plan was estimated with every array parameter
/// at 10 elements, PostgreSQL judged it three times dearer than a custom one and planned the
/// statement again on every call: 0.6 ms of each execution's critical path on the split,
/// more than the statement took to run (`commit::composed`, one execution).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_commit_that_ends_an_execution_is_not_planned_on_every_call() {
    const EXECUTIONS: usize = 12;
    let (db, store) = migrated("last_commit_plans").await;
    let (admin, admin_conn) = tokio_postgres::connect(&admin_url(), NoTls).await.unwrap();
    tokio::spawn(admin_conn);
    // Planning counted for the sessions opened from here on (a superuser setting).
    let track =
        format!("ALTER DATABASE \"{}\" SET pg_stat_statements.track_planning = on", db.name());
    admin.batch_execute(&track).await.unwrap();
    drop(store);
    let options = orbit_store::PgOptions { pool_size: 1, ..pg::options() };
    let store = PgStore::connect(db.url(), options).await.unwrap();
    let mut tokens = Vec::new();
    for n in 0..EXECUTIONS {
        let id = format!("e{n}");
        let mut start = start_batch(&id, "node-a");
        start.tasks_to_insert = vec![task("a", "t")];
        store.commit(start).await.unwrap();
    }
    for row in store.claim_tasks(&["t".into()], EXECUTIONS as u32, "fe", "s", "w").await.unwrap() {
        tokens.push((row.execution_id.clone(), row.token.clone().unwrap()));
    }
    assert_eq!(tokens.len(), EXECUTIONS);
    reset(&admin, db.name()).await;
    for (id, token) in &tokens {
        let last = CommitBatch {
            tasks_done: vec![token.clone()],
            projection: Some(orbit_store::ProjectionUpdate {
                status: orbit_engine::Status::Completed,
                updated_at_ms: 3_000,
                closed_at_ms: Some(3_000),
                delete_after_ms: None,
                failed_step: None,
                error_code: None,
            }),
            ..step(id, 3)
        };
        store.commit(last).await.unwrap();
    }
    let row = admin
        .query_one(
            "SELECT s.calls, s.plans FROM pg_stat_statements s JOIN pg_database d ON d.oid = s.dbid
             WHERE d.datname = $1 AND s.query LIKE 'WITH chk AS MATERIALIZED (%'",
            &[&db.name()],
        )
        .await
        .unwrap();
    let (calls, plans): (i64, i64) = (row.get(0), row.get(1));
    assert_eq!(calls, EXECUTIONS as i64, "every commit one statement of one shape");
    // The first call goes unprepared (planned once), then five custom plans and the
    // generic one: 7 plans, fewer than the calls (before: one plan per call).
    assert!(plans < calls, "{plans} plans for {calls} calls of the last commit");
    assert_eq!(store.commits_redone(), 0);
}
