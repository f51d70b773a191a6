//! The scheduler firing schedules on a domain clock the test moves by hand: every overlap
//! policy against a long-running execution, the remaining-actions limit, pause and resume
//! with catch-up. Real owner, real SQLite file, a real scheduler loop.

mod support;

use orbit_api::internal::v1 as pb;
use orbit_api::internal::v1::owner_service_server::OwnerService;
use orbit_api::internal::v1::scheduler_service_server::SchedulerService;
use orbit_owner::Clock;
use orbit_schedule::{ActionDef, CatchUp, IntervalDef, Overlap, ScheduleDef, SpecDef};
use orbit_scheduler::Scheduler;
use orbit_server_kit::payload::opt_timestamp_to_ms;
use orbit_store::{ExecutionFilter, ScheduleRow, Store};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::Notify;

/// Sleeps an hour of the domain clock: running for the whole test.
const LONG: &str = "name: long\nversion: '1'\nsteps: [ { id: z, sleep: 1h } ]\n";

const T0: u64 = 1_700_000_000_000;
static NOW: AtomicU64 = AtomicU64::new(T0);

fn now() -> u64 {
    NOW.load(Ordering::SeqCst)
}

fn row(id: &str, overlap: Overlap, remaining: Option<u64>) -> ScheduleRow {
    let def = ScheduleDef {
        spec: SpecDef {
            intervals: vec![IntervalDef { every_ms: 1_000, offset_ms: 0 }],
            overlap,
            catch_up: CatchUp::All,
            remaining_actions: remaining,
            ..SpecDef::default()
        },
        action: ActionDef { workflow: "long".into(), ..ActionDef::default() },
    };
    ScheduleRow {
        schedule_id: id.into(),
        workflow: "long".into(),
        spec: def.to_json(),
        next_fire_at_ms: Some(T0 + 1_000),
        due_at_ms: Some(T0 + 1_000),
        remaining,
        created_at_ms: T0,
        updated_at_ms: T0,
        ..ScheduleRow::default()
    }
}

/// Moves the clock to `at` and waits until the scheduler's pass at `at` finished (a scan
/// seen at `at + 1` follows it; nothing is due at `at + 1`).
async fn tick(scheduler: &Scheduler, wake: &Notify, at: u64) {
    for t in [at, at + 1] {
        NOW.store(t, Ordering::SeqCst);
        wake.notify_one();
        let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
        loop {
            let status = scheduler.status(tonic::Request::new(pb::StatusRequest {})).await.unwrap();
            if opt_timestamp_to_ms(status.into_inner().last_scan_at.as_ref()).unwrap() == Some(t) {
                break;
            }
            assert!(tokio::time::Instant::now() < deadline, "no scan at {t}");
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    }
}

/// Executions of `schedule`, by id.
async fn executions(store: &Arc<dyn Store>, schedule: &str) -> Vec<(String, orbit_engine::Status)> {
    let page = store
        .list_executions(ExecutionFilter { page_size: 1000, ..ExecutionFilter::default() })
        .await
        .unwrap();
    let mut out: Vec<_> = page
        .executions
        .into_iter()
        .filter(|e| e.schedule_id.as_deref() == Some(schedule))
        .map(|e| (e.execution_id, e.status))
        .collect();
    out.sort_by(|a, b| a.0.cmp(&b.0));
    out
}

fn id(schedule: &str, secs: u64) -> String {
    orbit_schedule::execution_id(schedule, T0 + secs * 1_000)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn overlap_policies_limits_and_pauses_on_a_moved_clock() {
    let dir = tempfile::tempdir().unwrap();
    let (store, owner, stop) =
        support::owner_with(dir.path(), LONG, Some(Clock::from_fn(now))).await;
    let owners: Arc<dyn OwnerService> = Arc::new(owner);
    let wake = Arc::new(Notify::new());
    let scheduler =
        Scheduler::new("scheduler-1", store.clone(), owners, wake.clone(), Clock::from_fn(now));
    tokio::spawn({
        let (s, stop) = (scheduler.clone(), stop.clone());
        async move { s.run(stop).await }
    });

    for (name, overlap, limit) in [
        ("skip", Overlap::Skip, None),
        ("allow", Overlap::AllowAll, None),
        ("cancel", Overlap::CancelOther, None),
        ("terminate", Overlap::TerminateOther, None),
        ("buffer1", Overlap::BufferOne, None),
        ("bufferall", Overlap::BufferAll, None),
        ("limit", Overlap::AllowAll, Some(2)),
    ] {
        store.create_schedule(&row(name, overlap, limit)).await.unwrap();
    }
    // Not due before its time (the tick also scans at T0 + 999).
    tick(&scheduler, &wake, T0 + 998).await;
    assert!(executions(&store, "allow").await.is_empty());
    for s in 1..=3 {
        tick(&scheduler, &wake, T0 + s * 1_000).await;
    }
    let ids =
        |v: Vec<(String, orbit_engine::Status)>| v.into_iter().map(|e| e.0).collect::<Vec<_>>();
    // The first execution runs an hour: SKIP starts one and skips two.
    assert_eq!(ids(executions(&store, "skip").await), [id("skip", 1)]);
    let skip = store.get_schedule("skip").await.unwrap().unwrap();
    assert_eq!((skip.fired_count, skip.skipped_count), (1, 2));
    assert_eq!(
        ids(executions(&store, "allow").await),
        [id("allow", 1), id("allow", 2), id("allow", 3)]
    );
    // BUFFER_ONE keeps one waiting and skips the third; BUFFER_ALL keeps both.
    assert_eq!(ids(executions(&store, "buffer1").await), [id("buffer1", 1)]);
    let b1 = store.get_schedule("buffer1").await.unwrap().unwrap();
    assert_eq!((b1.buffered.clone(), b1.skipped_count), (vec![T0 + 2_000], 1));
    let ball = store.get_schedule("bufferall").await.unwrap().unwrap();
    assert_eq!(ball.buffered, vec![T0 + 2_000, T0 + 3_000]);
    // The limit: two starts, then the schedule has ended.
    assert_eq!(ids(executions(&store, "limit").await), [id("limit", 1), id("limit", 2)]);
    let limit = store.get_schedule("limit").await.unwrap().unwrap();
    assert_eq!((limit.remaining, limit.next_fire_at_ms), (Some(0), None));
    // CANCEL_PREVIOUS and TERMINATE_PREVIOUS: three starts, the earlier two stopped.
    for (name, stopped) in [
        ("cancel", orbit_engine::Status::Cancelled),
        ("terminate", orbit_engine::Status::Cancelled),
    ] {
        let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
        loop {
            let got = executions(&store, name).await;
            assert_eq!(ids(got.clone()), [id(name, 1), id(name, 2), id(name, 3)]);
            let statuses: Vec<_> = got.iter().map(|e| e.1).collect();
            if statuses[0].is_closed() && statuses[1].is_closed() {
                assert_eq!(statuses[2], orbit_engine::Status::Running, "{name}");
                if name == "cancel" {
                    assert_eq!(statuses[0], stopped, "{name}");
                }
                break;
            }
            assert!(
                tokio::time::Instant::now() < deadline,
                "{name}: previous not stopped: {statuses:?}"
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    // Pause: nothing fires; resume: catch-up ALL fires the paused seconds, ids in order.
    store.set_schedule_paused("allow", true, "test", now()).await.unwrap();
    for s in 4..=5 {
        tick(&scheduler, &wake, T0 + s * 1_000).await;
    }
    assert_eq!(executions(&store, "allow").await.len(), 3, "nothing fires while paused");
    store.set_schedule_paused("allow", false, "", now()).await.unwrap();
    tick(&scheduler, &wake, T0 + 6_000).await;
    assert_eq!(
        ids(executions(&store, "allow").await),
        (1..=6).map(|s| id("allow", s)).collect::<Vec<_>>()
    );
    stop.cancel();
}
