//! Bounded owner memory: executions that only sleep or await a signal leave the owner's
//! memory after their commit and come back from their history at their next event — a
//! fired timer, a signal, a restart — with the same histories, no event twice, and the
//! epoch fence intact. Real owners over a real SQLite file, on a hand-moved clock (the
//! tests fire due timers themselves, as the scheduler would).

mod support;

use orbit_engine::{Event, Status};
use orbit_owner::Memory;
use orbit_store::Store;
use std::sync::Arc;
use support::*;
use tokio_util::sync::CancellationToken;

const T0: u64 = 1_700_000_000_000;

/// Sleeps one minute, then completes.
const NAP: &str = "name: nap\nversion: '1'\nsteps: [ { id: z, sleep: 60s } ]\noutput: rested\n";

/// One task step: its execution has a task in flight and must stay in memory.
const TASK: &str =
    "name: job\nversion: '1'\ntasks: { work: {} }\nsteps: [ { id: w, task: work } ]\n";

async fn status(store: &Arc<dyn Store>, id: &str) -> Status {
    store.get_execution(id).await.unwrap().unwrap().status
}

/// How many events of `id`'s first run satisfy `pred`.
async fn count(store: &Arc<dyn Store>, id: &str, pred: fn(&Event) -> bool) -> usize {
    store.load_history(id, 1).await.unwrap().iter().filter(|h| pred(&h.event)).count()
}

fn memory(held: usize, evicted: usize) -> Memory {
    Memory { held, evicted }
}

#[tokio::test]
async fn sleeping_and_awaiting_executions_leave_memory_and_complete_after_their_event() {
    let dir = tempfile::tempdir().unwrap();
    let store = store(&dir, &[NAP, TWO_SIGNALS, TASK]).await;
    let clock = ManualClock::at(T0);
    let a = evicting_owner(&store, "A", clock.clock());
    let stop = CancellationToken::new();
    let running = run(&a, &stop);

    a.start(start("sleeper", "nap")).await.unwrap();
    a.start(start("waiter", "two")).await.unwrap();
    a.start(start("worker", "job")).await.unwrap();
    assert_eq!(a.memory().await, memory(1, 2), "only the one with a task in flight is held");
    assert_eq!(a.held().await, ["worker"]);

    // A signal reloads the waiter, applies once, and it leaves again (still awaiting).
    let one = signal(&store, "waiter", "one").await;
    a.wake().await;
    assert_eq!(reply(&store, one).await["ok"], true);
    assert_eq!(a.memory().await, memory(1, 2));

    // A timer fired early by a scheduler whose clock runs ahead: the reloaded sleeper is
    // not due by the owner's clock, so its timer row is written again and it sleeps on.
    let due = T0 + 60_000;
    assert_eq!(store.fire_due_timers(due, 10).await.unwrap().len(), 1);
    a.wake().await;
    assert_eq!(status(&store, "sleeper").await, Status::Running);
    assert_eq!(store.next_timer_at().await.unwrap(), Some(due), "the timer is written again");
    assert_eq!(a.memory().await, memory(1, 2));

    // Due: fired, reloaded, completed; closed executions are neither held nor evicted.
    clock.set(due);
    assert_eq!(store.fire_due_timers(due, 10).await.unwrap().len(), 1);
    a.wake().await;
    assert_eq!(status(&store, "sleeper").await, Status::Completed);
    let two = signal(&store, "waiter", "two").await;
    a.wake().await;
    assert_eq!(reply(&store, two).await["ok"], true);
    assert_eq!(status(&store, "waiter").await, Status::Completed);
    assert_eq!(a.memory().await, memory(1, 0));

    // Histories: every event once, and they replay.
    assert_eq!(count(&store, "sleeper", |e| matches!(e, Event::TimerStarted { .. })).await, 1);
    assert_eq!(count(&store, "sleeper", |e| matches!(e, Event::TimerFired { .. })).await, 1);
    assert_eq!(count(&store, "sleeper", |e| matches!(e, Event::WorkflowCompleted { .. })).await, 1);
    assert_eq!(signals_received(&store, "waiter", "one").await, 1);
    assert_eq!(signals_received(&store, "waiter", "two").await, 1);
    assert_eq!(count(&store, "waiter", |e| matches!(e, Event::WorkflowCompleted { .. })).await, 1);
    for id in ["sleeper", "waiter", "worker"] {
        assert_replays(&store, &a, id).await;
    }
    // Reads of an evicted execution rebuild it without holding it.
    stop.cancel();
    running.await.unwrap();
}

#[tokio::test]
async fn a_restarted_owner_evicts_quiet_executions_and_wakes_them_from_history() {
    let dir = tempfile::tempdir().unwrap();
    let store = store(&dir, &[NAP, TWO_SIGNALS]).await;
    let clock = ManualClock::at(T0);
    let first = evicting_owner(&store, "A", clock.clock());
    let stop = CancellationToken::new();
    let running = run(&first, &stop);
    for i in 0..3 {
        first.start(start(&format!("s{i}"), "nap")).await.unwrap();
    }
    first.start(start("w", "two")).await.unwrap();
    stop.cancel();
    running.await.unwrap();

    // The next process of node A resumes them (new epoch) and keeps none in memory; a
    // query still answers from history.
    let again = evicting_owner(&store, "A", clock.clock());
    let stop = CancellationToken::new();
    let running = run(&again, &stop);
    again.wake().await;
    assert_eq!(again.memory().await, memory(0, 4));
    assert_eq!(owner_of(&store, "s0").await, ("A".to_string(), 2));
    let snap = again.snapshot("w").await.unwrap();
    assert_eq!(snap.state.status(), Status::Running);
    assert_eq!(again.memory().await, memory(0, 4), "a read does not hold it");

    clock.set(T0 + 60_000);
    assert_eq!(store.fire_due_timers(T0 + 60_000, 10).await.unwrap().len(), 3);
    again.wake().await;
    for i in 0..3 {
        let id = format!("s{i}");
        assert_eq!(status(&store, &id).await, Status::Completed);
        assert_eq!(count(&store, &id, |e| matches!(e, Event::TimerFired { .. })).await, 1);
        assert_replays(&store, &again, &id).await;
    }
    assert_eq!(again.memory().await, memory(0, 1), "the waiter still sleeps, evicted");
    stop.cancel();
    running.await.unwrap();
}

#[tokio::test]
async fn an_evicted_execution_taken_by_a_newer_process_of_the_same_node_is_fenced() {
    // The epoch recorded at eviction is the fence: a hung process of node A whose
    // executions a newer process of node A took over (epoch 2) must not reload them at the
    // newer epoch and write beside it.
    let dir = tempfile::tempdir().unwrap();
    let store = store(&dir, &[TWO_SIGNALS]).await;
    let clock = ManualClock::at(T0);
    let old_a = evicting_owner(&store, "A", clock.clock());
    let (stop_old, stop) = (CancellationToken::new(), CancellationToken::new());
    let old_run = run(&old_a, &stop_old);
    old_a.start(start("a1", "two")).await.unwrap();
    assert_eq!(old_a.memory().await, memory(0, 1));

    let new_a = evicting_owner(&store, "A", clock.clock());
    // At rest before the signal: no pass of its own may apply it behind the test's back.
    let new_run = run_recovered(&new_a, &stop).await;
    assert_eq!(owner_of(&store, "a1").await, ("A".to_string(), 2), "moved to a new epoch");

    let seq = signal(&store, "a1", "one").await;
    old_a.wake().await;
    assert!(pending(&store, seq).await, "the old process could not apply it");
    assert_eq!(old_a.memory().await, memory(0, 0), "it let the execution go");
    old_a.wake().await;
    assert!(pending(&store, seq).await, "nor in a later pass");

    new_a.wake().await;
    assert_eq!(reply(&store, seq).await["ok"], true);
    assert_eq!(signals_received(&store, "a1", "one").await, 1);
    assert_replays(&store, &new_a, "a1").await;
    stop_old.cancel();
    stop.cancel();
    for r in [old_run, new_run] {
        r.await.unwrap();
    }
}

/// The child a parent started, from its history.
async fn child_of(store: &Arc<dyn Store>, parent: &str) -> String {
    let history = store.load_history(parent, 1).await.unwrap();
    history
        .iter()
        .find_map(|h| match &h.event {
            Event::ChildStarted { child_id, .. } => Some(child_id.clone()),
            _ => None,
        })
        .expect("the parent started a child")
}

#[tokio::test]
async fn a_restart_reads_no_quiet_history_yet_restarts_a_lost_child_and_completes_a_task() {
    // A restart records its quiet executions as evicted without reading them — even one
    // with a task in flight, whose result then takes the inbox route and reloads it —
    // and loads only those whose history records a child start, so a child a lost process
    // asked for but never created is started again.
    let dir = tempfile::tempdir().unwrap();
    let store = store(&dir, &[NAP, TWO_SIGNALS, TASK, PARENT]).await;
    let clock = ManualClock::at(T0);
    let first = evicting_owner(&store, "A", clock.clock());
    let stop = CancellationToken::new();
    let running = run(&first, &stop);
    first.start(start("sleeper", "nap")).await.unwrap();
    first.start(start("worker", "job")).await.unwrap();
    first.start(start("parent", "parent")).await.unwrap();
    first.wake().await;
    let kid = child_of(&store, "parent").await;
    assert_eq!(status(&store, &kid).await, Status::Running, "the child was created");
    assert_eq!(first.held().await, ["worker"]);
    stop.cancel();
    running.await.unwrap();

    // The process died after committing the child start and before creating the child.
    let db = rusqlite::Connection::open(dir.path().join("orbit.db")).unwrap();
    for table in ["executions", "history_events", "owners", "timers", "inbox", "task_queue"] {
        db.execute(&format!("DELETE FROM {table} WHERE execution_id = ?1"), [&kid]).unwrap();
    }
    drop(db);

    let again = evicting_owner(&store, "A", clock.clock());
    let stop = CancellationToken::new();
    let running = run(&again, &stop);
    again.wake().await;
    again.wake().await;
    assert_eq!(status(&store, &kid).await, Status::Running, "the lost child started again");
    assert_eq!(again.held().await, Vec::<String>::new(), "not even the worker was loaded");
    assert_eq!(again.memory().await, memory(0, 4), "sleeper, worker, parent, child");
    for id in ["sleeper", "worker", "parent"] {
        assert_eq!(owner_of(&store, id).await, ("A".to_string(), 2), "{id}: moved to epoch 2");
    }

    // The task in flight: its result through the inbox reloads the worker, which completes.
    let mut rows = store.claim_tasks(&["work".to_string()], 10, "fe", "s1", "w").await.unwrap();
    assert_eq!(rows.len(), 1, "the worker's task is still queued");
    let token = rows.remove(0).token.unwrap();
    let done = orbit_store::InboxMessage::Complete(orbit_store::inbox::Complete {
        token,
        output: serde_json::json!("ok"),
    });
    store.enqueue_inbox("worker", &done).await.unwrap();
    again.wake().await;
    again.wake().await;
    assert_eq!(status(&store, "worker").await, Status::Completed);
    assert_eq!(count(&store, "worker", |e| matches!(e, Event::WorkflowCompleted { .. })).await, 1);
    assert_replays(&store, &again, "worker").await;
    assert_replays(&store, &again, "parent").await;

    // The sleeper, never read at the restart, wakes from its history at its timer.
    clock.set(T0 + 60_000);
    assert_eq!(store.fire_due_timers(T0 + 60_000, 10).await.unwrap().len(), 1);
    again.wake().await;
    assert_eq!(status(&store, "sleeper").await, Status::Completed);
    assert_eq!(again.memory().await, memory(0, 2), "parent and child still await");
    stop.cancel();
    running.await.unwrap();
}
