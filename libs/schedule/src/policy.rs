//! One scheduler pass over a due schedule, decided without IO: which occurrences are due,
//! which the catch-up policy fires or drops, how the overlap policy treats each against
//! the execution still running, the remaining-actions limit, and the next occurrence.
//!
//! The scheduler feeds [`plan`] with the schedule's progress and whether its last execution
//! still runs, then carries the [`Plan`] out (starts with deterministic ids, cancels or
//! terminates the previous execution) and records it — all under its claim on the row.

use crate::def::{CatchUp, Overlap, SpecDef};
use crate::spec::{jitter_ms, Spec};

/// An occurrence is on time (fires even under catch-up `SKIP`) when it is due at most this
/// long ago: a busy scheduler is late by a moment, not by an occurrence.
pub const ON_TIME_MS: u64 = 5_000;

/// At most this many occurrences wait under `BUFFER_ALL`; more are skipped.
pub const MAX_BUFFERED: usize = 1_000;

/// While occurrences wait in the buffer, the scheduler looks at the schedule again this
/// often to start the next one once the running execution closed.
pub const RECHECK_MS: u64 = 1_000;

/// Occurrences enumerated in one pass at most; older ones are counted as skipped.
const MAX_DUE: usize = 10_000;

/// What the scheduler knows about a schedule when it takes it.
#[derive(Debug, Clone)]
pub struct Tick<'a> {
    /// The schedule id (for jitter).
    pub schedule_id: &'a str,
    /// The compiled spec.
    pub spec: &'a Spec,
    /// Its stored form (policies).
    pub def: &'a SpecDef,
    /// The scheduler's clock.
    pub now_ms: u64,
    /// The nominal next occurrence recorded on the row.
    pub next_fire_ms: Option<u64>,
    /// Whether the last execution the schedule started is still open.
    pub running: bool,
    /// Occurrences waiting under a `BUFFER_*` policy, oldest first.
    pub buffered: &'a [u64],
    /// Scheduled starts still allowed; `None` means no limit.
    pub remaining: Option<u64>,
}

/// What to do with the execution that runs before a start.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Prior {
    /// Leave it running.
    Keep,
    /// Cancel it first (`CANCEL_OTHER`).
    Cancel,
    /// Terminate it first (`TERMINATE_OTHER`).
    Terminate,
}

/// One execution to start.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Start {
    /// Its nominal occurrence (the execution id derives from it).
    pub occurrence_ms: u64,
    /// What happens to the execution running before it.
    pub prior: Prior,
}

/// The outcome of one pass.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Plan {
    /// Executions to start, in order.
    pub starts: Vec<Start>,
    /// Occurrences dropped by the catch-up, overlap or remaining-actions rules.
    pub skipped: u64,
    /// Occurrences waiting after this pass.
    pub buffered: Vec<u64>,
    /// The next nominal occurrence, `None` when the schedule ended.
    pub next_fire_ms: Option<u64>,
    /// When the row is due again: the next occurrence plus its jitter, or sooner while
    /// occurrences wait in the buffer.
    pub due_ms: Option<u64>,
    /// The latest occurrence handled by this pass (started, buffered or skipped).
    pub last_fire_ms: Option<u64>,
    /// Scheduled starts still allowed after this pass.
    pub remaining: Option<u64>,
}

/// Decides one pass (see the module docs).
#[must_use]
pub fn plan(t: &Tick<'_>) -> Plan {
    let bound = t.spec.jitter_bound_ms();
    let due_at = |occ: u64| occ.saturating_add(jitter_ms(t.schedule_id, occ, bound));
    // 1. The due occurrences, oldest first, and the first one not due yet.
    let mut due = Vec::new();
    let mut skipped = 0u64;
    let mut next = t.next_fire_ms;
    while let Some(occ) = next {
        if due_at(occ) > t.now_ms {
            break;
        }
        if due.len() == MAX_DUE {
            due.remove(0);
            skipped += 1;
        }
        due.push(occ);
        next = t.spec.next_after(occ);
    }
    let last_fire_ms = due.last().copied();
    // 2. Catch-up: what is too old or missed under the policy is dropped.
    let window = t.def.window_ms();
    let age = |occ: u64| t.now_ms.saturating_sub(occ);
    let fresh: Vec<u64> = due.iter().copied().filter(|&o| age(o) <= window).collect();
    let fire: Vec<u64> = match t.def.catch_up {
        CatchUp::All => fresh,
        CatchUp::One => fresh.last().copied().into_iter().collect(),
        CatchUp::Skip => {
            fresh.last().copied().filter(|&o| age(o) <= ON_TIME_MS).into_iter().collect()
        }
    };
    skipped += (due.len() - fire.len()) as u64;
    // 3. Overlap and the limit, occurrence by occurrence (buffered ones first).
    let mut running = t.running;
    let mut buffered: Vec<u64> = t.buffered.to_vec();
    let mut remaining = t.remaining;
    let mut starts = Vec::new();
    let mut take = |occ: u64, prior: Prior, starts: &mut Vec<Start>, skipped: &mut u64| {
        if remaining == Some(0) {
            *skipped += 1;
            return false;
        }
        remaining = remaining.map(|r| r - 1);
        starts.push(Start { occurrence_ms: occ, prior });
        true
    };
    if !running && !buffered.is_empty() {
        let occ = buffered.remove(0);
        running = take(occ, Prior::Keep, &mut starts, &mut skipped);
    }
    for occ in fire {
        if !running {
            running = take(occ, Prior::Keep, &mut starts, &mut skipped);
            continue;
        }
        match t.def.overlap {
            Overlap::Skip => skipped += 1,
            Overlap::AllowAll => {
                take(occ, Prior::Keep, &mut starts, &mut skipped);
            }
            Overlap::CancelOther => {
                take(occ, Prior::Cancel, &mut starts, &mut skipped);
            }
            Overlap::TerminateOther => {
                take(occ, Prior::Terminate, &mut starts, &mut skipped);
            }
            Overlap::BufferOne if buffered.is_empty() => buffered.push(occ),
            Overlap::BufferAll if buffered.len() < MAX_BUFFERED => buffered.push(occ),
            Overlap::BufferOne | Overlap::BufferAll => skipped += 1,
        }
    }
    // 4. The limit ends the schedule once used up; waiting occurrences still start.
    if remaining == Some(0) {
        next = None;
    }
    let mut due_ms = next.map(due_at);
    if !buffered.is_empty() {
        let recheck = t.now_ms + RECHECK_MS;
        due_ms = Some(due_ms.map_or(recheck, |d| d.min(recheck)));
    }
    Plan { starts, skipped, buffered, next_fire_ms: next, due_ms, last_fire_ms, remaining }
}
