//! `orbit dev` with TLS and an identities file, and calls that carry a bearer token: for the
//! tests of the clients' security options (the Python worker, `orbit bench`, the Docker
//! init script's files).

// Tests read their environment (ORBIT_PYTHON, the database URL) and the wall clock
// (unique names, deadlines of real processes) directly.
#![allow(clippy::disallowed_methods)]

use super::tls::{connect, tls_address, Pki};
use super::{example, free_port, Server};
use orbit_api::tls::ClientTls;
use orbit_api::v1 as pb;
use orbit_api::v1::workflow_service_client::WorkflowServiceClient;
use orbit_server_kit::payload::json_to_proto;
use serde_json::Value;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};
use tonic::transport::Channel;
use tonic::Request;

/// One identities-file entry authenticated by `token` (only its hash is written); `extra`
/// is further YAML lines of the entry, indented by four spaces.
pub fn identity(name: &str, kind: &str, token: &str, extra: &str) -> String {
    format!(
        "  - name: {name}\n    kind: {kind}\n    token_sha256: {}\n{extra}",
        orbit_auth::token::hash_token_hex(token)
    )
}

/// The `app` client identity the SDK tests drive executions with: it registers, starts
/// and reads every workflow.
pub fn app_client(token: &str) -> String {
    identity("app", "client", token, "    actions: [register, start, read]\n    workflows: ['*']\n")
}

/// `message` with `authorization: Bearer <token>`.
pub fn bearer<T>(message: T, token: &str) -> Request<T> {
    let mut request = Request::new(message);
    let value = format!("Bearer {token}").parse().expect("token is metadata");
    request.metadata_mut().insert("authorization", value);
    request
}

/// `orbit dev --identities <file>` with `flags` (TLS), ready once a client with `tls` and
/// `token` lists workflows (anonymous calls are refused by design).
pub async fn start_dev_with_identities(
    db: &Path,
    identities: &Path,
    flags: &[String],
    tls: &ClientTls,
    token: &str,
) -> Server {
    let port = free_port();
    let child = Command::new(env!("CARGO_BIN_EXE_orbit"))
        .args(["dev", "--db"])
        .arg(db)
        .args(["--listen", &format!("127.0.0.1:{port}"), "--log", "warn", "--identities"])
        .arg(identities)
        .args(flags)
        .stdout(Stdio::null())
        .stderr(Stdio::inherit())
        .spawn()
        .expect("spawn orbit dev");
    let server = Server { child, port, db: db.to_path_buf() };
    let address = tls_address(&server);
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let answer = match connect(&address, tls).await {
            Ok(mut c) => c
                .list_workflows(bearer(pb::ListWorkflowsRequest::default(), token))
                .await
                .map(|_| ())
                .map_err(|s| format!("{s:?}")),
            Err(e) => Err(e),
        };
        match answer {
            Ok(()) => return server,
            Err(e) => assert!(
                Instant::now() < deadline,
                "orbit dev with TLS and identities did not become ready: {e}"
            ),
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// [`start_dev_with_identities`] with mutual TLS from `pki` (server `server`, clients of CA
/// `ca`) and `identities` (the entries, see [`identity`]) written to `dir/identities.yaml`;
/// ready with client certificate `client` and `token`.
pub async fn start_secured(dir: &Path, pki: &Pki, identities: &[String], token: &str) -> Server {
    let file = dir.join("identities.yaml");
    std::fs::write(&file, format!("identities:\n{}", identities.concat())).expect("identities");
    let tls = pki.client("ca", Some("client"));
    start_dev_with_identities(&dir.join("orbit.db"), &file, &pki.server_flags(true), &tls, token)
        .await
}

/// Registers an example definition as `token`.
pub async fn register_example_as(c: &mut WorkflowServiceClient<Channel>, name: &str, token: &str) {
    let document = std::fs::read_to_string(example(name)).expect("example file");
    c.register_workflow(bearer(pb::RegisterWorkflowRequest { document, format: 0 }, token))
        .await
        .expect("register");
}

/// Starts an execution as `token`.
pub async fn start_as(
    c: &mut WorkflowServiceClient<Channel>,
    workflow: &str,
    id: &str,
    input: Value,
    token: &str,
) {
    let request = pb::StartExecutionRequest {
        memo: None,
        workflow: workflow.into(),
        version: String::new(),
        input: Some(json_to_proto(input)),
        execution_id: id.into(),
        priority: 0,
    };
    c.start_execution(bearer(request, token)).await.expect("start");
}

/// The execution's description (latest run) as `token`.
pub async fn describe_as(
    c: &mut WorkflowServiceClient<Channel>,
    id: &str,
    token: &str,
) -> pb::ExecutionDescription {
    let request = pb::DescribeExecutionRequest { execution_id: id.into(), run: 0, at_seq: 0 };
    let described = c.describe_execution(bearer(request, token)).await.expect("describe");
    described.into_inner().execution.expect("execution")
}

/// Waits (bounded) for the execution's result as `token`: (status, output or error).
pub async fn result_as(
    c: &mut WorkflowServiceClient<Channel>,
    id: &str,
    token: &str,
    within: Duration,
) -> (pb::ExecutionStatus, Value) {
    super::result_of(c, bearer(super::result_watch(id), token), within).await
}
