//! The services split into nodes (see `support::topology`): starts routed by rendezvous
//! hashing to owners over gRPC, commands and replies crossing nodes through the store, a
//! dead frontend's claims swept and redelivered, a killed owner taken over, and
//! `ClusterStatus` from the `nodes` table.

// Tests read their environment (ORBIT_PYTHON, the database URL) and the wall clock
// (unique names, deadlines of real processes) directly.
#![allow(clippy::disallowed_methods)]

mod support;

use orbit_api::v1::server_message::Kind as ServerKind;
use orbit_api::v1::worker_message::{Credits, Hello, Kind as WorkerKind};
use orbit_api::v1::workflow_service_client::WorkflowServiceClient;
use orbit_api::v1::*;
use orbit_cluster::rendezvous;
use orbit_server_kit::payload::json_to_proto;
use serde_json::json;
use std::time::Duration;
use support::topology::{Topology, NODE_TIMEOUT_MS};
use support::{next, say};
use tokio::sync::mpsc;
use tokio_stream::wrappers::ReceiverStream;
use tonic::transport::Channel;

const WAIT: &str = "name: wait\nversion: '1'\nsignals: { one: {}, two: {} }\nsteps:\n  - { id: a, await: one }\n  - { id: b, await: two, needs: [a] }\noutput: done\n";

const TASK: &str = "name: job\nversion: '1'\ntasks: { work: { version: '1' } }\nsteps: [ { id: w, task: work, input: '${{ input }}' } ]\noutput: '${{ steps.w.output }}'\n";

async fn register(client: &mut WorkflowServiceClient<Channel>, doc: &str) {
    let req = RegisterWorkflowRequest { document: doc.into(), format: 0 };
    client.register_workflow(req).await.unwrap();
}

async fn start(client: &mut WorkflowServiceClient<Channel>, workflow: &str, id: &str) {
    let req = StartExecutionRequest {
        workflow: workflow.into(),
        input: Some(json_to_proto(json!({"id": id}))),
        execution_id: id.into(),
        ..Default::default()
    };
    assert!(client.start_execution(req).await.unwrap().into_inner().created);
}

async fn signal(client: &mut WorkflowServiceClient<Channel>, id: &str, name: &str) -> u64 {
    let req = SignalExecutionRequest {
        execution_id: id.into(),
        name: name.into(),
        payload: None,
        request_id: String::new(),
    };
    client.signal_execution(req).await.unwrap().into_inner().seq
}

async fn status(client: &mut WorkflowServiceClient<Channel>, id: &str) -> ExecutionStatus {
    let req = DescribeExecutionRequest { execution_id: id.into(), run: 0, at_seq: 0 };
    let d = client.describe_execution(req).await.unwrap().into_inner().execution.unwrap();
    d.info.unwrap().status()
}

async fn wait_status(client: &mut WorkflowServiceClient<Channel>, id: &str, want: ExecutionStatus) {
    for _ in 0..500 {
        if status(client, id).await == want {
            return;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    panic!("{id} did not reach {want:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn starts_route_by_rendezvous_and_commands_cross_nodes() {
    let topo = Topology::start(2, 2).await;
    let mut f1 = topo.workflows(0).await;
    let mut f2 = topo.workflows(1).await;
    register(&mut f1, WAIT).await;
    let ids: Vec<String> = (0..12).map(|i| format!("route-{i}")).collect();
    for (i, id) in ids.iter().enumerate() {
        let client = if i % 2 == 0 { &mut f1 } else { &mut f2 };
        start(client, "wait", id).await;
    }
    let live = topo.store.live_nodes(Some("owner"), NODE_TIMEOUT_MS).await.unwrap();
    assert_eq!(live.len(), 2);
    let mut per_owner = [0, 0];
    for id in &ids {
        let want = rendezvous::pick(id, &live).unwrap().node_id.clone();
        assert_eq!(topo.owner_of(id).await, (want.clone(), 1), "{id}");
        per_owner[usize::from(want == "owner-2")] += 1;
    }
    assert!(per_owner[0] > 0 && per_owner[1] > 0, "both owners got work: {per_owner:?}");

    // A signal through either frontend is applied by the owner on its node and answered.
    for (i, id) in ids.iter().enumerate() {
        let client = if i % 2 == 0 { &mut f2 } else { &mut f1 };
        assert!(signal(client, id, "one").await > 0);
        assert!(signal(client, id, "two").await > 0);
    }
    for id in &ids {
        wait_status(&mut f1, id, ExecutionStatus::Completed).await;
    }

    // ClusterStatus reads the nodes table: every node live, by service then node id.
    let cluster =
        topo.admin(1).await.cluster_status(ClusterStatusRequest::default()).await.unwrap();
    let nodes: Vec<(i32, String, bool)> =
        cluster.into_inner().nodes.into_iter().map(|n| (n.service, n.node_id, n.live)).collect();
    let f = ServiceKind::Frontend as i32;
    let o = ServiceKind::Owner as i32;
    assert_eq!(
        nodes,
        vec![
            (f, "frontend-1".into(), true),
            (f, "frontend-2".into(), true),
            (o, "owner-1".into(), true),
            (o, "owner-2".into(), true),
        ]
    );
}

async fn session(
    topo: &Topology,
    i: usize,
    worker_id: &str,
) -> (mpsc::Sender<WorkerMessage>, tonic::Streaming<ServerMessage>) {
    let (tx, rx) = mpsc::channel(16);
    let mut workers = topo.workers(i).await;
    let mut inbound = workers.session(ReceiverStream::new(rx)).await.unwrap().into_inner();
    let hello = Hello {
        worker_id: worker_id.into(),
        tasks: vec![TaskRef { name: "work".into(), version: "1".into() }],
        max_concurrency: 4,
        ..Default::default()
    };
    tx.send(say(WorkerKind::Hello(hello))).await.unwrap();
    let ServerKind::Welcome(_) = next(&mut inbound).await else { panic!("welcome first") };
    tx.send(say(WorkerKind::Credits(Credits { n: 4 }))).await.unwrap();
    (tx, inbound)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dead_frontends_claims_are_redelivered_and_its_late_result_still_counts() {
    let topo = Topology::start(1, 1).await;
    let mut f1 = topo.workflows(0).await;
    register(&mut f1, TASK).await;
    start(&mut f1, "job", "lost-1").await;
    // A frontend that claimed the task for its worker and then died: it never heartbeats
    // again (here it never did at all).
    let claimed =
        topo.store.claim_tasks(&["work".into()], 10, "frontend-9", "s-9", "w-dead").await.unwrap();
    assert_eq!(claimed.len(), 1);
    let old_token = claimed[0].token.clone().unwrap();

    // A worker on the live frontend gets the attempt again once the sweeper hands the claim
    // back: same attempt key, marked as a redelivery.
    let (_tx, mut inbound) = session(&topo, 0, "w-live").await;
    let ServerKind::Task(task) = next(&mut inbound).await else { panic!("a redelivered task") };
    assert_eq!(task.execution_id, "lost-1");
    assert!(task.redelivery, "{task:?}");
    assert_eq!(task.idempotency_key, claimed[0].idempotency_key);
    assert_ne!(task.token, old_token);

    // The dead frontend's worker reports late, through another frontend: recorded and,
    // the unit being unresolved, it counts (rule 4).
    let mut workers = topo.workers(0).await;
    let late = workers
        .complete_task(CompleteTaskRequest {
            token: old_token,
            output: Some(json_to_proto(json!("late"))),
            worker_id: "w-dead".into(),
        })
        .await
        .unwrap()
        .into_inner();
    assert!(late.accepted, "{late:?}");
    wait_status(&mut f1, "lost-1", ExecutionStatus::Completed).await;
    // The redelivered attempt's result comes after: recorded, not applied.
    let second = workers
        .complete_task(CompleteTaskRequest {
            token: task.token.clone(),
            output: Some(json_to_proto(json!("second"))),
            worker_id: "w-live".into(),
        })
        .await
        .unwrap()
        .into_inner();
    assert!(!second.accepted, "{second:?}");
    let history = topo.store.load_history("lost-1", 1).await.unwrap();
    let succeeded = history
        .iter()
        .filter(|h| matches!(h.event, orbit_engine::Event::StepSucceeded { .. }))
        .count();
    assert_eq!(succeeded, 1);
    assert!(history
        .iter()
        .any(|h| matches!(&h.event, orbit_engine::Event::StepAttemptUncertain { .. })));
    // The live frontend's own claims are never swept.
    assert!(topo.store.orphaned_claimers(NODE_TIMEOUT_MS).await.unwrap().is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_killed_owner_is_taken_over_and_new_starts_reach_the_live_one() {
    let topo = Topology::start(2, 1).await;
    let mut f1 = topo.workflows(0).await;
    register(&mut f1, WAIT).await;
    let ids: Vec<String> = (0..10).map(|i| format!("k-{i}")).collect();
    for id in &ids {
        start(&mut f1, "wait", id).await;
        signal(&mut f1, id, "one").await;
    }
    let mut victims = Vec::new();
    for id in &ids {
        if topo.owner_of(id).await.0 == "owner-1" {
            victims.push(id.clone());
        }
    }
    assert!(!victims.is_empty(), "owner-1 owns some executions");
    topo.owners[0].kill();

    // New starts keep working: the frontend retries until owner-1 drops out of the live
    // owners, then every root goes to owner-2.
    let after: Vec<String> = (0..6).map(|i| format!("after-{i}")).collect();
    for id in &after {
        start(&mut f1, "wait", id).await;
        assert_eq!(topo.owner_of(id).await.0, "owner-2", "{id}");
    }
    // owner-2 takes owner-1's trees over; the signals sent now complete them.
    for id in &victims {
        for _ in 0..200 {
            if topo.owner_of(id).await.0 == "owner-2" {
                break;
            }
            tokio::time::sleep(Duration::from_millis(25)).await;
        }
        assert_eq!(topo.owner_of(id).await, ("owner-2".to_string(), 2), "{id}");
    }
    for id in &ids {
        signal(&mut f1, id, "two").await;
        wait_status(&mut f1, id, ExecutionStatus::Completed).await;
    }
    let cluster = topo
        .admin(0)
        .await
        .cluster_status(ClusterStatusRequest { include_dead: true })
        .await
        .unwrap()
        .into_inner();
    let owner1 = cluster.nodes.iter().find(|n| n.node_id == "owner-1").expect("dead row shown");
    assert!(!owner1.live);
    assert_eq!(owner1.owned_executions, 0);
    assert_eq!(cluster.orphaned_executions, 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn heartbeat_details_reach_the_owner_through_any_frontend() {
    let topo = Topology::start(1, 2).await;
    let mut f1 = topo.workflows(0).await;
    register(&mut f1, TASK).await;
    start(&mut f1, "job", "beat-1").await;
    let (_tx, mut inbound) = session(&topo, 0, "w-first").await;
    let ServerKind::Task(task) = next(&mut inbound).await else { panic!("a task") };

    // The worker's heartbeat arrives through the other frontend (it moved there, keeping
    // its worker id: details for another worker's token would be dropped).
    let (tx2, _inbound2) = session(&topo, 1, "w-first").await;
    let beat = orbit_api::v1::worker_message::Heartbeat {
        tokens: vec![task.token.clone()],
        details: Some(json_to_proto(json!({"progress": 0.5}))),
        complete: false,
    };
    tx2.send(say(WorkerKind::Heartbeat(beat))).await.unwrap();
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    loop {
        let history = topo.store.load_history("beat-1", 1).await.unwrap();
        let recorded = history.iter().any(|h| {
            matches!(&h.event, orbit_engine::Event::StepHeartbeat { details, .. }
                if details == &json!({"progress": 0.5}))
        });
        if recorded {
            break;
        }
        assert!(std::time::Instant::now() < deadline, "heartbeat details never recorded");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}
