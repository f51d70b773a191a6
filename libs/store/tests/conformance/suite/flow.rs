//! Flow control in the task queue (issue 27): the flow columns, the claim order (priority,
//! then age), concurrency keys, rate limits (inline and named), named-limit management and
//! what the reads say about waiting rows.

use crate::support::{complete, flow_task, start_batch, task, Backend};
use orbit_engine::{ConcurrencyKey, FairKey, Flow, RateKey, RateSource};
use orbit_store::{
    ClaimFilter, CommitBatch, LimitedClaim, NewTask, Store, StoreError, TaskClaim, TaskRow,
    TaskState, WaitReason, PRIORITY_STEP_MS,
};
use serde_json::json;
use std::time::Duration;

/// A window so long that no test crosses into the next one (366 days, from the epoch).
const LONG: u64 = 366 * 86_400_000;

fn keyed(key: &str, limit: u32) -> Flow {
    Flow { concurrency: Some(ConcurrencyKey { key: key.into(), limit }), ..Flow::default() }
}

fn rated(key: &str, limit: RateSource) -> Flow {
    Flow { rate: Some(RateKey { key: key.into(), limit }), ..Flow::default() }
}

fn inline(limit: u32) -> RateSource {
    RateSource::Inline { limit, per_ms: LONG }
}

fn priority(p: u8) -> Flow {
    Flow { priority: Some(p), ..Flow::default() }
}

fn steps(rows: &[TaskRow]) -> Vec<&str> {
    rows.iter().map(|r| r.unit_key.as_str()).collect()
}

fn token(row: &TaskRow) -> String {
    row.token.clone().expect("a claimed row has a token")
}

/// Queues `tasks` for the running execution `id` (epoch 1).
async fn offer(store: &dyn Store, id: &str, tasks: Vec<NewTask>) {
    let batch = CommitBatch {
        execution_id: id.into(),
        run: 1,
        expected_epoch: Some(1),
        tasks_to_insert: tasks,
        ..CommitBatch::default()
    };
    store.commit(batch).await.expect("queue tasks");
}

/// Starts `id` with `tasks` queued.
async fn start_with(store: &dyn Store, id: &str, tasks: Vec<NewTask>) {
    let mut batch = start_batch(id, "node-a");
    batch.tasks_to_insert = tasks;
    store.commit(batch).await.expect("start with tasks");
}

async fn claim_flow(store: &dyn Store, limit: u32) -> LimitedClaim {
    let filter = ClaimFilter::names(&["work".into()]);
    store.claim_limited(&filter, limit, "fe", "s1", "w").await.expect("flow claim")
}

async fn claim_one(store: &dyn Store) -> Vec<String> {
    let rows = store.claim_tasks(&["work".into()], 1, "fe", "s1", "w").await.expect("claim");
    rows.into_iter().map(|r| r.unit_key).collect()
}

fn now_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
}

pub async fn flow_columns_are_written_and_read_back(b: &dyn Backend) {
    let store = b.open().await;
    assert!(!store.limited_possible().await.unwrap(), "an empty queue has no limited rows");
    let urgent = priority(1);
    let limited = Flow {
        priority: Some(4),
        concurrency: Some(ConcurrencyKey { key: "g/a".into(), limit: 2 }),
        rate: Some(RateKey { key: "r/a".into(), limit: inline(5) }),
        fairness: Some(FairKey { key: "f/a".into(), weight: 3 }),
        ..Flow::default()
    };
    let named = rated("api/x", RateSource::Named("api".into()));
    let mut batch = start_batch("e1", "node-a");
    batch.tasks_to_insert = vec![
        flow_task("a", "work", urgent.clone()),
        flow_task("b", "work", limited.clone()),
        task("c", "work"),
        flow_task("d", "work", named),
        // The hand-off path writes the same columns.
        flow_task("h", "work", limited.clone()),
    ];
    batch.task_claims = vec![TaskClaim {
        unit: "h".into(),
        attempt: 1,
        offer: 1,
        claimer: "fe".into(),
        session: "s0".into(),
        worker_id: "w0".into(),
        token: "tok-h".into(),
    }];
    let outcome = store.commit(batch).await.unwrap();
    let handed = &outcome.claimed[0];
    assert_eq!((handed.priority, handed.flow.as_ref()), (4, Some(&limited)));
    assert!(store.limited_possible().await.unwrap(), "this store queued limited rows");

    // The ordinary claim takes the unlimited rows by rank: priority 1 before priority 3.
    let got = store.claim_tasks(&["work".into()], 10, "fe", "s1", "w").await.unwrap();
    assert_eq!(steps(&got), ["a", "c"], "limited rows are left to the flow claim");
    assert_eq!((got[0].priority, got[0].flow.as_ref()), (1, Some(&urgent)));
    assert_eq!((got[1].priority, got[1].flow.as_ref()), (3, None));

    // The flow claim takes `b` (its key holds `h`, one of two slots) and leaves `d`, whose
    // named limit is not defined.
    let flow = claim_flow(&*store, 10).await;
    assert_eq!(steps(&flow.rows), ["b"]);
    let row = &flow.rows[0];
    assert_eq!((row.priority, row.flow.as_ref()), (4, Some(&limited)));
    assert_eq!((row.state, row.claimed_by.as_deref()), (TaskState::Claimed, Some("fe")));
    assert_eq!(row.worker_id.as_deref(), Some("w"));
    assert_eq!(store.task_by_token(&token(row)).await.unwrap().as_ref(), Some(row));
    assert!(flow.blocked, "d waits for its named limit");
    assert_eq!(flow.retry_at_ms, None, "no window would admit it");
    // Claimed as an ordinary claim claims: its owner is told.
    let inbox = store.pending_inbox(Some("e1"), 10).await.unwrap();
    let dispatched = crate::support::decoded(&inbox);
    assert!(
        dispatched.iter().any(|m| matches!(m,
            orbit_store::InboxMessage::Dispatched(d) if d.token == token(row) && d.task_id == row.id)),
        "{dispatched:?}"
    );
    assert_eq!(store.waiting_on("e1").await.unwrap(), [("d".to_string(), WaitReason::RateLimit)]);
    // A filter that admits none of them takes nothing and is held back by nothing.
    let other = ClaimFilter::names(&["other".into()]);
    let none = store.claim_limited(&other, 10, "fe", "s1", "w").await.unwrap();
    assert_eq!(none, LimitedClaim::default());
}

pub async fn unlimited_rows_are_claimed_by_priority_then_age(b: &dyn Backend) {
    let store = b.open().await;
    // A priority-5 row queued first, a priority-1 row after: the urgent one goes first.
    start_with(&*store, "e1", vec![flow_task("p5-first", "work", priority(5))]).await;
    offer(&*store, "e1", vec![flow_task("p1-after", "work", priority(1))]).await;
    assert_eq!(claim_one(&*store).await, ["p1-after"]);
    assert_eq!(claim_one(&*store).await, ["p5-first"]);

    // Queued together; then one priority-5 row is made 5 steps older, another 3: a
    // priority-5 row waiting longer than 4 steps passes a fresh priority-1 row, one
    // waiting less does not.
    start_with(
        &*store,
        "e2",
        vec![
            flow_task("p5-aged", "work", priority(5)),
            flow_task("p5-young", "work", priority(5)),
            flow_task("p1", "work", priority(1)),
            flow_task("limited", "work", keyed("g/k", 1)),
        ],
    )
    .await;
    let step = PRIORITY_STEP_MS;
    b.execute(&format!(
        "UPDATE task_queue SET created_at = created_at - {aged}, dispatch_rank = dispatch_rank - {aged}
            WHERE unit_key = 'p5-aged';
        UPDATE task_queue SET created_at = created_at - {young},
            dispatch_rank = dispatch_rank - {young} WHERE unit_key = 'p5-young';",
        aged = 5 * step,
        young = 3 * step
    ))
    .await;
    assert_eq!(claim_one(&*store).await, ["p5-aged"]);
    assert_eq!(claim_one(&*store).await, ["p1"]);
    assert_eq!(claim_one(&*store).await, ["p5-young"]);
    assert!(claim_one(&*store).await.is_empty(), "the limited row is never taken by a claim");
    assert_eq!(steps(&claim_flow(&*store, 5).await.rows), ["limited"]);
}

pub async fn concurrency_keys_hold_rows_until_a_slot_frees(b: &dyn Backend) {
    let store = b.open().await;
    let k = || keyed("g/K", 1);
    let m = || keyed("g/M", 2);
    start_with(
        &*store,
        "e1",
        vec![
            flow_task("k1", "work", k()),
            flow_task("k2", "work", k()),
            flow_task("k3", "work", k()),
            flow_task("l1", "work", keyed("g/L", 1)),
            flow_task("m1", "work", m()),
            flow_task("m2", "work", m()),
            flow_task("m3", "work", m()),
        ],
    )
    .await;
    // One claim with credits for all: one row of K, the row of L behind K's others, two of M.
    let first = claim_flow(&*store, 10).await;
    assert_eq!(steps(&first.rows), ["k1", "l1", "m1", "m2"]);
    assert!(first.blocked);
    assert_eq!(first.retry_at_ms, None, "only a slot frees them");
    let wait = WaitReason::Concurrency;
    let waiting: Vec<(String, WaitReason)> =
        ["k2", "k3", "m3"].iter().map(|s| ((*s).to_string(), wait)).collect();
    assert_eq!(store.waiting_on("e1").await.unwrap(), waiting);
    let flow = store.flow_waiting().await.unwrap();
    assert_eq!(
        flow.by_reason,
        [(WaitReason::Ready, 0), (WaitReason::Concurrency, 3), (WaitReason::RateLimit, 0)]
    );
    let keys: Vec<(&str, u64, u64, u64)> =
        flow.keys.iter().map(|k| (k.key.as_str(), k.running, k.queued, k.limit)).collect();
    assert_eq!(keys, [("g/M", 2, 1, 2), ("g/K", 1, 2, 1), ("g/L", 1, 0, 1)]);
    let again = claim_flow(&*store, 10).await;
    assert!(again.rows.is_empty() && again.blocked, "{again:?}");

    // A worker's result frees k1's slot (and wakes the flow claims of this process).
    let wakeups = store.flow_wakeups();
    let notified = wakeups.as_ref().map(|n| n.notified());
    tokio::pin!(notified);
    if let Some(n) = notified.as_mut().as_pin_mut() {
        n.enable();
    }
    let k1 = token(&first.rows[0]);
    store.complete_task_row(&k1, "w", Some(complete(json!(1)))).await.unwrap().unwrap();
    if let Some(n) = notified.as_pin_mut() {
        tokio::time::timeout(Duration::from_secs(5), n).await.expect("a freed slot wakes");
    }
    let next = claim_flow(&*store, 10).await;
    assert_eq!(steps(&next.rows), ["k2"]);
    // The owner recording a result directly frees k2's.
    let done = CommitBatch {
        execution_id: "e1".into(),
        run: 1,
        expected_epoch: Some(1),
        tasks_done: vec![token(&next.rows[0])],
        ..CommitBatch::default()
    };
    store.commit(done).await.unwrap();
    assert_eq!(steps(&claim_flow(&*store, 10).await.rows), ["k3"]);
    // A claim handed back frees m1's.
    let m1 = token(&first.rows[2]);
    assert_eq!(store.hand_back_claims("fe", &[m1], "lost").await.unwrap().len(), 1);
    let last = claim_flow(&*store, 10).await;
    assert_eq!(steps(&last.rows), ["m3"]);
    assert!(!last.blocked, "nothing queued is held back");
    assert!(store.waiting_on("e1").await.unwrap().is_empty());
}

pub async fn rate_limits_take_starts_per_window(b: &dyn Backend) {
    let store = b.open().await;
    let r = || rated("api/a", inline(2));
    let names = ["r1", "r2", "r3", "r4", "r5"];
    start_with(&*store, "e1", names.iter().map(|n| flow_task(n, "work", r())).collect()).await;
    let before = now_ms();
    let first = claim_flow(&*store, 10).await;
    assert_eq!(steps(&first.rows), ["r1", "r2"]);
    assert!(first.blocked);
    let retry = first.retry_at_ms.expect("the next window admits more");
    assert_eq!(retry % LONG, 0, "windows are aligned to the epoch");
    assert!(retry > before && retry - LONG <= now_ms() + 60_000, "{retry}: the next window");
    let again = claim_flow(&*store, 10).await;
    assert!(again.rows.is_empty() && again.blocked);
    assert_eq!(again.retry_at_ms, Some(retry));
    let wait = store.waiting_on("e1").await.unwrap();
    assert_eq!(wait.len(), 3);
    assert!(wait.iter().all(|(_, r)| *r == WaitReason::RateLimit), "{wait:?}");

    // Another bucket is not held back by this one.
    offer(&*store, "e1", vec![flow_task("x", "work", rated("api/b", inline(1)))]).await;
    assert_eq!(steps(&claim_flow(&*store, 10).await.rows), ["x"]);

    // A named limit: unknown, nothing is taken; once set, its starts are.
    let ext = || rated("ext", RateSource::Named("ext".into()));
    offer(&*store, "e1", vec![flow_task("n1", "work", ext()), flow_task("n2", "work", ext())])
        .await;
    let unknown = claim_flow(&*store, 10).await;
    assert!(unknown.rows.is_empty() && unknown.blocked);
    assert_eq!(unknown.retry_at_ms, Some(retry), "the named rows have no window yet");
    store.set_rate_limit("ext", 1, LONG).await.unwrap();
    assert_eq!(steps(&claim_flow(&*store, 10).await.rows), ["n1"]);
    let flow = store.flow_waiting().await.unwrap();
    assert_eq!(
        flow.by_reason,
        [(WaitReason::Ready, 0), (WaitReason::Concurrency, 0), (WaitReason::RateLimit, 4)]
    );
    assert!(flow.keys.is_empty(), "no concurrency key: {flow:?}");

    // The buckets' windows end (as if LONG passed): a stored older window starts over.
    b.execute(&format!("UPDATE rate_buckets SET window_start = window_start - {LONG}")).await;
    let next = claim_flow(&*store, 10).await;
    assert_eq!(steps(&next.rows), ["r3", "r4", "n2"]);
    assert!(next.blocked, "r5 waits again");
}

pub async fn rate_limits_are_managed_by_name(b: &dyn Backend) {
    let store = b.open().await;
    assert!(store.list_rate_limits().await.unwrap().is_empty());
    let before = now_ms().saturating_sub(60_000);
    let set = store.set_rate_limit("b.api", 10, 1_000).await.unwrap();
    assert_eq!((set.name.as_str(), set.limit, set.period_ms), ("b.api", 10, 1_000));
    assert!(set.updated_at_ms >= before, "{set:?}");
    store.set_rate_limit("a-api", 1, 60_000).await.unwrap();
    let replaced = store.set_rate_limit("b.api", 20, 2_000).await.unwrap();
    assert_eq!((replaced.limit, replaced.period_ms), (20, 2_000));
    let listed = store.list_rate_limits().await.unwrap();
    let listed: Vec<(&str, u32, u64)> =
        listed.iter().map(|r| (r.name.as_str(), r.limit, r.period_ms)).collect();
    assert_eq!(listed, [("a-api", 1, 60_000), ("b.api", 20, 2_000)]);
    assert!(store.delete_rate_limit("a-api").await.unwrap());
    assert!(!store.delete_rate_limit("a-api").await.unwrap());
    assert_eq!(store.list_rate_limits().await.unwrap().len(), 1);
    for (name, limit, period) in [("", 1, 1), ("x", 0, 1), ("x", 1, 0)] {
        let refused = store.set_rate_limit(name, limit, period).await;
        assert!(matches!(refused, Err(StoreError::InvalidArgument(_))), "{refused:?}");
    }
    assert!(!store.limited_possible().await.unwrap(), "limits alone queue nothing");
}
