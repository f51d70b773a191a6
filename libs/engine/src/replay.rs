//! The replay check: re-run the decider over a recorded history and report the first place
//! where it would decide differently.
//!
//! Recorded events are applied as they are; at each decided event the decider runs one
//! round at that event's timestamp, and the history's next events must equal that round.

use crate::decide::{round, Memo};
use crate::event::{Event, HistoryEvent, Origin};
use crate::state::State;
use orbit_definition::{Definition, Limits};
use serde::Serialize;

/// Where replay diverged.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Divergence {
    /// Seq of the first event that differs (or where an event was expected).
    pub seq: u64,
    /// What the decider produces there (`None`: nothing).
    pub expected: Option<Box<Event>>,
    /// What the history holds there (`None`: the history ends).
    pub actual: Option<Box<Event>>,
}

/// Replays `history` (one run) against `def`; `Ok(())` when every decided event matches.
///
/// # Errors
/// The first divergence.
pub fn replay(
    def: &Definition,
    history: &[HistoryEvent],
    server: &Limits,
) -> Result<(), Divergence> {
    let mut state = State::default();
    // As in `advance_within`: what rounds learn holds while only decided events follow.
    let mut memo = Memo::default();
    let mut i = 0;
    while i < history.len() {
        let he = &history[i];
        if he.origin == Origin::Recorded {
            state.apply(he);
            memo = Memo::default();
            i += 1;
            continue;
        }
        let first = i;
        let round = round(def, &state, he.timestamp_ms, server, &memo);
        if round.is_empty() {
            return Err(Divergence {
                seq: he.seq,
                expected: None,
                actual: Some(Box::new(he.event.clone())),
            });
        }
        for expected in round {
            let actual = history.get(i);
            match actual {
                Some(a) if a.origin == Origin::Decided && a.event == expected => {
                    state.apply(a);
                    i += 1;
                }
                _ => {
                    return Err(Divergence {
                        seq: actual.map_or(state.last_seq + 1, |a| a.seq),
                        expected: Some(Box::new(expected)),
                        actual: actual.map(|a| Box::new(a.event.clone())),
                    })
                }
            }
        }
        memo.observe(&state, &history[first..i]);
    }
    Ok(())
}
