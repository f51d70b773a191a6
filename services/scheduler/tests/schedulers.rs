//! Several schedulers on one store: every durable timer fires exactly once, and every
//! execution waiting on one carries on. Real owner, real SQLite file, real schedulers.

use orbit_api::internal::v1::owner_service_server::OwnerService;
use orbit_owner::{system_clock, Owner, OwnerConfig, StartRequest};
use orbit_scheduler::Scheduler;
use orbit_store::{ChangeHub, SqliteStore, Store};
use serde_json::json;
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::Notify;
use tokio_util::sync::CancellationToken;

const NAP: &str = "name: nap\nversion: '1'\nsteps: [ { id: z, sleep: 150ms } ]\noutput: rested\n";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn three_schedulers_fire_each_timer_once() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("orbit.db");
    let store: Arc<dyn Store> = Arc::new(SqliteStore::open_and_migrate(&path).await.unwrap());
    let def = orbit_definition::parse(NAP).unwrap();
    let doc = orbit_definition::canonical_json(&orbit_definition::to_document(&def));
    store.put_definition(&def.name, &def.version, &def.hash, &doc).await.unwrap();

    let owner = Owner::new(
        OwnerConfig { node_id: "owner-1".into(), ..OwnerConfig::default() },
        store.clone(),
        Arc::new(Notify::new()),
        Arc::new(Notify::new()),
        Arc::new(ChangeHub::new()),
    );
    let stop = CancellationToken::new();
    tokio::spawn({
        let (o, s) = (owner.clone(), stop.clone());
        async move { o.run(s).await }
    });
    let owners: Arc<dyn OwnerService> = Arc::new(owner.clone());
    // Each scheduler has its own wake-up, as separate processes would; the test plays the
    // database notification that tells all of them timers changed.
    let mut wakes = Vec::new();
    for i in 0..3 {
        let wake = Arc::new(Notify::new());
        wakes.push(wake.clone());
        let s = Scheduler::new(
            &format!("scheduler-{i}"),
            store.clone(),
            owners.clone(),
            wake,
            system_clock,
        );
        let stop = stop.clone();
        tokio::spawn(async move { s.run(stop).await });
    }

    let ids: Vec<String> = (0..30).map(|i| format!("nap-{i}")).collect();
    for id in &ids {
        owner
            .start(StartRequest {
                execution_id: id.clone(),
                workflow: "nap".into(),
                version: None,
                input: json!({}),
                parent: None,
                root_id: None,
                schedule_id: None,
            })
            .await
            .unwrap();
    }
    for w in &wakes {
        w.notify_one();
    }
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    for id in &ids {
        loop {
            let row = store.get_execution(id).await.unwrap().unwrap();
            if row.status == orbit_engine::Status::Completed {
                break;
            }
            assert!(tokio::time::Instant::now() < deadline, "{id} still {:?}", row.status);
            owner.kick();
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }
    stop.cancel();
    let conn = rusqlite::Connection::open(&path).unwrap();
    let fired: Vec<(String, i64)> = conn
        .prepare("SELECT execution_id, count(*) FROM inbox WHERE kind = ?1 GROUP BY 1")
        .unwrap()
        .query_map([orbit_store::InboxKind::Timer.as_str()], |r| Ok((r.get(0)?, r.get(1)?)))
        .unwrap()
        .collect::<Result<_, _>>()
        .unwrap();
    assert_eq!(fired.len(), ids.len(), "every execution's timer fired");
    assert!(fired.iter().all(|(_, n)| *n == 1), "a timer fired twice: {fired:?}");
    assert_eq!(store.next_timer_at().await.unwrap(), None, "no timer left");
}
