//! Workflow-level concurrency keys (issue 27 item 1; docs/flow-control.md, "Workflow
//! concurrency") in `orbit dev`, through the real binary and a raw worker session:
//!
//! - `on_limit: queue`: 5 executions of one key with `limit: 1` run strictly one after
//!   another (from their histories: each starts after the one before closed, in start
//!   order), while an execution of another key runs beside the first; a waiting execution
//!   says so (`ConcurrencySlotRequested` without its grant, `DescribeExecution`, and the
//!   console's gateway the execution page reads);
//! - `on_limit: cancel_newest`: a start while the key is full is cancelled at once, with a
//!   reason naming the key, and never schedules a step;
//! - `on_limit: cancel_in_progress`: a new start cancels the holder, then takes the slot;
//! - a fork of the holder, and a reset of a closed execution, ask for the slot again and
//!   wait for it like a new start (their copied grants were the source run's);
//! - on the split (PostgreSQL, 2 frontends, 2 owners), 40 executions over 4 keys with
//!   `limit: 1`, one owner SIGKILLed midway: never two holders of a key (from the
//!   histories, and a sampler of the slot table), all complete and replay, and the slot
//!   table is empty at the end.

// Tests read their environment and the wall clock directly.
#![allow(clippy::disallowed_methods)]

mod common;

use common::cluster::{check_all, load_worker, psql, Topology, FAST};
use common::*;
use orbit_api::v1 as pb;
use orbit_store::ExecutionReads;
use serde_json::{json, Value};
use std::time::Duration;

const BILLING: &str = r#"
name: billing
version: "1"
concurrency:
  - key: "${{ input.account }}"
    limit: 1
tasks: { work: {} }
steps:
  - id: a
    task: work
    input: "${{ input }}"
output: "${{ steps.a.output }}"
"#;

const NEWEST: &str = r#"
name: newest
version: "1"
concurrency:
  - key: "${{ input.account }}"
    limit: 1
    on_limit: cancel_newest
tasks: { work: {} }
steps:
  - id: a
    task: work
    input: "${{ input }}"
"#;

const LATEST: &str = r#"
name: latest
version: "1"
concurrency:
  - key: "${{ input.account }}"
    limit: 1
    on_limit: cancel_in_progress
tasks: { work: {} }
steps:
  - id: a
    task: work
    input: "${{ input }}"
"#;

/// Bounds every wait for something the server does at once: generous for a busy machine.
const WAIT: Duration = Duration::from_secs(30);

/// The next task delivered to `w`, skipping acks and task cancels (bounded).
async fn next_task(w: &mut RawSession) -> pb::server_message::Task {
    let deadline = tokio::time::Instant::now() + WAIT;
    loop {
        let left = deadline.saturating_duration_since(tokio::time::Instant::now());
        match w.next(left.max(Duration::from_millis(1))).await {
            Some(pb::server_message::Kind::Task(t)) => return t,
            Some(_) => {}
            None => panic!("the session ended"),
        }
    }
}

fn id_of(task: &pb::server_message::Task) -> String {
    let input = task
        .input
        .clone()
        .and_then(|v| orbit_server_kit::payload::proto_to_json(v).ok())
        .unwrap_or(Value::Null);
    input["id"].as_str().unwrap_or_default().to_string()
}

fn ms(e: &pb::HistoryEvent) -> i128 {
    let ts = e.timestamp.expect("timestamp");
    i128::from(ts.seconds) * 1000 + i128::from(ts.nanos) / 1_000_000
}

fn at(h: &[pb::HistoryEvent], event_type: &str) -> Option<i128> {
    h.iter().find(|e| e.event_type == event_type).map(ms)
}

fn waiting(h: &[pb::HistoryEvent]) -> bool {
    h.iter().any(|e| e.event_type == "ConcurrencySlotRequested")
        && !h.iter().any(|e| e.event_type == "WorkflowStarted")
}

#[tokio::test]
async fn queue_runs_one_execution_per_key_at_a_time_in_start_order() {
    let dir = TempDir::new("wf-conc-queue");
    let admin = format!("127.0.0.1:{}", free_port());
    let server = Server::start(&dir.0.join("db"), &["--admin-listen", &admin]).await;
    let mut c = server.client().await;
    register(&mut c, BILLING).await;
    let acme: Vec<String> = (1..=5).map(|i| format!("acme-{i}")).collect();
    for id in &acme {
        start(&mut c, "billing", id, json!({"account": "acme", "id": id})).await.expect("start");
    }
    start(&mut c, "billing", "zen-1", json!({"account": "zen", "id": "zen-1"}))
        .await
        .expect("start");
    let mut w = RawSession::start(&server.address(), "w", &[("work", "")], 10).await;
    // The first of acme and zen's run side by side; acme-2.. wait for the key.
    let mut got = vec![next_task(&mut w).await, next_task(&mut w).await];
    got.sort_by_key(id_of);
    assert_eq!(got.iter().map(id_of).collect::<Vec<_>>(), ["acme-1", "zen-1"]);
    for id in &acme[1..] {
        let h = history_until(&mut c, id, WAIT, waiting).await;
        let requested = h.iter().find(|e| e.event_type == "ConcurrencySlotRequested").unwrap();
        assert_eq!(event_payload(requested)["key"], "billing/acme");
        assert!(!h.iter().any(|e| e.event_type == "StepScheduled"), "{id} scheduled a step");
        let d = c
            .describe_execution(pb::DescribeExecutionRequest {
                execution_id: id.clone(),
                ..Default::default()
            })
            .await
            .expect("describe")
            .into_inner();
        let e = d.execution.expect("described");
        assert_eq!(e.info.as_ref().map(|i| i.status), Some(pb::ExecutionStatus::Running as i32));
        assert_eq!(e.waiting_for_slot, "billing/acme", "{id}: the waiting reason");
    }
    // The console's execution page reads the same reason through its gateway, and shows it.
    let body = json!({"executionId": "acme-2"});
    let (status, d) =
        common::console::api(&admin, "WorkflowService/DescribeExecution", &body, None).await;
    assert_eq!(status, 200, "{d}");
    assert_eq!(d["execution"]["waitingForSlot"], "billing/acme", "{d}");
    let (_, page) = common::console::http(&admin, "GET", "/ui/assets/execution.js", "", None).await;
    assert!(page.contains("d.waitingForSlot"), "the execution page shows the reason");
    // Nothing more comes while acme-1 holds the key (8 credits are free).
    let extra = tokio::time::timeout(Duration::from_millis(500), w.rx.message()).await;
    assert!(
        !matches!(&extra, Ok(Ok(Some(m))) if matches!(m.kind, Some(pb::server_message::Kind::Task(_)))),
        "a second acme execution ran while acme-1 held the key: {extra:?}"
    );
    for t in &got {
        w.complete(&t.token, json!("done")).await;
    }
    for expected in &acme[1..] {
        let t = next_task(&mut w).await;
        assert_eq!(&id_of(&t), expected, "slots are granted in start order");
        w.complete(&t.token, json!("done")).await;
    }
    let mut spans = Vec::new();
    for id in acme.iter().chain(std::iter::once(&"zen-1".to_string())) {
        let (status, _) = result(&mut c, id, WAIT).await;
        assert_eq!(status, pb::ExecutionStatus::Completed, "{id}");
        let h = history(&mut c, id).await;
        spans.push((
            id.clone(),
            at(&h, "WorkflowStarted").unwrap(),
            at(&h, "WorkflowCompleted").unwrap(),
        ));
    }
    for pair in spans[..acme.len()].windows(2) {
        let ((a, _, a_closed), (b, b_started, _)) = (&pair[0], &pair[1]);
        assert!(
            b_started >= a_closed,
            "{b} started at {b_started} before {a} closed at {a_closed}"
        );
    }
    let (_, zen_started, _) = &spans[acme.len()];
    assert!(zen_started < &spans[0].2, "another key runs beside the first");
}

/// The seq of the first `event_type` event of `h`.
fn seq_of(h: &[pb::HistoryEvent], event_type: &str) -> u64 {
    h.iter().find(|e| e.event_type == event_type).map(|e| e.seq).expect(event_type)
}

/// Whether a restored run asked for its slot again and does not hold it yet.
fn waiting_again(h: &[pb::HistoryEvent]) -> bool {
    let restored = h.iter().position(|e| e.event_type == "RunRestored");
    restored.is_some_and(|r| {
        let after = &h[r..];
        after.iter().any(|e| e.event_type == "ConcurrencySlotRequested")
            && !after.iter().any(|e| e.event_type == "ConcurrencySlotGranted")
    })
}

#[tokio::test]
async fn a_fork_and_a_reset_wait_for_the_slot_like_a_new_start() {
    let dir = TempDir::new("wf-conc-restore");
    let server = Server::start(&dir.0.join("db"), &[]).await;
    let mut c = server.client().await;
    register(&mut c, BILLING).await;
    start(&mut c, "billing", "r-1", json!({"account": "acme", "id": "r-1"})).await.expect("start");
    let mut w = RawSession::start(&server.address(), "w", &[("work", "")], 10).await;
    let held = next_task(&mut w).await;
    assert_eq!(id_of(&held), "r-1");
    // A fork of the holder, from just after it started: it must not run beside it.
    let h = history(&mut c, "r-1").await;
    let fork = c
        .fork_execution(pb::ForkExecutionRequest {
            execution_id: "r-1".into(),
            at_seq: seq_of(&h, "WorkflowStarted"),
            new_execution_id: "r-1-fork".into(),
            reason: "try again beside it".into(),
            ..Default::default()
        })
        .await
        .expect("fork")
        .into_inner();
    assert!(fork.created);
    let h = history_until(&mut c, "r-1-fork", WAIT, waiting_again).await;
    assert!(
        !h.iter()
            .skip_while(|e| e.event_type != "RunRestored")
            .any(|e| e.event_type == "StepScheduled"),
        "the fork scheduled a step while r-1 held the key: {:?}",
        h.iter().map(|e| &e.event_type).collect::<Vec<_>>()
    );
    let d = c
        .describe_execution(pb::DescribeExecutionRequest {
            execution_id: "r-1-fork".into(),
            ..Default::default()
        })
        .await
        .expect("describe")
        .into_inner();
    assert_eq!(d.execution.expect("described").waiting_for_slot, "billing/acme");
    // r-1 closes: the fork gets the slot and runs its step.
    w.complete(&held.token, json!("done")).await;
    let forked = next_task(&mut w).await;
    assert_eq!(id_of(&forked), "r-1", "the fork's step (its input is r-1's)");
    // While the fork holds the key, a reset of the closed r-1 waits too.
    assert_eq!(result(&mut c, "r-1", WAIT).await.0, pb::ExecutionStatus::Completed);
    c.reset_execution(pb::ResetExecutionRequest {
        execution_id: "r-1".into(),
        to: Some(pb::reset_execution_request::To::Step("a".into())),
        reason: "again".into(),
        ..Default::default()
    })
    .await
    .expect("reset");
    let h = history_until(&mut c, "r-1", WAIT, waiting_again).await;
    assert!(
        !h.iter()
            .skip_while(|e| e.event_type != "RunRestored")
            .any(|e| e.event_type == "StepScheduled"),
        "the reset run scheduled a step while the fork held the key"
    );
    w.complete(&forked.token, json!("done")).await;
    assert_eq!(result(&mut c, "r-1-fork", WAIT).await.0, pb::ExecutionStatus::Completed);
    let again = next_task(&mut w).await;
    assert_eq!(id_of(&again), "r-1");
    w.complete(&again.token, json!("done")).await;
    assert_eq!(result(&mut c, "r-1", WAIT).await.0, pb::ExecutionStatus::Completed);
    for id in ["r-1", "r-1-fork"] {
        let h = history(&mut c, id).await;
        let kinds: Vec<&str> = h.iter().map(|e| e.event_type.as_str()).collect();
        let restored = kinds.iter().position(|k| *k == "RunRestored").expect("restored");
        let granted = kinds.iter().rposition(|k| *k == "ConcurrencySlotGranted").expect("granted");
        let step = kinds.iter().rposition(|k| *k == "StepScheduled").expect("step");
        assert!(restored < granted && granted < step, "{id}: {kinds:?}");
    }
}

#[tokio::test]
async fn cancel_newest_cancels_a_start_while_the_key_is_full() {
    let dir = TempDir::new("wf-conc-newest");
    let server = Server::start(&dir.0.join("db"), &[]).await;
    let mut c = server.client().await;
    register(&mut c, NEWEST).await;
    start(&mut c, "newest", "n-1", json!({"account": "acme", "id": "n-1"})).await.expect("start");
    let mut w = RawSession::start(&server.address(), "w", &[("work", "")], 10).await;
    let first = next_task(&mut w).await;
    assert_eq!(id_of(&first), "n-1");
    start(&mut c, "newest", "n-2", json!({"account": "acme", "id": "n-2"})).await.expect("start");
    let (status, _) = result(&mut c, "n-2", WAIT).await;
    assert_eq!(status, pb::ExecutionStatus::Cancelled);
    let h = history(&mut c, "n-2").await;
    let cancel = h.iter().find(|e| e.event_type == "CancelRequested").expect("a cancel");
    let reason = event_payload(cancel)["reason"].as_str().unwrap_or_default().to_string();
    assert!(reason.contains("newest/acme") && reason.contains("cancel_newest"), "{reason}");
    assert!(!h
        .iter()
        .any(|e| e.event_type == "StepScheduled" || e.event_type == "WorkflowStarted"));
    // The holder is untouched, and the key is free again once it closes.
    w.complete(&first.token, json!("done")).await;
    assert_eq!(result(&mut c, "n-1", WAIT).await.0, pb::ExecutionStatus::Completed);
    start(&mut c, "newest", "n-3", json!({"account": "acme", "id": "n-3"})).await.expect("start");
    let third = next_task(&mut w).await;
    assert_eq!(id_of(&third), "n-3");
    w.complete(&third.token, json!("done")).await;
    assert_eq!(result(&mut c, "n-3", WAIT).await.0, pb::ExecutionStatus::Completed);
}

#[tokio::test]
async fn cancel_in_progress_cancels_the_holder_and_the_new_start_runs() {
    let dir = TempDir::new("wf-conc-latest");
    let server = Server::start(&dir.0.join("db"), &[]).await;
    let mut c = server.client().await;
    register(&mut c, LATEST).await;
    start(&mut c, "latest", "l-1", json!({"account": "acme", "id": "l-1"})).await.expect("start");
    let mut w = RawSession::start(&server.address(), "w", &[("work", "")], 10).await;
    assert_eq!(id_of(&next_task(&mut w).await), "l-1");
    start(&mut c, "latest", "l-2", json!({"account": "acme", "id": "l-2"})).await.expect("start");
    let (status, _) = result(&mut c, "l-1", WAIT).await;
    assert_eq!(status, pb::ExecutionStatus::Cancelled);
    let h = history(&mut c, "l-1").await;
    let cancel = h.iter().find(|e| e.event_type == "CancelRequested").expect("a cancel");
    let reason = event_payload(cancel)["reason"].as_str().unwrap_or_default().to_string();
    assert!(reason.contains("latest/acme") && reason.contains("cancel_in_progress"), "{reason}");
    let second = next_task(&mut w).await;
    assert_eq!(id_of(&second), "l-2");
    let closed = at(&h, "WorkflowCancelled").expect("closed");
    let h2 = history(&mut c, "l-2").await;
    assert!(at(&h2, "WorkflowStarted").expect("started") >= closed, "never two holders");
    w.complete(&second.token, json!("done")).await;
    assert_eq!(result(&mut c, "l-2", WAIT).await.0, pb::ExecutionStatus::Completed);
}

const SPLIT: &str = r#"
name: split
version: "1"
concurrency:
  - key: "${{ input.k }}"
    limit: 1
tasks: { work: {} }
steps:
  - { id: a, task: work, input: "${{ input.n }}" }
  - { id: nap, needs: [a], sleep: 100ms }
  - { id: b, needs: [nap], task: work, input: "${{ steps.a.output }}" }
output: "${{ steps.b.output }}"
"#;

fn count(topo: &Topology, sql: &str) -> u64 {
    psql(topo, sql).first().and_then(|l| l.trim().parse().ok()).unwrap_or(0)
}

#[tokio::test]
async fn split_keeps_one_holder_per_key_through_an_owner_kill() {
    const EXECUTIONS: usize = 40;
    const KEYS: usize = 4;
    let topo = Topology::start_env("wfconc", [2, 2, 1], "disable", FAST, &[]);
    let mut clients = [topo.client(0).await, topo.client(1).await];
    register(&mut clients[0], SPLIT).await;
    let def = orbit_definition::parse(SPLIT).expect("definition");
    let stop = tokio_util::sync::CancellationToken::new();
    let fe = topo.frontends();
    let _runs_a = load_worker(&fe[0], "w-a", 8, Duration::from_millis(20), &stop);
    let _runs_b = load_worker(&fe[1], "w-b", 8, Duration::from_millis(20), &stop);

    // The sampler: never two holders of one key in the slot table.
    let url = topo.database_url.clone();
    let sampling = stop.child_token();
    let sampler = {
        let sampling = sampling.clone();
        tokio::spawn(async move {
            let (client, conn) =
                tokio_postgres::connect(&url, tokio_postgres::NoTls).await.expect("connect");
            tokio::spawn(conn);
            let (mut samples, mut doubled) = (0u64, Vec::new());
            while !sampling.is_cancelled() {
                let rows = client
                    .query(
                        "SELECT slot_key, count(*) FROM execution_slots WHERE held \
                         GROUP BY 1 HAVING count(*) > 1",
                        &[],
                    )
                    .await
                    .expect("sample");
                doubled.extend(rows.iter().map(|r| r.get::<_, String>(0)));
                samples += 1;
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
            (samples, doubled)
        })
    };

    let mut ids = Vec::new();
    for i in 0..EXECUTIONS {
        let id = format!("s-{i}");
        let input = json!({"k": format!("k{}", i % KEYS), "n": i});
        start(&mut clients[i % 2], "split", &id, input).await.expect("start");
        ids.push(id);
    }
    let completed = || count(&topo, "SELECT count(*) FROM executions WHERE status = 'COMPLETED'");
    let within = Duration::from_secs(300);
    let quarter = (EXECUTIONS / 4) as u64;
    poll_until(
        within,
        || "a quarter did not complete".into(),
        async || (completed() >= quarter).then_some(()),
    )
    .await;
    // The kill must catch owner-1 with open executions (holding or waiting for a slot).
    let held_open = "SELECT count(*) FROM owners o JOIN executions e USING (execution_id) \
                     WHERE o.node_id = 'owner-1' AND e.status = 'RUNNING'";
    poll_until(
        within,
        || "owner-1 holds no open execution".into(),
        async || (count(&topo, held_open) > 0).then_some(()),
    )
    .await;
    topo.signal("owner-1", "KILL");
    let open_on_dead = "SELECT count(*) FROM owners o JOIN executions e USING (execution_id) \
                        WHERE o.node_id = 'owner-1' AND e.status <> 'COMPLETED'";
    let by_status = || psql(&topo, "SELECT status, count(*) FROM executions GROUP BY 1");
    let not_all = || format!("not all {EXECUTIONS} completed; by status: {:?}", by_status());
    poll_until(within, not_all, async || (completed() >= EXECUTIONS as u64).then_some(())).await;
    assert_eq!(count(&topo, open_on_dead), 0, "owner-1's open executions were taken over");
    sampling.cancel();
    let (samples, doubled) = sampler.await.expect("sampler");
    stop.cancel();
    assert!(samples > 10, "the sampler ran ({samples} samples)");
    assert!(doubled.is_empty(), "two holders of one key: {doubled:?}");
    check_all(&topo, &def, &ids, 3).await;
    // From the histories: the runs of one key never overlap.
    let store = topo.store().await;
    let mut spans: std::collections::BTreeMap<String, Vec<(u64, u64, String)>> =
        std::collections::BTreeMap::new();
    for (i, id) in ids.iter().enumerate() {
        let h = store.load_history(id, 1).await.expect("history");
        let when = |t: &str| h.iter().find(|e| e.event.type_name() == t).map(|e| e.timestamp_ms);
        let (Some(s), Some(e)) = (when("WorkflowStarted"), when("WorkflowCompleted")) else {
            panic!("{id}: not started and completed");
        };
        spans.entry(format!("k{}", i % KEYS)).or_default().push((s, e, id.clone()));
    }
    for (key, mut runs) in spans {
        runs.sort();
        for pair in runs.windows(2) {
            assert!(
                pair[1].0 >= pair[0].1,
                "{key}: {} started at {} before {} closed at {}",
                pair[1].2,
                pair[1].0,
                pair[0].2,
                pair[0].1
            );
        }
    }
    assert_eq!(count(&topo, "SELECT count(*) FROM execution_slots"), 0, "every slot released");
}
