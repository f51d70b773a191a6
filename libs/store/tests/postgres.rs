//! PostgreSQL-only guarantees the conformance suite cannot state: many processes on one
//! database (concurrent migrations, claims, timer firing, takeover against an in-flight
//! commit), TLS modes, LISTEN/NOTIFY wake-ups, and healing after a server restart.
//!
//! Each test uses a fresh database on `ORBIT_TEST_DATABASE_URL` (see `conformance/pg.rs`);
//! the restart test runs a second server of its own (`scripts/pg.sh` with another directory
//! and port) so it never disturbs the other tests. Every wait is bounded.

// Tests read their environment (ORBIT_PYTHON, the database URL) and the wall clock
// (unique names, deadlines of real processes) directly.
#![allow(clippy::disallowed_methods)]

#[path = "conformance/pg.rs"]
mod pg;
#[allow(dead_code)]
#[path = "conformance/support.rs"]
mod support;

use orbit_store::migrations::MIGRATIONS;
use orbit_store::roles::*;
use orbit_store::InboxKind;
use orbit_store::{
    Change, CommitBatch, InboxDone, InboxReply, PgOptions, PgStore, StoreError, TaskState, Wakeup,
};
use pg::{admin_url, ca_file, options, url_for, with_param, PgBackend};
use serde_json::json;
use std::collections::HashSet;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use support::{applied, complete, signal};
use support::{ev, scheduled, start_batch, task, timer};
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

/// A bound for every single wait in these tests.
const WAIT: Duration = Duration::from_secs(10);

async fn bounded<T>(what: &str, f: impl std::future::Future<Output = T>) -> T {
    tokio::time::timeout(WAIT, f).await.unwrap_or_else(|_| panic!("{what}: no result in {WAIT:?}"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn concurrent_migrations_apply_each_version_once() {
    let db = PgBackend::new("concurrent_migrations");
    let mut stores = Vec::new();
    for _ in 0..8 {
        stores.push(db.connect().await);
    }
    let runs = stores.iter().map(|s| s.migrate());
    let applied = bounded("8 migrations", futures_util::future::join_all(runs)).await;
    let mut all: Vec<u32> =
        applied.into_iter().flat_map(|r| r.expect("every migrate call succeeds")).collect();
    all.sort_unstable();
    let expected: Vec<u32> = MIGRATIONS.iter().map(|m| m.version).collect();
    assert_eq!(all, expected, "each migration applied by exactly one of the 8 calls");
    assert!(stores[0].migrate().await.unwrap().is_empty());
    // The schema is usable.
    stores[3].put_definition("order", "v1", "h", "doc").await.unwrap();
    assert!(stores[5].get_definition("order", None).await.unwrap().is_some());
    // 0001 created `worker_sessions` and `workers`, 0006 dropped them; `schedules` stays.
    let (client, connection) = tokio_postgres::connect(db.url(), tokio_postgres::NoTls)
        .await
        .expect("connect to the test database");
    let driver = tokio::spawn(connection);
    let tables: Vec<String> = client
        .query(
            "SELECT table_name::text FROM information_schema.tables WHERE table_schema = 'public'",
            &[],
        )
        .await
        .expect("list tables")
        .iter()
        .map(|r| r.get(0))
        .collect();
    drop(client);
    let _ = driver.await;
    assert!(tables.iter().any(|t| t == "schedules"), "{tables:?}");
    assert!(!tables.iter().any(|t| t == "worker_sessions" || t == "workers"), "{tables:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn two_stores_claiming_never_share_a_row() {
    const ROWS: usize = 400;
    let db = PgBackend::new("two_stores_claiming");
    let (a, b) = (db.connect().await, db.connect().await);
    a.migrate().await.unwrap();
    for e in 0..4 {
        let mut batch = start_batch(&format!("e{e}"), "node-a");
        batch.tasks_to_insert = (0..ROWS / 4).map(|i| task(&format!("u{i}"), "work")).collect();
        a.commit(batch).await.unwrap();
    }
    let claimer = |store: PgStore, name: String| {
        tokio::spawn(async move {
            let mut got = Vec::new();
            loop {
                let rows = store.claim_tasks(&["work".into()], 7, &name, &name, "w").await.unwrap();
                if rows.is_empty() {
                    return got;
                }
                assert!(rows.iter().all(|r| r.state == TaskState::Claimed));
                got.extend(rows.into_iter().map(|r| r.id));
            }
        })
    };
    let mut handles = Vec::new();
    for i in 0..3 {
        handles.push(claimer(a.clone(), format!("fe-a{i}")));
        handles.push(claimer(b.clone(), format!("fe-b{i}")));
    }
    let mut ids = Vec::new();
    for h in handles {
        ids.extend(bounded("claimers", h).await.unwrap());
    }
    let unique: HashSet<u64> = ids.iter().copied().collect();
    assert_eq!((ids.len(), unique.len()), (ROWS, ROWS), "every row claimed exactly once");
    let mut dispatched = 0;
    for e in 0..4 {
        let inbox = b.pending_inbox(Some(&format!("e{e}")), 1_000).await.unwrap();
        dispatched += inbox.iter().filter(|e| e.kind == InboxKind::Dispatched.as_str()).count();
    }
    assert_eq!(dispatched, ROWS, "one dispatched entry per claim");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn two_schedulers_fire_each_timer_once() {
    const TIMERS: usize = 300;
    let db = PgBackend::new("two_schedulers");
    let (a, b) = (db.connect().await, db.connect().await);
    a.migrate().await.unwrap();
    for e in 0..10 {
        let mut batch = start_batch(&format!("e{e}"), "node-a");
        batch.timers_to_upsert =
            (0..TIMERS / 10).map(|i| timer(&format!("t{i}"), 100 + i as u64)).collect();
        a.commit(batch).await.unwrap();
    }
    let scheduler = |store: PgStore| {
        tokio::spawn(async move {
            let mut fired = Vec::new();
            loop {
                let batch = store.fire_due_timers(10_000, 9).await.unwrap();
                if batch.is_empty() {
                    return fired;
                }
                fired.extend(batch.into_iter().map(|(t, seq)| (t.execution_id, t.key, seq)));
            }
        })
    };
    let handles = [scheduler(a.clone()), scheduler(b.clone()), scheduler(a.clone())];
    let mut fired = Vec::new();
    for h in handles {
        fired.extend(bounded("schedulers", h).await.unwrap());
    }
    let timers: HashSet<_> = fired.iter().map(|(e, k, _)| (e.clone(), k.clone())).collect();
    let seqs: HashSet<_> = fired.iter().map(|(_, _, s)| *s).collect();
    assert_eq!((fired.len(), timers.len(), seqs.len()), (TIMERS, TIMERS, TIMERS));
    assert_eq!(a.next_timer_at().await.unwrap(), None);
    let entries = b.pending_inbox(None, 1_000).await.unwrap();
    assert_eq!(entries.iter().filter(|e| e.kind == InboxKind::Timer.as_str()).count(), TIMERS);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn takeover_waits_for_an_in_flight_commit_then_fences_the_old_owner() {
    let db = PgBackend::new("takeover_fences");
    let (old, new) = (db.connect().await, db.connect().await);
    old.migrate().await.unwrap();
    old.commit(start_batch("r", "node-old")).await.unwrap();

    // A commit of the old owner in flight: its transaction holds the owners row FOR SHARE.
    let (client, connection) =
        tokio_postgres::connect(db.url(), tokio_postgres::NoTls).await.unwrap();
    let driver = tokio::spawn(connection);
    client.batch_execute("BEGIN").await.unwrap();
    client.query("SELECT epoch FROM owners WHERE execution_id = 'r' FOR SHARE", &[]).await.unwrap();
    let taking = {
        let new = new.clone();
        tokio::spawn(async move { new.take_over_root("r", "node-old", "node-new").await })
    };
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(!taking.is_finished(), "the takeover waits for the commit holding the old epoch");
    client.batch_execute("COMMIT").await.unwrap();
    let taken = bounded("takeover", taking).await.unwrap().unwrap();
    assert_eq!(taken, [("r".to_string(), 2)]);
    drop(client);
    let _ = driver.await;

    // From now on the old owner's commits are refused, the new owner's accepted.
    let append = |epoch| CommitBatch {
        execution_id: "r".into(),
        run: 1,
        expected_epoch: Some(epoch),
        events: vec![ev(3, scheduled("s"))],
        ..CommitBatch::default()
    };
    let err = old.commit(append(1)).await.unwrap_err();
    assert!(matches!(err, StoreError::Fenced(_)), "{err:?}");
    assert_eq!(new.commit(append(2)).await.unwrap().last_seq, 3);
    assert!(old.take_over_root("r", "node-old", "node-x").await.unwrap().is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn racing_writers_of_one_execution_get_the_contract_errors() {
    let db = PgBackend::new("racing_writers");
    let (a, b) = (db.connect().await, db.connect().await);
    a.migrate().await.unwrap();
    for round in 0..10 {
        // Two processes start the same execution: one wins, the other is told it exists.
        let id = format!("e{round}");
        let (x, y) =
            tokio::join!(a.commit(start_batch(&id, "n1")), b.commit(start_batch(&id, "n2")));
        let errors: Vec<StoreError> = [x, y].into_iter().filter_map(Result::err).collect();
        assert_eq!(errors.len(), 1, "round {round}: {errors:?}");
        assert!(matches!(errors[0], StoreError::ExecutionExists(_)), "{errors:?}");
        // Two writers append the same seq: one wins, the other's seq no longer follows.
        let append = |step: &str| CommitBatch {
            execution_id: id.clone(),
            run: 1,
            expected_epoch: Some(1),
            events: vec![ev(3, scheduled(step))],
            ..CommitBatch::default()
        };
        let (x, y) = tokio::join!(a.commit(append("x")), b.commit(append("y")));
        let errors: Vec<StoreError> = [x, y].into_iter().filter_map(Result::err).collect();
        assert_eq!(errors.len(), 1, "round {round}: {errors:?}");
        assert!(matches!(errors[0], StoreError::Conflict(_)), "{errors:?}");
        assert_eq!(a.load_history(&id, 1).await.unwrap().len(), 3);
    }
}

/// Whether the session of `application_name` uses TLS (from the server's own view).
async fn uses_tls(application_name: &str) -> bool {
    let (client, connection) =
        tokio_postgres::connect(&admin_url(), tokio_postgres::NoTls).await.unwrap();
    let driver = tokio::spawn(connection);
    let rows = client
        .query(
            "SELECT s.ssl FROM pg_stat_ssl s JOIN pg_stat_activity a USING (pid)
            WHERE a.application_name = $1",
            &[&application_name],
        )
        .await
        .unwrap();
    drop(client);
    let _ = driver.await;
    assert!(!rows.is_empty(), "no session of {application_name}");
    rows.iter().all(|r| r.get::<_, bool>(0))
}

fn tls_options(name: &str, ca: Option<std::path::PathBuf>) -> PgOptions {
    PgOptions { pool_size: 2, ca_file: ca, application_name: name.into(), ..options() }
}

async fn connect_with(url: &str, name: &str, ca: Option<std::path::PathBuf>) -> PgStore {
    PgStore::connect(url, tls_options(name, ca)).await.unwrap_or_else(|e| panic!("{url}: {e}"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn sslmodes_connect_as_libpq_would() {
    let db = PgBackend::new("sslmodes");
    db.connect().await.migrate().await.unwrap();
    let admin = db.url().to_string();
    let ca = ca_file();
    let pid = std::process::id();

    let plain =
        connect_with(&with_param(&admin, "sslmode", "disable"), &format!("t-plain-{pid}"), None)
            .await;
    assert!(!uses_tls(&format!("t-plain-{pid}")).await);
    drop(plain);

    for mode in ["prefer", "require"] {
        let name = format!("t-{mode}-{pid}");
        let store = connect_with(&with_param(&admin, "sslmode", mode), &name, None).await;
        assert!(uses_tls(&name).await, "{mode} encrypts");
        store.list_nodes().await.unwrap();
    }

    let name = format!("t-full-{pid}");
    let full = with_param(&admin, "sslmode", "verify-full");
    let store = connect_with(&full, &name, Some(ca.clone())).await;
    assert!(uses_tls(&name).await);
    store.list_nodes().await.unwrap();
    // The CA may come with the URL instead; `localhost` is in the certificate too.
    let by_url = with_param(&full, "sslrootcert", &ca.display().to_string());
    connect_with(&by_url, &format!("t-url-{pid}"), None).await;
    let localhost = by_url.replace("127.0.0.1", "localhost");
    connect_with(&localhost, &format!("t-lh-{pid}"), None).await;

    // A host name the certificate does not name: verify-ca accepts, verify-full refuses.
    let port = admin.rsplit_once(':').and_then(|(_, p)| p.split('/').next()).unwrap_or("5432");
    let kv = |mode: &str| {
        format!(
            "host=orbit-other.invalid hostaddr=127.0.0.1 port={port} user=postgres \
             dbname={} sslmode={mode}",
            db.name()
        )
    };
    let store = connect_with(&kv("verify-ca"), &format!("t-ca-{pid}"), Some(ca.clone())).await;
    store.list_nodes().await.unwrap();
    let err = PgStore::connect(&kv("verify-full"), tls_options("t-name", Some(ca.clone())))
        .await
        .unwrap_err();
    assert!(err.to_string().contains("certificate"), "{err}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn unverifiable_servers_and_bad_settings_are_refused_clearly() {
    let admin = admin_url();
    let full = with_param(&admin, "sslmode", "verify-full");
    // The public roots do not know the test CA.
    let err = PgStore::connect(&full, tls_options("t-no-ca", None)).await.unwrap_err();
    let text = err.to_string();
    assert!(matches!(err, StoreError::Storage(_)), "{err:?}");
    assert!(text.contains("certificate") && text.contains("sslmode"), "{text}");

    // Another CA than the server's.
    let dir = std::env::temp_dir().join(format!("orbit-wrong-ca-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let wrong = dir.join("ca.crt");
    let made = std::process::Command::new("openssl")
        .args(["req", "-new", "-x509", "-nodes", "-days", "2", "-newkey", "rsa:2048"])
        .args(["-subj", "/CN=another CA", "-keyout"])
        .arg(dir.join("ca.key"))
        .arg("-out")
        .arg(&wrong)
        .output()
        .expect("openssl (scripts/pg.sh needs it too)");
    assert!(made.status.success(), "{}", String::from_utf8_lossy(&made.stderr));
    let err = PgStore::connect(&full, tls_options("t-wrong-ca", Some(wrong))).await.unwrap_err();
    assert!(err.to_string().contains("UnknownIssuer"), "{err}");
    let _ = std::fs::remove_dir_all(&dir);

    // A CA file that is not there, or holds no certificate.
    let missing = dir.join("nothing.pem");
    let err = PgStore::connect(&full, tls_options("t", Some(missing))).await.unwrap_err();
    assert!(matches!(&err, StoreError::InvalidArgument(m) if m.contains("cannot read")), "{err:?}");

    // Malformed URLs and modes.
    for bad in [
        with_param(&admin, "sslmode", "sometimes"),
        "postgres://postgres@127.0.0.1:notaport/postgres".to_string(),
        "mysql://root@127.0.0.1/db".to_string(),
        "host=127.0.0.1 sslmode='verify-full".to_string(),
    ] {
        let err = PgStore::connect(&bad, options()).await.unwrap_err();
        assert!(matches!(err, StoreError::InvalidArgument(_)), "{bad}: {err:?}");
    }
    // Nobody listens there: transient.
    let err =
        PgStore::connect("postgres://postgres@127.0.0.1:1/postgres", options()).await.unwrap_err();
    assert!(matches!(err, StoreError::Unavailable(_)), "{err:?}");
}

/// Collects wake-ups into a channel.
fn collector() -> (Arc<dyn Fn(Wakeup) + Send + Sync>, mpsc::UnboundedReceiver<Wakeup>) {
    let (tx, rx) = mpsc::unbounded_channel();
    let tx = Mutex::new(tx);
    let handler = move |w: Wakeup| {
        if let Ok(tx) = tx.lock() {
            let _ = tx.send(w);
        }
    };
    (Arc::new(handler), rx)
}

/// Waits until every wake-up of `want` arrived (in any order: one transaction's
/// notifications have no promised order), skipping others.
async fn expect_all(rx: &mut mpsc::UnboundedReceiver<Wakeup>, want: &[Wakeup]) {
    let mut missing: Vec<Wakeup> = want.to_vec();
    bounded(&format!("wake-ups {want:?}"), async {
        while !missing.is_empty() {
            match rx.recv().await {
                Some(w) => missing.retain(|m| *m != w),
                None => panic!("listener stopped before {missing:?}"),
            }
        }
    })
    .await;
}

/// Waits for one wake-up, skipping others.
async fn expect(rx: &mut mpsc::UnboundedReceiver<Wakeup>, want: &Wakeup) {
    expect_all(rx, std::slice::from_ref(want)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn listen_delivers_wakeups_after_the_matching_writes() {
    let db = PgBackend::new("listen");
    let store = db.connect().await;
    store.migrate().await.unwrap();
    let (handler, mut rx) = collector();
    let shutdown = CancellationToken::new();
    let listener = store.listen(handler, shutdown.clone());
    expect(&mut rx, &Wakeup::Reconnected).await;

    let go = store.enqueue_inbox("e1", &signal("go")).await.unwrap();
    expect(&mut rx, &Wakeup::Inbox).await;

    let mut batch = start_batch("e1", "node-a");
    batch.tasks_to_insert = vec![task("charge", "payments")];
    // The payload carries what the commit did (issue 14), exactly.
    let changed = Change::of_batch(&batch);
    assert!(changed.detail.as_ref().is_some_and(|d| d.last_seq.is_some()), "{changed:?}");
    store.commit(batch).await.unwrap();
    expect_all(&mut rx, &[Wakeup::Tasks, Wakeup::Changed(changed)]).await;

    let timers = CommitBatch {
        execution_id: "e1".into(),
        run: 1,
        expected_epoch: Some(1),
        timers_to_upsert: vec![timer("t", 5)],
        ..CommitBatch::default()
    };
    store.commit(timers).await.unwrap();
    expect(&mut rx, &Wakeup::Timers).await;

    let claimed = store.claim_tasks(&["payments".into()], 1, "fe", "s", "w").await.unwrap();
    assert_eq!(claimed.len(), 1);
    expect(&mut rx, &Wakeup::Inbox).await;

    // An applied entry's reply and the cancelled units ride in the payload.
    let applied = CommitBatch {
        execution_id: "e1".into(),
        run: 1,
        expected_epoch: Some(1),
        inbox_done: vec![InboxDone {
            seq: go,
            result: Some(InboxReply::Applied { seq: 2, run: 1, applied: true }),
        }],
        units_to_cancel: vec!["charge".into()],
        ..CommitBatch::default()
    };
    let changed = Change::of_batch(&applied);
    store.commit(applied).await.unwrap();
    expect(&mut rx, &Wakeup::Changed(changed)).await;

    // Nothing is sent for a rolled-back commit.
    while rx.try_recv().is_ok() {}
    let stale = CommitBatch {
        execution_id: "e1".into(),
        run: 1,
        expected_epoch: Some(9),
        events: vec![ev(3, scheduled("x"))],
        ..CommitBatch::default()
    };
    assert!(store.commit(stale).await.is_err());
    store.enqueue_inbox("marker", &signal("go")).await.unwrap();
    let next = bounded("next wake-up", rx.recv()).await;
    assert_eq!(next, Some(Wakeup::Inbox), "the refused commit notified nothing");

    shutdown.cancel();
    bounded("listener stops", listener).await.unwrap();
}

/// A second PostgreSQL server of this test's own, stopped when dropped.
struct OwnServer {
    dir: std::path::PathBuf,
    port: u16,
}

impl OwnServer {
    fn script() -> std::path::PathBuf {
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../scripts/pg.sh")
    }

    fn run(&self, args: &[&str]) {
        let out = std::process::Command::new("bash")
            .arg(Self::script())
            .args(args)
            .env("ORBIT_PG_DIR", &self.dir)
            .env("ORBIT_PG_PORT", self.port.to_string())
            .output()
            .expect("run scripts/pg.sh");
        assert!(
            out.status.success(),
            "pg.sh {args:?}: {}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
    }

    fn url(&self, db: &str) -> String {
        format!("postgres://postgres@127.0.0.1:{}/{db}", self.port)
    }

    /// A fresh, empty database (the cluster is kept between runs).
    async fn fresh_database(&self, db: &str) -> String {
        let (client, connection) =
            tokio_postgres::connect(&self.url("postgres"), tokio_postgres::NoTls).await.unwrap();
        let driver = tokio::spawn(connection);
        client.batch_execute(&format!("DROP DATABASE IF EXISTS {db} WITH (FORCE)")).await.unwrap();
        client.batch_execute(&format!("CREATE DATABASE {db}")).await.unwrap();
        drop(client);
        let _ = driver.await;
        self.url(db)
    }
}

impl Drop for OwnServer {
    fn drop(&mut self) {
        let _ = std::process::Command::new("bash")
            .arg(Self::script())
            .arg("stop")
            .env("ORBIT_PG_DIR", &self.dir)
            .env("ORBIT_PG_PORT", self.port.to_string())
            .output();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_server_restart_heals_without_help() {
    let target = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../target");
    // A free port, not a fixed one: another server (a developer's, another checkout's) may
    // hold any fixed port on this machine.
    let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
    let server = OwnServer { dir: target.join("pg-restart"), port };
    tokio::task::block_in_place(|| server.run(&["start"]));
    let opts = PgOptions { connect_timeout: Duration::from_secs(2), ..options() };
    let url = server.fresh_database("orbit_restart").await;
    let store = PgStore::connect(&url, opts).await.unwrap();
    store.migrate().await.unwrap();
    let node = |n: u32| orbit_store::NodeInfo {
        node_id: format!("n{n}"),
        service: "owner".into(),
        incarnation: "i".into(),
        addr: None,
        sessions: None,
    };
    for n in 0..4 {
        store.heartbeat_node(&node(n)).await.unwrap(); // several pooled connections in use
    }
    let (handler, mut rx) = collector();
    let shutdown = CancellationToken::new();
    let listener = store.listen(handler, shutdown.clone());
    expect(&mut rx, &Wakeup::Reconnected).await;

    tokio::task::block_in_place(|| server.run(&["stop"]));
    let down = store.list_nodes().await.unwrap_err();
    assert!(matches!(down, StoreError::Unavailable(_)), "{down:?}");
    let err = store.heartbeat_node(&node(9)).await.unwrap_err();
    assert!(matches!(err, StoreError::Unavailable(_)), "{err:?}");

    tokio::task::block_in_place(|| server.run(&["start"]));
    let healed = std::time::Instant::now();
    let rows = loop {
        match store.list_nodes().await {
            Ok(rows) => break rows,
            Err(e) if healed.elapsed() < WAIT => {
                assert!(matches!(e, StoreError::Unavailable(_)), "{e:?}");
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
            Err(e) => panic!("still failing {WAIT:?} after the restart: {e:?}"),
        }
    };
    eprintln!("calls succeed again {:?} after the server is back", healed.elapsed());
    assert_eq!(rows.len(), 4, "the data survived the restart");
    for n in 0..8 {
        store.heartbeat_node(&node(n)).await.unwrap(); // every pooled connection works again
    }
    expect(&mut rx, &Wakeup::Reconnected).await;
    store.enqueue_inbox("e", &signal("go")).await.unwrap();
    expect(&mut rx, &Wakeup::Inbox).await;

    shutdown.cancel();
    bounded("listener stops", listener).await.unwrap();
    drop(store);
    tokio::task::block_in_place(|| drop(server));
}

#[test]
fn urls_for_test_databases_keep_the_query() {
    assert_eq!(url_for("postgres://u@h:1/postgres", "x"), "postgres://u@h:1/x");
    assert_eq!(
        url_for("postgres://u@h:1/postgres?sslmode=disable", "x"),
        "postgres://u@h:1/x?sslmode=disable"
    );
    assert_eq!(url_for("postgres://u@h:1", "x"), "postgres://u@h:1/x");
    assert_eq!(with_param("postgres://h/d", "a", "1"), "postgres://h/d?a=1");
}

/// Counts round trips on one connection: a TCP proxy that counts the client's bursts (data
/// to the server after data from it). Run on a current-thread runtime, a pipeline's
/// requests all leave in one burst, so the count is exact.
struct RoundTrips {
    port: u16,
    turns: Arc<std::sync::atomic::AtomicU64>,
}

impl RoundTrips {
    async fn start(server: std::net::SocketAddr) -> RoundTrips {
        use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = listener.local_addr().unwrap().port();
        let turns = Arc::new(AtomicU64::new(0));
        let counted = Arc::clone(&turns);
        tokio::spawn(async move {
            while let Ok((client, _)) = listener.accept().await {
                let Ok(upstream) = tokio::net::TcpStream::connect(server).await else { return };
                let (mut cr, mut cw) = client.into_split();
                let (mut ur, mut uw) = upstream.into_split();
                // Whether the last bytes went from the server to the client.
                let server_spoke = Arc::new(AtomicBool::new(true));
                let (spoke, turns) = (Arc::clone(&server_spoke), Arc::clone(&counted));
                tokio::spawn(async move {
                    let mut buf = vec![0u8; 64 * 1024];
                    while let Ok(n) = cr.read(&mut buf).await {
                        if n == 0 || uw.write_all(&buf[..n]).await.is_err() {
                            return;
                        }
                        if spoke.swap(false, Ordering::SeqCst) {
                            turns.fetch_add(1, Ordering::SeqCst);
                        }
                    }
                });
                tokio::spawn(async move {
                    let mut buf = vec![0u8; 64 * 1024];
                    while let Ok(n) = ur.read(&mut buf).await {
                        if n == 0 || cw.write_all(&buf[..n]).await.is_err() {
                            return;
                        }
                        server_spoke.store(true, Ordering::SeqCst);
                    }
                });
            }
        });
        RoundTrips { port, turns }
    }

    fn count(&self) -> u64 {
        self.turns.load(std::sync::atomic::Ordering::SeqCst)
    }

    /// Round trips `f` took.
    async fn of<T>(&self, f: impl std::future::Future<Output = T>) -> (T, u64) {
        let before = self.count();
        let out = f.await;
        (out, self.count() - before)
    }
}

#[tokio::test(flavor = "current_thread")]
async fn commits_and_queue_calls_take_few_round_trips() {
    let db = PgBackend::new("round_trips");
    db.connect().await.migrate().await.unwrap();
    let (host_port, db_path) = {
        let rest = db.url().split_once("@").map_or(db.url(), |(_, r)| r);
        rest.split_once('/').unwrap()
    };
    let server: std::net::SocketAddr = host_port.parse().unwrap();
    let proxy = RoundTrips::start(server).await;
    let url = format!("postgres://postgres@127.0.0.1:{}/{db_path}?sslmode=disable", proxy.port);
    let store = PgStore::connect(&url, PgOptions { pool_size: 1, ..options() }).await.unwrap();

    // A decision pass over many executions: starts with tasks, timers and inbox entries.
    let pass = |round: u32| {
        (0..25)
            .map(|i| {
                let id = format!("e{round}-{i}");
                let mut b = start_batch(&id, "node-a");
                b.events.push(ev(3, scheduled("charge")));
                b.tasks_to_insert = vec![task("charge", "payments"), task("ship", "shipping")];
                b.timers_to_upsert = vec![timer("timeout", 99_000)];
                b
            })
            .collect::<Vec<_>>()
    };
    store.commit_all(pass(0)).await.unwrap(); // prepares the statements once
    let (outcomes, trips) = proxy.of(store.commit_all(pass(1))).await;
    assert_eq!(outcomes.unwrap().len(), 25);
    assert_eq!(trips, 1, "commit_all of 25 new executions: lock, check, write and commit");

    let seq = store.enqueue_inbox("e1-0", &signal("go")).await.unwrap();
    let applied = CommitBatch {
        execution_id: "e1-0".into(),
        run: 1,
        expected_epoch: Some(1),
        events: vec![ev(4, scheduled("x"))],
        tasks_done: Vec::new(),
        inbox_done: vec![orbit_store::InboxDone { seq, result: Some(applied(1)) }],
        ..CommitBatch::default()
    };
    let (done, trips) = proxy.of(store.commit(applied)).await;
    done.unwrap();
    assert_eq!(trips, 1, "a fenced commit applying an inbox entry");
    // A commit the check refuses takes the two round trips after its own.
    let stale = CommitBatch {
        execution_id: "e1-0".into(),
        run: 1,
        expected_epoch: Some(1),
        events: vec![ev(4, scheduled("y"))],
        ..CommitBatch::default()
    };
    let (refused, trips) = proxy.of(store.commit(stale)).await;
    assert!(matches!(refused, Err(StoreError::Conflict(_))), "{refused:?}");
    assert_eq!(trips, 3, "the attempt, then lock+read and the rollback");

    let (seq, trips) = proxy.of(store.enqueue_inbox("e1-1", &signal("go"))).await;
    seq.unwrap();
    assert_eq!(trips, 1, "enqueue_inbox");
    // First uses prepare their statement (one more round trip, once per connection).
    store.claim_tasks(&["nothing".into()], 1, "fe", "s", "w").await.unwrap();
    store.fire_due_timers(0, 1).await.unwrap();
    let (claimed, trips) =
        proxy.of(store.claim_tasks(&["payments".into()], 10, "fe", "s", "w")).await;
    let claimed = claimed.unwrap();
    assert_eq!((claimed.len(), trips), (10, 1), "claim_tasks");
    let token = claimed[0].token.clone().unwrap();
    let report = complete(json!(null));
    store.complete_task_row("none", "w", None).await.unwrap();
    let (done, trips) = proxy.of(store.complete_task_row(&token, "w", Some(report))).await;
    assert!(done.unwrap().unwrap().newly_done);
    assert_eq!(trips, 1, "complete_task_row");
    let (fired, trips) = proxy.of(store.fire_due_timers(100_000, 100)).await;
    assert_eq!((fired.unwrap().len(), trips), (50, 1), "fire_due_timers");
}

/// The owner's usual commit goes in one round trip, on rows predicted from the batch; when
/// the rows differ (a fenced writer, a seq another writer took, an inbox entry already
/// applied) the server rolls that attempt back and the commit, done again in two round
/// trips, refuses with the exact error, having written nothing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_commit_whose_rows_differ_from_the_batch_is_redone_and_refused_exactly() {
    let db = PgBackend::new("commit_check");
    let store = db.connect().await;
    store.migrate().await.unwrap();
    let append = |epoch, seq, step: &str| CommitBatch {
        execution_id: "c".into(),
        run: 1,
        expected_epoch: Some(epoch),
        events: vec![ev(seq, scheduled(step))],
        ..CommitBatch::default()
    };

    // The plain path: a start, appends, an inbox entry applied with its events.
    store.commit(start_batch("c", "node-a")).await.unwrap();
    assert_eq!(store.commit(append(1, 3, "a")).await.unwrap().last_seq, 3);
    let go = store.enqueue_inbox("c", &signal("go")).await.unwrap();
    let apply = |seq| CommitBatch {
        inbox_done: vec![InboxDone { seq: go, result: Some(applied(seq)) }],
        ..append(1, seq, "b")
    };
    assert_eq!(store.commit(apply(4)).await.unwrap().last_seq, 4);
    assert!(store.pending_inbox(Some("c"), 10).await.unwrap().is_empty(), "applied");
    assert_eq!(store.commits_redone(), 0, "every plain commit went in one round trip");

    // Each differing row: rolled back, redone, refused as before.
    let err = store.commit(append(7, 5, "x")).await.unwrap_err();
    assert!(matches!(err, StoreError::Fenced(_)), "{err:?}");
    assert_eq!(store.commits_redone(), 1);
    let err = store.commit(append(1, 4, "x")).await.unwrap_err();
    assert!(matches!(err, StoreError::Conflict(_)), "a seq already taken: {err:?}");
    assert_eq!(store.commits_redone(), 2);
    let err = store.commit(apply(5)).await.unwrap_err();
    assert!(matches!(err, StoreError::Conflict(_)), "an entry already applied: {err:?}");
    assert_eq!(store.commits_redone(), 3);
    let err = store.commit(start_batch("c", "node-b")).await.unwrap_err();
    assert!(matches!(err, StoreError::ExecutionExists(_)), "{err:?}");
    assert_eq!(store.commits_redone(), 4);

    // Nothing of the refused attempts was written; the next plain commit still continues.
    let history = store.load_history("c", 1).await.unwrap();
    assert_eq!(history.iter().map(|e| e.seq).collect::<Vec<_>>(), [1, 2, 3, 4]);
    assert_eq!(store.commit(append(1, 5, "c")).await.unwrap().last_seq, 5);
    assert_eq!(store.commits_redone(), 4);
}

/// A listener hears only the channels it asked for: an owner's (`orbit_inbox`) is not
/// woken by the changes nearly every commit announces.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_listener_hears_only_its_channels() {
    let db = PgBackend::new("listen_to");
    let store = db.connect().await;
    store.migrate().await.unwrap();
    let (handler, mut rx) = collector();
    let shutdown = CancellationToken::new();
    let listener = store.listen_to(&[orbit_store::Channel::Inbox], handler, shutdown.clone());
    expect(&mut rx, &Wakeup::Reconnected).await;
    // A start announces a change and queued tasks; a timer write announces timers.
    let mut batch = start_batch("e1", "node-a");
    batch.tasks_to_insert = vec![task("charge", "payments")];
    batch.timers_to_upsert = vec![timer("t", 5)];
    store.commit(batch).await.unwrap();
    store.enqueue_inbox("e1", &signal("go")).await.unwrap();
    let first = bounded("the inbox wake-up", rx.recv()).await;
    assert_eq!(first, Some(Wakeup::Inbox), "nothing of the commit's other channels came first");
    shutdown.cancel();
    bounded("listener stops", listener).await.unwrap();
}

/// The pool hands out the connection used last (LIFO; issue 25): an owner's commits at one
/// execution in flight keep to one warm server session (its cached plans, its caches, its
/// CPU) instead of taking each pooled connection in turn, as bb8's default (FIFO) did, where
/// every connection planned the commit's statement shapes for itself and woke cold.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn sequential_calls_reuse_the_connection_used_last() {
    let db = PgBackend::new("pool_last_used");
    db.create().await;
    let name = format!("orbit-pool-last-used-{}", std::process::id());
    let opts = PgOptions { pool_size: 4, application_name: name.clone(), ..options() };
    let store = PgStore::connect(db.url(), opts).await.unwrap();
    store.migrate().await.unwrap();
    let (admin, connection) =
        tokio_postgres::connect(&admin_url(), tokio_postgres::NoTls).await.unwrap();
    let driver = tokio::spawn(connection);
    let sessions = |since: Option<std::time::SystemTime>| {
        let (admin, name) = (&admin, &name);
        async move {
            let row = admin
                .query_one(
                    "SELECT count(*) FROM pg_stat_activity WHERE application_name = $1 \
                     AND ($2::timestamptz IS NULL OR query_start > $2)",
                    &[name, &since],
                )
                .await
                .unwrap();
            row.get::<_, i64>(0)
        }
    };
    // Calls at the same time open more connections (bounded: the pool has four).
    for _ in 0..50 {
        if sessions(None).await >= 3 {
            break;
        }
        let calls: Vec<_> = (0..8)
            .map(|_| {
                let store = store.clone();
                tokio::spawn(async move { store.get_execution("nobody").await.unwrap() })
            })
            .collect();
        for call in calls {
            bounded("a concurrent read", call).await.unwrap();
        }
    }
    let open = sessions(None).await;
    assert!(open >= 3, "the pool opened only {open} connection(s): nothing to tell apart");
    let mark: std::time::SystemTime =
        admin.query_one("SELECT clock_timestamp()", &[]).await.unwrap().get(0);
    for _ in 0..20 {
        bounded("a read", store.get_execution("nobody")).await.unwrap();
    }
    let used = sessions(Some(mark)).await;
    assert_eq!(
        used, 1,
        "20 calls one after another used {used} pooled connections (at least {open} open)"
    );
    drop(admin);
    let _ = driver.await;
}
