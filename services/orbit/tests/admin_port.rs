//! The admin HTTP port under hostile clients, through the real `orbit dev` (issue 30, item
//! 12): a connection that sends nothing, one that trickles its headers a byte at a time and
//! one left idle after a request are all closed within the header timeout
//! (`ADMIN_HEADER_TIMEOUT`); the console's gateway answers a too-large payload 413 (not 429,
//! "retry later") and refuses a body with a repeated key instead of letting the last win.

// Tests read their environment (ORBIT_PYTHON, the database URL) and the wall clock
// (unique names, deadlines of real processes) directly.
#![allow(clippy::disallowed_methods)]

mod common;

use common::console::{api, http};
use common::*;
use orbit_server_kit::admin::ADMIN_HEADER_TIMEOUT;
use serde_json::json;
use std::time::{Duration, Instant};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

/// The timeout plus room for a loaded machine to get round to closing.
fn bound() -> Duration {
    ADMIN_HEADER_TIMEOUT + Duration::from_secs(10)
}

/// Reads until the server closes the connection (EOF or reset), bounded; returns when.
async fn closed_within(stream: &mut TcpStream, bound: Duration) -> Duration {
    let start = Instant::now();
    let mut buf = [0u8; 4096];
    loop {
        match tokio::time::timeout_at((start + bound).into(), stream.read(&mut buf)).await {
            Ok(Ok(0) | Err(_)) => return start.elapsed(),
            Ok(Ok(_)) => {}
            Err(_) => panic!("the admin port kept the connection open past {bound:?}"),
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn silent_trickling_and_idle_admin_connections_are_closed() {
    let dir = TempDir::new("admin-port");
    let admin = format!("127.0.0.1:{}", free_port());
    let _server = Server::start(&dir.0.join("orbit.db"), &["--admin-listen", admin.as_str()]).await;

    // Sends nothing at all.
    let mut silent = TcpStream::connect(&admin).await.unwrap();
    // Sends its headers one byte at a time, forever.
    let mut trickling = TcpStream::connect(&admin).await.unwrap();
    let trickle = {
        let (_, mut w) = trickling.split();
        async move {
            for b in b"GET /healthz HTTP/1.1\r\nHost: x\r\nX-Slow: ".iter().cycle() {
                if w.write_all(&[*b]).await.is_err() {
                    return;
                }
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
        }
    };
    // The trickle ends when the server closes the connection (the write fails).
    tokio::time::timeout(bound(), trickle).await.expect("the trickling connection was closed");
    closed_within(&mut trickling, bound()).await;
    closed_within(&mut silent, bound()).await;

    // A request answered on a kept-alive connection, then nothing more.
    let mut idle = TcpStream::connect(&admin).await.unwrap();
    idle.write_all(b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n").await.unwrap();
    let mut first = [0u8; 12];
    idle.read_exact(&mut first).await.unwrap();
    assert_eq!(&first, b"HTTP/1.1 200");
    closed_within(&mut idle, bound()).await;

    // The port still serves.
    let (status, _) = admin::get(&admin, "/healthz").await.expect("healthz");
    assert_eq!(status, 200);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_gateway_answers_413_for_too_large_and_refuses_repeated_keys() {
    let dir = TempDir::new("admin-gateway");
    let admin = format!("127.0.0.1:{}", free_port());
    let server = Server::start(
        &dir.0.join("orbit.db"),
        &["--admin-listen", admin.as_str(), "--max-payload-bytes", "1000"],
    )
    .await;
    let mut c = server.client().await;
    let doc =
        "name: big\nversion: \"1\"\nsignals: { poke: null }\nsteps: [ { id: a, await: poke } ]\n";
    register(&mut c, doc).await;
    start(&mut c, "big", "big-1", json!({})).await.expect("start");

    let signal =
        json!({"executionId": "big-1", "name": "poke", "payload": {"blob": "x".repeat(5_000)}});
    let (status, body) = api(&admin, "WorkflowService/SignalExecution", &signal, None).await;
    assert_eq!((status, body["code"].as_str()), (413, Some("PAYLOAD_TOO_LARGE")), "{body}");

    let repeated = r#"{"executionId": "big-1", "name": "poke", "name": "other"}"#;
    let (status, text) =
        http(&admin, "POST", "/ui/api/orbit.v1.WorkflowService/SignalExecution", repeated, None)
            .await;
    assert_eq!(status, 400, "{text}");
    assert!(text.contains("INVALID_ARGUMENT") && text.contains("duplicate key `name`"), "{text}");
    let h = history(&mut c, "big-1").await;
    assert!(!h.iter().any(|e| e.event_type == "SignalReceived"), "nothing was recorded");
}
