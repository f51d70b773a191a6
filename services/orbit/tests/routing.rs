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
