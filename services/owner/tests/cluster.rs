//! Several owners on one store: fencing, restart of a node id, takeover of a dead owner's
//! trees by rendezvous hashing. Real owners over a real SQLite file; passes run only when a
//! test wakes an owner, so the test decides who acts first.

mod support;

use orbit_cluster::rendezvous;
use support::*;
use tokio_util::sync::CancellationToken;

#[tokio::test]
async fn a_fenced_owner_drops_the_execution_and_carries_on_with_the_rest() {
    let dir = tempfile::tempdir().unwrap();
    let store = store(&dir, &[TWO_SIGNALS]).await;
    let (a, b) = (owner(&store, "A"), owner(&store, "B"));
    let stop = CancellationToken::new();
    let runs = [run(&a, &stop), run_recovered(&b, &stop).await];
    a.start(start("x", "two")).await.unwrap();
    a.start(start("y", "two")).await.unwrap();
    assert_eq!(a.held().await, ["x", "y"]);

    // B takes x's tree while A still holds x in memory (A paused, say).
    let taken = store.take_over_root("x", "A", "B").await.unwrap();
    assert_eq!(taken, vec![("x".to_string(), 2)]);
    let first = signal(&store, "x", "one").await;
    b.wake().await;
    assert_eq!(reply(&store, first).await["ok"], true, "B applies x's entry");

    // A's next pass holds entries for x (lost) and y (still A's) and a new start: the
    // commit is fenced; A drops x, and the pass after it applies y's entry and the start.
    let second = signal(&store, "x", "two").await;
    let for_y = signal(&store, "y", "one").await;
    let z = {
        let a = a.clone();
        tokio::spawn(async move { a.start(start("z", "two")).await })
    };
    // The start queues itself and kicks a pass, which then holds all three.
    tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    a.wake().await;
    assert_eq!(reply(&store, for_y).await["ok"], true, "y carried on");
    assert!(z.await.unwrap().unwrap().created, "the start in the fenced pass was carried over");
    assert_eq!(a.held().await, ["y", "z"], "x dropped, not reloaded");
    assert!(pending(&store, second).await, "A never applied x's entry");
    a.wake().await;
    assert!(pending(&store, second).await, "nor in a later pass");

    b.wake().await;
    assert_eq!(reply(&store, second).await["ok"], true);
    assert_eq!(
        store.get_execution("x").await.unwrap().unwrap().status,
        orbit_engine::Status::Completed
    );
    assert_eq!(signals_received(&store, "x", "one").await, 1);
    assert_eq!(signals_received(&store, "x", "two").await, 1);
    assert_eq!(owner_of(&store, "x").await, ("B".to_string(), 2));
    assert_eq!(owner_of(&store, "y").await, ("A".to_string(), 1));
    assert_replays(&store, &b, "x").await;
    assert_replays(&store, &a, "y").await;
    stop.cancel();
    for r in runs {
        r.await.unwrap();
    }
}

#[tokio::test]
async fn a_restarted_node_resumes_its_own_executions_and_fences_its_previous_process() {
    let dir = tempfile::tempdir().unwrap();
    let store = store(&dir, &[TWO_SIGNALS]).await;
    let (old_a, b) = (owner(&store, "A"), owner(&store, "B"));
    let stop_old = CancellationToken::new();
    let stop = CancellationToken::new();
    let old_run = run(&old_a, &stop_old);
    let b_run = run(&b, &stop);
    old_a.start(start("a1", "two")).await.unwrap();
    old_a.start(start("a2", "two")).await.unwrap();
    b.start(start("b1", "two")).await.unwrap();

    // A new process with node id A starts while the old one still runs (a hung process).
    let new_a = owner(&store, "A");
    let new_run = run(&new_a, &stop);
    new_a.wake().await;
    assert_eq!(new_a.held().await, ["a1", "a2"], "only A's executions");
    assert_eq!(owner_of(&store, "a1").await, ("A".to_string(), 2), "moved to a new epoch");
    assert_eq!(owner_of(&store, "b1").await, ("B".to_string(), 1), "B's untouched");

    // The old process wakes up and tries to apply an entry: fenced, it drops a1.
    let seq = signal(&store, "a1", "one").await;
    old_a.wake().await;
    assert!(pending(&store, seq).await, "the old process could not write");
    assert!(!old_a.held().await.contains(&"a1".to_string()));
    new_a.wake().await;
    assert_eq!(reply(&store, seq).await["ok"], true);
    assert_eq!(signals_received(&store, "a1", "one").await, 1);
    assert_replays(&store, &new_a, "a1").await;

    stop_old.cancel();
    stop.cancel();
    for r in [old_run, b_run, new_run] {
        r.await.unwrap();
    }
}

#[tokio::test]
async fn live_owners_take_over_a_dead_owners_trees_by_rendezvous() {
    let dir = tempfile::tempdir().unwrap();
    let store = store(&dir, &[TWO_SIGNALS, PARENT]).await;
    let a = owner(&store, "A");
    let stop_a = CancellationToken::new();
    let a_run = run(&a, &stop_a);
    let roots: Vec<String> = (0..8).map(|i| format!("r{i}")).collect();
    for r in &roots {
        a.start(start(r, "two")).await.unwrap();
    }
    a.start(start("p", "parent")).await.unwrap();
    for _ in 0..100 {
        if store.get_execution("p/kid").await.unwrap().is_some() {
            break;
        }
        a.wake().await;
    }
    assert_eq!(owner_of(&store, "p/kid").await.0, "A", "a child shares its root's owner");
    // A dies: it never heartbeated, and its loop stops.
    stop_a.cancel();
    a_run.await.unwrap();

    let (b, c) = (owner(&store, "B"), owner(&store, "C"));
    beat(&store, "B", None).await;
    beat(&store, "C", None).await;
    let stop = CancellationToken::new();
    let runs = [run_recovered(&b, &stop).await, run_recovered(&c, &stop).await];
    let taken_b = b.take_over_once(10_000).await.unwrap();
    let taken_c = c.take_over_once(10_000).await.unwrap();
    assert_eq!(taken_b + taken_c, roots.len() + 1, "every tree taken exactly once");
    assert_eq!(b.take_over_once(10_000).await.unwrap(), 0, "nothing left");

    let live = store.live_nodes(Some("owner"), 10_000).await.unwrap();
    let mut all_roots = roots.clone();
    all_roots.push("p".into());
    for r in &all_roots {
        let want = rendezvous::pick(r, &live).unwrap().node_id.clone();
        assert_eq!(owner_of(&store, r).await, (want, 2), "{r}");
    }
    assert_eq!(owner_of(&store, "p/kid").await, owner_of(&store, "p").await, "the tree moved");
    let mut held = b.held().await;
    held.extend(c.held().await);
    held.sort();
    let mut want: Vec<String> = all_roots.clone();
    want.push("p/kid".into());
    want.sort();
    assert_eq!(held, want, "each execution held by exactly one live owner");

    // The new owners apply what comes next; the dead one's stale copies go at its next
    // round (it is not live, so it takes nothing).
    let seq = signal(&store, "p/kid", "one").await;
    b.kick();
    c.kick();
    assert_eq!(reply(&store, seq).await["ok"], true);
    assert_eq!(a.take_over_once(10_000).await.unwrap(), 0);
    assert!(a.held().await.is_empty(), "the dead owner dropped what it lost");
    let kid_owner = if owner_of(&store, "p/kid").await.0 == "B" { &b } else { &c };
    assert_replays(&store, kid_owner, "p/kid").await;
    stop.cancel();
    for r in runs {
        r.await.unwrap();
    }
}

#[tokio::test]
async fn a_restart_waits_out_a_database_held_past_its_busy_timeout() {
    let dir = tempfile::tempdir().unwrap();
    let store = store(&dir, &[TWO_SIGNALS]).await;
    let first = owner(&store, "A");
    let stop_first = CancellationToken::new();
    let first_run = run(&first, &stop_first);
    first.start(start("x", "two")).await.unwrap();
    stop_first.cancel();
    first_run.await.unwrap();

    // Another process holds the file's write lock for longer than SQLite's busy timeout
    // (5 s): the restart's recovery (which moves A's rows to the next epoch) meets a
    // "database is locked" and must retry, not end the owner's loop.
    let db = dir.path().join("orbit.db");
    let (locked_tx, locked_rx) = std::sync::mpsc::channel();
    let holder = std::thread::spawn(move || {
        let conn = rusqlite::Connection::open(db).unwrap();
        conn.execute_batch("BEGIN IMMEDIATE").unwrap();
        locked_tx.send(()).unwrap();
        std::thread::sleep(std::time::Duration::from_secs(7));
        conn.execute_batch("COMMIT").unwrap();
    });
    locked_rx.recv().unwrap();
    let again = owner(&store, "A");
    let stop = CancellationToken::new();
    let running = run(&again, &stop);
    // Bounded: the lock goes after 7 s, the retries pause at most 2 s.
    tokio::time::timeout(std::time::Duration::from_secs(60), again.wake())
        .await
        .expect("the owner's loop never ran a pass: the recovery gave up");
    holder.join().unwrap();
    assert!(!running.is_finished(), "the owner's loop ended");
    assert_eq!(owner_of(&store, "x").await, ("A".to_string(), 2), "recovered at a new epoch");
    let seq = signal(&store, "x", "one").await;
    again.wake().await;
    assert_eq!(reply(&store, seq).await["ok"], true, "the restarted owner applies entries");
    stop.cancel();
    running.await.unwrap();
}
