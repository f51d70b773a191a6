//! Hostile definitions and expressions against one real `orbit dev`: each one gets a clear
//! error with a stable code (`INVALID_DEFINITION` with a per-path code at registration,
//! `EXPRESSION_LIMIT` at evaluation), and the server keeps serving — across a restart too.

mod common;

use common::*;
use orbit_api::v1 as pb;
use orbit_api::v1::workflow_service_client::WorkflowServiceClient;
use orbit_server_kit::payload::json_to_proto;
use orbit_server_kit::OrbitError;
use orbit_store::roles::*;
use serde_json::{json, Value};
use std::time::Duration;
use tonic::transport::Channel;

/// Generous bound of one RPC on a loaded machine.
const CALL: Duration = Duration::from_secs(15);

async fn bounded<T>(
    what: &str,
    fut: impl std::future::Future<Output = Result<tonic::Response<T>, tonic::Status>>,
) -> Result<T, tonic::Status> {
    tokio::time::timeout(CALL, fut)
        .await
        .unwrap_or_else(|_| panic!("{what}: no answer within {CALL:?}"))
        .map(tonic::Response::into_inner)
}

async fn still_serving(c: &mut WorkflowServiceClient<Channel>, after: &str) {
    bounded("ListWorkflows", c.list_workflows(pb::ListWorkflowsRequest::default()))
        .await
        .unwrap_or_else(|e| panic!("the server stopped answering after {after}: {e:?}"));
}

async fn register_as(
    c: &mut WorkflowServiceClient<Channel>,
    document: &str,
    format: pb::DefinitionFormat,
) -> Result<pb::RegisterWorkflowResponse, tonic::Status> {
    let req = pb::RegisterWorkflowRequest { document: document.into(), format: format as i32 };
    bounded("RegisterWorkflow", c.register_workflow(req)).await
}

async fn register_doc(
    c: &mut WorkflowServiceClient<Channel>,
    document: &str,
) -> Result<pb::RegisterWorkflowResponse, tonic::Status> {
    register_as(c, document, pb::DefinitionFormat::Unspecified).await
}

/// Asserts an `INVALID_DEFINITION` refusal with a violation `(path, code)`; returns it.
fn refused_with(
    what: &str,
    r: Result<pb::RegisterWorkflowResponse, tonic::Status>,
    path: &str,
    code: &str,
) -> OrbitError {
    let status = match r {
        Ok(ok) => panic!("{what}: expected a refusal, got {ok:?}"),
        Err(status) => status,
    };
    let e = OrbitError::from_status(&status)
        .unwrap_or_else(|| panic!("{what}: not an Orbit error: {status:?}"));
    assert_eq!(e.code.as_str(), "INVALID_DEFINITION", "{what}: {status:?}");
    assert!(
        e.details.iter().any(|v| v.path == path && v.code == code),
        "{what}: expected a {code} violation at `{path}`, got {:?}",
        e.details
    );
    e
}

/// `1+1+...+1` with `n` terms.
fn long_sum(n: usize) -> String {
    vec!["1"; n].join("+")
}

/// A definition whose step `b` evaluates `expr` once signal `go` arrived.
fn after_signal(name: &str, expr: &str) -> String {
    format!(
        "name: {name}\nversion: \"1\"\nsignals: {{ go: null }}\nsteps:\n  - {{ id: a, await: go }}\n  - id: b\n    needs: [a]\n    compute: \"${{{{ {expr} }}}}\"\n"
    )
}

/// `n` steps where step i needs step i-1 (and step 0 needs the last when `cycle`).
fn chain(name: &str, n: usize, cycle: bool) -> String {
    let mut doc = format!("name: {name}\nversion: \"1\"\nsteps:\n");
    for i in 0..n {
        let need = match (i, cycle) {
            (0, false) => String::new(),
            (0, true) => format!(", needs: [s{}]", n - 1),
            _ => format!(", needs: [s{}]", i - 1),
        };
        doc.push_str(&format!("  - {{ id: s{i}, sleep: 1s{need} }}\n"));
    }
    doc
}

fn signal(id: &str) -> pb::SignalExecutionRequest {
    pb::SignalExecutionRequest {
        execution_id: id.into(),
        name: "go".into(),
        payload: Some(json_to_proto(json!({}))),
        request_id: String::new(),
    }
}

fn start_req(workflow: &str, id: &str, input: Value) -> pb::StartExecutionRequest {
    pb::StartExecutionRequest {
        memo: None,
        workflow: workflow.into(),
        version: String::new(),
        input: Some(json_to_proto(input)),
        execution_id: id.into(),
        priority: 0,
    }
}

/// The 2,000-term sum that once registered and then crashed the server (and every restart
/// of it) when its step ran: now refused at registration. A definition stored before the
/// limits existed (planted in the file here, as an older server wrote it) still loads; its
/// step fails with `EXPRESSION_LIMIT`, the server stays up, and a restart comes up too.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_long_sum_is_refused_and_a_stored_one_fails_its_step_without_a_crash() {
    let dir = TempDir::new("expr-sum");
    let db = dir.0.join("orbit.db");
    let mut server = Server::start(&db, &[]).await;
    let mut c = server.client().await;

    let doc = after_signal("long-sum", &long_sum(2_000));
    let r = register_doc(&mut c, &doc).await;
    refused_with("2,000 terms", r, "steps[1].compute", "EXPRESSION_LIMIT");
    still_serving(&mut c, "the 2,000-term sum").await;

    // The same definition as an older server stored it.
    let def = orbit_definition::parse_stored(&doc).expect("a stored document loads");
    let document = orbit_definition::canonical_json(&orbit_definition::to_document(&def));
    let store = orbit_store::SqliteStore::open(&db).await.expect("open the server's file");
    store.put_definition(&def.name, &def.version, &def.hash, &document).await.expect("plant");
    drop(store);

    bounded("start", c.start_execution(start_req("long-sum", "sum-1", json!({}))))
        .await
        .expect("start the stored definition");
    bounded("signal", c.signal_execution(signal("sum-1"))).await.expect("signal");
    still_serving(&mut c, "the 2,000-term step ran").await;
    let (status, value) = result(&mut c, "sum-1", CALL).await;
    assert_eq!(status, pb::ExecutionStatus::Failed, "{value}");
    assert!(value.to_string().contains("EXPRESSION_LIMIT"), "{value}");

    // A restart on the same file comes up, serves, and reads the execution.
    let port = server.port;
    server.kill9();
    let server = Server::start_on(&db, port, &[]).await;
    let mut c = server.client().await;
    still_serving(&mut c, "a restart").await;
    let (status, _) = result(&mut c, "sum-1", CALL).await;
    assert_eq!(status, pb::ExecutionStatus::Failed);
}

/// Expressions the parser could not survive are refused before it runs.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn huge_expressions_are_refused_with_a_path_and_a_code() {
    let dir = TempDir::new("expr-register");
    let server = Server::start(&dir.0.join("orbit.db"), &[]).await;
    let mut c = server.client().await;

    // 5,210+ terms once aborted the server inside RegisterWorkflow (parser recursion).
    let doc = after_signal("huge-sum", &long_sum(6_000));
    refused_with(
        "6,000 terms",
        register_doc(&mut c, &doc).await,
        "steps[1].compute",
        "EXPRESSION_LIMIT",
    );
    still_serving(&mut c, "a 6,000-term expression").await;
}

/// Graphs the size of the step limit are checked without recursion; cycle errors stay small.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn big_graphs_are_checked_without_recursion() {
    let dir = TempDir::new("expr-graph");
    let server = Server::start(&dir.0.join("orbit.db"), &[]).await;
    let mut c = server.client().await;

    // A 6,300-step `needs` chain overflowed the stack in graph validation: now it is
    // checked iteratively and accepted.
    let r = register_doc(&mut c, &chain("long-chain", 6_300, false)).await;
    r.unwrap_or_else(|e| panic!("a 6,300-step chain is within the limits: {e:?}"));
    still_serving(&mut c, "a 6,300-step chain").await;

    // A 20,000-step cycle: over the step limit, refused as such at the document root.
    let r = register_doc(&mut c, &chain("big-cycle", 20_000, true)).await;
    refused_with("20,000-step cycle", r, "steps", "DOCUMENT_LIMIT");
    still_serving(&mut c, "a 20,000-step cycle").await;

    // A 9,000-step cycle (within the step limit) is found without recursion, and its
    // message fits the client's metadata limit: INVALID_DEFINITION, not RESOURCE_EXHAUSTED.
    let r = register_doc(&mut c, &chain("cycle-9000", 9_000, true)).await;
    let e = refused_with("9,000-step cycle", r, "steps[0]", "CYCLE");
    assert!(e.message.len() < 4096, "message of {} bytes", e.message.len());
    // The 500-step cycle of the original report.
    let r = register_doc(&mut c, &chain("cycle-500", 500, true)).await;
    let e = refused_with("500-step cycle", r, "steps[0]", "CYCLE");
    assert!(e.message.contains("more"), "the listing is shortened: {}", e.message);
    still_serving(&mut c, "a 500-step cycle").await;
}

/// JSON documents: duplicate keys are refused, and the `format` field is honoured.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn json_duplicates_and_the_format_field() {
    let dir = TempDir::new("expr-json");
    let server = Server::start(&dir.0.join("orbit.db"), &[]).await;
    let mut c = server.client().await;

    // JSON with a duplicate key is refused like YAML (it was silently last-one-wins).
    let dup =
        r#"{"name": "dup", "version": "1", "steps": [{"id": "a", "sleep": "1s", "sleep": "2s"}]}"#;
    refused_with(
        "duplicate JSON key",
        register_doc(&mut c, dup).await,
        "steps[0].sleep",
        "PARSE_ERROR",
    );

    // The `format` field is honoured: YAML text declared JSON is refused, as JSON.
    let yaml = "name: fmt\nversion: \"1\"\nsteps:\n  - { id: a, sleep: 1s }\n";
    let r = register_as(&mut c, yaml, pb::DefinitionFormat::Json).await;
    refused_with("YAML sent as JSON", r, "", "PARSE_ERROR");
    register_as(&mut c, yaml, pb::DefinitionFormat::Yaml).await.expect("YAML as YAML");
    let json_doc = r#"{"name": "fmt-json", "version": "1", "steps": [{"id": "a", "sleep": "1s"}]}"#;
    register_as(&mut c, json_doc, pb::DefinitionFormat::Json).await.expect("JSON as JSON");
    still_serving(&mut c, "the format checks").await;
}

/// RSS of a process in KiB, from /proc.
fn rss_kib(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.split_whitespace().next()?.parse().ok())
        .unwrap_or(0)
}

/// Evaluation budgets: a step or query that would iterate 10^9 times or build 2.5·10^8
/// strings fails with `EXPRESSION_LIMIT` before it runs, and every other RPC answers.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn runaway_evaluations_fail_with_expression_limit() {
    let dir = TempDir::new("expr-eval");
    let server = Server::start(&dir.0.join("orbit.db"), &[]).await;
    let mut c = server.client().await;
    let billion = "input.L.all(a, input.L.all(b, input.L.all(c, true)))";
    let strings = "input.L.map(a, input.L.map(b, input.L.map(c, 'x')))";
    let doc = format!(
        "name: runaway\nversion: \"1\"\nsignals: {{ go: null }}\nqueries:\n  billion: \"${{{{ {billion} }}}}\"\n  fine: \"${{{{ size(input.L) }}}}\"\nsteps:\n  - {{ id: a, await: go }}\n  - id: b\n    needs: [a]\n    compute: \"${{{{ input.mode == 'billion' ? {billion} : {strings} }}}}\"\n"
    );
    register_doc(&mut c, &doc).await.expect("register runaway");
    let list: Vec<Value> = (0..1_000).map(|i| json!(i)).collect();

    // The query, while the execution waits: a clear EXPRESSION_LIMIT, fast enough that
    // ListWorkflows on another channel answers beside it.
    bounded(
        "start",
        c.start_execution(start_req("runaway", "q-1", json!({"mode": "billion", "L": list}))),
    )
    .await
    .expect("start q-1");
    let query = pb::QueryExecutionRequest {
        execution_id: "q-1".into(),
        name: "billion".into(),
        run: 0,
        at_seq: 0,
    };
    let mut other = server.client().await;
    let (q, listed) = tokio::join!(
        bounded("query", c.query_execution(query)),
        bounded("ListWorkflows beside", other.list_workflows(pb::ListWorkflowsRequest::default()))
    );
    listed.expect("ListWorkflows answers beside the query");
    let status = q.expect_err("a 10^9-iteration query must be refused");
    let e = OrbitError::from_status(&status).expect("an Orbit error");
    assert_eq!(e.code.as_str(), "EXPRESSION_LIMIT", "{status:?}");
    let fine = pb::QueryExecutionRequest {
        execution_id: "q-1".into(),
        name: "fine".into(),
        run: 0,
        at_seq: 0,
    };
    let v = bounded("fine query", c.query_execution(fine)).await.expect("a cheap query works");
    assert_eq!(orbit_server_kit::payload::proto_to_json(v.result.unwrap()).unwrap(), json!(1000));

    // The compute step, both ways: the step fails EXPRESSION_LIMIT, the workflow fails.
    let small: Vec<Value> = (0..630).map(|i| json!(i)).collect();
    for (id, mode, l) in [("c-billion", "billion", list.clone()), ("c-strings", "strings", small)] {
        bounded(
            "start",
            c.start_execution(start_req("runaway", id, json!({"mode": mode, "L": l}))),
        )
        .await
        .expect("start");
        bounded("signal", c.signal_execution(signal(id))).await.expect("signal");
        still_serving(&mut other, id).await;
        let (status, value) = result(&mut c, id, CALL).await;
        assert_eq!(status, pb::ExecutionStatus::Failed, "{id}: {value}");
        assert!(value.to_string().contains("EXPRESSION_LIMIT"), "{id}: {value}");
    }
    let rss = rss_kib(server.child.id());
    eprintln!("server RSS after the runaway evaluations: {rss} KiB");
    assert!(rss < 1024 * 1024, "RSS grew to {rss} KiB");
    still_serving(&mut c, "the runaway evaluations").await;
}
