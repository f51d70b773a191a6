//! Helpers for end-to-end tests: run the real `orbit` binary on a temporary SQLite file,
//! talk to it over loopback gRPC, run in-process Rust workers, read the file afterwards.
#![allow(dead_code, missing_docs)]

use orbit_api::v1 as pb;
use orbit_api::v1::workflow_service_client::WorkflowServiceClient;
use orbit_server_kit::payload::{json_to_proto, proto_to_json};
use serde_json::Value;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};
use tonic::transport::Channel;

/// A temporary directory removed on drop.
pub struct TempDir(pub PathBuf);

impl TempDir {
    pub fn new(name: &str) -> TempDir {
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos());
        let dir =
            std::env::temp_dir().join(format!("orbit-e2e-{name}-{}-{nanos}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("temp dir");
        TempDir(dir)
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// A free loopback port (bound and released; the server binds it right after).
pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("free port")
}

/// A running `orbit dev` process.
pub struct Server {
    pub child: Child,
    pub port: u16,
    pub db: PathBuf,
}

impl Server {
    /// Starts `orbit dev` on `db` and waits until it answers.
    pub async fn start(db: &Path, extra: &[&str]) -> Server {
        Server::start_on(db, free_port(), extra).await
    }

    /// Starts `orbit dev` on `db` and `port` (a restart keeps the port workers dial).
    pub async fn start_on(db: &Path, port: u16, extra: &[&str]) -> Server {
        let child = Command::new(env!("CARGO_BIN_EXE_orbit"))
            .args(["dev", "--db"])
            .arg(db)
            .args(["--listen", &format!("127.0.0.1:{port}"), "--log", "warn"])
            .args(extra)
            .stdout(Stdio::null())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("spawn orbit dev");
        let server = Server { child, port, db: db.to_path_buf() };
        server.wait_ready().await;
        server
    }

    pub fn address(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }

    async fn wait_ready(&self) {
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            if let Ok(mut c) = WorkflowServiceClient::connect(self.address()).await {
                if c.list_workflows(pb::ListWorkflowsRequest::default()).await.is_ok() {
                    return;
                }
            }
            assert!(Instant::now() < deadline, "orbit dev did not become ready");
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    pub async fn client(&self) -> WorkflowServiceClient<Channel> {
        WorkflowServiceClient::connect(self.address()).await.expect("connect")
    }

    /// SIGKILL, then reap.
    pub fn kill9(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        self.kill9();
    }
}

/// Path of an example definition.
pub fn example(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../examples/definitions").join(name)
}

pub async fn register(
    client: &mut WorkflowServiceClient<Channel>,
    document: &str,
) -> pb::RegisterWorkflowResponse {
    client
        .register_workflow(pb::RegisterWorkflowRequest { document: document.into(), format: 0 })
        .await
        .expect("register")
        .into_inner()
}

pub async fn register_example(client: &mut WorkflowServiceClient<Channel>, name: &str) {
    let doc = std::fs::read_to_string(example(name)).expect("example file");
    register(client, &doc).await;
}

pub async fn start(
    client: &mut WorkflowServiceClient<Channel>,
    workflow: &str,
    id: &str,
    input: Value,
) -> Result<pb::StartExecutionResponse, tonic::Status> {
    client
        .start_execution(pb::StartExecutionRequest {
            workflow: workflow.into(),
            version: String::new(),
            input: Some(json_to_proto(input)),
            execution_id: id.into(),
        })
        .await
        .map(tonic::Response::into_inner)
}

/// Waits (bounded) for an execution's result: (status, output or error message).
pub async fn result(
    client: &mut WorkflowServiceClient<Channel>,
    id: &str,
    within: Duration,
) -> (pb::ExecutionStatus, Value) {
    let watch = pb::WatchExecutionRequest {
        execution_id: id.into(),
        result_only: true,
        ..Default::default()
    };
    let fut = async {
        let mut stream = client.watch_execution(watch).await.expect("watch").into_inner();
        while let Some(msg) = stream.message().await.expect("watch stream") {
            if let Some(pb::watch_execution_response::Kind::Result(r)) = msg.kind {
                let status = pb::ExecutionStatus::try_from(r.status)
                    .unwrap_or(pb::ExecutionStatus::Unspecified);
                let value = match (r.output, r.error) {
                    (Some(o), _) => proto_to_json(o).unwrap_or(Value::Null),
                    (None, Some(e)) => Value::String(format!("{}: {}", e.code, e.message)),
                    _ => Value::Null,
                };
                return (status, value);
            }
        }
        panic!("watch ended without a result for {id}");
    };
    tokio::time::timeout(within, fut)
        .await
        .unwrap_or_else(|_| panic!("no result for {id} within {within:?}"))
}

/// The Orbit error code of a failed call.
pub fn code(status: &tonic::Status) -> String {
    orbit_server_kit::OrbitError::from_status(status)
        .map_or_else(|| format!("{:?}", status.code()), |e| e.code.as_str().to_string())
}
