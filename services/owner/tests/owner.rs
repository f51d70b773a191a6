//! The owner against a real SQLite store: starts, inbox commands, timers, children,
//! continue-as-new and recovery after the owner is dropped and rebuilt from the file.
//! Timer tests run the owner on a hand-moved clock and fire the store's due timers
//! themselves (the scheduler's side), so no test waits for a timer in real time.

mod support;

use orbit_engine::replay::replay;
use orbit_engine::{ErrorCode, Status};
use orbit_owner::{Clock, Owner, OwnerConfig, StartRequest};
use orbit_store::inbox::{Complete, Signal, Timer};
use orbit_store::{InboxMessage, InboxReply, InboxStatus, SqliteStore, Store};
use serde_json::{json, Value};
use std::path::PathBuf;
use std::sync::Arc;
use support::ManualClock;
use tokio::sync::Notify;
use tokio_util::sync::CancellationToken;

fn temp_db(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("orbit-owner-test-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir.join("orbit.db")
}

struct Rig {
    store: Arc<dyn Store>,
    owner: Owner,
    stop: CancellationToken,
}

/// A store with `defs` registered and an owner over it (not running yet).
async fn open(path: &PathBuf, defs: &[&str]) -> (Arc<dyn Store>, Owner) {
    open_on(path, defs, Clock::system()).await
}

/// [`open`] with an owner reading `now` from `clock`.
async fn open_on(path: &PathBuf, defs: &[&str], clock: Clock) -> (Arc<dyn Store>, Owner) {
    let store: Arc<dyn Store> = Arc::new(SqliteStore::open_and_migrate(path).await.unwrap());
    for d in defs {
        let def = orbit_definition::parse(d).unwrap();
        let doc = orbit_definition::canonical_json(&orbit_definition::to_document(&def));
        store.put_definition(&def.name, &def.version, &def.hash, &doc).await.unwrap();
    }
    let owner = Owner::new(
        OwnerConfig { clock, ..OwnerConfig::default() },
        store.clone(),
        Arc::new(Notify::new()),
        Arc::new(Notify::new()),
        Arc::new(orbit_store::ChangeHub::new()),
    );
    (store, owner)
}

async fn rig(path: &PathBuf, defs: &[&str]) -> Rig {
    rig_on(path, defs, Clock::system()).await
}

/// [`rig`] with an owner reading `now` from `clock`.
async fn rig_on(path: &PathBuf, defs: &[&str], clock: Clock) -> Rig {
    let (store, owner) = open_on(path, defs, clock).await;
    let stop = CancellationToken::new();
    let o = owner.clone();
    let s = stop.clone();
    tokio::spawn(async move { o.run(s).await });
    Rig { store, owner, stop }
}

fn start(id: &str, workflow: &str, input: Value) -> StartRequest {
    StartRequest {
        execution_id: id.into(),
        workflow: workflow.into(),
        version: None,
        input,
        parent: None,
        root_id: None,
        schedule_id: None,
        fork: None,
        priority: None,
        memo: None,
        update: None,
        versions_seen: None,
    }
}

const HELLO: &str = "name: hello\nversion: '1'\ntasks: { greet: {} }\nsteps: [ { id: g, task: greet, input: '${{ input.name }}' } ]\noutput: '${{ steps.g.output }}'\n";

fn signal_message(name: &str, payload: Value) -> InboxMessage {
    InboxMessage::Signal(Signal { name: name.into(), payload, request_id: None })
}

async fn complete_all(store: &Arc<dyn Store>, task: &str, f: impl Fn(&Value) -> Value) -> usize {
    let rows =
        store.claim_tasks(&[task.to_string()], 100, "test-frontend", "s1", "w").await.unwrap();
    for row in &rows {
        let token = row.token.clone().unwrap();
        let report =
            InboxMessage::Complete(Complete { token: token.clone(), output: f(&row.input) });
        store.complete_task_row(&token, "w", Some(report)).await.unwrap();
    }
    rows.len()
}

async fn assert_replays(store: &Arc<dyn Store>, owner: &Owner, id: &str) {
    let row = store.get_execution(id).await.unwrap().unwrap();
    let def = owner.definition(&row.workflow, Some(&row.version)).await.unwrap();
    for run in 1..=row.run {
        let history = store.load_history(id, run).await.unwrap();
        replay(&def, &history, &orbit_definition::Limits::default())
            .unwrap_or_else(|d| panic!("{id} run {run}: {d:?}"));
    }
}

#[tokio::test]
async fn start_is_idempotent_and_results_complete_the_execution() {
    let path = temp_db("hello");
    let r = rig(&path, &[HELLO]).await;
    let first = r.owner.start(start("e1", "hello", json!({"name": "Ada"}))).await.unwrap();
    assert!(first.created);
    let again = r.owner.start(start("e1", "hello", json!({"name": "Bob"}))).await.unwrap();
    assert!(!again.created);
    assert_eq!(
        r.owner.start(start("e2", "nope", json!({}))).await.unwrap_err().code.as_str(),
        "WORKFLOW_NOT_FOUND"
    );

    assert_eq!(
        complete_all(&r.store, "greet", |i| json!(format!("hi {}", i.as_str().unwrap()))).await,
        1
    );
    r.owner.wake().await;
    let row = r.store.get_execution("e1").await.unwrap().unwrap();
    assert_eq!(row.status, orbit_engine::Status::Completed);
    let history = r.store.load_history("e1", 1).await.unwrap();
    assert!(
        matches!(&history.last().unwrap().event, orbit_engine::Event::WorkflowCompleted { output } if output == &json!("hi Ada"))
    );
    assert_replays(&r.store, &r.owner, "e1").await;
    r.stop.cancel();
}

const OTHER: &str =
    "name: other\nversion: '1'\ntasks: { greet: {} }\nsteps: [ { id: g, task: greet } ]\n";

/// Starts queued before the owner runs go into its first pass together; their ids are read
/// in one read (`apply::read_starts`), and each is answered from its own row.
#[tokio::test]
async fn starts_sharing_a_pass_are_each_answered_from_their_own_read() {
    let path = temp_db("several");
    {
        let r = rig(&path, &[HELLO, OTHER]).await;
        assert!(r.owner.start(start("e1", "hello", json!({"name": "Ada"}))).await.unwrap().created);
        r.stop.cancel();
    }
    let (_store, owner) = open(&path, &[]).await;
    let stop = CancellationToken::new();
    let starts = async {
        // Polled before the loop below runs: all four are queued for its first pass.
        let answers = tokio::join!(
            owner.start(start("e1", "hello", json!({"name": "Bob"}))),
            owner.start(start("e2", "hello", json!({"name": "Cy"}))),
            owner.start(start("e1", "other", json!({}))),
            owner.start(start("e3", "hello", json!({"name": "Di"}))),
        );
        stop.cancel();
        answers
    };
    let ((e1, e2, taken, e3), ran) = tokio::join!(starts, owner.run(stop.clone()));
    ran.unwrap();
    assert!(!e1.unwrap().created, "e1 existed");
    assert!(e2.unwrap().created);
    assert_eq!(taken.unwrap_err().code, ErrorCode::ExecutionExists);
    assert!(e3.unwrap().created);
}

/// A start that took its workflow's latest version from a frontend's cached list
/// (`versions_seen`, issue 25) starts the latest whatever was registered since: alone in its
/// pass, its commit checks the count, fails on a newer version and is carried at once to a
/// pass that reads the latest; beside other starts, the pass reads the versions with the
/// ids. A current list starts as named. Safety nets are an hour apart, as above.
#[tokio::test]
async fn a_start_from_a_cached_latest_starts_the_version_registered_since() {
    let path = temp_db("cached-latest");
    let v2 = HELLO.replace("version: '1'", "version: '2'");
    let (store, _) = open(&path, &[HELLO, v2.as_str()]).await;
    let hour = std::time::Duration::from_secs(3600);
    let config = OwnerConfig { idle_pass: hour, retry_pass: hour, ..OwnerConfig::default() };
    let hub = Arc::new(orbit_store::ChangeHub::new());
    let owner =
        Owner::new(config, store.clone(), Arc::new(Notify::new()), Arc::new(Notify::new()), hub);
    // The frontend saw one version (1) and took it as the latest; 2 was registered since.
    let cached = |id: &str, version: &str, seen: u32| StartRequest {
        version: Some(version.into()),
        versions_seen: Some(seen),
        ..start(id, "hello", json!({"name": "Ada"}))
    };
    let stop = CancellationToken::new();
    let several = async {
        // Polled before the loop runs: one pass, ids and versions read side by side.
        let answers =
            tokio::join!(owner.start(cached("e1", "1", 1)), owner.start(cached("e2", "1", 1)));
        stop.cancel();
        answers
    };
    let ((e1, e2), ran) = tokio::join!(several, owner.run(stop.clone()));
    ran.unwrap();
    for (id, started) in [("e1", e1), ("e2", e2)] {
        let started = started.unwrap();
        assert!(started.created);
        assert_eq!(started.version, "2", "{id}");
        assert_eq!(store.get_execution(id).await.unwrap().unwrap().version, "2", "{id}");
    }

    let stop = CancellationToken::new();
    tokio::spawn({
        let (o, s) = (owner.clone(), stop.clone());
        async move { o.run(s).await }
    });
    let bound = hour / 60;
    let alone = tokio::time::timeout(bound, owner.start(cached("e3", "1", 1)))
        .await
        .expect("the carried start was answered without a safety net")
        .unwrap();
    assert!(alone.created);
    assert_eq!(alone.version, "2");
    assert_eq!(store.get_execution("e3").await.unwrap().unwrap().version, "2");
    // A current list: the version named, in one commit.
    let current = owner.start(cached("e4", "2", 2)).await.unwrap();
    assert_eq!((current.created, current.version.as_str()), (true, "2"));
    stop.cancel();
}

/// A start alone in its pass does not read its id first (issue 25): the commit that
/// creates the execution checks it. A taken id fails that commit; the start is carried into
/// the next pass, which runs at once and reads: answered as before (`created: false`, or
/// `EXECUTION_EXISTS` for another workflow). The owner's safety nets are an hour here, so
/// only the carried start's own wake-up can answer it within the bound below.
#[tokio::test]
async fn a_start_of_a_taken_id_not_held_in_memory_is_answered_at_once() {
    let path = temp_db("taken");
    let store: Arc<dyn Store> = Arc::new(SqliteStore::open_and_migrate(&path).await.unwrap());
    for d in [HELLO, OTHER] {
        let def = orbit_definition::parse(d).unwrap();
        let doc = orbit_definition::canonical_json(&orbit_definition::to_document(&def));
        store.put_definition(&def.name, &def.version, &def.hash, &doc).await.unwrap();
    }
    let hour = std::time::Duration::from_secs(3600);
    let config = OwnerConfig { idle_pass: hour, retry_pass: hour, ..OwnerConfig::default() };
    let hub = Arc::new(orbit_store::ChangeHub::new());
    let owner =
        Owner::new(config, store.clone(), Arc::new(Notify::new()), Arc::new(Notify::new()), hub);
    let stop = CancellationToken::new();
    tokio::spawn({
        let (o, s) = (owner.clone(), stop.clone());
        async move { o.run(s).await }
    });
    assert!(owner.start(start("e1", "hello", json!({"name": "Ada"}))).await.unwrap().created);
    // Completed, so no longer held: the next start of e1 does not know it exists.
    assert_eq!(complete_all(&store, "greet", |_| json!("hi")).await, 1);
    owner.wake().await;
    assert_eq!(status(&store, "e1").await, Status::Completed);
    let events = store.load_history("e1", 1).await.unwrap().len();

    let bound = hour / 60;
    let again = tokio::time::timeout(bound, owner.start(start("e1", "hello", json!({}))))
        .await
        .expect("the carried start was answered without a safety net")
        .unwrap();
    assert!(!again.created);
    assert_eq!((again.run, again.version.as_str()), (1, "1"));
    let other = tokio::time::timeout(bound, owner.start(start("e1", "other", json!({}))))
        .await
        .expect("answered")
        .unwrap_err();
    assert_eq!(other.code, ErrorCode::ExecutionExists);
    // The refused commits wrote nothing.
    assert_eq!(store.load_history("e1", 1).await.unwrap().len(), events);
    assert_eq!(status(&store, "e1").await, Status::Completed);
    stop.cancel();
}

#[tokio::test]
async fn signals_are_answered_through_the_inbox() {
    let path = temp_db("signal");
    let yaml = "name: s\nversion: '1'\nsignals: { go: { type: object, required: [by] } }\nsteps: [ { id: w, await: go } ]\noutput: '${{ steps.w.output.by }}'\n";
    let r = rig(&path, &[yaml]).await;
    r.owner.start(start("e", "s", json!({}))).await.unwrap();
    let bad = r.store.enqueue_inbox("e", &signal_message("go", json!({}))).await.unwrap();
    let unknown = r.store.enqueue_inbox("e", &signal_message("stop", json!({}))).await.unwrap();
    let good =
        r.store.enqueue_inbox("e", &signal_message("go", json!({"by": "me"}))).await.unwrap();
    r.owner.wake().await;
    let result = |s| {
        let store = r.store.clone();
        async move {
            match store.inbox_result(s).await.unwrap() {
                orbit_store::InboxStatus::Done(Some(v)) => v.to_json(),
                other => panic!("{other:?}"),
            }
        }
    };
    assert_eq!(result(bad).await["error"]["code"], "SIGNAL_PAYLOAD_INVALID");
    assert_eq!(result(unknown).await["error"]["code"], "UNKNOWN_SIGNAL");
    assert!(result(good).await["seq"].as_u64().unwrap() > 0);
    assert_eq!(
        r.store.get_execution("e").await.unwrap().unwrap().status,
        orbit_engine::Status::Completed
    );
    r.stop.cancel();
}

/// Writes an inbox row as raw SQL: something no typed writer can produce.
fn raw_entry(path: &PathBuf, id: &str, kind: &str, payload: &str) -> u64 {
    let conn = rusqlite::Connection::open(path).unwrap();
    conn.busy_timeout(std::time::Duration::from_secs(5)).unwrap();
    conn.query_row(
        "INSERT INTO inbox (execution_id, kind, token, payload, created_at)
         VALUES (?1, ?2, NULL, ?3, 0) RETURNING seq",
        rusqlite::params![id, kind, payload],
        |r| r.get::<_, i64>(0),
    )
    .map(|seq| u64::try_from(seq).unwrap())
    .unwrap()
}

#[tokio::test]
async fn a_row_that_does_not_decode_is_refused_with_a_code_not_defaulted() {
    let path = temp_db("malformed");
    let yaml = "name: s\nversion: '1'\nsignals: { go: {} }\nsteps: [ { id: w, await: go } ]\noutput: '${{ steps.w.output }}'\n";
    let r = rig(&path, &[yaml]).await;
    r.owner.start(start("e", "s", json!({}))).await.unwrap();
    let signal = orbit_store::InboxKind::Signal.as_str();
    let child = orbit_store::InboxKind::ChildClosed.as_str();
    let unknown = raw_entry(&path, "e", "signall", r#"{"name": "go"}"#);
    let malformed = raw_entry(&path, "e", signal, r#""not an object""#);
    let bad_status =
        raw_entry(&path, "e", child, r#"{"step": "w", "child_id": "x", "status": "FINISHED"}"#);
    r.owner.wake().await;
    for (seq, says) in [
        (unknown, "unknown inbox kind `signall`"),
        (malformed, "malformed `signal` entry"),
        (bad_status, "malformed `child_closed` entry"),
    ] {
        match r.store.inbox_result(seq).await.unwrap() {
            InboxStatus::Done(Some(InboxReply::Refused { code, message })) => {
                assert_eq!(code, ErrorCode::InvalidArgument, "{message}");
                assert!(message.contains(says), "{message}");
            }
            other => panic!("entry {seq}: {other:?}"),
        }
    }
    // Nothing was applied: the execution still waits for its signal, and takes it.
    assert_eq!(
        r.store.get_execution("e").await.unwrap().unwrap().status,
        orbit_engine::Status::Running
    );
    let good = r.store.enqueue_inbox("e", &signal_message("go", json!(1))).await.unwrap();
    r.owner.wake().await;
    assert!(matches!(
        r.store.inbox_result(good).await.unwrap(),
        InboxStatus::Done(Some(InboxReply::Applied { applied: true, .. }))
    ));
    assert_eq!(
        r.store.get_execution("e").await.unwrap().unwrap().status,
        orbit_engine::Status::Completed
    );
    r.stop.cancel();
}

/// A moment far from zero, so a due time computed from any other clock would show.
const T0: u64 = 1_700_000_000_000;

/// Sleeps 50 ms: one timer, due at the owner's `now` + 50.
const NAP: &str = "name: z\nversion: '1'\nsteps: [ { id: nap, sleep: 50ms } ]\n";

async fn status(store: &Arc<dyn Store>, id: &str) -> Status {
    store.get_execution(id).await.unwrap().unwrap().status
}

#[tokio::test]
async fn timers_fire_through_the_inbox_at_their_due_time_and_not_before() {
    let path = temp_db("timer");
    let clock = ManualClock::at(T0);
    let r = rig_on(&path, &[NAP], clock.clock()).await;
    r.owner.start(start("e", "z", json!({}))).await.unwrap();
    let at = r.store.next_timer_at().await.unwrap().expect("a timer row exists");
    assert_eq!(at, T0 + 50, "due 50 ms after the owner's now");

    // The scheduler's side, by hand: a millisecond early nothing is due, and a pass on the
    // owner changes nothing.
    clock.set(at - 1);
    assert!(r.store.fire_due_timers(at - 1, 10).await.unwrap().is_empty(), "not due yet");
    r.owner.wake().await;
    assert_eq!(status(&r.store, "e").await, Status::Running, "the sleep is not over");
    assert_eq!(r.store.next_timer_at().await.unwrap(), Some(at));

    // Due: the row becomes a `timer` inbox entry, and the owner's pass ends the sleep.
    clock.set(at);
    let fired = r.store.fire_due_timers(at, 10).await.unwrap();
    assert_eq!(fired.len(), 1);
    r.owner.wake().await;
    assert_eq!(status(&r.store, "e").await, Status::Completed);
    let history = r.store.load_history("e", 1).await.unwrap();
    assert_eq!(history.first().unwrap().timestamp_ms, T0, "events carry the owner's clock");
    assert_eq!(history.last().unwrap().timestamp_ms, at, "completed when the timer fired");
    assert_eq!(r.store.next_timer_at().await.unwrap(), None, "a closed execution keeps no timer");
    assert_replays(&r.store, &r.owner, "e").await;
    r.stop.cancel();
}

#[tokio::test]
async fn a_timer_fired_early_by_a_scheduler_whose_clock_runs_ahead_is_kept_until_due() {
    // Split mode: the scheduler's host clock may run ahead of the owner's. Firing deleted
    // the timer row; the owner, for which the sleep is not over, must write it again, or
    // the execution would sleep for ever.
    let path = temp_db("early-timer");
    let clock = ManualClock::at(T0);
    let r = rig_on(&path, &[NAP], clock.clock()).await;
    r.owner.start(start("e", "z", json!({}))).await.unwrap();
    let at = r.store.next_timer_at().await.unwrap().expect("a timer row exists");
    clock.set(T0 + 10);
    assert_eq!(r.store.fire_due_timers(at, 10).await.unwrap().len(), 1, "fired by its clock");
    r.owner.wake().await;
    assert_eq!(status(&r.store, "e").await, Status::Running, "not due by the owner's clock");
    assert_eq!(r.store.next_timer_at().await.unwrap(), Some(at), "the timer is written again");

    clock.set(at);
    assert_eq!(r.store.fire_due_timers(at, 10).await.unwrap().len(), 1);
    r.owner.wake().await;
    assert_eq!(status(&r.store, "e").await, Status::Completed);
    assert_eq!(r.store.next_timer_at().await.unwrap(), None);
    assert_replays(&r.store, &r.owner, "e").await;
    r.stop.cancel();
}

#[tokio::test]
async fn children_start_and_resolve_their_parent() {
    let path = temp_db("child");
    let parent = "name: p\nversion: '1'\nsteps: [ { id: kid, workflow: c, input: { n: 2 } } ]\noutput: '${{ steps.kid.output }}'\n";
    let child = "name: c\nversion: '1'\ntasks: { dbl: {} }\nsteps: [ { id: d, task: dbl, input: '${{ input.n }}' } ]\noutput: '${{ steps.d.output }}'\n";
    let r = rig(&path, &[parent, child]).await;
    r.owner.start(start("p1", "p", json!({}))).await.unwrap();
    // The parent's commit queues the child's start for a later pass: run passes (no real
    // waiting) until the child's task is offered.
    let mut completed = 0;
    for _ in 0..10 {
        completed = complete_all(&r.store, "dbl", |v| json!(v.as_f64().unwrap() * 2.0)).await;
        if completed > 0 {
            break;
        }
        r.owner.wake().await;
    }
    assert_eq!(completed, 1, "the child's task was offered");
    for _ in 0..3 {
        r.owner.wake().await;
    }
    assert_eq!(r.store.get_execution("p1/kid").await.unwrap().unwrap().status, Status::Completed);
    let row = r.store.get_execution("p1").await.unwrap().unwrap();
    assert_eq!(row.status, Status::Completed);
    assert_replays(&r.store, &r.owner, "p1").await;
    r.stop.cancel();
}

/// Only the pass that closes a child tells its parent: an entry that touches the closed
/// child later (here a timer tick) writes no second `child_closed` into the parent's inbox.
#[tokio::test]
async fn a_closed_child_touched_again_does_not_notify_its_parent_twice() {
    let path = temp_db("child-once");
    let parent = "name: p\nversion: '1'\nsteps: [ { id: kid, workflow: c, input: { n: 2 } } ]\noutput: '${{ steps.kid.output }}'\n";
    let child = "name: c\nversion: '1'\ntasks: { dbl: {} }\nsteps: [ { id: d, task: dbl, input: '${{ input.n }}' } ]\noutput: '${{ steps.d.output }}'\n";
    let r = rig(&path, &[parent, child]).await;
    r.owner.start(start("p1", "p", json!({}))).await.unwrap();
    for _ in 0..50 {
        if complete_all(&r.store, "dbl", |v| json!(v.as_f64().unwrap() * 2.0)).await > 0 {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(10)).await;
    }
    for _ in 0..3 {
        r.owner.wake().await;
    }
    assert_eq!(r.store.get_execution("p1").await.unwrap().unwrap().status, Status::Completed);
    let before = r.store.load_history("p1", 1).await.unwrap().len();
    let tick = {
        let timer = Timer { key: "next".into(), run: 1, fire_at: 0, payload: json!({}) };
        r.store.enqueue_inbox("p1/kid", &InboxMessage::Timer(timer)).await.unwrap()
    };
    for _ in 0..3 {
        r.owner.wake().await;
    }
    let applied = r.store.inbox_result(tick).await.unwrap();
    assert!(matches!(applied, orbit_store::InboxStatus::Done(_)), "the tick was applied");
    let history = r.store.load_history("p1", 1).await.unwrap();
    // Inbox seqs are one sequence for every execution: a second `child_closed` for the
    // parent would be the next entry (the parent's check refuses it, so its history alone
    // would not show it).
    let next = r.store.inbox_result(tick + 1).await;
    assert!(
        matches!(next, Err(orbit_store::StoreError::NotFound(_))),
        "no entry after the tick: {next:?}"
    );
    assert_eq!(history.len(), before, "the parent heard of its child once: {history:?}");
    r.stop.cancel();
}

#[tokio::test]
async fn continue_as_new_writes_both_runs_in_one_pass() {
    let path = temp_db("can");
    let yaml = "name: l\nversion: '1'\nsteps:\n  - { id: n, compute: '${{ input.i + 1.0 }}' }\n  - { id: again, needs: [n], when: '${{ steps.n.output < 3 }}', continue_as_new: { input: { i: '${{ steps.n.output }}' } } }\noutput: '${{ steps.n.output }}'\n";
    let r = rig(&path, &[yaml]).await;
    r.owner.start(start("e", "l", json!({"i": 0}))).await.unwrap();
    let row = r.store.get_execution("e").await.unwrap().unwrap();
    assert_eq!((row.run, row.status.as_str()), (3, "COMPLETED"));
    assert_eq!(
        r.store.load_history("e", 1).await.unwrap().last().unwrap().event.type_name(),
        "WorkflowContinuedAsNew"
    );
    assert_replays(&r.store, &r.owner, "e").await;
    r.stop.cancel();
}

#[tokio::test]
async fn a_new_owner_on_the_same_file_picks_up_open_executions() {
    let path = temp_db("recover");
    {
        let r = rig(&path, &[HELLO]).await;
        r.owner.start(start("e1", "hello", json!({"name": "Ada"}))).await.unwrap();
        r.stop.cancel();
    }
    let r = rig(&path, &[]).await;
    assert_eq!(complete_all(&r.store, "greet", |_| json!("late")).await, 1);
    r.owner.wake().await;
    assert_eq!(
        r.store.get_execution("e1").await.unwrap().unwrap().status,
        orbit_engine::Status::Completed
    );
    assert_replays(&r.store, &r.owner, "e1").await;
    r.stop.cancel();
}

#[tokio::test]
async fn http_steps_fail_with_adapter_disabled() {
    let path = temp_db("http");
    let yaml = "name: h\nversion: '1'\nsteps: [ { id: call, http: { method: GET, url: 'https://example.invalid/x' } } ]\n";
    let r = rig(&path, &[yaml]).await;
    r.owner.start(start("e", "h", json!({}))).await.unwrap();
    let row = r.store.get_execution("e").await.unwrap().unwrap();
    assert_eq!(row.status, orbit_engine::Status::Failed);
    let history = r.store.load_history("e", 1).await.unwrap();
    assert!(history.iter().any(|h| matches!(&h.event, orbit_engine::Event::StepFailed { error, .. } if error.code == "ADAPTER_DISABLED")));
    assert!(
        r.store.claim_tasks(&["orbit.http".into()], 10, "fe", "s", "w").await.unwrap().is_empty(),
        "nothing was queued"
    );
    assert_replays(&r.store, &r.owner, "e").await;
    r.stop.cancel();
}

#[tokio::test]
async fn the_owner_serves_its_grpc_api_on_its_own_port() {
    use orbit_api::internal::v1 as pb;
    use orbit_api::internal::v1::owner_service_client::OwnerServiceClient;
    let path = temp_db("serve");
    let (store, owner) = open(&path, &[HELLO]).await;
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let stop = CancellationToken::new();
    let served = tokio::spawn(owner.serve(listener, stop.clone()));
    let mut client = loop {
        if let Ok(c) = OwnerServiceClient::connect(format!("http://{addr}")).await {
            break c;
        }
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    };
    let started = client
        .start_execution(pb::StartExecutionRequest {
            execution_id: "remote-1".into(),
            workflow: "hello".into(),
            input: Some(orbit_server_kit::payload::json_to_proto(json!({"name": "Ada"}))),
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner();
    assert!(started.created);
    let missing = client
        .start_execution(pb::StartExecutionRequest {
            execution_id: "x".into(),
            workflow: "nope".into(),
            ..Default::default()
        })
        .await
        .unwrap_err();
    assert_eq!(
        orbit_server_kit::OrbitError::from_status(&missing).unwrap().code.as_str(),
        "WORKFLOW_NOT_FOUND"
    );
    assert_eq!(complete_all(&store, "greet", |_| json!("hi")).await, 1);
    client
        .wake(pb::OwnerServiceWakeRequest { execution_ids: vec!["remote-1".into()] })
        .await
        .unwrap();
    assert_eq!(
        store.get_execution("remote-1").await.unwrap().unwrap().status,
        orbit_engine::Status::Completed
    );
    stop.cancel();
    served.await.unwrap().unwrap();
}
