//! Executions that need more decider rounds than one pass runs complete through the real
//! `orbit dev` (issue 30, item 9): a 10,005-element `for_each` with `max_concurrency: 1`
//! and a 9,999-step `needs` chain. Before, the decider stopped for good after 10,000 rounds
//! and the execution stayed RUNNING forever, also across a restart.

mod common;

use common::*;
use orbit_api::v1 as pb;
use serde_json::{json, Value};
use std::fmt::Write as _;
use std::time::Duration;

/// Generous: a debug build parses the 10,000-step definition in seconds, and the passes
/// each take their share of a loaded 2-core machine.
const WITHIN: Duration = Duration::from_secs(300);

const WIDE: &str = r#"
name: wide
version: "1"
steps:
  - id: c
    compute: "${{ item }}"
    for_each: "${{ input }}"
    max_concurrency: 1
output: "${{ steps.c.output.size() }}"
"#;

fn chain(n: usize) -> String {
    let mut yaml =
        String::from("name: chain\nversion: \"1\"\nsteps:\n  - id: s0\n    compute: 0\n");
    for i in 1..n {
        let p = i - 1;
        let _ = write!(
            yaml,
            "  - id: s{i}\n    needs: [s{p}]\n    compute: \"${{{{ steps.s{p}.output + 1.0 }}}}\"\n"
        );
    }
    let _ = writeln!(yaml, "output: \"${{{{ steps.s{}.output }}}}\"", n - 1);
    yaml
}

fn count(events: &[pb::HistoryEvent], event_type: &str) -> usize {
    events.iter().filter(|e| e.event_type == event_type).count()
}

async fn replays(server: &Server, id: &str) {
    let channel = channel_to(&server.address()).await;
    let mut admin = orbit_api::v1::admin_service_client::AdminServiceClient::new(channel);
    let request = pb::ReplayRequest { execution_id: id.into(), run: 0 };
    let r = admin.replay(request).await.expect("replay").into_inner();
    assert!(r.ok, "{id}: replay diverged: {:?}", r.divergence);
}

/// Both complete; the server is SIGKILLed right after the starts (their first passes
/// stopped at the round bound, leaving the executions due at once) and restarted: the
/// durable wake-up carries them on.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_long_for_each_and_a_long_chain_complete_across_a_restart() {
    let dir = TempDir::new("long-runs");
    let db = dir.0.join("orbit.db");
    let mut server = Server::start(&db, &[]).await;
    let port = server.port;
    let mut c = server.client().await;
    register(&mut c, WIDE).await;
    register(&mut c, &chain(9_999)).await;

    let items: Vec<Value> = (0..10_005).map(|i| json!(i)).collect();
    start(&mut c, "wide", "wide-1", Value::Array(items)).await.expect("start wide");
    start(&mut c, "chain", "chain-1", json!({})).await.expect("start chain");
    server.kill9();
    drop(c);

    let server = Server::start_on(&db, port, &[]).await;
    let mut c = server.client().await;
    let (status, output) = result(&mut c, "wide-1", WITHIN).await;
    assert_eq!((status, output), (pb::ExecutionStatus::Completed, json!(10_005)));
    let h = history(&mut c, "wide-1").await;
    assert_eq!(count(&h, "StepSucceeded"), 10_006, "each element once, then the step");
    replays(&server, "wide-1").await;

    let (status, output) = result(&mut c, "chain-1", WITHIN).await;
    assert_eq!((status, output), (pb::ExecutionStatus::Completed, json!(9_998)));
    let h = history(&mut c, "chain-1").await;
    assert_eq!(count(&h, "StepSucceeded"), 9_999, "each step once");
    replays(&server, "chain-1").await;
}
