//! `CountExecutions`, `ORDER BY` any attribute and the failure attributes through the real
//! `orbit dev` (SQLite) with an identities file:
//!
//! - a workflow whose `charge` step fails (an `http` step the server does not enable,
//!   `ADAPTER_DISABLED`) ends FAILED with `failed_step = 'charge'` and
//!   `error_code = 'ADAPTER_DISABLED'`, queryable and shown in `ExecutionInfo`;
//! - counts in total, by status and by workflow; a group_by the count refuses is
//!   INVALID_ARGUMENT, a malformed query INVALID_QUERY with its position;
//! - a client restricted to `billing.*` counts (and lists, in any order) only those
//!   workflows' executions: nothing of `shipping.*` leaks, not even a zero group;
//! - `ORDER BY workflow` pages one execution at a time without loss or repeat;
//! - the CLI (`orbit execution count --group-by status`), grpcurl and the Python client
//!   (`Client.count_executions`) answer the same.

// Tests read their environment (GRPCURL) and the wall clock (deadlines of real processes)
// directly.
#![allow(clippy::disallowed_methods)]

mod common;

use common::grpcurl::grpcurl_raw;
use common::python::{check_sdk, python};
use common::secure::{bearer, identity};
use common::{code, free_port, poll_until, result_of, result_watch, run_bounded, Server, TempDir};
use orbit_api::v1 as pb;
use orbit_api::v1::workflow_service_client::WorkflowServiceClient;
use orbit_server_kit::payload::json_to_proto;
use orbit_server_kit::OrbitError;
use serde_json::{json, Value};
use std::time::Duration;
use tonic::transport::Channel;

/// The Python client counts as the restricted identity and reads a refusal's code.
const PYTHON_COUNT: &str = r#"
import json, sys, grpc
from orbit_worker import Client
c = Client(sys.argv[1], bearer_token=sys.argv[2])
counted = c.count_executions("failed_step IS NOT NULL OR status = 'RUNNING'", ["status"])
try:
    c.count_executions("", ["created"])
    error = None
except grpc.RpcError as e:
    error = e.code().name
print(json.dumps({"counted": counted, "error": error}))
"#;

/// Generous bound for anything that happens "soon" on a busy 2-core machine.
const WAIT: Duration = Duration::from_secs(60);
const OPS: &str = "token-of-ops";
const BILLING: &str = "token-of-billing";

const PAY: &str = r#"
name: billing.pay
version: "1"
steps:
  - { id: charge, http: { method: GET, url: "http://127.0.0.1:9/" } }
output: "${{ steps.charge.output }}"
"#;

fn waiting(name: &str) -> String {
    format!(
        "name: {name}\nversion: \"1\"\nsignals: {{ go: null }}\nsteps:\n  - {{ id: wait, await: go }}\n"
    )
}

type Client = WorkflowServiceClient<Channel>;

async fn start(c: &mut Client, workflow: &str, id: &str) {
    let request = pb::StartExecutionRequest {
        workflow: workflow.into(),
        execution_id: id.into(),
        input: Some(json_to_proto(json!({}))),
        ..Default::default()
    };
    c.start_execution(bearer(request, OPS)).await.expect("start");
}

async fn count(
    c: &mut Client,
    token: &str,
    query: &str,
    group_by: &[&str],
) -> Result<(u64, Vec<(Vec<String>, u64)>), tonic::Status> {
    let request = pb::CountExecutionsRequest {
        query: query.into(),
        group_by: group_by.iter().map(ToString::to_string).collect(),
    };
    let answer = c.count_executions(bearer(request, token)).await?.into_inner();
    let groups = answer.groups.into_iter().map(|g| (g.values, g.count)).collect();
    Ok((answer.count, groups))
}

/// Every page of `query` as `token`, `size` at a time: the ids in order.
async fn pages(c: &mut Client, token: &str, query: &str, size: u32) -> Vec<String> {
    let mut seen = Vec::new();
    let mut page_token = String::new();
    loop {
        let request = pb::ListExecutionsRequest {
            query: query.into(),
            page_size: size,
            page_token,
            ..Default::default()
        };
        let page = c.list_executions(bearer(request, token)).await.expect("list").into_inner();
        assert!(page.executions.len() <= size as usize);
        seen.extend(page.executions.into_iter().map(|e| e.execution_id));
        assert!(seen.len() <= 20, "{query}: pages repeat: {seen:?}");
        if page.next_page_token.is_empty() {
            return seen;
        }
        page_token = page.next_page_token;
    }
}

fn g(values: &[&str], n: u64) -> (Vec<String>, u64) {
    (values.iter().map(ToString::to_string).collect(), n)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn counts_orders_and_failures_through_the_api_cli_and_grpcurl() {
    let dir = TempDir::new("query-count");
    let file = dir.0.join("identities.yaml");
    let billing = "    actions: [read]\n    workflows: ['billing.*']\n";
    let entries =
        [identity("ops", "admin", OPS, ""), identity("billing", "client", BILLING, billing)];
    std::fs::write(&file, format!("identities:\n{}", entries.concat())).expect("identities");
    let file_arg = file.to_string_lossy().to_string();
    let server =
        Server::spawn_on(&dir.0.join("orbit.db"), free_port(), &["--identities", &file_arg]);
    let address = server.address();
    let mut c = poll_until(
        WAIT,
        || "orbit dev did not become ready".into(),
        async || {
            let mut c = WorkflowServiceClient::connect(address.clone()).await.ok()?;
            let ready = c.list_workflows(bearer(pb::ListWorkflowsRequest::default(), OPS)).await;
            ready.ok().map(|_| c)
        },
    )
    .await;
    for document in [PAY.to_string(), waiting("billing.wait"), waiting("shipping.pack")] {
        let request = pb::RegisterWorkflowRequest { document, format: 0 };
        c.register_workflow(bearer(request, OPS)).await.expect("register");
    }
    start(&mut c, "billing.pay", "p1").await;
    for id in ["b1", "b2"] {
        start(&mut c, "billing.wait", id).await;
    }
    for id in ["s1", "s2", "s3"] {
        start(&mut c, "shipping.pack", id).await;
    }
    let watch = bearer(result_watch("p1"), OPS);
    let (status, error) = result_of(&mut c, watch, WAIT).await;
    assert_eq!(status, pb::ExecutionStatus::Failed, "{error}");

    // The failure attributes: queryable and in ExecutionInfo.
    let request = pb::ListExecutionsRequest {
        query: "failed_step = 'charge' AND error_code = 'ADAPTER_DISABLED'".into(),
        ..Default::default()
    };
    let listed = c.list_executions(bearer(request, OPS)).await.expect("list").into_inner();
    let found: Vec<_> = listed
        .executions
        .iter()
        .map(|e| (e.execution_id.as_str(), e.failed_step.as_str(), e.error_code.as_str()))
        .collect();
    assert_eq!(found, [("p1", "charge", "ADAPTER_DISABLED")]);
    assert_eq!(
        pages(&mut c, OPS, "failed_step IS NOT NULL OR error_code IS NOT NULL", 10).await,
        ["p1"]
    );

    // Counts: the total, by status, by workflow (largest first, ties by value).
    assert_eq!(count(&mut c, OPS, "", &[]).await.expect("count"), (6, vec![]));
    let by_status = count(&mut c, OPS, "", &["status"]).await.expect("count");
    assert_eq!(by_status, (6, vec![g(&["RUNNING"], 5), g(&["FAILED"], 1)]));
    let by_workflow = count(&mut c, OPS, "workflow STARTS_WITH 'b'", &["workflow", "failed_step"])
        .await
        .expect("count");
    assert_eq!(
        by_workflow,
        (3, vec![g(&["billing.wait", ""], 2), g(&["billing.pay", "charge"], 1)])
    );

    // Refusals: a group the count cannot make, a malformed query with its position.
    let refused = count(&mut c, OPS, "", &["execution_id"]).await.expect_err("execution_id");
    assert_eq!(refused.code(), tonic::Code::InvalidArgument);
    assert!(refused.message().contains("cannot group by"), "{}", refused.message());
    let refused = count(&mut c, OPS, "", &["status", "workflow", "version", "root"]).await;
    assert_eq!(refused.expect_err("four groups").code(), tonic::Code::InvalidArgument);
    let refused = count(&mut c, OPS, "status = 5", &[]).await.expect_err("a type error");
    assert_eq!(code(&refused), "INVALID_QUERY");
    let error = OrbitError::from_status(&refused).expect("an Orbit error");
    assert_eq!(error.query_position(), Some((9, 1, 10)), "{error:?}");

    // The restricted client: only billing.* is counted and listed.
    assert_eq!(count(&mut c, BILLING, "", &[]).await.expect("count"), (3, vec![]));
    let by_status = count(&mut c, BILLING, "", &["status"]).await.expect("count");
    assert_eq!(by_status, (3, vec![g(&["RUNNING"], 2), g(&["FAILED"], 1)]));
    let by_workflow = count(&mut c, BILLING, "", &["workflow"]).await.expect("count");
    assert_eq!(by_workflow, (3, vec![g(&["billing.wait"], 2), g(&["billing.pay"], 1)]));
    let other = count(&mut c, BILLING, "workflow = 'shipping.pack'", &["workflow"]).await;
    assert_eq!(other.expect("count"), (0, vec![]), "nothing of shipping.* leaks");

    // ORDER BY another attribute pages without loss or repeat, as either identity.
    assert_eq!(
        pages(&mut c, OPS, "ORDER BY workflow ASC", 1).await,
        ["p1", "b1", "b2", "s1", "s2", "s3"]
    );
    assert_eq!(
        pages(&mut c, OPS, "ORDER BY status DESC", 2).await,
        ["s3", "s2", "s1", "b2", "b1", "p1"]
    );
    assert_eq!(pages(&mut c, BILLING, "ORDER BY workflow DESC", 1).await, ["b2", "b1", "p1"]);
    assert_eq!(pages(&mut c, OPS, "ORDER BY closed DESC", 4).await[0], "p1", "NULLs last");

    // The CLI: a table by default, the same counts as JSON.
    let cli = |args: &'static [&'static str]| {
        let address = server.address();
        tokio::task::spawn_blocking(move || {
            let mut cmd = std::process::Command::new(env!("CARGO_BIN_EXE_orbit"));
            cmd.args(["execution", "count", "--address", &address, "--token", OPS]).args(args);
            run_bounded(&mut cmd, WAIT)
        })
    };
    let (ok, out, err) = cli(&["--group-by", "status", "--output", "json"]).await.expect("cli");
    assert!(ok, "{out}{err}");
    let counted: Value = serde_json::from_str(&out).unwrap_or_else(|e| panic!("{e}: {out}"));
    assert_eq!(counted["count"], 6, "{counted}");
    assert_eq!(counted["groups"][0], json!({"values": {"status": "RUNNING"}, "count": 5}));
    let (ok, out, err) = cli(&["--group-by", "workflow,status"]).await.expect("cli");
    assert!(ok, "{out}{err}");
    assert!(out.contains("WORKFLOW") && out.contains("shipping.pack"), "{out}");
    assert!(out.lines().any(|l| l.starts_with("TOTAL") && l.trim_end().ends_with('6')), "{out}");
    let (ok, _, err) = cli(&["--query", "status = 5"]).await.expect("cli");
    assert!(!ok);
    assert!(err.contains("INVALID_QUERY") && err.contains("  status = 5\n"), "{err}");

    // grpcurl, through reflection.
    let target = format!("127.0.0.1:{}", server.port);
    let (ok, out, err) = tokio::task::spawn_blocking(move || {
        let header = format!("authorization: Bearer {BILLING}");
        grpcurl_raw(&[
            "-plaintext",
            "-H",
            &header,
            "-d",
            r#"{"groupBy": ["status"]}"#,
            &target,
            "orbit.v1.WorkflowService/CountExecutions",
        ])
    })
    .await
    .expect("grpcurl thread");
    assert!(ok, "{out}{err}");
    let counted: Value = serde_json::from_str(&out).unwrap_or_else(|e| panic!("{e}: {out}"));
    assert_eq!(counted["count"], "3", "{counted}");
    assert_eq!(counted["groups"][1], json!({"values": ["FAILED"], "count": "1"}), "{counted}");

    // The Python client, as the restricted identity.
    check_sdk("");
    let target = format!("127.0.0.1:{}", server.port);
    let (ok, out, err) = tokio::task::spawn_blocking(move || {
        let mut cmd = std::process::Command::new(python());
        cmd.args(["-c", PYTHON_COUNT, &target, BILLING]);
        run_bounded(&mut cmd, WAIT)
    })
    .await
    .expect("python thread");
    assert!(ok, "{out}{err}");
    let answer: Value = serde_json::from_str(out.trim()).unwrap_or_else(|e| panic!("{e}: {out}"));
    let groups = json!([{"values": ["RUNNING"], "count": 2}, {"values": ["FAILED"], "count": 1}]);
    assert_eq!(
        answer,
        json!({"counted": {"count": 3, "groups": groups}, "error": "INVALID_ARGUMENT"})
    );
}
