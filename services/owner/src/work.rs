//! One execution's work in a pass ([`Work`]): its hot copy, the events recorded before the
//! engine settles them, and what the commit will mark done; and what a set of works came
//! to ([`Applied`], [`Failed`]).

use crate::context::Hot;
use crate::error::OwnerError;
use crate::requests::{InitialUpdate, PendingStart};
use orbit_engine::event::{Event, HistoryEvent};
use orbit_engine::run::{effects_of, Pass, Run};
use orbit_engine::{settle, Capabilities};
use orbit_store::{ExecutionRow, InboxDone};

/// One execution's work in this pass.
pub(crate) struct Work {
    pub(crate) hot: Hot,
    /// Events recorded in this pass before the engine settles them (a start, accepted
    /// commands, an operator's terminate).
    pub(crate) events: Vec<HistoryEvent>,
    pub(crate) inbox_done: Vec<InboxDone>,
    /// Tokens of handed results recorded in this pass (their rows are marked done).
    pub(crate) tasks_done: Vec<String>,
    /// Units that succeeded in this pass by the handed result of their attempt in flight:
    /// no row of theirs stays open (earlier offers were withdrawn when their attempts
    /// ended, this one is in `tasks_done`), so their `CancelUnit` writes nothing and is
    /// left out of the commit.
    pub(crate) settled_units: Vec<String>,
    pub(crate) new_execution: Option<ExecutionRow>,
    /// A start that took its workflow's latest version from a frontend's cached list of
    /// this many versions, not read here: the commit that creates the execution checks it
    /// (`CommitBatch::versions_seen`; only for a start alone in its pass, `apply::load`).
    pub(crate) versions_seen: Option<u32>,
    pub(crate) replies: Vec<PendingStart>,
    /// The built-in adapters this server runs (`OwnerConfig::capabilities`): off, http
    /// steps fail `ADAPTER_DISABLED`; on, their attempts are queued for the built-in worker.
    pub(crate) caps: Capabilities,
    /// Update-with-start: the update to accept right after `WorkflowCreated` (see
    /// `initial`), the seq of its `UpdateAccepted` once accepted, or why it was refused
    /// (then nothing of this execution is committed).
    pub(crate) initial: Option<InitialUpdate>,
    pub(crate) update_seq: Option<u64>,
    pub(crate) refused: Option<OwnerError>,
    /// A fork's source, read before the job (see `fork`): the job records the fork's
    /// first run from it instead of a plain start's decision.
    pub(crate) fork: Option<crate::fork::ForkInput>,
    /// The wake-up the pass's commit writes (`orbit_engine::Run::wake` of the last run):
    /// due at once when the pass stopped at the engine's round bound.
    pub(crate) wake: Option<u64>,
}

impl Work {
    pub(crate) fn new(hot: Hot, caps: Capabilities) -> Work {
        Work {
            hot,
            events: vec![],
            inbox_done: vec![],
            tasks_done: vec![],
            settled_units: vec![],
            new_execution: None,
            versions_seen: None,
            replies: vec![],
            caps,
            initial: None,
            update_seq: None,
            refused: None,
            fork: None,
            wake: None,
        }
    }

    pub(crate) fn record(&mut self, event: Event, now: u64) -> u64 {
        orbit_engine::run::record(&mut self.hot.state, &mut self.events, event, now)
    }

    /// Decides to the fixpoint after the recorded events (see `orbit_engine::settle`).
    pub(crate) fn settle(&mut self, now: u64, limits: &orbit_definition::Limits) -> Vec<Run> {
        let pass = Pass { now, limits, caps: self.caps };
        let recorded = std::mem::take(&mut self.events);
        settle(&self.hot.def, &mut self.hot.state, recorded, self.hot.timer_at, &pass)
    }

    /// The run touched by the recorded events, without deciding.
    pub(crate) fn undecided(&mut self) -> Vec<Run> {
        let recorded = std::mem::take(&mut self.events);
        vec![effects_of(&self.hot.def, &self.hot.state, recorded, self.hot.timer_at, self.caps)]
    }
}

/// An execution whose engine work panicked in this pass.
pub(crate) struct Failed {
    pub execution_id: String,
    /// Its entries in the pass, by seq (empty for a start).
    pub seqs: Vec<u64>,
    /// Whether it was being created (nothing stored yet).
    pub new_execution: bool,
    /// Its starts that nobody waits for (a child a parent asked for): retried, counted.
    pub retry_starts: Vec<PendingStart>,
    /// The panic message.
    pub message: String,
}

/// What [`apply_set`] did.
#[derive(Default)]
pub(crate) struct Applied {
    /// Executions committed.
    pub committed: Vec<String>,
    /// Executions whose engine work panicked (left out of the commit).
    pub failed: Vec<Failed>,
}
