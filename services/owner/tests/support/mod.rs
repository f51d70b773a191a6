//! Helpers of the owner's tests: a store in a temp dir with definitions, owners with a node
//! id (and optionally a hand-moved clock), starts, heartbeats, inbox replies and the replay
//! check.

#![allow(dead_code)]

use orbit_engine::replay::replay;
use orbit_owner::{Clock, Owner, OwnerConfig, StartRequest};
use orbit_store::{ChangeHub, InboxStatus, NodeInfo, SqliteStore, Store};
use serde_json::{json, Value};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::Notify;
use tokio_util::sync::CancellationToken;

/// Waits for signals `one` then `two`.
pub const TWO_SIGNALS: &str = "name: two\nversion: '1'\nsignals: { one: {}, two: {} }\nsteps:\n  - { id: a, await: one }\n  - { id: b, await: two, needs: [a] }\noutput: done\n";

/// A parent whose child waits for signal `one`.
pub const PARENT: &str = "name: parent\nversion: '1'\nsteps: [ { id: kid, workflow: two } ]\n";

/// A migrated store in `dir` with `defs` registered.
pub async fn store(dir: &tempfile::TempDir, defs: &[&str]) -> Arc<dyn Store> {
    let store: Arc<dyn Store> =
        Arc::new(SqliteStore::open_and_migrate(dir.path().join("orbit.db")).await.unwrap());
    for d in defs {
        let def = orbit_definition::parse(d).unwrap();
        let doc = orbit_definition::canonical_json(&orbit_definition::to_document(&def));
        store.put_definition(&def.name, &def.version, &def.hash, &doc).await.unwrap();
    }
    store
}

/// An owner with node id `node` whose passes run only when woken (no idle pass), so a test
/// decides which owner acts when.
pub fn owner(store: &Arc<dyn Store>, node: &str) -> Owner {
    owner_on(store, node, Clock::system())
}

/// [`owner`] reading `now` from `clock`. It keeps every open execution in memory (no
/// eviction), so tests of fencing and takeover see the hot copies they reason about;
/// [`evicting_owner`] drops quiet ones.
pub fn owner_on(store: &Arc<dyn Store>, node: &str, clock: Clock) -> Owner {
    owner_with(store, node, clock, None)
}

/// [`owner_on`] that evicts every execution left only sleeping or awaiting by a commit.
pub fn evicting_owner(store: &Arc<dyn Store>, node: &str, clock: Clock) -> Owner {
    owner_with(store, node, clock, Some(0))
}

fn owner_with(
    store: &Arc<dyn Store>,
    node: &str,
    clock: Clock,
    evict_after_ms: Option<u64>,
) -> Owner {
    Owner::new(
        OwnerConfig {
            node_id: node.into(),
            // Passes only when a test wakes the owner: neither the idle safety net nor the
            // quick look again after a busy pass (`retry_pass`, 1 s) may run one behind the
            // test's back (on a loaded machine it did, between a test's steps).
            idle_pass: Duration::from_secs(3600),
            retry_pass: Duration::from_secs(3600),
            clock,
            evict_after_ms,
            ..OwnerConfig::default()
        },
        store.clone(),
        Arc::new(Notify::new()),
        Arc::new(Notify::new()),
        Arc::new(ChangeHub::new()),
    )
}

/// Runs `owner`'s pass loop until `stop`.
pub fn run(owner: &Owner, stop: &CancellationToken) -> tokio::task::JoinHandle<()> {
    let (o, s) = (owner.clone(), stop.clone());
    tokio::spawn(async move { o.run(s).await.unwrap() })
}

/// [`run`], returning once the owner has recovered what its node id owns (its first pass
/// has finished). A test that moves executions to this node right after starting it needs
/// this: recovery moves every row of the node to the next epoch (fencing a previous
/// process of the same id), so a takeover it has not seen yet would be bumped again.
///
/// It also returns with the owner at rest: a wake made before the loop's first pass began
/// is answered by that first pass but leaves its kick stored, and the loop then runs one
/// more pass on its own, possibly after the test's next step. The second wake is answered
/// by the pass that kick starts (or by a later one that consumes it).
pub async fn run_recovered(owner: &Owner, stop: &CancellationToken) -> tokio::task::JoinHandle<()> {
    let running = run(owner, stop);
    owner.wake().await;
    owner.wake().await;
    running
}

/// A root start request.
pub fn start(id: &str, workflow: &str) -> StartRequest {
    StartRequest {
        execution_id: id.into(),
        workflow: workflow.into(),
        version: None,
        input: json!({}),
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

/// Registers a heartbeat of owner `node` (advertising `addr`) now.
pub async fn beat(store: &Arc<dyn Store>, node: &str, addr: Option<String>) {
    let info = NodeInfo {
        node_id: node.into(),
        service: "owner".into(),
        incarnation: "1".into(),
        addr,
        sessions: None,
    };
    store.heartbeat_node(&info).await.unwrap();
}

/// Writes signal `name` for `id`; returns the entry's seq.
pub async fn signal(store: &Arc<dyn Store>, id: &str, name: &str) -> u64 {
    store.enqueue_inbox(id, &signal_message(name, json!({}))).await.unwrap()
}

/// A signal entry.
pub fn signal_message(name: &str, payload: Value) -> orbit_store::InboxMessage {
    orbit_store::InboxMessage::Signal(orbit_store::inbox::Signal {
        name: name.into(),
        payload,
        request_id: None,
    })
}

/// The reply of an applied entry as stored, waiting up to 5 s for it.
pub async fn reply(store: &Arc<dyn Store>, seq: u64) -> Value {
    for _ in 0..500 {
        if let InboxStatus::Done(r) = store.inbox_result(seq).await.unwrap() {
            return r.map_or(Value::Null, |r| r.to_json());
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    panic!("inbox entry {seq} was not applied within 5 s");
}

/// Whether the entry is still pending.
pub async fn pending(store: &Arc<dyn Store>, seq: u64) -> bool {
    matches!(store.inbox_result(seq).await.unwrap(), InboxStatus::Pending)
}

/// The owners row of `id`: (node, epoch).
pub async fn owner_of(store: &Arc<dyn Store>, id: &str) -> (String, u64) {
    let o = store.get_owner(id).await.unwrap().unwrap();
    (o.node_id, o.epoch)
}

/// Every run of `id` replays through the current decider, and its seqs are 1..=n.
pub async fn assert_replays(store: &Arc<dyn Store>, owner: &Owner, id: &str) {
    let row = store.get_execution(id).await.unwrap().unwrap();
    let def = owner.definition(&row.workflow, Some(&row.version)).await.unwrap();
    for run in 1..=row.run {
        let history = store.load_history(id, run).await.unwrap();
        let seqs: Vec<u64> = history.iter().map(|h| h.seq).collect();
        assert_eq!(seqs, (1..=history.len() as u64).collect::<Vec<_>>(), "{id}: seqs");
        replay(&def, &history, &orbit_definition::Limits::default())
            .unwrap_or_else(|d| panic!("{id} run {run}: {d:?}"));
    }
}

/// How many `SignalReceived` events named `name` the history of `id` holds.
pub async fn signals_received(store: &Arc<dyn Store>, id: &str, name: &str) -> usize {
    let history = store.load_history(id, 1).await.unwrap();
    history
        .iter()
        .filter(|h| {
            matches!(&h.event, orbit_engine::Event::SignalReceived { name: n, .. } if n == name)
        })
        .count()
}

/// A clock the test moves by hand (milliseconds since the epoch): an owner on it stamps
/// events and computes timer due times from whatever the test last set, so a timer test
/// never waits a real duration. Clones share the time.
#[derive(Clone, Debug)]
pub struct ManualClock(Arc<AtomicU64>);

impl ManualClock {
    /// A clock standing at `ms`.
    pub fn at(ms: u64) -> ManualClock {
        ManualClock(Arc::new(AtomicU64::new(ms)))
    }

    /// The time now.
    pub fn now(&self) -> u64 {
        self.0.load(Ordering::SeqCst)
    }

    /// Moves the clock to `ms` (also backwards: a test may model a skewed clock).
    pub fn set(&self, ms: u64) {
        self.0.store(ms, Ordering::SeqCst);
    }

    /// The owner's view of this clock.
    pub fn clock(&self) -> Clock {
        let t = self.0.clone();
        Clock::from_fn(move || t.load(Ordering::SeqCst))
    }
}
