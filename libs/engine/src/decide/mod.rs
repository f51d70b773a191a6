//! The decider: `(definition, state, now) → events`, pure.
//!
//! One call of [`decide`] is one *round*: it looks at the state once and returns what follows
//! from it. [`advance`] applies rounds until nothing more follows (the fixpoint), which is
//! what the owner does after every command. Rounds are ordered: workflow-level checks (start,
//! history limit, timeout), then unit timers and retries, then either the wind-down or the
//! running work (signals, the main body, signal handler instances, completion). Every
//! iteration is over ordered maps, so the same inputs always give the same events.

mod body;
mod body_memo;
mod branches;
mod drive;
mod flow;
mod loops;
mod nested;
mod search;
pub(crate) mod slots;
mod units;

pub use autocan::RESUME_RESERVE_EVENTS;
use body_memo::BodyMemo;
pub use units::WORKER_LOST;
mod autocan;
mod winddown;

use crate::event::{Event, HistoryEvent, Origin};
use crate::state::State;
use crate::unit::Scope as UnitScope;
use orbit_definition::{Definition, Limits};
use std::cell::RefCell;
use std::collections::HashMap;

/// Everything a round reads.
pub(crate) struct Ctx<'a> {
    pub def: &'a Definition,
    pub state: &'a State,
    pub now: u64,
    pub limits: Limits,
    /// What earlier rounds of the same [`advance`] learnt (see [`Memo`]).
    pub memo: &'a Memo,
    /// One round of a running nested step (`drive::round`): the list scheduler calls it
    /// without importing the constructs that schedule their own lists through it.
    pub nested_round: NestedRound,
}

/// See [`Ctx::nested_round`].
pub(crate) type NestedRound =
    fn(&Ctx<'_>, &orbit_definition::Step, &crate::unit::UnitKey, &mut Vec<Event>);

/// What one round leaves for the next rounds of the same [`advance_within`], so a round
/// costs the work that changed, not the size of the run (see [`body_memo::BodyMemo`]). Valid
/// only while one `advance_within` applies its own rounds to one state (a resolved unit
/// never becomes unresolved through decided events); a new call starts empty.
#[derive(Default)]
pub(crate) struct Memo {
    /// By body instance and group prefix (`""` for the body's own list, `"g."` for the
    /// steps of its group `g`).
    bodies: RefCell<HashMap<(UnitScope, String), BodyMemo>>,
}

impl Memo {
    /// The memo of one list of a body instance (`prefix`: see [`Memo::bodies`]), made on
    /// first use from a full look at its steps. `f` must not ask for another list's memo.
    pub(crate) fn body<R>(
        &self,
        scope: &UnitScope,
        prefix: &str,
        steps: &[orbit_definition::Step],
        f: impl FnOnce(&mut BodyMemo) -> R,
    ) -> R {
        let mut bodies = self.bodies.borrow_mut();
        let memo = bodies
            .entry((scope.clone(), prefix.to_string()))
            .or_insert_with(|| BodyMemo::new(steps));
        f(memo)
    }

    /// Takes in the events of a round just applied to `state`: units of a body that
    /// resolved wake the steps that need them.
    pub(crate) fn observe(&self, state: &State, events: &[HistoryEvent]) {
        let mut bodies = self.bodies.borrow_mut();
        if bodies.is_empty() {
            return;
        }
        for he in events {
            // Elements (`step[i]`) never resolve a body's step: no key parse for them.
            let Some(key) = he.event.step().filter(|k| !k.ends_with(']')) else { continue };
            if !state.unit(key).is_some_and(|u| u.status.is_resolved()) {
                continue;
            }
            let Some(parsed) = crate::unit::UnitKey::parse(key) else { continue };
            if parsed.compensate || parsed.index.is_some() {
                continue;
            }
            let prefix = crate::unit::group_prefix(&parsed.step);
            if let Some(memo) = bodies.get_mut(&(parsed.scope, prefix.to_string())) {
                memo.resolved_step(&parsed.step[prefix.len()..]);
            }
        }
    }
}

/// The stricter of two limits (`None` is no limit).
#[must_use]
pub fn effective_limits(server: &Limits, def: &Definition) -> Limits {
    fn min(a: Option<u64>, b: Option<u64>) -> Option<u64> {
        match (a, b) {
            (Some(x), Some(y)) => Some(x.min(y)),
            (x, y) => x.or(y),
        }
    }
    Limits {
        max_fan_out: min(server.max_fan_out, def.limits.max_fan_out),
        max_history_events: min(server.max_history_events, def.limits.max_history_events),
        max_payload_bytes: min(server.max_payload_bytes, def.limits.max_payload_bytes),
        max_timers: min(server.max_timers, def.limits.max_timers),
    }
}

/// One decision round with only the definition's own limits.
#[must_use]
pub fn decide(def: &Definition, state: &State, now: u64) -> Vec<Event> {
    decide_with(def, state, now, &Limits::default())
}

/// One decision round under the server's limits.
#[must_use]
pub fn decide_with(def: &Definition, state: &State, now: u64, server: &Limits) -> Vec<Event> {
    round(def, state, now, server, &Memo::default())
}

pub(crate) fn round(
    def: &Definition,
    state: &State,
    now: u64,
    server: &Limits,
    memo: &Memo,
) -> Vec<Event> {
    if state.status.is_none() || state.status().is_closed() {
        return Vec::new();
    }
    let ctx = Ctx {
        def,
        state,
        now,
        limits: effective_limits(server, def),
        memo,
        nested_round: drive::round,
    };
    if state.started_at.is_none() {
        if let Some(first) = slots::gate(&ctx) {
            return first;
        }
        return vec![Event::WorkflowStarted {}];
    }
    let upserts = search::round(&ctx);
    if !upserts.is_empty() {
        return upserts;
    }
    if state.winding.is_none() {
        if let Some(e) = workflow_checks(&ctx) {
            return vec![e];
        }
        // A restored run holds its slots again before anything else goes on.
        if state.slots_again {
            if let Some(first) = slots::gate(&ctx) {
                return first;
            }
        }
    }
    let mut out = units::timers_and_retries(&ctx);
    if !out.is_empty() {
        crate::catch::rewrite(def, state, &mut out);
        return out;
    }
    if state.winding.is_some() {
        winddown::round(&ctx, &mut out);
    } else {
        body::running_round(&ctx, &mut out);
    }
    crate::catch::rewrite(def, state, &mut out);
    out
}

/// Most rounds one pass decides. A run that needs more (a long `for_each` with
/// `max_concurrency`, a long `needs` chain) is not stuck: the pass ends at the bound with
/// the events so far (consistent: rounds are whole) and [`crate::run::settle`] leaves the
/// execution's wake-up due at once, so the next pass goes on where this one stopped. The
/// bound keeps one pass, and so one commit, from growing with the run.
pub const MAX_PASS_ROUNDS: usize = 10_000;

/// Decides to the fixpoint or [`MAX_PASS_ROUNDS`], whichever comes first, applying each
/// round to `state`; returns the new history events (seq numbers follow `state.last_seq`,
/// timestamps are `now`).
pub fn advance(
    def: &Definition,
    state: &mut State,
    now: u64,
    server: &Limits,
) -> Vec<HistoryEvent> {
    advance_within(def, state, now, server, MAX_PASS_ROUNDS).0
}

/// [`advance`] with at most `max_rounds` rounds; the flag says whether the fixpoint was
/// reached (`false`: deciding again now would produce more).
pub fn advance_within(
    def: &Definition,
    state: &mut State,
    now: u64,
    server: &Limits,
    max_rounds: usize,
) -> (Vec<HistoryEvent>, bool) {
    let memo = Memo::default();
    let mut all = Vec::new();
    for _ in 0..max_rounds {
        let events = round(def, state, now, server, &memo);
        if events.is_empty() {
            return (all, true);
        }
        let first = all.len();
        for event in events {
            let he = HistoryEvent {
                seq: state.last_seq + 1,
                timestamp_ms: now,
                origin: Origin::Decided,
                event,
            };
            state.apply(&he);
            all.push(he);
        }
        memo.observe(state, &all[first..]);
    }
    // The bound: settled only if nothing more follows.
    let settled = round(def, state, now, server, &memo).is_empty();
    (all, settled)
}

/// The earliest time at which deciding again would produce something without any command
/// (a timer, a retry, a deadline, the workflow timeout); `None` if nothing is pending.
#[must_use]
pub fn next_timer(def: &Definition, state: &State) -> Option<u64> {
    if state.status.is_none() || state.status().is_closed() {
        return None;
    }
    let workflow = match (state.winding.is_none(), def.timeout_ms, state.timeout_from()) {
        (true, Some(t), Some(s)) => Some(s.saturating_add(t)),
        _ => None,
    };
    units::deadlines(def, state).chain(workflow).min()
}

fn workflow_checks(ctx: &Ctx<'_>) -> Option<Event> {
    if let Some(max) = ctx.limits.max_history_events {
        if ctx.state.event_count >= max {
            return Some(Event::LimitExceeded {
                limit: "max_history_events".into(),
                message: format!(
                    "the history reached {} events (limit {max})",
                    ctx.state.event_count
                ),
            });
        }
    }
    let deadline =
        ctx.def.timeout_ms.zip(ctx.state.timeout_from()).map(|(t, s)| s.saturating_add(t));
    match deadline {
        Some(d) if ctx.now >= d => Some(Event::WorkflowTimeoutReached {}),
        _ => None,
    }
}

/// The per-attempt timeout of a unit, if its step has one.
pub(crate) fn unit_timeout(def: &Definition, key: &crate::unit::UnitKey) -> Option<u64> {
    units::spec(def, key)?.timeout_ms
}
