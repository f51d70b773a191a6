//! The decider: `(definition, state, now) → events`, pure.
//!
//! One call of [`decide`] is one *round*: it looks at the state once and returns what follows
//! from it. [`advance`] applies rounds until nothing more follows (the fixpoint), which is
//! what the owner does after every command. Rounds are ordered: workflow-level checks (start,
//! history limit, timeout), then unit timers and retries, then either the wind-down or the
//! running work (signals, the main body, signal handler instances, completion). Every
//! iteration is over ordered maps, so the same inputs always give the same events.

mod body;
mod units;
mod winddown;

use crate::event::{Event, HistoryEvent, Origin};
use crate::state::State;
use orbit_definition::{Definition, Limits};

/// Everything a round reads.
pub(crate) struct Ctx<'a> {
    pub def: &'a Definition,
    pub state: &'a State,
    pub now: u64,
    pub limits: Limits,
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
    if state.status.is_none() || state.status().is_closed() {
        return Vec::new();
    }
    let ctx = Ctx { def, state, now, limits: effective_limits(server, def) };
    if state.started_at.is_none() {
        return vec![Event::WorkflowStarted {}];
    }
    if state.winding.is_none() {
        if let Some(e) = workflow_checks(&ctx) {
            return vec![e];
        }
    }
    let mut out = units::timers_and_retries(&ctx);
    if !out.is_empty() {
        return out;
    }
    if state.winding.is_some() {
        winddown::round(&ctx, &mut out);
    } else {
        body::running_round(&ctx, &mut out);
    }
    out
}

/// Most rounds one [`advance`] runs; reaching it means a decider bug, and stopping keeps the
/// owner alive (the events so far are still consistent).
const MAX_ROUNDS: usize = 10_000;

/// Decides to the fixpoint, applying each round to `state`; returns the new history events
/// (seq numbers follow `state.last_seq`, timestamps are `now`).
pub fn advance(
    def: &Definition,
    state: &mut State,
    now: u64,
    server: &Limits,
) -> Vec<HistoryEvent> {
    let mut all = Vec::new();
    for _ in 0..MAX_ROUNDS {
        let round = decide_with(def, state, now, server);
        if round.is_empty() {
            break;
        }
        for event in round {
            let he = HistoryEvent {
                seq: state.last_seq + 1,
                timestamp_ms: now,
                origin: Origin::Decided,
                event,
            };
            state.apply(&he);
            all.push(he);
        }
    }
    all
}

/// The earliest time at which deciding again would produce something without any command
/// (a timer, a retry, a deadline, the workflow timeout); `None` if nothing is pending.
#[must_use]
pub fn next_timer(def: &Definition, state: &State) -> Option<u64> {
    if state.status.is_none() || state.status().is_closed() {
        return None;
    }
    let workflow = match (state.winding.is_none(), def.timeout_ms, state.started_at) {
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
    let deadline = ctx.def.timeout_ms.zip(ctx.state.started_at).map(|(t, s)| s.saturating_add(t));
    match deadline {
        Some(d) if ctx.now >= d => Some(Event::WorkflowTimeoutReached {}),
        _ => None,
    }
}

/// The per-attempt timeout of a unit, if its step has one.
pub(crate) fn unit_timeout(def: &Definition, key: &crate::unit::UnitKey) -> Option<u64> {
    units::spec(def, key)?.timeout_ms
}
