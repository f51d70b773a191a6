//! The built-in HTTP step through the real `orbit dev` against a local HTTP server the test
//! runs: a JSON response lands in the step's output, a non-2xx status fails `HTTP_ERROR`
//! with the status (retried under the step's policy when 5xx), a server that never answers
//! fails every attempt with `TIMEOUT`, a binary body is kept in base64, a JSON body that does
//! not parse fails `HTTP_BAD_RESPONSE`, a hung host cannot starve steps to another (per-host
//! limit, `HTTP_HOST_BUSY`), hosts off the allow-list (directly or by redirect)
//! are refused with `HTTP_HOST_NOT_ALLOWED`, a refused connection fails
//! `HTTP_CONNECT_FAILED`, an oversized body `HTTP_BODY_TOO_LARGE`; and without
//! `--enable-http-step` the step fails `ADAPTER_DISABLED` as before. With identities on,
//! the built-in worker opens its session as the worker identity of `--http-step-token`.

// Tests read their environment (ORBIT_PYTHON, the database URL) and the wall clock
// (unique names, deadlines of real processes) directly.
#![allow(clippy::disallowed_methods)]

mod common;

use common::*;
use http_body_util::{BodyExt as _, Full};
use hyper::body::{Bytes, Incoming};
use hyper::{Request, Response};
use orbit_api::v1 as pb;
use orbit_api::v1::workflow_service_client::WorkflowServiceClient;
use serde_json::{json, Value};
use std::convert::Infallible;
use std::time::Duration;
use tonic::transport::Channel;

const WAIT: Duration = Duration::from_secs(60);

/// `timeout` and retries per workflow: `call` gives requests ample time, `call-slow` 1 s
/// (its server never answers within it).
const CALL: &str = r#"
name: call
version: "1"
steps:
  - id: call
    http:
      method: POST
      url: ${{ input.url }}
      headers: { x-test: orbit }
      body: { n: "${{ input.n }}" }
    timeout: 20s
    retry: { max_attempts: 2, initial_interval: 100ms }
output: ${{ steps.call.output }}
"#;

const CALL_SLOW: &str = r#"
name: call-slow
version: "1"
steps:
  - id: call
    http: { method: GET, url: "${{ input.url }}" }
    timeout: 1s
    retry: { max_attempts: 2, initial_interval: 100ms }
output: ${{ steps.call.output }}
"#;

/// The test's HTTP server: `/ok` echoes the request as JSON, `/missing` 404, `/down` 503,
/// `/slow` never answers in time, `/away` redirects to a host off the allow-list, `/big`
/// sends more than the payload limit.
async fn handle(req: Request<Incoming>) -> Result<Response<Full<Bytes>>, Infallible> {
    let (parts, body) = req.into_parts();
    let body = body.collect().await.map(|b| b.to_bytes()).unwrap_or_default();
    let reply = |status: u16, ct: &str, body: Bytes| {
        Ok(Response::builder()
            .status(status)
            .header("content-type", ct)
            .body(Full::new(body))
            .expect("response"))
    };
    match parts.uri.path() {
        "/ok" => {
            let echo = json!({
                "method": parts.method.as_str(),
                "x_test": parts.headers.get("x-test").and_then(|v| v.to_str().ok()),
                "received": serde_json::from_slice::<Value>(&body).unwrap_or(Value::Null),
            });
            reply(200, "application/json", Bytes::from(echo.to_string()))
        }
        "/missing" => reply(404, "text/plain", Bytes::from_static(b"no such thing")),
        "/down" => reply(503, "text/plain", Bytes::from_static(b"try later")),
        "/slow" => {
            tokio::time::sleep(Duration::from_secs(120)).await;
            reply(200, "text/plain", Bytes::new())
        }
        "/away" => Ok(Response::builder()
            .status(302)
            .header("location", "http://not-allowed.invalid/ok")
            .body(Full::new(Bytes::new()))
            .expect("response")),
        "/big" => reply(200, "text/plain", Bytes::from(vec![b'x'; 3 * 1024 * 1024])),
        "/binary" => {
            reply(200, "application/octet-stream", Bytes::from_static(&[0xff, 0, 0x80, b'a']))
        }
        "/badjson" => reply(200, "application/json", Bytes::from_static(b"{not json")),
        _ => reply(500, "text/plain", Bytes::new()),
    }
}

/// The `error` of the step's `StepFailed` and how many attempts failed before it.
async fn step_failure(c: &mut WorkflowServiceClient<Channel>, id: &str) -> (Value, usize) {
    let h = history_until(c, id, WAIT, |h| h.iter().any(|e| e.event_type == "StepFailed")).await;
    let failed = h.iter().find(|e| e.event_type == "StepFailed").expect("StepFailed");
    let attempts = h.iter().filter(|e| e.event_type == "StepAttemptFailed").count();
    (event_payload(failed)["error"].clone(), attempts)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn http_step_against_a_local_server() {
    let port = http_peer::serve(handle).await;
    let dir = TempDir::new("http-step");
    let allow = format!("127.0.0.1:{port},localhost");
    let server =
        Server::start(&dir.0.join("dev.db"), &["--enable-http-step", "--http-allow-host", &allow])
            .await;
    let mut c = server.client().await;
    register(&mut c, CALL).await;
    register(&mut c, CALL_SLOW).await;
    let url = |path: &str| format!("http://127.0.0.1:{port}{path}");

    // Success: status, headers and the JSON-decoded body are the step's output.
    start(&mut c, "call", "ok", json!({ "url": url("/ok"), "n": 7 })).await.expect("start");
    let (status, output) = result(&mut c, "ok", WAIT).await;
    assert_eq!(status, pb::ExecutionStatus::Completed, "{output}");
    assert_eq!(output["status"], json!(200));
    assert_eq!(output["headers"]["content-type"], json!("application/json"));
    assert_eq!(
        output["body"],
        json!({ "method": "POST", "x_test": "orbit", "received": { "n": 7 } })
    );
    let h = history(&mut c, "ok").await;
    let done = h.iter().find(|e| e.event_type == "StepSucceeded").expect("StepSucceeded");
    assert_eq!(event_payload(done)["output"]["body"]["received"], json!({ "n": 7 }));

    // 404: HTTP_ERROR with the status, not retried.
    start(&mut c, "call", "missing", json!({ "url": url("/missing"), "n": 1 })).await.expect("s");
    let (error, attempts) = step_failure(&mut c, "missing").await;
    assert_eq!(error["code"], json!("HTTP_ERROR"), "{error}");
    assert_eq!(error["details"]["status"], json!(404), "{error}");
    assert_eq!(error["details"]["body"], json!("no such thing"), "{error}");
    assert_eq!(attempts, 1, "a 4xx is not retried");

    // 503: HTTP_ERROR, retried under the step's policy (2 attempts).
    start(&mut c, "call", "down", json!({ "url": url("/down"), "n": 1 })).await.expect("s");
    let (error, attempts) = step_failure(&mut c, "down").await;
    assert_eq!(
        (error["code"].clone(), error["details"]["status"].clone()),
        (json!("HTTP_ERROR"), json!(503))
    );
    assert_eq!(attempts, 2, "a 5xx is retried up to max_attempts");

    // No answer within the step's timeout: every attempt fails TIMEOUT.
    start(&mut c, "call-slow", "slow", json!({ "url": url("/slow") })).await.expect("s");
    let (error, attempts) = step_failure(&mut c, "slow").await;
    assert_eq!(error["code"], json!("TIMEOUT"), "{error}");
    assert_eq!(attempts, 2);

    // Off the allow-list: another port of an allowed host, and a redirect elsewhere.
    let other = free_port();
    let off = format!("http://127.0.0.1:{other}/ok");
    start(&mut c, "call", "off-list", json!({ "url": off, "n": 1 })).await.expect("s");
    let (error, attempts) = step_failure(&mut c, "off-list").await;
    assert_eq!(error["code"], json!("HTTP_HOST_NOT_ALLOWED"), "{error}");
    assert_eq!(attempts, 1, "a refused host is not retried");
    start(&mut c, "call", "away", json!({ "url": url("/away"), "n": 1 })).await.expect("s");
    let (error, _) = step_failure(&mut c, "away").await;
    assert_eq!(error["code"], json!("HTTP_HOST_NOT_ALLOWED"), "{error}");
    assert_eq!(error["details"]["host"], json!("not-allowed.invalid"), "{error}");

    // An allowed host that refuses the connection: retryable, so both attempts fail.
    let refused = format!("http://localhost:{}/ok", free_port());
    start(&mut c, "call", "refused", json!({ "url": refused, "n": 1 })).await.expect("s");
    let (error, attempts) = step_failure(&mut c, "refused").await;
    assert_eq!(error["code"], json!("HTTP_CONNECT_FAILED"), "{error}");
    assert_eq!(attempts, 2);

    // A body over the payload limit.
    start(&mut c, "call", "big", json!({ "url": url("/big"), "n": 1 })).await.expect("s");
    let (error, _) = step_failure(&mut c, "big").await;
    assert_eq!(error["code"], json!("HTTP_BODY_TOO_LARGE"), "{error}");

    // A body that is not UTF-8 is kept exactly, in base64 (issue 30, item 11).
    start(&mut c, "call", "binary", json!({ "url": url("/binary"), "n": 1 })).await.expect("s");
    let (status, output) = result(&mut c, "binary", WAIT).await;
    assert_eq!(status, pb::ExecutionStatus::Completed, "{output}");
    assert_eq!(
        (output["body"].clone(), output["body_base64"].clone()),
        (json!(null), json!("/wCAYQ=="))
    );
    // Declared JSON, not JSON: the attempt fails HTTP_BAD_RESPONSE (not retried), never a
    // silent string.
    start(&mut c, "call", "badjson", json!({ "url": url("/badjson"), "n": 1 })).await.expect("s");
    let (error, attempts) = step_failure(&mut c, "badjson").await;
    assert_eq!(error["code"], json!("HTTP_BAD_RESPONSE"), "{error}");
    assert_eq!(error["details"]["body_head"], json!("{not json"), "{error}");
    assert_eq!(attempts, 1);
}

/// One host that never answers cannot starve steps to another (issue 30, item 11): with 2
/// requests per host and 4 in all, 6 steps to the hung host take 2 requests and fail the
/// others at once with HTTP_HOST_BUSY; a step to the fast host then completes long before
/// the hung requests' 60 s timeout.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hung_host_does_not_starve_steps_to_another_host() {
    const HUNG: &str = r#"
name: hung
version: "1"
steps:
  - id: call
    http: { method: GET, url: "${{ input.url }}" }
    timeout: 60s
    retry: { max_attempts: 1 }
"#;
    let hung = http_peer::serve(handle).await;
    let fast = http_peer::serve(handle).await;
    let dir = TempDir::new("http-step-hosts");
    let allow = format!("127.0.0.1:{hung},127.0.0.1:{fast}");
    let flags = [
        "--enable-http-step",
        "--http-allow-host",
        allow.as_str(),
        "--http-max-concurrency",
        "4",
        "--http-max-per-host",
        "2",
    ];
    let server = Server::start(&dir.0.join("dev.db"), &flags).await;
    let mut c = server.client().await;
    register(&mut c, HUNG).await;
    register(&mut c, CALL).await;
    for i in 0..6 {
        let url = format!("http://127.0.0.1:{hung}/slow");
        start(&mut c, "hung", &format!("hung-{i}"), json!({ "url": url })).await.expect("start");
    }
    let url = format!("http://127.0.0.1:{fast}/ok");
    start(&mut c, "call", "fast", json!({ "url": url, "n": 1 })).await.expect("start");
    let (status, output) = result(&mut c, "fast", Duration::from_secs(30)).await;
    assert_eq!(status, pb::ExecutionStatus::Completed, "{output}");
    // The four beyond the host's two failed at once; two still hang. Each run's result is
    // watched (no polling); the first four to close are read.
    let mut watches = tokio::task::JoinSet::new();
    for i in 0..6 {
        let (mut c, id) = (c.clone(), format!("hung-{i}"));
        watches.spawn(async move {
            result(&mut c, &id, WAIT).await;
            id
        });
    }
    let closed = tokio::time::timeout(WAIT, async {
        let mut closed = Vec::new();
        while closed.len() < 4 {
            match watches.join_next().await {
                Some(Ok(id)) => closed.push(id),
                _ => break,
            }
        }
        closed
    })
    .await
    .unwrap_or_default();
    watches.abort_all();
    let mut codes = Vec::new();
    for id in &closed {
        let h = history(&mut c, id).await;
        if let Some(failed) = h.iter().find(|e| e.event_type == "StepFailed") {
            codes.push(event_payload(failed)["error"]["code"].clone());
        }
    }
    assert_eq!(codes, vec![json!("HTTP_HOST_BUSY"); 4]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn http_step_is_refused_when_disabled() {
    let port = http_peer::serve(handle).await;
    let dir = TempDir::new("http-step-off");
    // The allow-list alone does not enable the step.
    let allow = format!("127.0.0.1:{port}");
    let server = Server::start(&dir.0.join("dev.db"), &["--http-allow-host", &allow]).await;
    let mut c = server.client().await;
    register(&mut c, CALL).await;
    let url = format!("http://127.0.0.1:{port}/ok");
    start(&mut c, "call", "off", json!({ "url": url, "n": 1 })).await.expect("start");
    let (error, attempts) = step_failure(&mut c, "off").await;
    assert_eq!(error["code"], json!("ADAPTER_DISABLED"), "{error}");
    assert_eq!(attempts, 1);
}

/// With identities on, `orbit dev` runs the step's built-in worker as the worker identity
/// of `--http-step-token`; without a token it refuses to start (exit 2) and says which flag
/// is missing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn http_step_with_identities_runs_as_the_tokens_worker() {
    use common::secure::{app_client, bearer, identity, result_as, start_as};
    use orbit_api::tls::ClientTls;
    let port = http_peer::serve(handle).await;
    let dir = TempDir::new("http-step-identities");
    let file = dir.0.join("identities.yaml");
    let http_worker = identity("http", "worker", "http-token", "    tasks: ['orbit.http']\n");
    let entries = [app_client("app-token"), http_worker].concat();
    std::fs::write(&file, format!("identities:\n{entries}")).expect("identities file");
    let allow = format!("127.0.0.1:{port}");

    let refused = std::process::Command::new(env!("CARGO_BIN_EXE_orbit"))
        .args(["dev", "--db"])
        .arg(dir.0.join("refused.db"))
        .args(["--listen", "127.0.0.1:0", "--enable-http-step", "--http-allow-host", &allow])
        .arg("--identities")
        .arg(&file)
        .env_remove("ORBIT_HTTP_STEP_TOKEN")
        .output()
        .expect("run orbit dev");
    let stderr = String::from_utf8_lossy(&refused.stderr);
    assert_eq!(refused.status.code(), Some(2), "{stderr}");
    assert!(stderr.contains("--http-step-token"), "{stderr}");

    let flags: Vec<String> =
        ["--enable-http-step", "--http-allow-host", &allow, "--http-step-token", "http-token"]
            .map(String::from)
            .to_vec();
    let tls = ClientTls::default();
    let db = dir.0.join("dev.db");
    let server =
        common::secure::start_dev_with_identities(&db, &file, &flags, &tls, "app-token").await;
    let mut c = tls::connect(&tls::tls_address(&server), &tls).await.expect("connect");
    let register = pb::RegisterWorkflowRequest { document: CALL.into(), format: 0 };
    c.register_workflow(bearer(register, "app-token")).await.expect("register");
    let input = json!({ "url": format!("http://127.0.0.1:{port}/ok"), "n": 7 });
    start_as(&mut c, "call", "as-worker", input, "app-token").await;
    let (status, output) = result_as(&mut c, "as-worker", "app-token", WAIT).await;
    assert_eq!(status, pb::ExecutionStatus::Completed, "{output}");
    assert_eq!(output["body"]["received"], json!({ "n": 7 }), "{output}");
}
