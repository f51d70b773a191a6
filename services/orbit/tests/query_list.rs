//! `ListExecutions.query` through the real `orbit dev`: the list query language answers on
//! SQLite, ANDs with the structured filters, pages in both directions of `ORDER BY created`,
//! and refuses a malformed query with `INVALID_QUERY` and its position, read by the Rust
//! client, by grpcurl (decoded `ErrorInfo` metadata) and by `orbit execution list --query`
//! (a caret under the column), and the same query through the Python client.

mod common;

use common::grpcurl::grpcurl_raw;
use common::python::{check_sdk, python};
use common::{code, register_example, result, run_bounded, start, Server, TempDir};
use orbit_api::v1 as pb;
use orbit_server_kit::OrbitError;
use serde_json::{json, Value};
use std::time::Duration;

/// How long a terminated execution may take to show its result.
const RESULT_WITHIN: Duration = Duration::from_secs(30);
/// How long one CLI call (or the Python client's script) may take.
const CLI_CALL: Duration = Duration::from_secs(60);

/// The Python client lists with a query and reads a refusal's code and position.
const PYTHON_LIST: &str = r#"
import json, sys, grpc
from orbit_worker import Client
c = Client(sys.argv[1])
ids = [e["executionId"] for e in c.list_executions("workflow = 'hello' AND status = 'FAILED'")]
try:
    c.list_executions("workflow = 'hello' AND created > 5")
    error = None
except grpc.RpcError as e:
    error = dict(e.trailing_metadata()).get("orbit-error-code")
print(json.dumps({"ids": ids, "error": error}))
"#;

async fn list(
    client: &mut pb::workflow_service_client::WorkflowServiceClient<tonic::transport::Channel>,
    request: pb::ListExecutionsRequest,
) -> Result<(Vec<String>, String), tonic::Status> {
    let page = client.list_executions(request).await?.into_inner();
    Ok((page.executions.into_iter().map(|e| e.execution_id).collect(), page.next_page_token))
}

fn query(q: &str) -> pb::ListExecutionsRequest {
    pb::ListExecutionsRequest { query: q.into(), ..Default::default() }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn list_executions_answers_the_query_language() {
    let dir = TempDir::new("query-list");
    let server = Server::start(&dir.0.join("orbit.db"), &[]).await;
    let mut c = server.client().await;
    register_example(&mut c, "hello.yaml").await;
    register_example(&mut c, "query.yaml").await;
    // No worker: the executions stay RUNNING, but h2, which is terminated (FAILED).
    for id in ["h1", "h2", "h3"] {
        start(&mut c, "hello", id, json!({"name": id})).await.expect("start hello");
    }
    for id in ["q1", "q2"] {
        let input = json!({"order_id": id, "items": [{"sku": "a"}]});
        start(&mut c, "query", id, input).await.expect("start query");
    }
    let req = pb::TerminateExecutionRequest { execution_id: "h2".into(), reason: "test".into() };
    assert!(c.terminate_execution(req).await.expect("terminate").into_inner().terminated);
    let (status, _) = result(&mut c, "h2", RESULT_WITHIN).await;
    assert_eq!(status, pb::ExecutionStatus::Failed);

    let ids = |v: &[&str]| v.iter().map(ToString::to_string).collect::<Vec<_>>();
    for (q, want) in [
        ("workflow = 'hello'", ids(&["h3", "h2", "h1"])),
        ("workflow = 'hello' AND status = 'failed'", ids(&["h2"])),
        ("closed IS NOT NULL AND duration >= 0", ids(&["h2"])),
        ("NOT (workflow = 'hello' OR execution_id IN ('q2'))", ids(&["q1"])),
        ("parent IS NULL AND root STARTS_WITH 'q' ORDER BY created ASC", ids(&["q1", "q2"])),
        ("workflow = ''' OR 1=1 --'", ids(&[])),
    ] {
        let (got, _) = list(&mut c, query(q)).await.unwrap_or_else(|e| panic!("{q}: {e:?}"));
        assert_eq!(got, want, "{q}");
    }

    // ANDed with the structured filters.
    let both = pb::ListExecutionsRequest {
        workflow: "hello".into(),
        query: "status = 'RUNNING'".into(),
        ..Default::default()
    };
    assert_eq!(list(&mut c, both).await.expect("list").0, ids(&["h3", "h1"]));

    // Oldest first, one execution a page: every one once, in creation order.
    let mut seen = Vec::new();
    let mut token = String::new();
    loop {
        let req = pb::ListExecutionsRequest {
            query: "status != 'FAILED' ORDER BY created ASC".into(),
            page_size: 1,
            page_token: token,
            ..Default::default()
        };
        let (page, next) = list(&mut c, req).await.expect("page");
        assert!(page.len() <= 1);
        seen.extend(page);
        if next.is_empty() {
            break;
        }
        token = next;
    }
    assert_eq!(seen, ids(&["h1", "h3", "q1", "q2"]));

    // A malformed query: INVALID_QUERY (INVALID_ARGUMENT) with the position.
    let bad = "workflow = 'hello' AND created > 5";
    let status = list(&mut c, query(bad)).await.expect_err("a type error");
    assert_eq!(status.code(), tonic::Code::InvalidArgument);
    assert_eq!(code(&status), "INVALID_QUERY");
    let error = OrbitError::from_status(&status).expect("an Orbit error");
    assert_eq!(error.query_position(), Some((33, 1, 34)), "{error:?}");
    assert!(error.message.contains("datetime"), "{}", error.message);
    let status = list(&mut c, query("ORDER BY nothing")).await.expect_err("an unknown order");
    assert_eq!(code(&status), "INVALID_QUERY");

    // The CLI: rows for a valid query; a caret under the column for a refused one.
    let address = server.address();
    let cli = |q: &'static str| {
        let address = address.clone();
        tokio::task::spawn_blocking(move || {
            let mut cmd = std::process::Command::new(env!("CARGO_BIN_EXE_orbit"));
            cmd.args([
                "execution",
                "list",
                "--address",
                &address,
                "--output",
                "json",
                "--query",
                q,
            ]);
            run_bounded(&mut cmd, CLI_CALL)
        })
    };
    let (ok, out, err) = cli("workflow = 'hello' AND status = 'FAILED'").await.expect("cli");
    assert!(ok, "{out}{err}");
    let listed: Value = serde_json::from_str(&out).unwrap_or_else(|e| panic!("{e}: {out}"));
    assert_eq!(listed["executions"].as_array().map(Vec::len), Some(1), "{listed}");
    let (ok, _, err) = cli("workflow = 'hello' AND created > 5").await.expect("cli");
    assert!(!ok);
    assert!(err.contains("error: INVALID_QUERY"), "{err}");
    let caret = format!("  {bad}\n  {}^\n", " ".repeat(33));
    assert!(err.contains(&caret), "no caret under column 34:\n{err}");

    // grpcurl, through reflection: the same query, and the position in ErrorInfo.metadata.
    let target = format!("127.0.0.1:{}", server.port);
    let (found, refused) = tokio::task::spawn_blocking(move || {
        let call = |q: &str| {
            let body = json!({"query": q}).to_string();
            grpcurl_raw(&[
                "-plaintext",
                "-format-error",
                "-d",
                &body,
                &target,
                "orbit.v1.WorkflowService/ListExecutions",
            ])
        };
        (call("workflow = 'hello' AND status = 'FAILED'"), call(bad))
    })
    .await
    .expect("grpcurl thread");
    let (ok, out, err) = found;
    assert!(ok, "{out}{err}");
    let listed: Value = serde_json::from_str(&out).unwrap_or_else(|e| panic!("{e}: {out}"));
    assert_eq!(listed["executions"][0]["executionId"], "h2", "{listed}");
    let (ok, out, err) = refused;
    assert!(!ok, "{out}");
    let start = err.find('{').unwrap_or_else(|| panic!("no JSON: {err}"));
    let status: Value =
        serde_json::from_str(&err[start..]).unwrap_or_else(|e| panic!("{e}: {err}"));
    assert_eq!(status["code"], 3, "{status}");
    let info = &status["details"][0];
    assert_eq!(info["reason"], "INVALID_QUERY", "{status}");
    assert_eq!(info["metadata"]["position"], "33", "{status}");
    assert_eq!(info["metadata"]["line"], "1", "{status}");
    assert_eq!(info["metadata"]["column"], "34", "{status}");

    // The Python client: the same query, and the refusal's code.
    check_sdk("");
    let target = format!("127.0.0.1:{}", server.port);
    let (ok, out, err) = tokio::task::spawn_blocking(move || {
        let mut cmd = std::process::Command::new(python());
        cmd.args(["-c", PYTHON_LIST, &target]);
        run_bounded(&mut cmd, CLI_CALL)
    })
    .await
    .expect("python thread");
    assert!(ok, "{out}{err}");
    let answer: Value = serde_json::from_str(out.trim()).unwrap_or_else(|e| panic!("{e}: {out}"));
    assert_eq!(answer, json!({"ids": ["h2"], "error": "INVALID_QUERY"}));
}
