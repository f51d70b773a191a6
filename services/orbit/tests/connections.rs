//! Connection hygiene of the one server builder (issue 8, item 7): a connection with no open
//! call is closed after the idle timeout, while a worker's session stream — one long open
//! call — keeps its connection however quiet it is. Runs `orbit dev` with a short timeout
//! given through `ORBIT_IDLE_TIMEOUT_MS`.

// Tests read their environment (ORBIT_PYTHON, the database URL) and the wall clock
// (unique names, deadlines of real processes) directly.
#![allow(clippy::disallowed_methods)]

mod common;

use common::*;
use orbit_api::v1 as pb;
use serde_json::json;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

const IDLE_MS: u64 = 1_000;

/// `orbit dev` with the idle timeout set through its environment variable.
async fn dev(dir: &TempDir) -> (ChildGuard, String) {
    let port = free_port();
    let child = Command::new(env!("CARGO_BIN_EXE_orbit"))
        .args(["dev", "--db"])
        .arg(dir.0.join("orbit.db"))
        .args(["--listen", &format!("127.0.0.1:{port}"), "--log", "warn"])
        .env("ORBIT_IDLE_TIMEOUT_MS", IDLE_MS.to_string())
        .stdout(Stdio::null())
        .stderr(Stdio::inherit())
        .spawn()
        .expect("spawn orbit dev");
    let guard = ChildGuard(child);
    let address = format!("http://127.0.0.1:{port}");
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        if let Ok(mut c) =
            pb::workflow_service_client::WorkflowServiceClient::connect(address.clone()).await
        {
            if c.list_workflows(pb::ListWorkflowsRequest::default()).await.is_ok() {
                return (guard, address);
            }
        }
        assert!(Instant::now() < deadline, "orbit dev did not become ready");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// A raw HTTP/2 connection that only says hello (preface + SETTINGS) and then nothing is
/// closed by the server: reading it reaches end of stream.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_idle_connection_is_closed_after_the_idle_timeout() {
    let dir = TempDir::new("idle-raw");
    let (_server, address) = dev(&dir).await;
    let addr = address.trim_start_matches("http://");
    let mut socket = tokio::net::TcpStream::connect(addr).await.expect("connect");
    socket.write_all(b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n").await.expect("preface");
    // An empty SETTINGS frame: length 0, type 4, no flags, stream 0.
    socket.write_all(&[0, 0, 0, 4, 0, 0, 0, 0, 0]).await.expect("settings");
    // Generous: the timeout is 1 s; a busy machine may take many times that.
    let patience = Duration::from_millis(IDLE_MS * 30);
    let closed = tokio::time::timeout(patience, async {
        let mut buf = [0u8; 1024];
        loop {
            match socket.read(&mut buf).await {
                Ok(0) | Err(_) => return,
                // The server's SETTINGS, its ack of ours, keepalive pings: not a close.
                Ok(_) => {}
            }
        }
    })
    .await;
    assert!(closed.is_ok(), "the idle connection was still open after {patience:?}");
}

/// A worker session outlives many idle timeouts: its stream is an open call, and a task
/// started afterwards still reaches it on the same connection.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_worker_stream_keeps_its_connection() {
    let dir = TempDir::new("idle-session");
    let (_server, address) = dev(&dir).await;
    let mut session = RawSession::start(&address, "patient", &[("work", "1")], 1).await;
    tokio::time::sleep(Duration::from_millis(IDLE_MS * 3)).await;

    let mut c = pb::workflow_service_client::WorkflowServiceClient::connect(address.clone())
        .await
        .expect("connect");
    let doc =
        "name: idle\nversion: \"1\"\ntasks: { work: {} }\nsteps:\n  - { id: a, task: work }\n";
    register(&mut c, doc).await;
    start(&mut c, "idle", "idle-1", json!({})).await.expect("start");
    let task = session.next_task(Duration::from_secs(20)).await;
    assert_eq!(task.execution_id, "idle-1");
}
