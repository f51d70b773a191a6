//! One execution's engine work in a pass: given the events a host already recorded (by
//! [`crate::accept`] or [`crate::start`]), decide to the fixpoint, refuse offers of disabled
//! adapters, follow continue-as-new into the next runs, and return per run touched its new
//! events and their [`Effect`]s. The served owner and the simulator both call [`settle`],
//! so what an event causes is worked out in one place.

use crate::command::next_run;
pub use crate::decide::MAX_PASS_ROUNDS;
use crate::decide::{advance_within, next_timer};
use crate::effects::HTTP_TASK;
use crate::effects::{adapter_disabled, derive, task_of, timer_change, Capabilities, Effect};
use crate::event::{Event, HistoryEvent, Origin};
use crate::state::{State, Status, UnitStatus};
use orbit_definition::{Definition, Limits};

/// Continue-as-new runs followed in one pass at most: a workflow that continues without
/// waiting for anything must not spin a pass forever.
const MAX_ROUNDS: usize = 100;

/// What a pass runs with.
#[derive(Debug, Clone, Copy)]
pub struct Pass<'a> {
    /// The clock, epoch milliseconds.
    pub now: u64,
    /// Server-wide limits.
    pub limits: &'a Limits,
    /// Built-in adapters the host runs.
    pub caps: Capabilities,
}

/// One run touched by a pass.
#[derive(Debug, Clone, PartialEq)]
pub struct Run {
    /// The run number.
    pub run: u32,
    /// Its status after the pass.
    pub status: Status,
    /// Its new events, in order (those the host recorded first).
    pub events: Vec<HistoryEvent>,
    /// What they cause.
    pub effects: Vec<Effect>,
    /// The run's next wake-up after the pass, as its `SetTimer`/`ClearTimer` says: the
    /// pass's `now` when the pass stopped at [`MAX_PASS_ROUNDS`] before the fixpoint (the
    /// next pass goes on), else [`next_timer`]; `None` for a continued run.
    pub wake: Option<u64>,
}

/// Records `event` on `state` as the next seq (origin `Recorded`); returns that seq.
pub fn record(state: &mut State, events: &mut Vec<HistoryEvent>, event: Event, now: u64) -> u64 {
    let he = HistoryEvent {
        seq: state.last_seq + 1,
        timestamp_ms: now,
        origin: Origin::Recorded,
        event,
    };
    state.apply(&he);
    let seq = he.seq;
    events.push(he);
    seq
}

/// Decides `state` to the fixpoint after the host recorded `recorded` (already applied),
/// and returns every run touched, oldest first; `state` ends as the last run's. A run that
/// needs more than [`MAX_PASS_ROUNDS`] rounds is decided that far: its wake-up is then the
/// pass's `now` ([`Run::wake`]), so the host passes again at once and goes on.
///
/// `timer_before` is the execution's stored wake-up (`None` when unknown): the last run
/// carries `SetTimer`/`ClearTimer` only when it changed. A continued run carries
/// `ContinueAsNew` and no timer.
pub fn settle(
    def: &Definition,
    state: &mut State,
    recorded: Vec<HistoryEvent>,
    timer_before: Option<Option<u64>>,
    pass: &Pass<'_>,
) -> Vec<Run> {
    let mut runs = Vec::new();
    let mut events = recorded;
    let mut settled = true;
    for _ in 0..MAX_ROUNDS {
        let (decided, done) = advance_within(def, state, pass.now, pass.limits, MAX_PASS_ROUNDS);
        events.extend(decided);
        if !done {
            // At the bound: the next pass goes on (the wake-up below is due now).
            settled = false;
            break;
        }
        if !pass.caps.http && refuse_http(def, state, &mut events, pass.now) {
            continue;
        }
        if state.status() != Status::ContinuedAsNew {
            break;
        }
        let first = next_run(def, state);
        let finished = std::mem::take(state);
        let mut fx = derive(def, &finished, &events, pass.caps);
        fx.push(Effect::ContinueAsNew { finished_run: finished.run, next_run: finished.run + 1 });
        runs.push(Run {
            run: finished.run,
            status: finished.status(),
            events: std::mem::take(&mut events),
            effects: fx,
            wake: None,
        });
        for e in first {
            record(state, &mut events, e, pass.now);
        }
    }
    let wake = if settled { next_timer(def, state) } else { Some(pass.now) };
    runs.push(run_of(def, state, events, timer_before, pass.caps, wake));
    runs
}

/// One attempt a pass offered that the host hands to a worker in the commit that queues
/// it (task hand-off): the worker session and the claim's token.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HandedOff {
    /// The unit key the offer is for.
    pub step: String,
    /// The claim's token.
    pub token: String,
    /// The worker's declared id.
    pub worker_id: String,
    /// The worker session.
    pub session: String,
}

/// Records on the last run of a pass (`run`, whose state `state` is) the `StepDispatched`
/// of each attempt the host hands to a worker in the same commit that queues it, as if the
/// claim's `dispatched` entry had been applied at `pass.now`; then works out the run's
/// wake-up again (a dispatched attempt's deadline starts now) and replaces its timer
/// change. Nothing else changes: `StepDispatched` causes no effect, and the run's offers
/// stay (their rows are queued claimed). Returns, per hand-off, whether it was recorded: an
/// attempt that is not waiting for a worker is refused by [`accept`](crate::accept), and
/// the host queues it unclaimed instead.
pub fn hand_off(
    def: &Definition,
    state: &mut State,
    run: &mut Run,
    timer_before: Option<Option<u64>>,
    handed: &[HandedOff],
    pass: &Pass<'_>,
) -> Vec<bool> {
    let mut recorded = Vec::with_capacity(handed.len());
    for h in handed {
        let command = crate::Command::Dispatched {
            step: h.step.clone(),
            token: h.token.clone(),
            worker_id: h.worker_id.clone(),
            session: h.session.clone(),
        };
        let events = if run.run == state.run {
            crate::accept(def, state, command, pass.now, pass.limits).unwrap_or_default()
        } else {
            Vec::new()
        };
        recorded.push(!events.is_empty());
        for e in events {
            record(state, &mut run.events, e, pass.now);
        }
    }
    if recorded.iter().any(|r| *r) {
        // A run stopped at the round bound keeps its wake-up at `now` (the next pass goes on).
        if run.wake != Some(pass.now) {
            run.wake = next_timer(def, state);
        }
        run.effects.retain(|e| !matches!(e, Effect::SetTimer { .. } | Effect::ClearTimer));
        run.effects.extend(timer_change(timer_before, run.wake));
    }
    recorded
}

/// The run touched by events a host recorded without deciding (a start stored before its
/// first decision, an operator's terminate): their effects and the timer change.
#[must_use]
pub fn effects_of(
    def: &Definition,
    state: &State,
    events: Vec<HistoryEvent>,
    timer_before: Option<Option<u64>>,
    caps: Capabilities,
) -> Run {
    run_of(def, state, events, timer_before, caps, next_timer(def, state))
}

fn run_of(
    def: &Definition,
    state: &State,
    events: Vec<HistoryEvent>,
    timer_before: Option<Option<u64>>,
    caps: Capabilities,
    wake: Option<u64>,
) -> Run {
    let mut effects = derive(def, state, &events, caps);
    effects.extend(timer_change(timer_before, wake));
    Run { run: state.run, status: state.status(), events, effects, wake }
}

/// Records the non-retryable `ADAPTER_DISABLED` failure of every offered http attempt (they
/// would otherwise wait in a queue nobody serves). Returns whether anything was recorded.
fn refuse_http(
    def: &Definition,
    state: &mut State,
    events: &mut Vec<HistoryEvent>,
    now: u64,
) -> bool {
    // A closed (or continued) run offers nothing (see `derive`): no failure to record.
    if state.status().is_closed() {
        return false;
    }
    let offers: Vec<(String, u32)> = state
        .open_units()
        .filter(|(_, u)| u.status == UnitStatus::Scheduled)
        .filter(|(k, _)| task_of(def, k).is_some_and(|(t, _)| t == HTTP_TASK))
        .map(|(k, u)| (k.clone(), u.attempt))
        .collect();
    for (step, attempt) in &offers {
        let error = adapter_disabled();
        record(
            state,
            events,
            Event::StepAttemptFailed { step: step.clone(), attempt: *attempt, error },
            now,
        );
    }
    !offers.is_empty()
}
