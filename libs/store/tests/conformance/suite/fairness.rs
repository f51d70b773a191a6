//! Fair queues in the task queue (issue 27; docs/flow-control.md, "Fair queues"): the flow
//! claim takes first the row whose fair key has the least running attempts per weight,
//! counting the rows it takes; ties go by rank. Rows without a fair key are still claimed
//! (ahead of the fair ones), and a concurrency key or rate bucket shared by fair keys is
//! shared by share.

use crate::support::{complete, flow_task, start_batch, task, Backend};
use orbit_engine::{ConcurrencyKey, FairKey, Flow, RateKey, RateSource};
use orbit_store::{
    ClaimFilter, CommitBatch, FlowRowsDeleted, LimitedClaim, NewTask, Store, TaskRow,
};
use serde_json::json;

fn fair(key: &str, weight: u32) -> Flow {
    Flow { fairness: Some(FairKey { key: key.into(), weight }), ..Flow::default() }
}

/// `n` rows `<prefix>1..=<prefix>n` of `flow`, of the task `work`.
fn rows(prefix: &str, n: usize, flow: &Flow) -> Vec<NewTask> {
    rows_of("work", prefix, n, flow)
}

fn rows_of(task: &str, prefix: &str, n: usize, flow: &Flow) -> Vec<NewTask> {
    (1..=n).map(|i| flow_task(&format!("{prefix}{i}"), task, flow.clone())).collect()
}

fn steps(rows: &[TaskRow]) -> Vec<&str> {
    rows.iter().map(|r| r.unit_key.as_str()).collect()
}

/// Starts `e1` with `first` queued, then queues `then` in a later commit.
async fn queue(store: &dyn Store, first: Vec<NewTask>, then: Vec<NewTask>) {
    let mut batch = start_batch("e1", "node-a");
    batch.tasks_to_insert = first;
    store.commit(batch).await.expect("start with tasks");
    queue_more(store, then).await;
}

/// Queues `tasks` for the running `e1`.
async fn queue_more(store: &dyn Store, tasks: Vec<NewTask>) {
    let batch = CommitBatch {
        execution_id: "e1".into(),
        run: 1,
        expected_epoch: Some(1),
        tasks_to_insert: tasks,
        ..CommitBatch::default()
    };
    store.commit(batch).await.expect("queue more");
}

async fn claim_flow(store: &dyn Store, limit: u32) -> LimitedClaim {
    claim_of(store, "work", limit).await
}

async fn claim_of(store: &dyn Store, task: &str, limit: u32) -> LimitedClaim {
    let filter = ClaimFilter::names(&[task.into()]);
    store.claim_limited(&filter, limit, "fe", "s1", "w").await.expect("flow claim")
}

/// `n` flow claims of one row each, completing nothing: the rows in claim order.
async fn one_by_one(store: &dyn Store, n: usize) -> Vec<TaskRow> {
    let mut out = Vec::new();
    for _ in 0..n {
        let claim = claim_flow(store, 1).await;
        assert!(!claim.blocked, "a fair key never holds a row back: {claim:?}");
        out.extend(claim.rows);
    }
    out
}

pub async fn fair_keys_take_turns_by_running_attempts(b: &dyn Backend) {
    let store = b.open().await;
    // A's backlog first, then B's few.
    queue(&*store, rows("a", 50, &fair("g/A", 1)), rows("b", 5, &fair("g/B", 1))).await;
    // Equal running: the older (A's) goes; B is served as soon as it has fewer running
    // than A, so they alternate while B has rows, then A's backlog goes on.
    let got = one_by_one(&*store, 13).await;
    assert_eq!(
        steps(&got),
        ["a1", "b1", "a2", "b2", "a3", "b3", "a4", "b4", "a5", "b5", "a6", "a7", "a8"]
    );
    // Running, not claimed so far, is what counts: with a1..a8 done, A has none running
    // and B five, so A goes until it has five again; then a tie goes to the key served
    // longest ago (B), and they alternate.
    for row in got.iter().filter(|r| r.unit_key.starts_with('a')) {
        let token = row.token.as_deref().expect("a claimed row has a token");
        store.complete_task_row(token, "w", Some(complete(json!(1)))).await.unwrap().unwrap();
    }
    queue_more(&*store, rows("c", 2, &fair("g/B", 1))).await;
    let got = one_by_one(&*store, 8).await;
    assert_eq!(steps(&got), ["a9", "a10", "a11", "a12", "a13", "c1", "a14", "c2"]);
}

pub async fn fair_keys_alternate_on_one_slot(b: &dyn Backend) {
    let store = b.open().await;
    // One worker slot: every claim finds nothing running, so every share ties; the key
    // served longest ago goes first, and B's few are not stuck behind A's backlog.
    queue(&*store, rows("a", 30, &fair("g/A", 1)), rows("b", 3, &fair("g/B", 1))).await;
    let mut order = Vec::new();
    for _ in 0..8 {
        let claim = claim_flow(&*store, 1).await;
        let row = claim.rows.first().expect("a row each time");
        order.push(row.unit_key.clone());
        let token = row.token.as_deref().expect("a claimed row has a token");
        store.complete_task_row(token, "w", Some(complete(json!(1)))).await.unwrap().unwrap();
    }
    assert_eq!(order, ["a1", "b1", "a2", "b2", "a3", "b3", "a4", "a5"]);
}

pub async fn a_claim_behind_a_long_fair_queue_reads_each_key_s_head(b: &dyn Backend) {
    let store = b.open().await;
    // 3 keys, 400 rows of one: a claim of 4 still takes each key's oldest by share (the
    // rows it reads per key are its first 4 by rank), and the next claim goes on from
    // there, none twice.
    queue(&*store, rows("a", 400, &fair("g/A", 1)), rows("b", 2, &fair("g/B", 1))).await;
    queue_more(&*store, rows("c", 6, &fair("g/C", 1))).await;
    let first = claim_flow(&*store, 4).await;
    assert_eq!(steps(&first.rows), ["a1", "b1", "c1", "a2"]);
    let second = claim_flow(&*store, 4).await;
    assert_eq!(steps(&second.rows), ["b2", "c2", "a3", "c3"]);
}

pub async fn fair_keys_share_by_weight(b: &dyn Backend) {
    let store = b.open().await;
    queue(&*store, rows("a", 20, &fair("g/A", 2)), rows("b", 20, &fair("g/B", 1))).await;
    // Weight 2 against 1: two of A's for one of B's (a tie of shares goes to the key
    // served longest ago).
    let expected = ["a1", "b1", "a2", "a3", "b2", "a4", "a5", "b3", "a6"];
    assert_eq!(steps(&one_by_one(&*store, 9).await), expected);

    // One claim with credits for several takes them in the same proportion (other keys,
    // of another task, none running, neither served yet: a tie goes by rank).
    queue_more(&*store, rows_of("batch", "c", 20, &fair("g/C", 2))).await;
    queue_more(&*store, rows_of("batch", "d", 20, &fair("g/D", 1))).await;
    let claim = claim_of(&*store, "batch", 9).await;
    assert_eq!(steps(&claim.rows), ["c1", "c2", "d1", "c3", "c4", "d2", "c5", "c6", "d3"]);
    assert!(!claim.blocked);
}

pub async fn rows_without_a_fair_key_are_still_claimed(b: &dyn Backend) {
    let store = b.open().await;
    let keyed = Flow {
        concurrency: Some(ConcurrencyKey { key: "g/K".into(), limit: 10 }),
        ..Flow::default()
    };
    queue(&*store, rows("a", 3, &fair("g/A", 1)), rows("k", 2, &keyed)).await;
    // No fair key: a share of 0, ahead of every fair row, by rank among themselves.
    assert_eq!(steps(&one_by_one(&*store, 5).await), ["k1", "k2", "a1", "a2", "a3"]);
    assert!(claim_flow(&*store, 5).await.rows.is_empty(), "every row was claimed once");
}

pub async fn a_limit_shared_by_fair_keys_is_shared_by_share(b: &dyn Backend) {
    let store = b.open().await;
    let both = |tenant: &str| Flow {
        concurrency: Some(ConcurrencyKey { key: "g/api".into(), limit: 2 }),
        ..fair(&format!("g/{tenant}"), 1)
    };
    queue(&*store, rows("a", 3, &both("A")), rows("b", 1, &both("B"))).await;
    // Two slots: not A's two oldest, but one for each tenant.
    let first = claim_flow(&*store, 10).await;
    assert_eq!(steps(&first.rows), ["a1", "b1"]);
    assert!(first.blocked, "A's others wait for the key");
    // B's slot frees: A is alone, and takes it.
    let b1 = first.rows[1].token.as_deref().unwrap();
    store.complete_task_row(b1, "w", Some(complete(json!(1)))).await.unwrap().unwrap();
    assert_eq!(steps(&claim_flow(&*store, 10).await.rows), ["a2"]);

    // A rate bucket too: two starts, one for each tenant (A has two running already).
    let rated = |tenant: &str| Flow {
        rate: Some(RateKey {
            key: "g/calls".into(),
            limit: RateSource::Inline { limit: 2, per_ms: 366 * 86_400_000 },
        }),
        ..fair(&format!("g/{tenant}"), 1)
    };
    queue_more(&*store, rows_of("call", "ra", 3, &rated("A"))).await;
    queue_more(&*store, rows_of("call", "rb", 2, &rated("B"))).await;
    let calls = claim_of(&*store, "call", 10).await;
    assert_eq!(steps(&calls.rows), ["rb1", "rb2"], "B has none running, A two");
    assert!(calls.blocked && calls.retry_at_ms.is_some());
}

pub async fn priority_orders_a_key_s_rows_not_its_share(b: &dyn Backend) {
    let store = b.open().await;
    let urgent = Flow { priority: Some(1), ..fair("g/A", 1) };
    let late = Flow { priority: Some(5), ..fair("g/A", 1) };
    let b_late = Flow { priority: Some(5), ..fair("g/B", 1) };
    queue(
        &*store,
        vec![flow_task("a-late", "work", late), flow_task("b-late", "work", b_late)],
        rows("a-urgent", 3, &urgent),
    )
    .await;
    // A's urgent rows go before its late one; B's late row still gets its turn.
    let got = one_by_one(&*store, 5).await;
    assert_eq!(steps(&got), ["a-urgent1", "b-late", "a-urgent2", "a-urgent3", "a-late"]);
}

/// The sweeper's flow rows: an idle fair key's served row and a rate bucket whose window
/// ended go; a key with work left and a bucket in its window stay. And a claim after the
/// sweep still admits what it did before.
pub async fn idle_flow_rows_are_swept(b: &dyn Backend) {
    let store = b.open().await;
    const YEAR: u64 = 366 * 86_400_000;
    let rated = Flow {
        rate: Some(RateKey {
            key: "api".into(),
            limit: RateSource::Inline { limit: 5, per_ms: YEAR },
        }),
        ..Flow::default()
    };
    queue(&*store, rows("a", 1, &fair("g/A", 1)), rows("b", 2, &fair("g/B", 1))).await;
    queue_more(&*store, rows("r", 2, &rated)).await;
    let claimed = claim_flow(&*store, 4).await;
    assert_eq!(steps(&claimed.rows), ["r1", "r2", "a1", "b1"], "{claimed:?}");
    // Everything is in use: nothing goes.
    assert_eq!(store.delete_idle_flow_rows(10).await.unwrap(), FlowRowsDeleted::default());
    // A's only row is done: A is idle. B still runs b1 and has b2 queued.
    let a1 = claimed.rows.iter().find(|r| r.unit_key == "a1").expect("a1");
    let token = a1.token.as_deref().expect("a claimed row has a token");
    store.complete_task_row(token, "w", Some(complete(json!(1)))).await.unwrap().unwrap();
    let swept = store.delete_idle_flow_rows(10).await.unwrap();
    assert_eq!(swept, FlowRowsDeleted { buckets: 0, fair_keys: 1 });
    assert_eq!(store.delete_idle_flow_rows(10).await.unwrap(), FlowRowsDeleted::default());
    // The bucket's window ends (as if a year passed): it goes, and the next window starts
    // over with the full limit.
    b.execute(&format!(
        "UPDATE rate_buckets SET window_start = window_start - {YEAR}, expires_at = expires_at - {YEAR}"
    ))
    .await;
    let swept = store.delete_idle_flow_rows(10).await.unwrap();
    assert_eq!(swept, FlowRowsDeleted { buckets: 1, fair_keys: 0 });
    queue_more(&*store, rows("s", 6, &rated)).await;
    let next = claim_flow(&*store, 10).await;
    assert_eq!(steps(&next.rows), ["s1", "s2", "s3", "s4", "s5", "b2"], "{next:?}");
    assert!(next.blocked, "s6 waits for the next window");
}

/// A claim of both kinds in one call (`claim_with_limited`, what a session runs once limited
/// rows may exist): the ordinary rows first, then the flow claim with the credits left, and
/// nothing of the flow claim when the ordinary rows took every credit.
pub async fn one_claim_takes_ordinary_rows_then_limited_ones(b: &dyn Backend) {
    let store = b.open().await;
    let plain = vec![task("o1", "work"), task("o2", "work")];
    queue(&*store, plain, rows("a", 3, &fair("g/A", 1))).await;
    let filter = ClaimFilter::names(&["work".into()]);
    let both = |limit| store.claim_with_limited(&filter, limit, "fe", "s1", "w");
    let (rows, limited) = both(1).await.expect("claim");
    let limited = limited.expect("flow claim");
    assert_eq!((steps(&rows), steps(&limited.rows)), (vec!["o1"], vec![]));
    assert!(!limited.blocked);
    let (rows, limited) = both(3).await.expect("claim");
    assert_eq!(
        (steps(&rows), steps(&limited.expect("flow claim").rows)),
        (vec!["o2"], vec!["a1", "a2"])
    );
    let (rows, limited) = both(5).await.expect("claim");
    assert_eq!((steps(&rows), steps(&limited.expect("flow claim").rows)), (vec![], vec!["a3"]));
    let (rows, limited) = both(5).await.expect("claim");
    assert!(rows.is_empty() && limited.expect("flow claim").rows.is_empty(), "all taken");
    // Every row was claimed once, with its own token.
    let claimed = store.claimed_tasks("fe").await.expect("claimed rows");
    let mut tokens: Vec<_> = claimed.iter().filter_map(|r| r.token.clone()).collect();
    tokens.sort();
    tokens.dedup();
    assert_eq!((claimed.len(), tokens.len()), (5, 5));
}
