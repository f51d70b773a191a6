//! Helpers of the schedule tests: a workflow that needs no worker, a 1-second interval
//! spec, and reading the occurrences a schedule started (from the ids
//! `<schedule>:<occurrence RFC 3339>` of the executions `ListExecutions` returns for it).

// Tests read their environment (ORBIT_PYTHON, the database URL) and the wall clock
// (unique names, deadlines of real processes) directly.
#![allow(clippy::disallowed_methods)]

use orbit_api::v1 as pb;
use orbit_api::v1::schedule_service_client::ScheduleServiceClient;
use orbit_api::v1::workflow_service_client::WorkflowServiceClient;
use std::time::{Duration, Instant};
use tonic::transport::Channel;

/// A workflow that completes by itself shortly (no worker needed).
pub const NAP: &str = r#"
name: nap
version: "1"
steps:
  - { id: one, sleep: 100ms }
"#;

/// Every second, every missed occurrence within `window` fires (catch-up ALL), overlaps
/// allowed (a slow execution never makes an occurrence skip).
pub fn every_second(catch_up: pb::CatchUpPolicy, window: Duration) -> pb::ScheduleSpec {
    pb::ScheduleSpec {
        trigger: Some(pb::schedule_spec::Trigger::Interval(prost_types::Duration {
            seconds: 1,
            nanos: 0,
        })),
        overlap: pb::OverlapPolicy::Allow as i32,
        catch_up: catch_up as i32,
        catch_up_window: Some(prost_types::Duration {
            seconds: i64::try_from(window.as_secs()).unwrap_or(i64::MAX),
            nanos: 0,
        }),
        ..pb::ScheduleSpec::default()
    }
}

/// Creates schedule `id` starting `nap`.
pub async fn create(
    schedules: &mut ScheduleServiceClient<Channel>,
    id: &str,
    spec: pb::ScheduleSpec,
) -> pb::Schedule {
    let request = pb::CreateScheduleRequest {
        schedule_id: id.into(),
        spec: Some(spec),
        action: Some(pb::ScheduleAction {
            workflow: "nap".into(),
            version: String::new(),
            input: None,
        }),
        paused: false,
    };
    let created = schedules.create_schedule(request).await.expect("create schedule").into_inner();
    assert!(created.created);
    created.schedule.expect("schedule")
}

pub async fn get(schedules: &mut ScheduleServiceClient<Channel>, id: &str) -> pb::Schedule {
    let request = pb::GetScheduleRequest { schedule_id: id.into() };
    schedules
        .get_schedule(request)
        .await
        .expect("get schedule")
        .into_inner()
        .schedule
        .expect("schedule")
}

/// The occurrence (epoch seconds) each execution of schedule `id` names, sorted, with
/// duplicates kept (there must be none).
pub async fn occurrences(client: &mut WorkflowServiceClient<Channel>, id: &str) -> Vec<i64> {
    let mut out = Vec::new();
    let mut page_token = String::new();
    loop {
        let request = pb::ListExecutionsRequest {
            schedule_id: id.into(),
            page_size: 1000,
            page_token,
            ..pb::ListExecutionsRequest::default()
        };
        let page = client.list_executions(request).await.expect("list").into_inner();
        for e in &page.executions {
            assert_eq!(e.schedule_id, id, "{} records its schedule", e.execution_id);
            let at = e.execution_id.strip_prefix(&format!("{id}:")).expect("schedule id prefix");
            let ts: prost_types::Timestamp = at.parse().expect("RFC 3339 occurrence");
            assert_eq!(ts.nanos, 0, "a 1-second interval fires on whole seconds: {at}");
            out.push(ts.seconds);
        }
        if page.next_page_token.is_empty() {
            break;
        }
        page_token = page.next_page_token;
    }
    out.sort_unstable();
    out
}

/// Waits (bounded) until `done` holds for the occurrences of `id`; returns them.
pub async fn wait_for(
    client: &mut WorkflowServiceClient<Channel>,
    id: &str,
    within: Duration,
    what: &str,
    done: impl Fn(&[i64]) -> bool,
) -> Vec<i64> {
    let deadline = Instant::now() + within;
    loop {
        let seen = occurrences(client, id).await;
        if done(&seen) {
            return seen;
        }
        assert!(Instant::now() < deadline, "{what}: not within {within:?}; occurrences {seen:?}");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// Asserts the occurrences are consecutive seconds, each once.
pub fn assert_consecutive(seen: &[i64], what: &str) {
    for pair in seen.windows(2) {
        assert_eq!(
            pair[1] - pair[0],
            1,
            "{what}: occurrences not consecutive or repeated: {seen:?}"
        );
    }
}

pub fn now_secs() -> i64 {
    let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).expect("clock");
    i64::try_from(now.as_secs()).expect("seconds")
}
