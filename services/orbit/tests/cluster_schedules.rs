//! Three schedulers on one PostgreSQL database (the secure split topology): a schedule
//! every second for 20 s while one scheduler is SIGKILLed and another SIGSTOPped and
//! resumed. Every occurrence starts exactly once — the ids are the 20 consecutive seconds,
//! each once — and none is missed: a claim held by a dead or stopped scheduler is a lease
//! that runs out (5 s), and catch-up ALL fires what it delayed.

mod common;

use common::cluster::*;
use common::schedules::*;
use orbit_api::v1 as pb;
use orbit_api::v1::schedule_service_client::ScheduleServiceClient;
use std::time::Duration;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn three_schedulers_start_each_occurrence_once_through_kill_and_stop() {
    let topo = Topology::start("schedules", 1, 1, 3, FAST);
    let mut c = topo.client(0).await;
    common::register(&mut c, NAP).await;
    let endpoint = topo.tls().endpoint(&topo.frontends()[0]).expect("endpoint");
    let mut s = ScheduleServiceClient::new(endpoint.connect().await.expect("connect"));

    // Twenty occurrences, from two seconds from now.
    let first = now_secs() + 2;
    let mut spec = every_second(pb::CatchUpPolicy::All, Duration::from_secs(300));
    spec.start_at = Some(prost_types::Timestamp { seconds: first, nanos: 0 });
    spec.end_at = Some(prost_types::Timestamp { seconds: first + 20, nanos: 0 });
    create(&mut s, "split", spec).await;

    let schedulers: Vec<String> = topo.of("scheduler").iter().map(|n| n.node_id.clone()).collect();
    assert_eq!(schedulers.len(), 3);
    wait_for(&mut c, "split", Duration::from_secs(60), "first fires", |o| o.len() >= 4).await;
    topo.signal(&schedulers[0], "KILL");
    wait_for(&mut c, "split", Duration::from_secs(60), "fires after the kill", |o| o.len() >= 8)
        .await;
    topo.signal(&schedulers[1], "STOP");
    tokio::time::sleep(Duration::from_secs(6)).await;
    topo.signal(&schedulers[1], "CONT");

    let seen =
        wait_for(&mut c, "split", Duration::from_secs(90), "all twenty", |o| o.len() >= 20).await;
    let expected: Vec<i64> = (first..first + 20).collect();
    assert_eq!(seen, expected, "every occurrence exactly once, none missed");
    // The schedule ended at end_at; its progress counted each start once.
    let state = get(&mut s, "split").await.state.expect("state");
    assert_eq!(state.fired_count, 20, "{state:?}");
    assert_eq!(state.next_fire_at, None, "{state:?}");
    // Nothing more fires later.
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert_eq!(occurrences(&mut c, "split").await, expected);
    assert!(topo.alive(&schedulers[1]) && topo.alive(&schedulers[2]));
}
