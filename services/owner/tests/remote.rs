//! `RemoteOwners` against real owners served on loopback: starts land on the owner
//! rendezvous hashing picks, reads are forwarded to the execution's current owner, and an
//! owner that is not live makes reads `UNAVAILABLE`.

mod support;

use orbit_api::internal::v1 as pb;
use orbit_api::internal::v1::owner_service_server::OwnerService;
use orbit_cluster::{rendezvous, Membership, MembershipConfig, RemoteOwners, RetryPolicy};
use orbit_server_kit::{ErrorCode, OrbitError};
use std::sync::Arc;
use std::time::Duration;
use support::*;
use tokio_util::sync::CancellationToken;
use tonic::Request;

fn membership(
    store: &Arc<dyn orbit_store::Store>,
    node: &str,
    service: &str,
    addr: Option<String>,
) -> Membership {
    Membership::new(
        store.clone(),
        MembershipConfig {
            node_id: node.into(),
            service: service.into(),
            addr,
            heartbeat_interval: Duration::from_millis(50),
            node_timeout_ms: 400,
        },
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn starts_and_reads_reach_the_right_owner() {
    let dir = tempfile::tempdir().unwrap();
    let store = store(&dir, &[TWO_SIGNALS]).await;
    let mut stops = Vec::new();
    let mut beats = Vec::new();
    for node in ["owner-a", "owner-b"] {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap().to_string();
        let m = membership(&store, node, "owner", Some(addr));
        m.beat().await.unwrap();
        let stop = CancellationToken::new();
        tokio::spawn(owner(&store, node).serve(listener, stop.clone()));
        beats.push(tokio::spawn({
            let stop = stop.clone();
            async move { m.run(stop).await }
        }));
        stops.push(stop);
    }
    let front = membership(&store, "frontend-1", "frontend", None);
    front.beat().await.unwrap();
    let remote = RemoteOwners::new(front.clone(), RetryPolicy::default());

    let live = front.live_owners();
    for i in 0..8 {
        let id = format!("e{i}");
        let started = remote
            .start_execution(Request::new(pb::StartExecutionRequest {
                execution_id: id.clone(),
                workflow: "two".into(),
                ..Default::default()
            }))
            .await
            .unwrap()
            .into_inner();
        assert!(started.created);
        let want = rendezvous::pick(&id, &live).unwrap().node_id.clone();
        assert_eq!(owner_of(&store, &id).await, (want, 1), "{id}");
        let described = remote
            .describe_execution(Request::new(pb::DescribeExecutionRequest {
                execution_id: id.clone(),
            }))
            .await
            .unwrap()
            .into_inner();
        assert_eq!(described.epoch, 1);
        assert_eq!(described.execution.unwrap().info.unwrap().execution_id, id);
    }
    let unknown = remote
        .query_execution(Request::new(pb::QueryExecutionRequest {
            execution_id: "e0".into(),
            name: "nope".into(),
        }))
        .await
        .unwrap_err();
    assert_eq!(
        OrbitError::from_status(&unknown).unwrap().code,
        ErrorCode::UnknownQuery,
        "the owner answered"
    );

    // owner-a dies without leaving: once its heartbeat is stale, reads of its executions
    // are UNAVAILABLE (a takeover is due), not misrouted.
    let victim = (0..8)
        .map(|i| format!("e{i}"))
        .find(|id| rendezvous::pick(id, &live).is_some_and(|n| n.node_id == "owner-a"));
    let victim = victim.expect("owner-a owns one of 8");
    beats[0].abort();
    stops[0].cancel();
    tokio::time::sleep(Duration::from_millis(600)).await;
    front.refresh().await.unwrap();
    let status = remote
        .describe_execution(Request::new(pb::DescribeExecutionRequest { execution_id: victim }))
        .await
        .unwrap_err();
    assert_eq!(
        OrbitError::from_status(&status).unwrap().code,
        ErrorCode::Unavailable,
        "{status:?}"
    );
    stops[1].cancel();
}
