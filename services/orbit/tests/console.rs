//! The web console (`/ui` on the admin port) of a real `orbit dev` holding executions in
//! every state, made by a real worker: the JSON gateway answers what the gRPC API answers
//! (filters, paging with the list's page token, describe, history, signal, query, replay,
//! workers, task queues, schedules, cluster) and its errors carry Orbit's codes; with an
//! identities file, calls without a valid token are refused 401 and an identity without
//! read actions 403. Then headless Chromium opens every page, clicks from the list to the
//! failed execution and its failed attempt, sends a signal from the page, scrubs that
//! execution's history back to before the signal (time travel), resets an execution that
//! failed in a buggy step once its worker is fixed (it completes as run 2), forks another
//! at a past seq, migrates waiting executions with a batch (a dry run answering each, then
//! the batch's page until it completes), and saves screenshots (`ORBIT_CONSOLE_SHOTS=docs/img` keeps them, as
//! committed in the docs).

// Tests read their environment (ORBIT_PYTHON, the database URL) and the wall clock
// (unique names, deadlines of real processes) directly.
#![allow(clippy::disallowed_methods)]

mod common;

use common::console::*;
use orbit_api::v1 as pb;
use orbit_api::v1::schedule_service_client::ScheduleServiceClient;
use serde_json::{json, Value};
use std::collections::BTreeSet;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;
use tokio_util::sync::CancellationToken;

const WAIT: Duration = Duration::from_secs(60);

/// `orbit dev` with its admin port on a known address, plus `extra` flags.
async fn dev(dir: &common::TempDir, extra: &[&str]) -> (common::Server, String) {
    let admin = format!("127.0.0.1:{}", common::free_port());
    let mut flags = vec!["--admin-listen", admin.as_str()];
    flags.extend_from_slice(extra);
    let server = common::Server::start(&dir.0.join("orbit.db"), &flags).await;
    (server, admin)
}

/// Where screenshots go: `$ORBIT_CONSOLE_SHOTS` (the docs' folder when refreshing them), else
/// the test's temporary folder.
fn shots(dir: &common::TempDir) -> std::path::PathBuf {
    std::env::var("ORBIT_CONSOLE_SHOTS").map_or_else(|_| dir.0.join("shots"), Into::into)
}

/// A proto JSON `uint64` (a string, or a number).
fn uint(v: &Value) -> u64 {
    v.as_str().map_or_else(|| v.as_u64().expect("a count"), |s| s.parse().expect("a count"))
}

fn ids(list: &Value) -> Vec<String> {
    list["executions"]
        .as_array()
        .expect("executions")
        .iter()
        .map(|x| x["executionId"].as_str().expect("id").to_string())
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_json_gateway_answers_like_the_api() {
    let dir = common::TempDir::new("console-api");
    let (server, admin) = dev(&dir, &[]).await;
    let stop = CancellationToken::new();
    worker(&server.address(), None, &stop);
    let mut c = server.client().await;
    let mut s = ScheduleServiceClient::connect(server.address()).await.expect("connect");
    scenario(&mut c, &mut s).await;

    // The shell and its assets are served from the binary.
    let (status, page) = http(&admin, "GET", "/ui/executions?status=FAILED", "", None).await;
    assert_eq!(status, 200);
    assert!(page.contains("/ui/assets/app.js"), "{page}");
    assert_eq!(http(&admin, "GET", "/ui/assets/gantt.js", "", None).await.0, 200);
    assert_eq!(http(&admin, "GET", "/ui/assets/nope.js", "", None).await.0, 404);
    assert_eq!(http(&admin, "GET", "/ui/api/config", "", None).await.1.trim(), r#"{"auth":false}"#);

    // Filters: status, workflow.
    let (status, failed) = api(
        &admin,
        "WorkflowService/ListExecutions",
        &json!({"statuses": ["EXECUTION_STATUS_FAILED"]}),
        None,
    )
    .await;
    assert_eq!(status, 200, "{failed}");
    assert_eq!(ids(&failed), vec![FAILED.to_string()]);
    let (_, running) = api(
        &admin,
        "WorkflowService/ListExecutions",
        &json!({"statuses": ["EXECUTION_STATUS_RUNNING"], "workflow": "console-demo"}),
        None,
    )
    .await;
    let running: BTreeSet<_> = ids(&running).into_iter().collect();
    assert_eq!(running, [WAITING, SLEEPING, QUEUED].iter().map(ToString::to_string).collect());

    // Counts by status through the gateway, and a bad group refused with its field.
    let (status, counted) = api(
        &admin,
        "WorkflowService/CountExecutions",
        &json!({"query": "workflow = 'console-demo'", "groupBy": ["status"]}),
        None,
    )
    .await;
    assert_eq!(status, 200, "{counted}");
    let groups = counted["groups"].as_array().expect("groups");
    let failed_count = groups.iter().find(|g| g["values"] == json!(["FAILED"]));
    assert!(failed_count.is_some(), "{counted}");
    let sum: u64 = groups.iter().map(|g| uint(&g["count"])).sum();
    assert_eq!(sum, uint(&counted["count"]), "{counted}");
    assert!(sum >= 1, "{counted}");
    let (status, refused) =
        api(&admin, "WorkflowService/CountExecutions", &json!({"groupBy": ["execution_id"]}), None)
            .await;
    assert_eq!(status, 400, "{refused}");

    // Paging with the list's own token: pages of 2 cover every execution once.
    let mut seen = Vec::new();
    let mut token = String::new();
    loop {
        let (_, page) = api(
            &admin,
            "WorkflowService/ListExecutions",
            &json!({"pageSize": 2, "pageToken": token}),
            None,
        )
        .await;
        let got = ids(&page);
        assert!(got.len() <= 2);
        seen.extend(got);
        token = page["nextPageToken"].as_str().expect("token").to_string();
        if token.is_empty() {
            break;
        }
    }
    let unique: BTreeSet<_> = seen.iter().cloned().collect();
    assert_eq!((seen.len(), unique.len()), (7, 7), "{seen:?}");

    // One execution: the failed one's error and its failed attempts in the history.
    let (_, described) =
        api(&admin, "WorkflowService/DescribeExecution", &json!({"executionId": FAILED}), None)
            .await;
    let d = &described["execution"];
    assert_eq!(d["info"]["status"], "EXECUTION_STATUS_FAILED");
    assert_eq!(d["error"]["code"], "DEMO_FAILED", "{d}");
    let (_, history) =
        api(&admin, "WorkflowService/GetHistory", &json!({"executionId": FAILED}), None).await;
    let failed_attempts: Vec<_> = history["events"]
        .as_array()
        .expect("events")
        .iter()
        .filter(|e| e["eventType"] == "StepAttemptFailed")
        .map(|e| e["payload"]["attempt"].as_f64().expect("attempt"))
        .collect();
    assert_eq!(failed_attempts, vec![1.0, 2.0]);

    // Actions: query, signal (then the execution completes), replay check.
    let (status, q) = api(
        &admin,
        "WorkflowService/QueryExecution",
        &json!({"executionId": WAITING, "name": "mode"}),
        None,
    )
    .await;
    assert_eq!((status, &q["result"]), (200, &json!("wait")), "{q}");
    let (status, sent) = api(
        &admin,
        "WorkflowService/SignalExecution",
        &json!({"executionId": WAITING, "name": "approve", "payload": {"by": "console"}}),
        None,
    )
    .await;
    assert_eq!(status, 200, "{sent}");
    assert_eq!(common::result(&mut c, WAITING, WAIT).await.0, pb::ExecutionStatus::Completed);
    let (status, replay) =
        api(&admin, "AdminService/Replay", &json!({"executionId": RETRIED}), None).await;
    assert_eq!((status, &replay["ok"]), (200, &json!(true)), "{replay}");

    // Batches are routed: a dry run answers each RUNNING demo execution (the signalled one
    // has completed; migrated to its own version, each is safe), the lists answer, and a batch
    // that does not exist is the API's 404.
    let (status, dry) = api(
        &admin,
        "WorkflowService/StartBatch",
        &json!({"selector": {"workflow": "console-demo"}, "action": {"migrate": {"toVersion": "1"}}, "dryRun": true}),
        None,
    )
    .await;
    assert_eq!(status, 200, "{dry}");
    assert_eq!(dry["dryRunTotal"], "2", "SLEEPING and QUEUED run: {dry}");
    let answered: BTreeSet<_> = dry["dryRunItems"]
        .as_array()
        .expect("items")
        .iter()
        .map(|i| (i["executionId"].as_str().expect("id").to_string(), i["safe"] == true))
        .collect();
    let expected = [SLEEPING, QUEUED].map(|id| (id.to_string(), true));
    assert_eq!(answered, expected.into_iter().collect(), "{dry}");
    let (status, list) = api(&admin, "WorkflowService/ListBatches", &json!({}), None).await;
    assert_eq!((status, &list["batches"]), (200, &json!([])), "a dry run creates nothing: {list}");
    for method in ["DescribeBatch", "ListBatchItems", "CancelBatch"] {
        let (status, missing) =
            api(&admin, &format!("WorkflowService/{method}"), &json!({"batchId": "nope"}), None)
                .await;
        assert_eq!((status, &missing["code"]), (404, &json!("BATCH_NOT_FOUND")), "{method}");
    }

    // Workers, task queues, cluster.
    let (_, workers) = api(&admin, "AdminService/ListWorkers", &json!({}), None).await;
    assert_eq!(workers["workers"][0]["workerId"], WORKER_ID, "{workers}");
    assert_eq!(workers["workers"][0]["online"], true);
    let (_, queues) = api(&admin, "AdminService/DescribeTaskQueue", &json!({}), None).await;
    let lonely = queues["queues"]
        .as_array()
        .expect("queues")
        .iter()
        .find(|q| q["task"]["name"] == "demo.lonely")
        .unwrap_or_else(|| panic!("no demo.lonely queue: {queues}"));
    assert_eq!(lonely["backlog"], "1", "{lonely}");
    let (_, cluster) = api(&admin, "AdminService/ClusterStatus", &json!({}), None).await;
    assert_eq!(cluster["nodes"][0]["nodeId"], "dev", "{cluster}");

    // Schedules: list, trigger (an execution of the schedule appears), pause state.
    let (_, schedules) = api(&admin, "ScheduleService/ListSchedules", &json!({}), None).await;
    assert_eq!(schedules["schedules"][0]["scheduleId"], SCHEDULE);
    assert_eq!(schedules["schedules"][0]["state"]["paused"], true);
    let (status, fired) =
        api(&admin, "ScheduleService/TriggerSchedule", &json!({"scheduleId": SCHEDULE}), None)
            .await;
    assert_eq!(status, 200, "{fired}");
    let started = fired["executionId"].as_str().expect("execution id").to_string();
    let (_, by_schedule) =
        api(&admin, "WorkflowService/ListExecutions", &json!({"scheduleId": SCHEDULE}), None).await;
    assert_eq!(ids(&by_schedule), vec![started]);

    // Errors keep Orbit's codes and map to HTTP statuses.
    let (status, missing) =
        api(&admin, "WorkflowService/DescribeExecution", &json!({"executionId": "nope"}), None)
            .await;
    assert_eq!((status, &missing["code"]), (404, &json!("EXECUTION_NOT_FOUND")));
    let (status, bad) =
        api(&admin, "WorkflowService/ListExecutions", &json!({"pageSize": "many"}), None).await;
    assert_eq!((status, &bad["code"]), (400, &json!("INVALID_ARGUMENT")), "{bad}");
    let (status, unknown) = api(&admin, "WorkflowService/StartExecution", &json!({}), None).await;
    assert_eq!(status, 501, "the console does not start executions: {unknown}");
    assert_eq!(
        http(&admin, "GET", "/ui/api/orbit.v1.WorkflowService/ListExecutions", "", None).await.0,
        405
    );
    // A body another site could send without a CORS preflight is refused before any handler.
    let cancel = json!({"executionId": SLEEPING}).to_string();
    let path = "/ui/api/orbit.v1.WorkflowService/CancelExecution";
    let (status, _) = http_typed(&admin, "POST", path, "text/plain", &cancel, None).await;
    assert_eq!(status, 415);
    let (_, still) =
        api(&admin, "WorkflowService/DescribeExecution", &json!({"executionId": SLEEPING}), None)
            .await;
    assert_eq!(still["execution"]["info"]["status"], "EXECUTION_STATUS_RUNNING");
    stop.cancel();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_identities_the_console_needs_a_token_that_may_read() {
    let dir = common::TempDir::new("console-auth");
    let file = dir.0.join("identities.yaml");
    let admin_token = "console-admin-token-0123456789";
    let worker_token = "console-worker-token-0123456789";
    let reader_token = "console-reader-token-0123456789";
    let entries = [
        common::secure::identity("ops", "admin", admin_token, ""),
        common::secure::identity("w", "worker", worker_token, "    tasks: [\"*\"]\n"),
        common::secure::identity(
            "reader",
            "client",
            reader_token,
            "    actions: [read]\n    workflows: ['*']\n",
        ),
    ];
    std::fs::write(&file, format!("identities:\n{}", entries.join(""))).expect("write identities");
    // Started by hand: `Server::start` waits with an anonymous call, which is refused here.
    let (port, admin) = (common::free_port(), format!("127.0.0.1:{}", common::free_port()));
    let child = std::process::Command::new(env!("CARGO_BIN_EXE_orbit"))
        .args(["dev", "--log", "warn", "--listen", &format!("127.0.0.1:{port}")])
        .args(["--admin-listen", &admin, "--db"])
        .arg(dir.0.join("orbit.db"))
        .arg("--identities")
        .arg(&file)
        .stdout(std::process::Stdio::null())
        .spawn()
        .expect("spawn orbit dev");
    let server = common::Server { child, port, db: dir.0.join("orbit.db") };
    let deadline = std::time::Instant::now() + WAIT;
    while common::admin::get(&admin, "/readyz").await.map(|(s, _)| s) != Some(200) {
        assert!(std::time::Instant::now() < deadline, "orbit dev did not become ready");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let list = json!({});
    let method = "WorkflowService/ListExecutions";

    assert_eq!(http(&admin, "GET", "/ui/api/config", "", None).await.1.trim(), r#"{"auth":true}"#);
    let (status, body) = api(&admin, method, &list, None).await;
    assert_eq!((status, &body["code"]), (401, &json!("UNAUTHENTICATED")), "{body}");
    let (status, body) = api(&admin, method, &list, Some("wrong-token")).await;
    assert_eq!((status, &body["code"]), (401, &json!("UNAUTHENTICATED")), "{body}");
    // Unknown methods are refused the same way before anything else is said.
    let (status, _) = api(&admin, "WorkflowService/Nope", &list, None).await;
    assert_eq!(status, 401);
    let (status, body) = api(&admin, method, &list, Some(worker_token)).await;
    assert_eq!((status, &body["code"]), (403, &json!("PERMISSION_DENIED")), "{body}");
    let (status, body) = api(&admin, method, &list, Some(admin_token)).await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["executions"], json!([]));
    // Batches: `read` lists them, starting one needs `update` (the gate refuses before the
    // handler: no workflow is registered here), a worker may not even list them.
    let batches = "WorkflowService/ListBatches";
    let (status, body) = api(&admin, batches, &list, Some(reader_token)).await;
    assert_eq!((status, &body["batches"]), (200, &json!([])), "{body}");
    let (status, body) = api(&admin, batches, &list, Some(worker_token)).await;
    assert_eq!((status, &body["code"]), (403, &json!("PERMISSION_DENIED")), "{body}");
    let start = json!({"selector": {"workflow": "w"}, "action": {"migrate": {"toVersion": "2"}}, "dryRun": true});
    let (status, body) =
        api(&admin, "WorkflowService/StartBatch", &start, Some(reader_token)).await;
    assert_eq!((status, &body["code"]), (403, &json!("PERMISSION_DENIED")), "{body}");
    let (status, body) = api(&admin, "WorkflowService/StartBatch", &start, Some(admin_token)).await;
    assert_eq!((status, &body["code"]), (404, &json!("WORKFLOW_NOT_FOUND")), "{body}");
    // The page asks for the token, refuses a wrong one, and shows the list with the right one.
    let (at, folder) = (admin.clone(), shots(&dir));
    let token = admin_token.to_string();
    tokio::task::spawn_blocking(move || run_browser(&at, &folder, &["--token", &token]))
        .await
        .expect("browser run");
    drop(server);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_pages_work_in_headless_chromium() {
    let dir = common::TempDir::new("console-browser");
    let (server, admin) = dev(&dir, &[]).await;
    let stop = CancellationToken::new();
    worker(&server.address(), None, &stop);
    let mut c = server.client().await;
    let mut s = ScheduleServiceClient::connect(server.address()).await.expect("connect");
    scenario(&mut c, &mut s).await;
    // Versions of the demo to migrate the sleeping execution to from the page (issue 26):
    // v2 adds a step after the sleep (safe), v3 renames the completed `work` (unsafe).
    let v2 = DEMO.replacen("version: \"1\"", "version: \"2\"", 1).replace(
        "output: ${{ steps.work.output }}",
        "  - { id: wrapup, needs: [lonely], compute: \"${{ 'v2' }}\" }\noutput: ${{ steps.work.output }}",
    );
    common::register(&mut c, &v2).await;
    let v3 = DEMO
        .replacen("version: \"1\"", "version: \"3\"", 1)
        .replace("id: work", "id: job")
        .replace("needs: [work]", "needs: [job]")
        .replace("steps.work.output", "steps.job.output");
    common::register(&mut c, &v3).await;
    // Two versions registered out of order: 2.0.0 stays the latest (issue 30).
    for (version, task) in [("2.0.0", "v2-task"), ("1.2.1", "v1-task")] {
        let doc = format!(
            "name: console-versions\nversion: \"{version}\"\ntasks: {{ {task}: {{}} }}\nsteps:\n  - {{ id: a, task: {task} }}\n"
        );
        common::register(&mut c, &doc).await;
    }
    // An execution to repair from the page (issue 26): it fails in `check` (its worker's
    // bug) with `prepare` done; the worker is fixed before the page resets it to `check`.
    let fixed = Arc::new(AtomicBool::new(false));
    repair_worker(&server.address(), fixed.clone(), &stop);
    common::register(&mut c, REPAIR).await;
    common::start(&mut c, "console-repair", REPAIRED, json!({"order": 7})).await.expect("start");
    assert_eq!(common::result(&mut c, REPAIRED, WAIT).await.0, pb::ExecutionStatus::Failed);
    // Registered once it runs v1: a start without a version runs the latest.
    for doc in [REPAIR_V2, REPAIR_V3] {
        common::register(&mut c, doc).await;
    }
    fixed.store(true, Ordering::SeqCst);
    // Executions waiting for a signal on v1, and a safe v2, for the page's batch.
    batch_scenario(&mut c).await;
    flow_scenario(&mut c).await;
    let shots = shots(&dir);
    // Blocking (a child process with its own bound): off the runtime's threads.
    let at = admin.clone();
    let folder = shots.clone();
    tokio::task::spawn_blocking(move || run_browser(&at, &folder, &[])).await.expect("browser run");
    // What the browser did went through the API: the signal completed the execution.
    assert_eq!(common::result(&mut c, WAITING, WAIT).await.0, pb::ExecutionStatus::Completed);
    // The reset: run 2 on v2 completed, `prepare` kept from run 1 (one unit, run 1's).
    assert_eq!(common::result(&mut c, REPAIRED, WAIT).await.0, pb::ExecutionStatus::Completed);
    let request =
        pb::DescribeExecutionRequest { execution_id: REPAIRED.into(), ..Default::default() };
    let repaired = c.describe_execution(request).await.expect("describe").into_inner();
    let info = repaired.execution.and_then(|e| e.info).expect("info");
    assert_eq!((info.run, info.version.as_str()), (2, "2"), "{info:?}");
    let run2 = common::history(&mut c, REPAIRED).await;
    let restored = run2.iter().find(|e| e.event_type == "RunRestored").expect("RunRestored");
    let prepared: Vec<_> = run2
        .iter()
        .filter(|e| e.event_type == "StepSucceeded" && e.step == "prepare")
        .map(|e| e.seq)
        .collect();
    assert!(prepared.len() == 1 && prepared[0] < restored.seq, "{prepared:?} {restored:?}");
    // The fork of the sleeping demo at its `work` success (named `<id>-fork-<seq>` by the
    // page) went on by itself to the same sleep; the source still sleeps in its own run.
    let events = common::history(&mut c, SLEEPING).await;
    let work = events.iter().find(|e| e.event_type == "StepSucceeded" && e.step == "work");
    let fork = format!("{SLEEPING}-fork-{}", work.expect("work succeeded").seq);
    for id in [fork.as_str(), SLEEPING] {
        let request =
            pb::DescribeExecutionRequest { execution_id: id.into(), ..Default::default() };
        let d = c.describe_execution(request).await.expect("describe").into_inner();
        let d = d.execution.expect("execution");
        let info = d.info.expect("info");
        assert_eq!((info.status(), info.run), (pb::ExecutionStatus::Running, 1), "{id}");
        assert_eq!(d.pending_timers.len(), 1, "{id} sleeps: {:?}", d.pending_timers);
    }
    // The batch the page started migrated each waiting execution to v2 (one
    // `DefinitionMigrated` each), and completed with every item succeeded.
    let listed =
        c.list_batches(pb::ListBatchesRequest::default()).await.expect("list batches").into_inner();
    let [batch] = listed.batches.as_slice() else { panic!("one batch: {listed:?}") };
    assert_eq!(batch.state(), pb::BatchState::Completed, "{batch:?}");
    assert_eq!((batch.total, batch.done, batch.succeeded, batch.failed), (3, 3, 3, 0));
    for id in BATCH_IDS {
        let request =
            pb::DescribeExecutionRequest { execution_id: id.into(), ..Default::default() };
        let d = c.describe_execution(request).await.expect("describe").into_inner();
        let info = d.execution.and_then(|e| e.info).expect("info");
        assert_eq!((info.status(), info.version.as_str()), (pb::ExecutionStatus::Running, "2"));
        let migrated = common::history(&mut c, id).await;
        let count = migrated.iter().filter(|e| e.event_type == "DefinitionMigrated").count();
        assert_eq!(count, 1, "{id} migrated once");
    }
    // One of them, signalled, goes on through v2's added step.
    common::scenario::signal(&mut c, BATCH_IDS[0], "go", json!({})).await;
    assert_eq!(common::result(&mut c, BATCH_IDS[0], WAIT).await.0, pb::ExecutionStatus::Completed);
    let events = common::history(&mut c, BATCH_IDS[0]).await;
    assert!(events.iter().any(|e| e.event_type == "StepSucceeded" && e.step == "done"));
    // The rate limit the page set let the waiting step run.
    assert_eq!(common::result(&mut c, METERED_ID, WAIT).await.0, pb::ExecutionStatus::Completed);
    for name in [
        "console-flow-waiting",
        "console-rate-limits",
        "console-batch",
        "console-list",
        "console-timeline",
        "console-execution-failed",
        "console-cluster",
        "console-time-travel",
        "console-reset-plan",
    ] {
        assert!(shots.join(format!("{name}.png")).exists(), "screenshot {name}");
    }
    stop.cancel();
}

/// `orbit frontend` serves the console too, through its own frontend: the cluster page's
/// call sees every node, and a start through gRPC shows in the list.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_split_frontend_serves_the_console() {
    use common::split::{Split, PLAIN};
    let mut s = Split::new("console-split");
    s.spawn("owner", "owner-1", PLAIN);
    s.spawn("frontend", "frontend-1", PLAIN);
    let admin = common::admin::address_in(&s.node("frontend-1").log()).expect("admin address");
    let mut c = s.client("frontend-1").await;
    common::register(&mut c, DEMO).await;
    common::start(&mut c, "console-demo", "split-1", json!({"mode": "ok"})).await.expect("start");
    let (status, list) = api(&admin, "WorkflowService/ListExecutions", &json!({}), None).await;
    assert_eq!(status, 200, "{list}");
    assert_eq!(ids(&list), vec!["split-1".to_string()]);
    let (_, cluster) = api(&admin, "AdminService/ClusterStatus", &json!({}), None).await;
    let nodes: BTreeSet<_> = cluster["nodes"]
        .as_array()
        .expect("nodes")
        .iter()
        .map(|n| n["nodeId"].as_str().expect("id").to_string())
        .collect();
    assert_eq!(nodes, ["frontend-1", "owner-1"].iter().map(ToString::to_string).collect());
}
