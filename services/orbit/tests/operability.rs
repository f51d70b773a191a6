//! Operability with a gRPC client that is not Orbit's own generated code: `buf curl` lists
//! the services through server reflection, checks health and calls a method whose schema
//! it downloads through reflection.

mod common;

use common::*;
use serde_json::Value;

/// Runs `buf curl --protocol grpc --http2-prior-knowledge <args>` (bounded) in `cwd`.
fn buf_curl(cwd: &std::path::Path, args: &[&str]) -> String {
    let args = [&["--http2-prior-knowledge"][..], args].concat();
    let (ok, stdout, stderr) = common::buf::buf_curl_raw(cwd, &args);
    assert!(ok, "buf curl {args:?} failed:\nstdout: {stdout}\nstderr: {stderr}");
    stdout
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn buf_curl_lists_services_checks_health_and_calls_through_reflection() {
    let dir = TempDir::new("operability");
    let server = Server::start(&dir.0.join("orbit.db"), &[]).await;
    let mut c = server.client().await;
    register_example(&mut c, "hello.yaml").await;
    let base = server.address();
    let cwd = dir.0.clone();

    let (services, health, workflows) = tokio::task::spawn_blocking(move || {
        let services = buf_curl(&cwd, &["--list-services", &base]);
        let health = buf_curl(
            &cwd,
            &["-d", r#"{"service": ""}"#, &format!("{base}/grpc.health.v1.Health/Check")],
        );
        let service_health = buf_curl(
            &cwd,
            &[
                "-d",
                r#"{"service": "orbit.v1.WorkflowService"}"#,
                &format!("{base}/grpc.health.v1.Health/Check"),
            ],
        );
        assert!(service_health.contains("SERVING"), "{service_health}");
        let workflows = buf_curl(
            &cwd,
            &["-d", "{}", &format!("{base}/orbit.v1.WorkflowService/ListWorkflows")],
        );
        (services, health, workflows)
    })
    .await
    .expect("buf curl thread");

    let listed: Vec<&str> = services.lines().map(str::trim).filter(|l| !l.is_empty()).collect();
    for expected in ["orbit.v1.WorkflowService", "orbit.v1.WorkerService", "grpc.health.v1.Health"]
    {
        assert!(listed.contains(&expected), "{expected} not listed by reflection: {listed:?}");
    }

    let health: Value = serde_json::from_str(&health)
        .unwrap_or_else(|e| panic!("health answer is not JSON ({e}): {health}"));
    assert_eq!(health["status"], "SERVING", "{health}");

    let workflows: Value = serde_json::from_str(&workflows)
        .unwrap_or_else(|e| panic!("ListWorkflows answer is not JSON ({e}): {workflows}"));
    let names: Vec<&str> = workflows["workflows"]
        .as_array()
        .unwrap_or_else(|| panic!("no workflows array: {workflows}"))
        .iter()
        .filter_map(|w| w["name"].as_str())
        .collect();
    assert_eq!(names, ["hello"], "{workflows}");
}
