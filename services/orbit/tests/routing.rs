//! Names and registration warnings through the real `orbit dev`: names under `orbit.` are
//! refused at registration (`RESERVED_NAME`, except the built-in task `orbit.http`), and a
//! registration names the tasks no connected worker serves at the declared version.

mod common;

use common::*;
use orbit_server_kit::OrbitError;

const SHIP: &str = r#"
name: ship
version: "1"
tasks: { parcel.send: { version: "2" } }
steps:
  - { id: send, task: parcel.send }
"#;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn names_under_orbit_are_refused_with_reserved_name() {
    let dir = TempDir::new("routing-reserved");
    let server = Server::start(&dir.0.join("orbit.db"), &[]).await;
    let mut c = server.client().await;
    let doc = "name: orbit.ship\nversion: \"1\"\ntasks: { orbit.sendmail: {} }\nsteps:\n  - { id: a, task: orbit.sendmail }\n";
    let refused = c
        .register_workflow(orbit_api::v1::RegisterWorkflowRequest {
            document: doc.into(),
            format: 0,
        })
        .await
        .unwrap_err();
    assert_eq!(code(&refused), "INVALID_DEFINITION", "{refused:?}");
    let e = OrbitError::from_status(&refused).expect("orbit error");
    let reserved: Vec<&str> =
        e.details.iter().filter(|v| v.code == "RESERVED_NAME").map(|v| v.path.as_str()).collect();
    assert_eq!(reserved, ["name", r#"tasks["orbit.sendmail"]"#], "{e:?}");
    assert!(refused.message().contains("reserved"), "{}", refused.message());
    let listed = c.list_workflows(orbit_api::v1::ListWorkflowsRequest::default()).await.unwrap();
    assert!(listed.into_inner().workflows.is_empty(), "nothing was stored");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn registration_warns_about_tasks_no_connected_worker_serves() {
    let dir = TempDir::new("routing-warnings");
    let server = Server::start(&dir.0.join("orbit.db"), &[]).await;
    let mut c = server.client().await;
    let first = register(&mut c, SHIP).await;
    assert!(first.created);
    assert_eq!(first.warnings.len(), 1, "{:?}", first.warnings);
    assert!(first.warnings[0].contains("parcel.send version 2"), "{:?}", first.warnings);

    // A worker serving another version does not count.
    let _old = RawSession::start(&server.address(), "old-worker", &[("parcel.send", "1")], 1).await;
    let again = register(&mut c, SHIP).await;
    assert!(!again.created);
    assert_eq!(again.warnings.len(), 1, "{:?}", again.warnings);

    // Once a worker serves it at the declared version the warning is gone.
    let _new = RawSession::start(&server.address(), "new-worker", &[("parcel.send", "2")], 1).await;
    let served = register(&mut c, SHIP).await;
    assert!(served.warnings.is_empty(), "{:?}", served.warnings);
}

/// A raw worker session announcing `runtime` and `tasks`, with `n` credits, and its welcome.
async fn session(
    address: &str,
    worker_id: &str,
    runtime: &str,
    tasks: &[(&str, &str)],
    n: u32,
) -> (RawSession, orbit_api::v1::server_message::Welcome) {
    let mut first = hello(worker_id, tasks, n);
    if let Some(orbit_api::v1::worker_message::Kind::Hello(h)) = first.kind.as_mut() {
        h.runtime = runtime.into();
    }
    let mut s = open_raw_session(address, first).await.expect("open session");
    let welcome = match s.next(STEP).await {
        Some(orbit_api::v1::server_message::Kind::Welcome(w)) => w,
        other => panic!("expected welcome, got {other:?}"),
    };
    s.tx.send(credits(n)).await.expect("send credits");
    (s, welcome)
}

/// Bound on one step of a test: far above what any hop takes on a busy machine.
const STEP: std::time::Duration = std::time::Duration::from_secs(20);

fn dispatched_to(events: &[orbit_api::v1::HistoryEvent], step: &str) -> String {
    let e = events
        .iter()
        .find(|e| e.event_type == "StepDispatched" && e.step == step)
        .unwrap_or_else(|| panic!("no StepDispatched for {step}"));
    let payload = orbit_server_kit::payload::struct_to_json_object(e.payload.clone().unwrap())
        .expect("payload");
    payload["worker_id"].as_str().unwrap_or_default().to_string()
}

const CONVERT: &str = r#"
name: convert
version: "1"
tasks:
  render: { language: Python }
  pack: {}
steps:
  - { id: render, task: render }
  - { id: pack, task: pack }
"#;

/// A task with a `language` goes only to workers whose runtime names it; one without goes
/// to any worker. The rust worker is connected first with credits for both tasks, so
/// without routing it would be handed `render` at once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_task_with_a_language_goes_only_to_workers_of_that_runtime() {
    let dir = TempDir::new("routing-language");
    let server = Server::start(&dir.0.join("orbit.db"), &[]).await;
    let mut c = server.client().await;
    let tasks = [("render", "1"), ("pack", "1")];
    let (mut rust, _) = session(&server.address(), "rs-worker", "rust", &tasks, 4).await;
    // Registered with only the rust worker connected: `render` has no python worker.
    let registered = register(&mut c, CONVERT).await;
    assert_eq!(registered.warnings.len(), 1, "{:?}", registered.warnings);
    assert!(registered.warnings[0].contains("task render"), "{:?}", registered.warnings);
    start(&mut c, "convert", "conv-1", serde_json::json!({})).await.expect("start");
    let (mut python, _) =
        session(&server.address(), "py-worker", "python 3.12", &[("render", "1")], 4).await;

    let render = python.next_task(STEP).await;
    assert_eq!((render.task.as_str(), render.execution_id.as_str()), ("render", "conv-1"));
    python.complete(&render.token, serde_json::json!({"pages": 3})).await;
    let pack = rust.next_task(STEP).await;
    assert_eq!(pack.task, "pack", "the rust worker's first task is the unrouted one");
    rust.complete(&pack.token, serde_json::json!({"ok": true})).await;

    let (status, _) = result(&mut c, "conv-1", STEP).await;
    assert_eq!(status, orbit_api::v1::ExecutionStatus::Completed);
    let h = history(&mut c, "conv-1").await;
    assert_eq!(dispatched_to(&h, "render"), "py-worker");
    assert_eq!(dispatched_to(&h, "pack"), "rs-worker");
}

fn job(version: &str) -> String {
    format!(
        "name: job-v{version}\nversion: \"1\"\ntasks: {{ job: {{ version: \"{version}\" }} }}\n\
         steps:\n  - {{ id: run, task: job }}\n"
    )
}

/// A worker announcing a task version receives only attempts of that version. The
/// version-2 worker is connected first and the version-1 execution starts first, so
/// without version matching it would take the version-1 attempt (oldest first).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_worker_announcing_a_version_receives_only_that_version() {
    let dir = TempDir::new("routing-version");
    let server = Server::start(&dir.0.join("orbit.db"), &[]).await;
    let mut c = server.client().await;
    register(&mut c, &job("1")).await;
    register(&mut c, &job("2")).await;
    let (mut v2, welcome) = session(&server.address(), "w-v2", "rust", &[("job", "2")], 4).await;
    assert!(welcome.warnings.is_empty(), "{:?}", welcome.warnings);
    start(&mut c, "job-v1", "job-a", serde_json::json!({})).await.expect("start a");
    start(&mut c, "job-v2", "job-b", serde_json::json!({})).await.expect("start b");
    let (mut v1, _) = session(&server.address(), "w-v1", "rust", &[("job", "1")], 4).await;

    let t2 = v2.next_task(STEP).await;
    assert_eq!((t2.version.as_str(), t2.execution_id.as_str()), ("2", "job-b"));
    let t1 = v1.next_task(STEP).await;
    assert_eq!((t1.version.as_str(), t1.execution_id.as_str()), ("1", "job-a"));
    v2.complete(&t2.token, serde_json::json!(2)).await;
    v1.complete(&t1.token, serde_json::json!(1)).await;
    for (id, worker) in [("job-a", "w-v1"), ("job-b", "w-v2")] {
        let (status, output) = result(&mut c, id, STEP).await;
        assert_eq!(status, orbit_api::v1::ExecutionStatus::Completed, "{id}: {output}");
        assert_eq!(dispatched_to(&history(&mut c, id).await, "run"), worker);
    }
}

/// `Welcome.warnings` names the announced tasks no registered workflow uses and the
/// versions none declares; a hello matching the registered workflows gets none.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_welcome_warns_about_tasks_and_versions_no_workflow_declares() {
    let dir = TempDir::new("routing-welcome");
    let server = Server::start(&dir.0.join("orbit.db"), &[]).await;
    let mut c = server.client().await;
    register(&mut c, SHIP).await;
    let announced = [("parcel.send", "2"), ("parcel.send", "1"), ("parcel.track", "1")];
    let (_s, welcome) = session(&server.address(), "w-odd", "rust", &announced, 1).await;
    assert_eq!(welcome.warnings.len(), 2, "{:?}", welcome.warnings);
    assert!(
        welcome.warnings[0].contains("task parcel.send version 1 (declared: 2)"),
        "{:?}",
        welcome.warnings
    );
    assert!(
        welcome.warnings[1].contains("no registered workflow uses task parcel.track"),
        "{:?}",
        welcome.warnings
    );
    let (_ok, welcome) =
        session(&server.address(), "w-ok", "rust", &[("parcel.send", "2")], 1).await;
    assert!(welcome.warnings.is_empty(), "{:?}", welcome.warnings);
}
