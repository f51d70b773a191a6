//! The owner's shared context, the ground floor every other file of the crate builds on:
//! [`Inner`] (settings, store, wake-ups, the pending starts and results) and [`Core`] (what
//! the pass loop owns: the hot executions and the definition cache). Data only; the
//! behaviour lives in the files above (`hot`, `apply`, `pass`, ...) and the facade
//! (`owner`).

use crate::config::OwnerConfig;
use crate::counters::Counters;
use crate::evicted::Evicted;
use crate::requests::{Handed, PendingStart};
use orbit_definition::Definition;
use orbit_engine::State;
use orbit_store::{ChangeHub, OwnerStore};
use std::collections::{BTreeSet, HashMap};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex as StdMutex};
use tokio::sync::{watch, Mutex, Notify};

/// Counters of passes started and finished, for callers waiting on a pass.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct Passes {
    pub started: u64,
    pub finished: u64,
}

pub(crate) struct Inner {
    pub cfg: OwnerConfig,
    pub store: Arc<dyn OwnerStore>,
    pub tasks_ready: Arc<Notify>,
    pub timers_changed: Arc<Notify>,
    pub changes: Arc<ChangeHub>,
    /// Wakes the pass loop. Use [`Inner::kick_inbox`] when inbox entries may be new; a
    /// plain kick (a start, a handed result) lets the pass skip its inbox read.
    pub kick: Notify,
    /// The inbox may hold entries the last read did not return: set by every wake-up that
    /// may mean new entries (a notification, a `Wake`, a fired timer, the safety nets, a
    /// failed or full read, a commit that wrote entries), cleared by the read. A pass
    /// woken only by a start or a handed result of a token in flight skips the read: the
    /// step's hot path costs no inbox statement (issue 25).
    pub inbox_dirty: AtomicBool,
    /// When an inbox read last named the executions held in memory; while they are many
    /// that happens once per `pass::HELD_PERIOD` (see `pass::held_to_name`).
    pub held_named_at: StdMutex<Option<tokio::time::Instant>>,
    /// New inbox entries were notified (see [`crate::Owner::inbox_notified`]): the takeover loop
    /// looks for orphaned roots, which a root of a dead owner becomes once work reaches it.
    pub takeover_hint: Notify,
    pub core: Mutex<Core>,
    /// The definitions read so far, by (workflow, version). Outside `core`: a pass holds
    /// the core lock through its commit, and a start under load waited a whole pass just to
    /// look its definition up (issue 27, the priority run).
    pub versions: StdMutex<HashMap<(String, String), Arc<Definition>>>,
    pub starts: StdMutex<Vec<PendingStart>>,
    /// Worker results handed over directly (see `handed`).
    pub handed: StdMutex<Vec<Handed>>,
    /// Where new tasks are handed straight to a worker session (see `handoff`); unset: every
    /// task is queued for the frontends' claims.
    pub handoff: std::sync::OnceLock<Arc<dyn orbit_store::Handoff>>,
    pub passes: watch::Sender<Passes>,
    pub quarantine: Counters,
}

/// An execution held in memory by its owner.
#[derive(Debug, Clone)]
pub(crate) struct Hot {
    pub def: Arc<Definition>,
    pub state: State,
    pub root_id: String,
    pub epoch: Option<u64>,
    /// The timer row's due time as last written; `None` when unknown (after a rebuild).
    pub timer_at: Option<Option<u64>>,
}

/// What the pass loop owns.
pub(crate) struct Core {
    pub hot: HashMap<String, Hot>,
    /// Parsed definitions by hash.
    pub defs: HashMap<String, Arc<Definition>>,
    /// Executions this process lost to a fence, with the owners row's epoch then. Only an
    /// adoption at a higher epoch (a takeover by this process) brings one back.
    pub lost: HashMap<String, u64>,
    /// Executions in recovery mode (see `recovery`): recovered after a start or a takeover
    /// with pending entries, resumed by an operator, or after a caught panic. Their entries
    /// are applied with an attempt count committed first.
    pub suspects: BTreeSet<String>,
    /// Open executions dropped from memory while quiet (see `evict`), with their epoch.
    pub evicted: Evicted,
}

impl Inner {
    /// Wakes the pass loop for inbox entries that may be new (see [`Inner::inbox_dirty`]).
    pub(crate) fn kick_inbox(&self) {
        self.mark_inbox();
        self.kick.notify_one();
    }

    /// The next pass reads the inbox.
    pub(crate) fn mark_inbox(&self) {
        self.inbox_dirty.store(true, Ordering::SeqCst);
    }

    /// Whether this pass reads the inbox; clears the mark (a read that fails marks it again).
    pub(crate) fn take_inbox_mark(&self) -> bool {
        self.inbox_dirty.swap(false, Ordering::SeqCst)
    }

    /// A context with nothing held and nothing pending.
    pub(crate) fn new(
        cfg: OwnerConfig,
        store: Arc<dyn OwnerStore>,
        tasks_ready: Arc<Notify>,
        timers_changed: Arc<Notify>,
        changes: Arc<ChangeHub>,
    ) -> Inner {
        Inner {
            cfg,
            store,
            tasks_ready,
            timers_changed,
            changes,
            kick: Notify::new(),
            inbox_dirty: AtomicBool::new(true),
            held_named_at: StdMutex::new(None),
            takeover_hint: Notify::new(),
            core: Mutex::new(Core {
                hot: HashMap::new(),
                defs: HashMap::new(),
                lost: HashMap::new(),
                suspects: BTreeSet::new(),
                evicted: Evicted::default(),
            }),
            versions: StdMutex::new(HashMap::new()),
            starts: StdMutex::new(Vec::new()),
            handed: StdMutex::new(Vec::new()),
            handoff: std::sync::OnceLock::new(),
            passes: watch::channel(Passes::default()).0,
            quarantine: Counters::default(),
        }
    }
}
