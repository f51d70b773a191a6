//! Flow control on PostgreSQL (issue 27), what the conformance suite cannot state: flow
//! claims of many stores (processes) never exceed a concurrency key, and the `orbit_tasks`
//! notifications with the payload `limited` are sent exactly when a flow claim may find
//! more (limited rows queued, a slot freed), and heard by the store's listener.
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
use orbit_engine::{ConcurrencyKey, Flow};
use orbit_store::roles::*;
use orbit_store::{Channel, ClaimFilter, CommitBatch, PgStore, TaskRow, Wakeup};
use pg::PgBackend;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;
use support::{ev, flow_task, scheduled, start_batch, task};
use tokio::sync::mpsc;
use tokio_postgres::{AsyncMessage, Client, NoTls};
use tokio_util::sync::CancellationToken;

/// A bound for every single wait in these tests.
const WAIT: Duration = Duration::from_secs(10);

async fn bounded<T>(what: &str, f: impl std::future::Future<Output = T>) -> T {
    tokio::time::timeout(WAIT, f).await.unwrap_or_else(|_| panic!("{what}: no result in {WAIT:?}"))
}

fn keyed(key: &str, limit: u32) -> Flow {
    Flow { concurrency: Some(ConcurrencyKey { key: key.into(), limit }), ..Flow::default() }
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

async fn client(url: &str) -> Client {
    let (client, connection) = tokio_postgres::connect(url, NoTls).await.unwrap();
    tokio::spawn(connection);
    client
}

/// Fails any commit that leaves more claimed rows holding a key than its limit: checked at
/// commit (deferred), on a snapshot of its own, so a flow claim that counted stale rows
/// would be refused here.
const KEY_LIMIT_CHECK: &str = "
CREATE FUNCTION orbit_test_key_limit() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF (SELECT count(*) FROM task_queue
        WHERE state = 'claimed' AND concurrency_key = NEW.concurrency_key)
        > NEW.concurrency_limit THEN
        RAISE EXCEPTION 'concurrency key % over its limit', NEW.concurrency_key;
    END IF;
    RETURN NULL;
END $$;
CREATE CONSTRAINT TRIGGER orbit_test_key_limit AFTER UPDATE ON task_queue
    DEFERRABLE INITIALLY DEFERRED FOR EACH ROW
    WHEN (NEW.state = 'claimed' AND NEW.concurrency_key IS NOT NULL)
    EXECUTE FUNCTION orbit_test_key_limit();";

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn flow_claims_of_many_stores_never_exceed_a_key() {
    const ROWS: usize = 200;
    const KEYS: usize = 5;
    const CLAIMERS: usize = 8;
    // Rows of every key under four task names, each served by two claimers: claimers that
    // serve different tasks pick different rows of one key (claimers of one task pick the
    // same rows first, and the row locks alone would keep those apart).
    const TASKS: usize = 4;
    let db = PgBackend::new("flow_claims_race");
    let first = db.connect().await;
    first.migrate().await.unwrap();
    client(db.url()).await.batch_execute(KEY_LIMIT_CHECK).await.unwrap();
    for e in 0..4 {
        let mut batch = start_batch(&format!("e{e}"), "node-a");
        batch.tasks_to_insert = (0..ROWS / 4)
            .map(|i| {
                let name = format!("work-{}", i % TASKS);
                flow_task(&format!("u{i}"), &name, keyed(&format!("k{}", i % KEYS), 1))
            })
            .collect();
        first.commit(batch).await.unwrap();
    }
    let done = Arc::new(AtomicUsize::new(0));
    let mut handles = Vec::new();
    for n in 0..CLAIMERS {
        // A store of its own each: as many processes.
        let store = db.connect().await;
        let checker = client(db.url()).await;
        let done = Arc::clone(&done);
        handles.push(tokio::spawn(async move {
            let filter = ClaimFilter::names(&[format!("work-{}", n % TASKS)]);
            let (name, worker) = (format!("fe-{n}"), format!("w-{n}"));
            let mut most = 0i64;
            while done.load(Ordering::SeqCst) < ROWS {
                let claim = store.claim_limited(&filter, 3, &name, &name, &worker).await.unwrap();
                let rows: Vec<TaskRow> = claim.rows;
                for row in &rows {
                    let key = row.flow.as_ref().and_then(|f| f.concurrency.as_ref()).unwrap();
                    let held: i64 = checker
                        .query_one(
                            "SELECT count(*) FROM task_queue
                            WHERE state = 'claimed' AND concurrency_key = $1",
                            &[&key.key],
                        )
                        .await
                        .unwrap()
                        .get(0);
                    most = most.max(held);
                }
                if rows.is_empty() {
                    tokio::time::sleep(Duration::from_millis(1)).await;
                    continue;
                }
                // Hold the slots a moment, as a worker would, then report.
                tokio::time::sleep(Duration::from_millis(2)).await;
                for row in rows {
                    let token = row.token.unwrap();
                    store.complete_task_row(&token, &worker, None).await.unwrap().unwrap();
                    done.fetch_add(1, Ordering::SeqCst);
                }
            }
            most
        }));
    }
    for h in handles {
        let most = tokio::time::timeout(Duration::from_secs(120), h)
            .await
            .expect("the claimers finish")
            .unwrap();
        assert!(most <= 1, "a key held by {most} claimed rows at once");
    }
    let states: Vec<(String, i64)> = client(db.url())
        .await
        .query("SELECT state, count(*) FROM task_queue GROUP BY state", &[])
        .await
        .unwrap()
        .iter()
        .map(|r| (r.get(0), r.get(1)))
        .collect();
    assert_eq!(states, [("done".to_string(), ROWS as i64)], "every row done, once");
}

/// The next notification on `orbit_tasks` after `marker` was sent: what the writes before
/// the marker notified (one session's notifications arrive in commit order).
async fn tasks_notified(
    admin: &Client,
    rx: &mut mpsc::UnboundedReceiver<(String, String)>,
    marker: &str,
) -> Vec<String> {
    admin.batch_execute(&format!("NOTIFY orbit_tasks, '{marker}'")).await.unwrap();
    let mut got = Vec::new();
    bounded(marker, async {
        loop {
            let (channel, payload) = rx.recv().await.expect("listening");
            if channel != "orbit_tasks" {
                continue;
            }
            if payload == marker {
                return;
            }
            got.push(payload);
        }
    })
    .await;
    got
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn limited_is_notified_when_a_flow_claim_may_find_more() {
    let db = PgBackend::new("flow_notify");
    let store = db.connect().await;
    store.migrate().await.unwrap();
    let (listening, mut rx) = listener(db.url()).await;
    listening.batch_execute("LISTEN orbit_tasks").await.unwrap();
    let admin = client(db.url()).await;
    let filter = ClaimFilter::names(&["work".into()]);

    // Another store (process) that listens: once it read that there are no limited rows,
    // only the notification tells it otherwise.
    let other = db.connect().await;
    let heard = Arc::new(tokio::sync::Notify::new());
    let on_wakeup: Arc<dyn Fn(Wakeup) + Send + Sync> = {
        let heard = Arc::clone(&heard);
        Arc::new(move |_: Wakeup| heard.notify_one())
    };
    let shutdown = CancellationToken::new();
    let listen = other.listen_to(&[Channel::Tasks], on_wakeup, shutdown.clone());
    bounded("the listener connects", heard.notified()).await;
    assert!(!other.limited_possible().await.unwrap());

    // An unlimited offer notifies as before flow control: an empty payload.
    let mut start = start_batch("e1", "node-a");
    start.tasks_to_insert = vec![task("plain", "work")];
    store.commit(start).await.unwrap();
    assert_eq!(tasks_notified(&admin, &mut rx, "m1").await, [""]);
    // A limited offer says so, once, whatever else the commit queues.
    let offer = CommitBatch {
        execution_id: "e1".into(),
        run: 1,
        expected_epoch: Some(1),
        tasks_to_insert: vec![
            flow_task("k1", "work", keyed("g/k", 1)),
            flow_task("k2", "work", keyed("g/k", 1)),
            flow_task("k3", "work", keyed("g/k", 1)),
            task("plain-2", "work"),
        ],
        ..CommitBatch::default()
    };
    store.commit(offer).await.unwrap();
    assert_eq!(tasks_notified(&admin, &mut rx, "m2").await, ["limited"]);
    bounded("the other store hears of limited rows", async {
        while !other.limited_possible().await.unwrap() {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    })
    .await;

    // Claims and the results of unlimited rows notify nothing on orbit_tasks.
    let plain = store.claim_tasks(&["work".into()], 10, "fe", "s", "w").await.unwrap();
    assert_eq!(plain.len(), 2);
    let k1 = store.claim_limited(&filter, 10, "fe", "s", "w").await.unwrap().rows;
    assert_eq!(k1.len(), 1);
    for row in &plain {
        store.complete_task_row(row.token.as_deref().unwrap(), "w", None).await.unwrap();
    }
    assert!(tasks_notified(&admin, &mut rx, "m3").await.is_empty());

    // A worker's result on a row holding a key frees a slot: `limited`.
    store.complete_task_row(k1[0].token.as_deref().unwrap(), "w", None).await.unwrap();
    assert_eq!(tasks_notified(&admin, &mut rx, "m4").await, ["limited"]);
    // So does the owner recording it directly, and cancelling a claimed row's unit: steps
    // (with events), so each is the one-statement commit, whose writes are CTEs nothing
    // reads.
    let k2 = store.claim_limited(&filter, 10, "fe", "s", "w").await.unwrap().rows;
    let done = CommitBatch {
        events: vec![ev(3, scheduled("k2"))],
        tasks_done: vec![k2[0].token.clone().unwrap()],
        ..cancel_of("e1")
    };
    store.commit(done).await.unwrap();
    assert_eq!(tasks_notified(&admin, &mut rx, "m5").await, ["limited"]);
    let k3 = store.claim_limited(&filter, 10, "fe", "s", "w").await.unwrap().rows;
    assert_eq!(k3.len(), 1);
    let cancel = CommitBatch {
        events: vec![ev(4, scheduled("k3"))],
        units_to_cancel: vec!["k3".into()],
        ..cancel_of("e1")
    };
    store.commit(cancel).await.unwrap();
    assert_eq!(tasks_notified(&admin, &mut rx, "m6").await, ["limited"]);
    assert_eq!(store.commits_redone(), 0, "both went as one statement");
    // A queued row's unit cancelled frees nothing.
    let queued = CommitBatch {
        execution_id: "e1".into(),
        run: 1,
        expected_epoch: Some(1),
        tasks_to_insert: vec![flow_task("k4", "work", keyed("g/k", 1))],
        ..CommitBatch::default()
    };
    store.commit(queued).await.unwrap();
    assert_eq!(tasks_notified(&admin, &mut rx, "m7").await, ["limited"]);
    let cancel = CommitBatch { units_to_cancel: vec!["k4".into()], ..cancel_of("e1") };
    store.commit(cancel).await.unwrap();
    assert!(tasks_notified(&admin, &mut rx, "m8").await.is_empty());
    // A frontend's claims released: `limited` when one held a key.
    offer_keyed(&store, "k5").await;
    assert_eq!(tasks_notified(&admin, &mut rx, "m9").await, ["limited"]);
    assert_eq!(store.claim_limited(&filter, 10, "fe", "s", "w").await.unwrap().rows.len(), 1);
    assert_eq!(store.release_claims("fe", "gone").await.unwrap().len(), 1);
    assert_eq!(tasks_notified(&admin, &mut rx, "m10").await, ["limited"]);
    // A named limit set: rows may wait on it.
    store.set_rate_limit("api", 1, 1_000).await.unwrap();
    assert_eq!(tasks_notified(&admin, &mut rx, "m11").await, ["limited"]);

    shutdown.cancel();
    let _ = listen.await;
}

fn cancel_of(id: &str) -> CommitBatch {
    CommitBatch {
        execution_id: id.into(),
        run: 1,
        expected_epoch: Some(1),
        ..CommitBatch::default()
    }
}

async fn offer_keyed(store: &PgStore, unit: &str) {
    let batch = CommitBatch {
        tasks_to_insert: vec![flow_task(unit, "work", keyed("g/k", 1))],
        ..cancel_of("e1")
    };
    store.commit(batch).await.unwrap();
}
