//! Search attributes and memo (issue 28 item 1) through the real `orbit dev`: a definition
//! declaring all seven types, set at start and when a task step (served by a real
//! `orbit-worker`) succeeds, found by `ListExecutions` queries on each type (keyword list
//! membership, `customer = 'acme' AND amount > 10`), a value of the wrong type recorded as
//! an error while the run completes, describe (Rust client and CLI) showing the attributes
//! and the start's memo, the same through the Python client (start with a memo, list with
//! the query, describe), the rows gone with `DeleteExecution`, and a second workflow
//! declaring a name with another type refused with `SEARCH_ATTRIBUTE_CONFLICT`.

// Tests read their environment and the wall clock (deadlines of real processes) directly.
#![allow(clippy::disallowed_methods)]

mod common;

use common::python::{check_sdk, python};
use common::{code, history, register, result, run_bounded, Server, TempDir};
use orbit_api::v1 as pb;
use orbit_worker::client::{Client, Start};
use orbit_worker::{CancellationToken, TaskContext, TaskFailure, Worker};
use serde_json::{json, Value};
use std::time::Duration;

/// How long an execution may take to complete with a live worker.
const RESULT_WITHIN: Duration = Duration::from_secs(60);
/// How long one CLI call may take.
const CLI_CALL: Duration = Duration::from_secs(60);

const BILLING: &str = r#"
name: billing
version: "1"
search_attributes:
  customer: keyword
  note: text
  count: int
  amount: double
  vip: bool
  due: datetime
  tags: keyword_list
tasks:
  quote: { version: "1" }
search:
  customer: ${{ input.customer }}
  vip: ${{ input.vip }}
  due: ${{ input.due }}
  tags: ${{ input.tags }}
steps:
  - id: quote
    task: quote
    input: { total: "${{ input.total }}", count: "${{ input.count }}" }
    search:
      amount: ${{ steps.quote.output.total }}
      count: ${{ steps.quote.output.count }}
      note: ${{ 'quoted for ' + input.customer }}
output: ${{ steps.quote.output }}
"#;

/// Declares `customer` with another type than `billing` does.
/// The Python client starts `p1` with a memo, waits for it, lists with a search attribute
/// query and describes it.
const PYTHON: &str = r#"
import json, sys
from orbit_worker import Client
c = Client(sys.argv[1])
c.start("billing", {"customer": "initech", "vip": True, "due": "2026-12-01", "tags": ["py"],
    "total": 99, "count": 7}, execution_id="p1", memo={"from": "python"})
c.result("p1", timeout=60)
ids = [e["executionId"] for e in c.list_executions("customer = 'initech' AND amount > 10 AND tags = 'py'")]
d = c.describe("p1")
catalog = {a["name"]: a["type"] for a in c.search_attribute_catalog() if not a["system"]}
print(json.dumps({"ids": ids, "memo": d["memo"], "search": d["searchAttributes"], "catalog": catalog}))
"#;

const AUDIT: &str = r#"
name: audit
version: "1"
search_attributes: { customer: int }
steps:
  - { id: a, compute: "${{ 1 }}" }
"#;

async fn list(
    c: &mut pb::workflow_service_client::WorkflowServiceClient<tonic::transport::Channel>,
    q: &str,
) -> Result<Vec<String>, tonic::Status> {
    let req = pb::ListExecutionsRequest { query: q.into(), ..Default::default() };
    let page = c.list_executions(req).await?.into_inner();
    Ok(page.executions.into_iter().map(|e| e.execution_id).collect())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn search_attributes_are_set_queried_described_and_deleted() {
    let dir = TempDir::new("search-attributes");
    let server = Server::start(&dir.0.join("orbit.db"), &[]).await;
    let mut c = server.client().await;
    register(&mut c, BILLING).await;

    // Another type for a declared name: refused, naming the workflow that declared it.
    let refused = c
        .register_workflow(pb::RegisterWorkflowRequest { document: AUDIT.into(), format: 0 })
        .await
        .expect_err("a conflicting declaration");
    assert_eq!(refused.code(), tonic::Code::FailedPrecondition);
    assert_eq!(code(&refused), "SEARCH_ATTRIBUTE_CONFLICT");
    assert!(refused.message().contains("workflow `billing`"), "{}", refused.message());
    // Nothing of the refused definition was stored.
    let got = c.get_workflow(pb::GetWorkflowRequest { name: "audit".into(), ..Default::default() });
    assert!(got.await.is_err(), "audit is not registered");

    let stop = CancellationToken::new();
    let worker = Worker::builder(server.address())
        .worker_id("search-worker")
        .task("quote", "1", |ctx: TaskContext| async move {
            Ok::<Value, TaskFailure>(ctx.input().clone())
        })
        .build()
        .expect("worker");
    let s = stop.clone();
    tokio::spawn(async move { worker.run(s).await });

    let client = Client::connect(&server.address()).await.expect("connect");
    let starts = [
        (
            "b1",
            json!({"customer": "acme", "vip": true, "due": "2026-11-24T10:00:00Z",
            "tags": ["eu", "vip"], "total": 12.5, "count": 2}),
        ),
        (
            "b2",
            json!({"customer": "acme", "vip": false, "due": "2026-10-01",
            "tags": ["eu"], "total": 5, "count": 1}),
        ),
        // `count` is not an int: recorded as an error, the run completes.
        (
            "b3",
            json!({"customer": "globex", "vip": false, "due": 0,
            "tags": ["us"], "total": 50, "count": "many"}),
        ),
    ];
    for (id, input) in &starts {
        let mut start = Start::new("billing", input).execution_id(id);
        if *id == "b1" {
            start = start.memo(&json!({"ticket": "T-42", "owner": {"team": "billing"}}));
        }
        client.start_with(start).await.expect("start");
    }
    for (id, _) in &starts {
        let (status, _) = result(&mut c, id, RESULT_WITHIN).await;
        assert_eq!(status, pb::ExecutionStatus::Completed, "{id}");
    }

    let ids = |v: &[&str]| v.iter().map(ToString::to_string).collect::<Vec<_>>();
    for (q, want) in [
        ("customer = 'acme' AND amount > 10", ids(&["b1"])),
        ("customer = 'acme'", ids(&["b2", "b1"])),
        ("note STARTS_WITH 'quoted for g'", ids(&["b3"])),
        ("count >= 2", ids(&["b1"])),
        ("count IS NULL", ids(&["b3"])),
        ("amount BETWEEN 1 AND 20 ORDER BY created ASC", ids(&["b1", "b2"])),
        ("vip = true", ids(&["b1"])),
        ("due > '2026-11-01'", ids(&["b1"])),
        ("due < '2000-01-01'", ids(&["b3"])),
        ("tags = 'vip'", ids(&["b1"])),
        ("tags IN ('us', 'vip')", ids(&["b3", "b1"])),
        ("tags != 'eu'", ids(&["b3"])),
        ("workflow = 'billing' AND status = 'COMPLETED' AND NOT customer = 'acme'", ids(&["b3"])),
    ] {
        let got = list(&mut c, q).await.unwrap_or_else(|e| panic!("{q}: {e:?}"));
        assert_eq!(got, want, "{q}");
    }
    // A type error on a search attribute, an unknown name and an order the list cannot
    // page by are INVALID_QUERY.
    for q in ["amount > 'x'", "nope = 1", "ORDER BY amount"] {
        let e = list(&mut c, q).await.expect_err(q);
        assert_eq!(code(&e), "INVALID_QUERY", "{q}");
    }

    // The wrong-typed value is named in the step's upsert.
    let h = history(&mut c, "b3").await;
    let upsert = h
        .iter()
        .filter(|e| e.event_type == "SearchAttributesUpserted")
        .map(common::event_payload)
        .find(|p| p.get("step").is_some())
        .expect("the step's upsert");
    assert!(upsert["errors"]["count"].as_str().unwrap_or("").contains("`int`"), "{upsert}");

    // Describe: the Rust client and the CLI show the attributes and the memo.
    let search = client.search_attributes("b1").await.expect("describe");
    assert_eq!(search.search_attributes["customer"], json!("acme"));
    assert_eq!(search.search_attributes["amount"], json!(12.5));
    assert_eq!(search.search_attributes["tags"], json!(["eu", "vip"]));
    assert_eq!(search.search_attributes["due"], json!("2026-11-24T10:00:00.000Z"));
    assert_eq!(search.memo, Some(json!({"ticket": "T-42", "owner": {"team": "billing"}})));
    assert_eq!(client.search_attributes("b2").await.expect("describe").memo, None);
    let address = server.address();
    let cli = tokio::task::spawn_blocking(move || {
        let mut cmd = std::process::Command::new(env!("CARGO_BIN_EXE_orbit"));
        cmd.args(["execution", "describe", "b1", "--address", &address, "--output", "json"]);
        run_bounded(&mut cmd, CLI_CALL)
    });
    let (ok, out, err) = cli.await.expect("cli");
    assert!(ok, "{out}{err}");
    let described: Value = serde_json::from_str(&out).expect("json");
    assert_eq!(described["memo"]["ticket"], "T-42");
    assert_eq!(described["search_attributes"]["vip"], true);

    // The Python client: memo on start, the query, search attributes and memo on describe.
    check_sdk("");
    let target = format!("127.0.0.1:{}", server.port);
    let py = tokio::task::spawn_blocking(move || {
        let mut cmd = std::process::Command::new(python());
        cmd.args(["-c", PYTHON, &target]);
        run_bounded(&mut cmd, CLI_CALL)
    });
    let (ok, out, err) = py.await.expect("python thread");
    assert!(ok, "{out}{err}");
    let answer: Value = serde_json::from_str(out.trim()).unwrap_or_else(|e| panic!("{e}: {out}"));
    assert_eq!(answer["ids"], json!(["p1"]), "{answer}");
    assert_eq!(answer["memo"], json!({"from": "python"}), "{answer}");
    assert_eq!(answer["search"]["count"], json!(7), "{answer}");
    assert_eq!(answer["search"]["due"], json!("2026-12-01T00:00:00.000Z"), "{answer}");
    assert_eq!(answer["catalog"]["tags"], "keyword_list", "{answer}");
    assert_eq!(answer["catalog"]["amount"], "double", "{answer}");

    // The catalog a query (and the console's completion) may name: the system attributes
    // first, then the declared ones by name with their types and declaring workflow; the
    // CLI prints the same.
    let catalog = client.search_attribute_catalog().await.expect("catalog");
    let system: Vec<&str> = catalog.iter().filter(|a| a.system).map(|a| a.name.as_str()).collect();
    assert_eq!(system.first(), Some(&"execution_id"));
    assert!(system.contains(&"failed_step") && system.contains(&"status"), "{system:?}");
    let declared: Vec<(&str, &str, &str)> = catalog
        .iter()
        .filter(|a| !a.system)
        .map(|a| (a.name.as_str(), a.r#type.as_str(), a.workflow.as_str()))
        .collect();
    assert_eq!(
        declared,
        [
            ("amount", "double", "billing"),
            ("count", "int", "billing"),
            ("customer", "keyword", "billing"),
            ("due", "datetime", "billing"),
            ("note", "text", "billing"),
            ("tags", "keyword_list", "billing"),
            ("vip", "bool", "billing"),
        ],
        "by name, the conflicting `audit` declared nothing"
    );
    let address = server.address();
    let cli = tokio::task::spawn_blocking(move || {
        let mut cmd = std::process::Command::new(env!("CARGO_BIN_EXE_orbit"));
        cmd.args(["execution", "attributes", "--address", &address, "--output", "json"]);
        run_bounded(&mut cmd, CLI_CALL)
    });
    let (ok, out, err) = cli.await.expect("cli");
    assert!(ok, "{out}{err}");
    let listed: Value = serde_json::from_str(&out).expect("json");
    assert!(
        listed
            .as_array()
            .is_some_and(|a| a.iter().any(|x| x["name"] == "vip" && x["type"] == "bool")),
        "{listed}"
    );

    // Deleting an execution deletes its rows.
    let del = pb::DeleteExecutionRequest { execution_id: "b2".into() };
    c.delete_execution(del).await.expect("delete");
    assert_eq!(list(&mut c, "customer = 'acme'").await.expect("list"), ids(&["b1"]));
    stop.cancel();
}
