//! 1,000 schedules due in the same second: each starts exactly one execution, and the lag
//! from the due time to the execution's creation is printed (the figure in
//! docs/benchmarks.md; run with `--nocapture`). Real owner, real SQLite file, one real
//! scheduler on the system clock.

mod support;

use orbit_api::internal::v1::owner_service_server::OwnerService;
use orbit_owner::{system_clock, Clock};
use orbit_schedule::{ActionDef, IntervalDef, ScheduleDef, SpecDef};
use orbit_scheduler::Scheduler;
use orbit_store::{ExecutionFilter, ScheduleRow};
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::Notify;

const NAP: &str = "name: nap\nversion: '1'\nsteps: [ { id: z, sleep: 10ms } ]\n";
const SCHEDULES: usize = 1_000;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_thousand_schedules_due_in_one_second_each_start_once() {
    let dir = tempfile::tempdir().unwrap();
    let (store, owner, stop) = support::owner_with(dir.path(), NAP, None).await;
    // Hourly schedules whose next occurrence is the same whole second, 3 s from now.
    let due = (system_clock() / 1_000 + 3) * 1_000;
    let spec = ScheduleDef {
        spec: SpecDef {
            intervals: vec![IntervalDef { every_ms: 3_600_000, offset_ms: due % 3_600_000 }],
            ..SpecDef::default()
        },
        action: ActionDef { workflow: "nap".into(), ..ActionDef::default() },
    }
    .to_json();
    for i in 0..SCHEDULES {
        let row = ScheduleRow {
            schedule_id: format!("s{i:04}"),
            workflow: "nap".into(),
            spec: spec.clone(),
            next_fire_at_ms: Some(due),
            due_at_ms: Some(due),
            created_at_ms: system_clock(),
            updated_at_ms: system_clock(),
            ..ScheduleRow::default()
        };
        store.create_schedule(&row).await.unwrap();
    }
    let owners: Arc<dyn OwnerService> = Arc::new(owner);
    let scheduler = Scheduler::new(
        "scheduler-1",
        store.clone(),
        owners,
        Arc::new(Notify::new()),
        Clock::system(),
    );
    tokio::spawn({
        let (s, stop) = (scheduler.clone(), stop.clone());
        async move { s.run(stop).await }
    });

    let deadline = tokio::time::Instant::now() + Duration::from_secs(120);
    let rows = loop {
        let page = store
            .list_executions(ExecutionFilter { page_size: 1000, ..ExecutionFilter::default() })
            .await
            .unwrap();
        let mut rows = page.executions;
        let mut token = page.next_page_token;
        while let Some(t) = token {
            let next = store
                .list_executions(ExecutionFilter {
                    page_size: 1000,
                    page_token: Some(t),
                    ..ExecutionFilter::default()
                })
                .await
                .unwrap();
            rows.extend(next.executions);
            token = next.next_page_token;
        }
        // A fire is recorded after its start returns, so the last executions can be listed
        // a moment before their schedules' rows move on: wait for both.
        if rows.len() >= SCHEDULES && fires_recorded(&*store).await {
            break rows;
        }
        assert!(tokio::time::Instant::now() < deadline, "{} of {SCHEDULES} started", rows.len());
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    assert_eq!(rows.len(), SCHEDULES, "each schedule started exactly one execution");
    let mut lags: Vec<u64> = rows
        .iter()
        .map(|r| {
            let schedule = r.schedule_id.as_deref().expect("schedule id");
            assert_eq!(r.execution_id, orbit_schedule::execution_id(schedule, due));
            r.created_at_ms.saturating_sub(due)
        })
        .collect();
    lags.sort_unstable();
    let pct = |p: usize| lags[(lags.len() * p / 100).min(lags.len() - 1)];
    eprintln!(
        "schedule lag (due -> execution created), {SCHEDULES} due at once: p50 {} ms, p95 {} ms, p99 {} ms, max {} ms",
        pct(50),
        pct(95),
        pct(99),
        lags[lags.len() - 1]
    );
    for i in [0, SCHEDULES - 1] {
        let row = store.get_schedule(&format!("s{i:04}")).await.unwrap().unwrap();
        assert_eq!((row.fired_count, row.next_fire_at_ms), (1, Some(due + 3_600_000)));
    }
    stop.cancel();
}

/// Whether the first and the last schedule have recorded their fire.
async fn fires_recorded(store: &dyn orbit_store::Store) -> bool {
    for i in [0, SCHEDULES - 1] {
        let row = store.get_schedule(&format!("s{i:04}")).await.unwrap().unwrap();
        if row.fired_count == 0 {
            return false;
        }
    }
    true
}
