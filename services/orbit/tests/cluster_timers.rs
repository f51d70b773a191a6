//! Two schedulers on one database: every due timer becomes exactly one `timer` inbox entry,
//! and every durable sleep fires once.

mod common;

use common::cluster::*;
use orbit_engine::event::Event;
use std::time::Duration;
use tokio_util::sync::CancellationToken;

const SLEEPY: &str = r#"
name: sleepy
version: "1"
tasks: { work: {} }
steps:
  - { id: one, sleep: 200ms }
  - { id: two, needs: [one], sleep: 300ms }
  - { id: a, needs: [two], task: work, input: "${{ input }}" }
  - { id: three, needs: [a], sleep: 100ms }
output: "${{ steps.a.output }}"
"#;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_schedulers_never_fire_a_timer_twice() {
    let topo = Topology::start("timers", 1, 2, 2, FAST);
    let mut c = topo.client(0).await;
    common::register(&mut c, SLEEPY).await;
    let stop = CancellationToken::new();
    load_worker(&topo.worker_endpoints(), "w", 16, Duration::from_millis(10), &stop);
    let mut ids = Vec::new();
    for i in 0..40 {
        let id = format!("s-{i}");
        common::start(&mut c, "sleepy", &id, serde_json::json!(i)).await.unwrap();
        ids.push(id);
    }
    for (i, id) in ids.iter().enumerate() {
        let (status, output) = common::result(&mut c, id, Duration::from_secs(60)).await;
        assert_eq!(status, orbit_api::v1::ExecutionStatus::Completed, "{id}");
        assert_eq!(output, serde_json::json!(i));
    }
    stop.cancel();

    let timer = orbit_store::InboxKind::Timer.as_str();
    let twice = psql(
        &topo,
        &format!(
            "SELECT execution_id, payload FROM inbox WHERE kind = '{timer}'
             GROUP BY execution_id, payload HAVING count(*) > 1"
        ),
    );
    assert!(twice.is_empty(), "timers fired twice: {twice:?}");
    let fired = psql(&topo, &format!("SELECT count(*) FROM inbox WHERE kind = '{timer}'"));
    assert!(fired[0].parse::<u32>().unwrap() >= 40, "timers fired through the inbox: {fired:?}");
    let store = topo.store().await;
    let def = orbit_definition::parse(SLEEPY).unwrap();
    for id in &ids {
        let h = orbit_store::ExecutionReads::load_history(&store, id, 1).await.unwrap();
        check_history(&def, id, &h);
        let fires = h.iter().filter(|e| matches!(e.event, Event::TimerFired { .. })).count();
        assert_eq!(fires, 3, "{id}: each sleep fired once");
    }
    for s in topo.of("scheduler") {
        assert!(topo.alive(&s.node_id));
    }
}
