//! Batches selected by a list query, with the cancel, terminate, signal and delete actions,
//! through the real `orbit dev --identities` (docs/evolving.md, "Batches"; docs/queries.md,
//! "Batches"): an admin (`ops`) and a client restricted to `billing.*` (`billing`), against
//! executions of `billing.invoice` and `shipping.pack` that wait for signals.
//!
//! - a malformed query, or one with `ORDER BY`, is `INVALID_QUERY` and nothing starts;
//! - a signal batch by query signals exactly the matching executions, once each;
//! - `billing`'s cancel batch whose query also matches `shipping.pack` executions counts,
//!   dry-runs and cancels only the `billing.*` ones (its patterns are ANDed in); the other
//!   workflow's executions keep running and it cannot see the admin's batches;
//! - a second cancel batch over the now cancelled executions skips each
//!   (`EXECUTION_FINISHED`): one `CancelRequested` per execution;
//! - a terminate batch (started with the CLI) ends the rest FAILED; a delete batch deletes
//!   the finished ones and refuses an open one (`EXECUTION_NOT_FINISHED`).

// Tests read their environment and the wall clock (deadlines of real processes) directly.
#![allow(clippy::disallowed_methods)]

mod common;

use common::bearer::Bearer;

use common::evolving::cli;
use common::secure::identity;
use common::{code, free_port, Server, TempDir};
use orbit_api::v1 as pb;
use orbit_api::v1::workflow_service_client::WorkflowServiceClient;
use orbit_server_kit::payload::json_to_proto;
use serde_json::json;
use std::time::Duration;
use tonic::service::interceptor::InterceptedService;
use tonic::transport::Channel;
use tonic::Status;

/// Bounds each wait on a batch or an execution: the frontend's reply timeout (10 s) for a
/// command the owner has not answered yet, twice, with room for a busy host.
const WAIT: Duration = Duration::from_secs(60);

type Client = WorkflowServiceClient<InterceptedService<Channel, Bearer>>;

fn token(name: &str) -> String {
    format!("token-of-{name}")
}

/// A workflow that waits for `go`, then for `stop`: open until cancelled or terminated.
fn definition(name: &str) -> String {
    format!(
        "name: {name}\nversion: \"1\"\nsignals:\n  go: null\n  stop: null\nsteps:\n  \
         - {{ id: first, await: go }}\n  - {{ id: second, await: stop, needs: [first] }}\n"
    )
}

async fn client(port: u16, who: &str) -> Client {
    let channel = Channel::from_shared(format!("http://127.0.0.1:{port}"))
        .expect("address")
        .connect()
        .await
        .expect("connect");
    WorkflowServiceClient::with_interceptor(channel, Bearer(token(who)))
}

/// `orbit dev --identities`, ready once the admin can list workflows.
async fn start_dev(dir: &TempDir) -> Server {
    let file = dir.0.join("identities.yaml");
    let identities = [
        "identities:\n".to_owned(),
        identity("ops", "admin", &token("ops"), ""),
        identity(
            "billing",
            "client",
            &token("billing"),
            "    actions: [start, read, update, signal, cancel]\n    workflows: ['billing.*']\n",
        ),
    ]
    .concat();
    std::fs::write(&file, identities).expect("identities file");
    let path = file.to_string_lossy().to_string();
    let server = Server::spawn_on(&dir.0.join("orbit.db"), free_port(), &["--identities", &path]);
    let port = server.port;
    common::poll_until(
        Duration::from_secs(60),
        || "orbit dev --identities did not become ready".into(),
        async || {
            let address = format!("http://127.0.0.1:{port}");
            let channel = Channel::from_shared(address).ok()?.connect().await.ok()?;
            let mut ops = WorkflowServiceClient::with_interceptor(channel, Bearer(token("ops")));
            ops.list_workflows(pb::ListWorkflowsRequest::default()).await.ok()
        },
    )
    .await;
    server
}

fn request(query: &str, action: pb::batch_action::Action) -> pb::StartBatchRequest {
    pb::StartBatchRequest {
        selector: Some(pb::BatchSelector { query: query.into(), ..Default::default() }),
        action: Some(pb::BatchAction { action: Some(action) }),
        rate_per_second: 200,
        reason: "batch query test".into(),
        ..Default::default()
    }
}

fn cancel() -> pb::batch_action::Action {
    pb::batch_action::Action::Cancel(pb::BatchCancel::default())
}

async fn describe(c: &mut Client, id: &str) -> pb::Batch {
    let request = pb::DescribeBatchRequest { batch_id: id.into() };
    c.describe_batch(request).await.expect("describe a batch").into_inner().batch.expect("batch")
}

/// The batch once it is no longer running (bounded).
async fn ended(c: &mut Client, id: &str) -> pb::Batch {
    common::poll_until(
        WAIT,
        || format!("batch {id} did not end"),
        async || Some(describe(c, id).await).filter(|b| b.state() != pb::BatchState::Running),
    )
    .await
}

async fn items(c: &mut Client, id: &str) -> Vec<pb::BatchItem> {
    let request = pb::ListBatchItemsRequest { batch_id: id.into(), ..Default::default() };
    c.list_batch_items(request).await.expect("items").into_inner().items
}

async fn status(c: &mut Client, id: &str) -> Result<pb::ExecutionStatus, Status> {
    let request = pb::DescribeExecutionRequest { execution_id: id.into(), ..Default::default() };
    let info = c.describe_execution(request).await?.into_inner();
    let status = info.execution.and_then(|e| e.info).map_or(0, |i| i.status);
    Ok(pb::ExecutionStatus::try_from(status).expect("a status"))
}

/// How many events of `event_type` the execution's history holds.
async fn count(c: &mut Client, id: &str, event_type: &str) -> usize {
    let request = pb::GetHistoryRequest { execution_id: id.into(), ..Default::default() };
    let page = c.get_history(request).await.expect("history").into_inner();
    assert!(page.next_page_token.is_empty(), "one page of history");
    page.events.iter().filter(|e| e.event_type == event_type).count()
}

fn ids(prefix: &str, n: usize) -> Vec<String> {
    (1..=n).map(|i| format!("{prefix}{i}")).collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn batches_by_query_act_only_on_what_they_select_and_may_touch() {
    let dir = TempDir::new("batch-query");
    let server = start_dev(&dir).await;
    let mut ops = client(server.port, "ops").await;
    let mut billing = client(server.port, "billing").await;
    for name in ["billing.invoice", "shipping.pack"] {
        let request = pb::RegisterWorkflowRequest { document: definition(name), format: 0 };
        ops.register_workflow(request).await.expect("register");
    }
    let acme = ids("inv-acme-", 4);
    let globex = ids("inv-globex-", 3);
    let shipping = ids("ship-acme-", 2);
    for (workflow, group) in
        [("billing.invoice", &acme), ("billing.invoice", &globex), ("shipping.pack", &shipping)]
    {
        for id in group {
            let request = pb::StartExecutionRequest {
                workflow: workflow.into(),
                execution_id: id.clone(),
                input: Some(json_to_proto(json!({}))),
                ..Default::default()
            };
            ops.start_execution(request).await.expect("start");
        }
    }

    // Malformed queries: INVALID_QUERY with the position, nothing started.
    let refused = billing.start_batch(request("status = ", cancel())).await.unwrap_err();
    assert_eq!(code(&refused), "INVALID_QUERY", "{refused:?}");
    assert!(refused.message().contains("column 10"), "{}", refused.message());
    let ordered = request("status = 'RUNNING' ORDER BY created", cancel());
    let refused = billing.start_batch(ordered).await.unwrap_err();
    assert_eq!(code(&refused), "INVALID_QUERY", "{refused:?}");
    assert!(refused.message().contains("ORDER BY"), "{}", refused.message());
    let listed = ops.list_batches(pb::ListBatchesRequest::default()).await.expect("list");
    assert!(listed.into_inner().batches.is_empty(), "nothing started");

    // A signal batch by query: the globex invoices, once each.
    let signal = pb::batch_action::Action::Signal(pb::BatchSignal {
        name: "go".into(),
        payload: Some(json_to_proto(json!({"by": "ops"}))),
    });
    let query = "workflow = 'billing.invoice' AND execution_id STARTS_WITH 'inv-globex-'";
    let started = ops.start_batch(request(query, signal)).await.expect("signal batch");
    let started = started.into_inner();
    let signal_id = started.batch_id.clone();
    assert_eq!(started.batch.as_ref().map(|b| b.total), Some(3));
    let b = ended(&mut ops, &signal_id).await;
    assert_eq!(b.state(), pb::BatchState::Completed, "{b:?}");
    assert_eq!((b.succeeded, b.failed, b.skipped), (3, 0, 0), "{b:?}");
    assert_eq!(b.selector.as_ref().map(|s| s.query.as_str()), Some(query));
    for id in &globex {
        assert_eq!(count(&mut ops, id, "SignalReceived").await, 1, "{id} signalled once");
    }
    for id in acme.iter().chain(&shipping) {
        assert_eq!(count(&mut ops, id, "SignalReceived").await, 0, "{id} not signalled");
    }

    // The restricted client's cancel: its query names shipping executions too, but its
    // patterns are ANDed in — counted, dry-run and cancelled: only billing.invoice's.
    let both = "execution_id STARTS_WITH 'inv-acme-' OR execution_id STARTS_WITH 'ship-acme-'";
    let dry = pb::StartBatchRequest { dry_run: true, ..request(both, cancel()) };
    let dry = billing.start_batch(dry).await.expect("dry run").into_inner();
    assert_eq!(dry.dry_run_total, 4);
    let dry_ids: Vec<&str> = dry.dry_run_items.iter().map(|i| i.execution_id.as_str()).collect();
    assert_eq!(dry_ids, acme.iter().map(String::as_str).collect::<Vec<_>>());
    assert!(dry.dry_run_items.iter().all(|i| i.safe && i.code.is_empty()), "{dry:?}");
    let named = pb::StartBatchRequest {
        selector: Some(pb::BatchSelector {
            workflow: "shipping.pack".into(),
            query: both.into(),
            ..Default::default()
        }),
        ..request(both, cancel())
    };
    let refused = billing.start_batch(named).await.unwrap_err();
    assert_eq!(code(&refused), "PERMISSION_DENIED", "{refused:?}");
    let started = billing.start_batch(request(both, cancel())).await.expect("cancel batch");
    let cancel_id = started.into_inner().batch_id;
    let b = ended(&mut billing, &cancel_id).await;
    assert_eq!((b.total, b.succeeded, b.failed, b.skipped), (4, 4, 0, 0), "{b:?}");
    for id in &acme {
        let done = common::poll_until(
            WAIT,
            || format!("{id} was not cancelled"),
            async || {
                let s = status(&mut ops, id).await.expect("describe");
                (s == pb::ExecutionStatus::Cancelled).then_some(s)
            },
        )
        .await;
        assert_eq!(done, pb::ExecutionStatus::Cancelled);
    }
    for id in &shipping {
        assert_eq!(status(&mut ops, id).await.expect("describe"), pb::ExecutionStatus::Running);
        assert_eq!(count(&mut ops, id, "CancelRequested").await, 0, "{id} untouched");
    }
    // billing sees its batch, not the admin's signal batch (selected by a query alone).
    let seen = billing.list_batches(pb::ListBatchesRequest::default()).await.expect("list");
    let seen: Vec<String> = seen.into_inner().batches.into_iter().map(|b| b.batch_id).collect();
    assert_eq!(seen, [cancel_id]);
    let hidden = pb::DescribeBatchRequest { batch_id: signal_id };
    assert_eq!(code(&billing.describe_batch(hidden).await.unwrap_err()), "BATCH_NOT_FOUND");

    // Again: every one has finished, so each is skipped; still one CancelRequested each.
    let again = ops.start_batch(request("execution_id STARTS_WITH 'inv-acme-'", cancel())).await;
    let b = ended(&mut ops, &again.expect("second cancel").into_inner().batch_id).await;
    assert_eq!((b.total, b.succeeded, b.skipped), (4, 0, 4), "{b:?}");
    let skipped = items(&mut ops, &b.batch_id).await;
    assert!(skipped.iter().all(|i| i.code == "EXECUTION_FINISHED"), "{skipped:?}");
    for id in &acme {
        assert_eq!(count(&mut ops, id, "CancelRequested").await, 1, "{id} cancelled once");
    }

    // Terminate the globex invoices through the CLI.
    let port = server.port;
    let (exit, out, stderr) = tokio::task::spawn_blocking(move || {
        let ops_token = token("ops");
        let args = [
            "start",
            "--query",
            "execution_id STARTS_WITH 'inv-globex-'",
            "--terminate",
            "--reason",
            "cleanup",
            "--wait",
            "--token",
            &ops_token,
        ];
        cli(port, "batch", &args)
    })
    .await
    .expect("cli");
    assert_eq!(exit, 0, "{out} {stderr}");
    assert_eq!(out["action"], json!({"terminate": {"reason": ""}}), "{out}");
    assert_eq!((out["succeeded"].as_u64(), out["state"].as_str()), (Some(3), Some("COMPLETED")));
    for id in &globex {
        assert_eq!(status(&mut ops, id).await.expect("describe"), pb::ExecutionStatus::Failed);
    }

    // Delete the cancelled invoices; an open execution in the selection is refused.
    let query = "execution_id STARTS_WITH 'inv-acme-' OR execution_id = 'ship-acme-1'";
    let delete = pb::batch_action::Action::Delete(pb::BatchDelete {});
    let started = ops.start_batch(request(query, delete)).await.expect("delete batch");
    let b = ended(&mut ops, &started.into_inner().batch_id).await;
    assert_eq!((b.total, b.succeeded, b.failed), (5, 4, 1), "{b:?}");
    let failed: Vec<pb::BatchItem> =
        items(&mut ops, &b.batch_id).await.into_iter().filter(|i| !i.code.is_empty()).collect();
    assert_eq!(failed.len(), 1, "{failed:?}");
    assert_eq!(
        (failed[0].execution_id.as_str(), failed[0].code.as_str()),
        ("ship-acme-1", "EXECUTION_NOT_FINISHED")
    );
    for id in &acme {
        let gone = status(&mut ops, id).await.unwrap_err();
        assert_eq!(code(&gone), "EXECUTION_NOT_FOUND", "{id} deleted");
    }
    assert_eq!(status(&mut ops, "ship-acme-1").await.expect("kept"), pb::ExecutionStatus::Running);
}
