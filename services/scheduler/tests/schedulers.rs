//! Several schedulers on one store: every durable timer fires exactly once, not before it is
//! due, and every execution waiting on one carries on. Real owner, real SQLite file, real
//! schedulers, on a domain clock the test moves by hand (no timer is waited for in real
//! time).

mod support;

use orbit_api::internal::v1 as pb;
use orbit_api::internal::v1::owner_service_server::OwnerService;
use orbit_api::internal::v1::scheduler_service_server::SchedulerService;
use orbit_owner::{Clock, StartRequest};
use orbit_scheduler::Scheduler;
use orbit_server_kit::payload::opt_timestamp_to_ms;
use serde_json::json;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::Notify;

const NAP: &str = "name: nap\nversion: '1'\nsteps: [ { id: z, sleep: 150ms } ]\noutput: rested\n";

/// Where the test's clock starts (ms since the epoch).
const T0: u64 = 1_700_000_000_000;

/// The domain clock the owner and the schedulers read (this binary holds one test).
static NOW: AtomicU64 = AtomicU64::new(T0);

fn now() -> u64 {
    NOW.load(Ordering::SeqCst)
}

/// Waits (up to 10 s) until `scheduler`'s latest scan ran at `at` by the test's clock.
async fn scanned_at(scheduler: &Scheduler, at: u64) {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    loop {
        let status = scheduler.status(tonic::Request::new(pb::StatusRequest {})).await.unwrap();
        let status = status.into_inner();
        if opt_timestamp_to_ms(status.last_scan_at.as_ref()).unwrap() == Some(at) {
            assert_eq!(status.due_timers, 0, "nothing is due at {at}");
            return;
        }
        assert!(tokio::time::Instant::now() < deadline, "{} never scanned at {at}", status.node_id);
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

/// Timer rows turned into `timer` inbox entries so far, per execution.
fn fired(path: &std::path::Path) -> Vec<(String, i64)> {
    let conn = rusqlite::Connection::open(path).unwrap();
    let mut query = conn
        .prepare("SELECT execution_id, count(*) FROM inbox WHERE kind = ?1 GROUP BY 1")
        .unwrap();
    let kind = orbit_store::InboxKind::Timer.as_str();
    let rows = query.query_map([kind], |r| Ok((r.get(0)?, r.get(1)?))).unwrap();
    rows.collect::<Result<_, _>>().unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn three_schedulers_fire_each_timer_once() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("orbit.db");
    let (store, owner, stop) =
        support::owner_with(dir.path(), NAP, Some(Clock::from_fn(now))).await;
    let owners: Arc<dyn OwnerService> = Arc::new(owner.clone());
    // Each scheduler has its own wake-up, as separate processes would; the test plays the
    // database notification that tells all of them timers changed.
    let mut wakes = Vec::new();
    let mut schedulers = Vec::new();
    for i in 0..3 {
        let wake = Arc::new(Notify::new());
        wakes.push(wake.clone());
        let s = Scheduler::new(
            &format!("scheduler-{i}"),
            store.clone(),
            owners.clone(),
            wake,
            Clock::from_fn(now),
        );
        schedulers.push(s.clone());
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
                fork: None,
                priority: None,
                memo: None,
                update: None,
                versions_seen: None,
            })
            .await
            .unwrap();
    }
    assert_eq!(store.next_timer_at().await.unwrap(), Some(T0 + 150), "due by the owner's clock");

    // 50 ms before the due time every scheduler scans and fires nothing. A scheduler's
    // scans are sequential: one seen at `early + 1` means its scan at `early` committed.
    let early = T0 + 100;
    for at in [early, early + 1] {
        NOW.store(at, Ordering::SeqCst);
        for w in &wakes {
            w.notify_one();
        }
        for s in &schedulers {
            scanned_at(s, at).await;
        }
    }
    assert!(fired(&path).is_empty(), "a timer fired early: {:?}", fired(&path));
    assert_eq!(store.next_timer_at().await.unwrap(), Some(T0 + 150));

    // Due: each timer fires once, and each execution completes at the due time.
    NOW.store(T0 + 150, Ordering::SeqCst);
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
    for id in &ids {
        let history = store.load_history(id, 1).await.unwrap();
        assert_eq!(history.last().unwrap().timestamp_ms, T0 + 150, "{id} woke at its due time");
    }
    stop.cancel();
    let fired = fired(&path);
    assert_eq!(fired.len(), ids.len(), "every execution's timer fired");
    assert!(fired.iter().all(|(_, n)| *n == 1), "a timer fired twice: {fired:?}");
    assert_eq!(store.next_timer_at().await.unwrap(), None, "no timer left");
}
