//! Schedules on `orbit dev` through the real binary: a 1-second schedule fires every
//! occurrence once with consecutive ids, pauses and resumes (missed occurrences follow the
//! catch-up policy), and survives `kill -9`: after the restart the occurrences missed while
//! the process was down fire per the catch-up policy (ALL: every one; ONE: the latest) and
//! none fires twice. Plus the API's errors and preview.

// Tests read their environment (ORBIT_PYTHON, the database URL) and the wall clock
// (unique names, deadlines of real processes) directly.
#![allow(clippy::disallowed_methods)]

mod common;

use common::bearer::Bearer;

use common::schedules::*;
use orbit_api::v1 as pb;
use orbit_api::v1::schedule_service_client::ScheduleServiceClient;
use std::time::Duration;

async fn dev(dir: &common::TempDir, port: u16) -> common::Server {
    common::Server::start_on(&dir.0.join("orbit.db"), port, &[]).await
}

async fn schedule_client(
    server: &common::Server,
) -> ScheduleServiceClient<tonic::transport::Channel> {
    ScheduleServiceClient::connect(server.address()).await.expect("connect")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_one_second_schedule_fires_each_occurrence_once_and_pauses() {
    let dir = common::TempDir::new("schedule-tick");
    let server = dev(&dir, common::free_port()).await;
    let mut c = server.client().await;
    common::register(&mut c, NAP).await;
    let mut s = schedule_client(&server).await;
    create(&mut s, "tick", every_second(pb::CatchUpPolicy::All, Duration::from_secs(60))).await;
    let seen = wait_for(&mut c, "tick", Duration::from_secs(30), "3 fires", |o| o.len() >= 3).await;
    assert_consecutive(&seen, "running");

    let paused = s
        .pause_schedule(pb::PauseScheduleRequest {
            schedule_id: "tick".into(),
            note: "test".into(),
        })
        .await
        .expect("pause")
        .into_inner()
        .schedule
        .expect("schedule");
    let state = paused.state.expect("state");
    assert!(state.paused);
    assert_eq!(state.note, "test");
    // A fire already under way when the pause landed may still finish: settle, then
    // nothing starts while paused.
    tokio::time::sleep(Duration::from_millis(1500)).await;
    let before = occurrences(&mut c, "tick").await;
    tokio::time::sleep(Duration::from_secs(3)).await;
    assert_eq!(occurrences(&mut c, "tick").await, before, "nothing fires while paused");

    s.resume_schedule(pb::ResumeScheduleRequest { schedule_id: "tick".into() })
        .await
        .expect("resume");
    // Catch-up ALL: the occurrences missed while paused fire too, so the ids stay
    // consecutive across the pause, and new ones follow.
    let resumed_at = now_secs();
    let seen = wait_for(&mut c, "tick", Duration::from_secs(30), "fires after resume", |o| {
        o.last().is_some_and(|&l| l > resumed_at)
    })
    .await;
    assert_consecutive(&seen, "across the pause");
    assert!(seen.len() > before.len() + 3, "the paused seconds were caught up: {seen:?}");

    // Progress: every start counted once (counted only when it created the execution).
    s.pause_schedule(pb::PauseScheduleRequest { schedule_id: "tick".into(), note: String::new() })
        .await
        .expect("pause");
    tokio::time::sleep(Duration::from_millis(1500)).await;
    let all = occurrences(&mut c, "tick").await;
    let state = get(&mut s, "tick").await.state.expect("state");
    assert_eq!(state.fired_count, all.len() as u64);
    assert_eq!(state.last_execution_id, format!("tick:{}", rfc3339(*all.last().unwrap())));

    // Trigger is idempotent by execution id and counted; delete, then not found.
    let trigger =
        pb::TriggerScheduleRequest { schedule_id: "tick".into(), execution_id: "manual-1".into() };
    assert!(s.trigger_schedule(trigger.clone()).await.expect("trigger").into_inner().created);
    assert!(!s.trigger_schedule(trigger).await.expect("trigger again").into_inner().created);
    assert_eq!(get(&mut s, "tick").await.state.expect("state").fired_count, all.len() as u64 + 1);
    s.delete_schedule(pb::DeleteScheduleRequest { schedule_id: "tick".into() })
        .await
        .expect("delete");
    let gone =
        s.get_schedule(pb::GetScheduleRequest { schedule_id: "tick".into() }).await.unwrap_err();
    assert_eq!(common::code(&gone), "SCHEDULE_NOT_FOUND");
}

fn rfc3339(secs: i64) -> String {
    prost_types::Timestamp { seconds: secs, nanos: 0 }.to_string()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kill_9_for_five_seconds_misses_nothing_and_fires_nothing_twice() {
    let dir = common::TempDir::new("schedule-kill");
    let port = common::free_port();
    let mut server = dev(&dir, port).await;
    let mut c = server.client().await;
    common::register(&mut c, NAP).await;
    let mut s = schedule_client(&server).await;
    create(&mut s, "all", every_second(pb::CatchUpPolicy::All, Duration::from_secs(60))).await;
    create(&mut s, "one", every_second(pb::CatchUpPolicy::One, Duration::from_secs(60))).await;
    wait_for(&mut c, "all", Duration::from_secs(30), "2 fires", |o| o.len() >= 2).await;
    wait_for(&mut c, "one", Duration::from_secs(30), "2 fires", |o| o.len() >= 2).await;

    server.kill9();
    let killed_at = now_secs();
    tokio::time::sleep(Duration::from_secs(5)).await;
    let server = dev(&dir, port).await;
    let restarted_at = now_secs();
    let mut c = server.client().await;
    let mut s = schedule_client(&server).await;

    // ALL: every second of the outage fires once after the restart, ids consecutive.
    let seen = wait_for(&mut c, "all", Duration::from_secs(30), "catch-up ALL", |o| {
        o.last().is_some_and(|&l| l >= restarted_at + 2)
    })
    .await;
    assert_consecutive(&seen, "catch-up ALL across kill -9");
    assert!(
        seen.iter().any(|&o| o > killed_at && o < restarted_at),
        "outage seconds fired: {seen:?}"
    );
    // ONE: the missed seconds but the latest are skipped (counted), nothing twice.
    let seen = wait_for(&mut c, "one", Duration::from_secs(30), "catch-up ONE", |o| {
        o.last().is_some_and(|&l| l >= restarted_at + 2)
    })
    .await;
    let gaps: Vec<i64> = seen.windows(2).map(|p| p[1] - p[0]).collect();
    assert!(gaps.iter().all(|&g| g >= 1), "no occurrence twice: {seen:?}");
    assert!(gaps.iter().any(|&g| g >= 3), "catch-up ONE drops missed occurrences: {seen:?}");
    let state = get(&mut s, "one").await.state.expect("state");
    assert!(state.skipped_count >= 2, "the dropped occurrences are counted: {state:?}");
    let all_state = get(&mut s, "all").await.state.expect("state");
    assert_eq!(all_state.skipped_count, 0, "{all_state:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_specs_name_the_field_and_preview_applies_the_dst_rules() {
    let dir = common::TempDir::new("schedule-api");
    let server = dev(&dir, common::free_port()).await;
    let mut c = server.client().await;
    common::register(&mut c, NAP).await;
    let mut s = schedule_client(&server).await;
    let cron = |expr: &str, zone: &str| pb::ScheduleSpec {
        trigger: Some(pb::schedule_spec::Trigger::Cron(expr.into())),
        timezone: zone.into(),
        ..pb::ScheduleSpec::default()
    };
    let create = |id: &str, spec: pb::ScheduleSpec, workflow: &str| pb::CreateScheduleRequest {
        schedule_id: id.into(),
        spec: Some(spec),
        action: Some(pb::ScheduleAction { workflow: workflow.into(), ..Default::default() }),
        paused: false,
    };
    let err = s.create_schedule(create("bad", cron("61 * * * *", ""), "nap")).await.unwrap_err();
    assert_eq!(common::code(&err), "INVALID_ARGUMENT");
    assert!(err.message().starts_with("spec.cron:"), "{}", err.message());
    let err =
        s.create_schedule(create("bad", cron("@daily", "Mars/Olympus"), "nap")).await.unwrap_err();
    assert!(err.message().starts_with("spec.timezone:"), "{}", err.message());
    let err = s.create_schedule(create("bad id", cron("@daily", ""), "nap")).await.unwrap_err();
    assert!(err.message().starts_with("schedule_id:"), "{}", err.message());
    let err = s.create_schedule(create("x", cron("@daily", ""), "missing")).await.unwrap_err();
    assert_eq!(common::code(&err), "WORKFLOW_NOT_FOUND");
    // Idempotent by id: the same spec again is `created = false`, another one conflicts.
    assert!(
        s.create_schedule(create("d", cron("@daily", ""), "nap"))
            .await
            .unwrap()
            .into_inner()
            .created
    );
    assert!(
        !s.create_schedule(create("d", cron("@daily", ""), "nap"))
            .await
            .unwrap()
            .into_inner()
            .created
    );
    let err = s.create_schedule(create("d", cron("@hourly", ""), "nap")).await.unwrap_err();
    assert_eq!(common::code(&err), "SCHEDULE_EXISTS");

    // Berlin's spring forward: 02:30 does not exist on 29 March 2026 and fires at 03:00.
    let preview = pb::PreviewScheduleRequest {
        spec: Some(cron("30 2 * * *", "Europe/Berlin")),
        count: 2,
        after: Some("2026-03-28T12:00:00Z".parse().unwrap()),
        schedule_id: String::new(),
    };
    let times = s.preview_schedule(preview).await.unwrap().into_inner().fire_times;
    let times: Vec<String> = times.iter().map(ToString::to_string).collect();
    assert_eq!(times, ["2026-03-29T01:00:00Z", "2026-03-30T00:30:00Z"]);

    // Backfill starts the range's occurrences with the scheduled ids; again, nothing new.
    let backfill = pb::BackfillScheduleRequest {
        schedule_id: "d".into(),
        start_at: Some("2026-01-01T00:00:00Z".parse().unwrap()),
        end_at: Some("2026-01-04T00:00:00Z".parse().unwrap()),
        overlap: 0,
    };
    let first = s.backfill_schedule(backfill.clone()).await.unwrap().into_inner();
    let want = ["d:2026-01-01T00:00:00Z", "d:2026-01-02T00:00:00Z", "d:2026-01-03T00:00:00Z"];
    assert_eq!((first.execution_ids.clone(), first.started), (want.map(String::from).to_vec(), 3));
    let again = s.backfill_schedule(backfill.clone()).await.unwrap().into_inner();
    assert_eq!((again.execution_ids.clone(), again.started), (want.map(String::from).to_vec(), 0));
    let buffered =
        pb::BackfillScheduleRequest { overlap: pb::OverlapPolicy::BufferAll as i32, ..backfill };
    let err = s.backfill_schedule(buffered).await.unwrap_err();
    assert!(err.message().starts_with("overlap:"), "{}", err.message());

    // The CLI: one JSON document, the same DST rule.
    let mut cli = std::process::Command::new(env!("CARGO_BIN_EXE_orbit"));
    cli.args(["schedule", "preview", "--cron", "30 1 * * *", "--timezone", "America/New_York"]);
    cli.args(["--after", "2026-10-31T12:00:00Z", "--count", "2", "--output", "json"]);
    cli.args(["--address", &server.address()]);
    let (ok, out, err) = common::run_bounded(&mut cli, Duration::from_secs(30));
    assert!(ok, "orbit schedule preview failed: {err}");
    let doc: serde_json::Value = serde_json::from_str(&out).expect("one JSON document");
    assert_eq!(
        doc["fire_times"],
        serde_json::json!(["2026-11-01T05:30:00Z", "2026-11-02T06:30:00Z"])
    );
    let mut cli = std::process::Command::new(env!("CARGO_BIN_EXE_orbit"));
    cli.args(["schedule", "get", "d", "--output", "json", "--address", &server.address()]);
    let (ok, out, err) = common::run_bounded(&mut cli, Duration::from_secs(30));
    assert!(ok, "orbit schedule get failed: {err}");
    let doc: serde_json::Value = serde_json::from_str(&out).expect("one JSON document");
    assert_eq!(doc["schedule"]["state"]["fired_count"], 3, "backfilled starts count: {doc}");
    assert_eq!(doc["schedule"]["spec"]["recurrences"][0]["cron"], "@daily");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_restricted_client_sees_and_manages_only_its_workflows_schedules() {
    use orbit_auth::token::hash_token_hex;
    use tonic::service::interceptor::InterceptedService;
    let dir = common::TempDir::new("schedule-scope");
    let ids = dir.0.join("identities.yaml");
    let entry = |name: &str, kind: &str, extra: &str| {
        format!(
            "  - name: {name}\n    kind: {kind}\n    token_sha256: {}\n{extra}",
            hash_token_hex(&format!("t-{name}"))
        )
    };
    let file = [
        "identities:\n".to_owned(),
        entry("ops", "admin", ""),
        entry(
            "billing",
            "client",
            "    actions: [admin, read, start]\n    workflows: ['billing.*']\n",
        ),
    ]
    .concat();
    std::fs::write(&ids, file).unwrap();
    let port = common::free_port();
    let child = std::process::Command::new(env!("CARGO_BIN_EXE_orbit"))
        .args(["dev", "--db"])
        .arg(dir.0.join("orbit.db"))
        .args(["--listen", &format!("127.0.0.1:{port}"), "--log", "warn", "--identities"])
        .arg(&ids)
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::inherit())
        .spawn()
        .expect("spawn orbit dev");
    let _server = common::Server { child, port, db: dir.0.join("orbit.db") };
    let channel = tonic::transport::Channel::from_shared(format!("http://127.0.0.1:{port}"))
        .expect("address")
        .connect_lazy();
    // Ready once the admin can list workflows.
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    loop {
        let mut c = orbit_api::v1::workflow_service_client::WorkflowServiceClient::new(
            InterceptedService::new(channel.clone(), Bearer("t-ops".into())),
        );
        if c.list_workflows(pb::ListWorkflowsRequest::default()).await.is_ok() {
            break;
        }
        assert!(std::time::Instant::now() < deadline, "orbit dev --identities not ready");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let as_ = |name: &str| {
        ScheduleServiceClient::new(InterceptedService::new(
            channel.clone(),
            Bearer(format!("t-{name}")),
        ))
    };
    let mut workflows = orbit_api::v1::workflow_service_client::WorkflowServiceClient::new(
        InterceptedService::new(channel.clone(), Bearer("t-ops".into())),
    );
    for name in ["billing.nap", "shipping.nap"] {
        let doc = NAP.replace("name: nap", &format!("name: {name}"));
        let request = pb::RegisterWorkflowRequest { document: doc, format: 0 };
        workflows.register_workflow(request).await.expect("register");
    }
    let daily = |id: &str, workflow: &str| pb::CreateScheduleRequest {
        schedule_id: id.into(),
        spec: Some(pb::ScheduleSpec {
            trigger: Some(pb::schedule_spec::Trigger::Cron("@daily".into())),
            ..pb::ScheduleSpec::default()
        }),
        action: Some(pb::ScheduleAction { workflow: workflow.into(), ..Default::default() }),
        paused: false,
    };
    let (mut ops, mut billing) = (as_("ops"), as_("billing"));
    ops.create_schedule(daily("ship", "shipping.nap")).await.expect("admin creates");
    ops.create_schedule(daily("bill", "billing.nap")).await.expect("admin creates");

    let listed =
        billing.list_schedules(pb::ListSchedulesRequest::default()).await.unwrap().into_inner();
    let listed: Vec<_> = listed.schedules.iter().map(|s| s.schedule_id.as_str()).collect();
    assert_eq!(listed, ["bill"], "only its workflows' schedules are listed");
    let get = billing
        .get_schedule(pb::GetScheduleRequest { schedule_id: "ship".into() })
        .await
        .unwrap_err();
    assert_eq!(common::code(&get), "SCHEDULE_NOT_FOUND", "another workflow's schedule is hidden");
    let pause = pb::PauseScheduleRequest { schedule_id: "ship".into(), note: String::new() };
    assert_eq!(
        common::code(&billing.pause_schedule(pause).await.unwrap_err()),
        "SCHEDULE_NOT_FOUND"
    );
    let delete = pb::DeleteScheduleRequest { schedule_id: "ship".into() };
    assert_eq!(
        common::code(&billing.delete_schedule(delete).await.unwrap_err()),
        "SCHEDULE_NOT_FOUND"
    );
    let create = billing.create_schedule(daily("mine", "shipping.nap")).await.unwrap_err();
    assert_eq!(common::code(&create), "PERMISSION_DENIED");
    // Its own workflow's schedules it manages.
    let trigger =
        pb::TriggerScheduleRequest { schedule_id: "bill".into(), execution_id: "bill-now".into() };
    assert!(billing.trigger_schedule(trigger).await.expect("trigger").into_inner().created);
    assert!(ops.get_schedule(pb::GetScheduleRequest { schedule_id: "ship".into() }).await.is_ok());
}
