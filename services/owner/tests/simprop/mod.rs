//! The simulator-versus-owner property test's parts: the generator (`gen`), the two
//! runners (`sim_side`, `owner_side`) and the comparison of their histories (here).
//!
//! What is compared, per execution (children and every continued run included): the list
//! of runs, and per run every event in seq order as (timestamp − T0, origin, the event's
//! JSON). Two fields are masked because they are the claimer's, not the engine's: a
//! dispatch's `token`, `worker_id` and `session` (random 128-bit tokens in the store), and
//! a stale result's `token`. Commands that reach one execution in the same instant
//! (results, dispatches, children's ends, signals) arrive in an order the engine does not
//! choose: the simulator records a dispatch right after the decision that scheduled the
//! unit, while in the owner a child that closed in the same pass wrote its `child_closed`
//! entry before the claimer wrote the `dispatched` one. So each maximal run of consecutive
//! recorded (command) events with one timestamp is compared as a set (sorted); decided
//! events, and the order of everything across them, are compared as they are.

pub mod gen;
pub mod owner_side;
pub mod sim_side;

use orbit_definition::Definition;
use orbit_engine::{Event, HistoryEvent, Origin};
use std::collections::{BTreeMap, BTreeSet};

/// The root execution's id on both sides.
pub const ROOT: &str = "root";

/// Manual time both sides run to (every generated timeout, retry and sleep is far shorter,
/// the examples' workflow timeout of 2 h included).
pub const HORIZON_MS: u64 = 3 * 3_600_000;

/// Execution id → runs (oldest first) → history.
pub type Histories = BTreeMap<String, Vec<Vec<HistoryEvent>>>;

/// Every task name a worker must answer: the declared tasks, and both names an `http`
/// step's task goes by (`http` in the simulator, `orbit.http` in the owner).
pub fn task_names(defs: &[Definition]) -> Vec<String> {
    let mut names: BTreeSet<String> = defs.iter().flat_map(|d| d.tasks.keys().cloned()).collect();
    names.insert("http".into());
    names.insert("orbit.http".into());
    names.into_iter().collect()
}

/// One history as comparable lines (see the module docs).
pub fn lines(history: &[HistoryEvent]) -> Vec<String> {
    let mut events: Vec<(u64, bool, String)> = history
        .iter()
        .map(|he| {
            let mut event = he.event.clone();
            match &mut event {
                Event::StepDispatched { token, worker_id, session, .. } => {
                    token.clear();
                    worker_id.clear();
                    session.clear();
                }
                Event::StaleResultIgnored { token, .. } => token.clear(),
                _ => {}
            }
            let json = serde_json::to_string(&event).unwrap_or_else(|e| e.to_string());
            let line =
                format!("+{}ms {:?} {json}", he.timestamp_ms.saturating_sub(gen::T0), he.origin);
            (he.timestamp_ms, he.origin == Origin::Recorded, line)
        })
        .collect();
    let mut i = 0;
    while i < events.len() {
        let mut j = i;
        while j < events.len() && events[j].1 && events[j].0 == events[i].0 {
            j += 1;
        }
        events[i..j].sort();
        i = j.max(i + 1);
    }
    events.into_iter().map(|(_, _, line)| line).collect()
}

/// Each execution's runs as text: `== <id> run <n>` headers, then the run's lines.
pub fn render(h: &Histories) -> Vec<String> {
    let mut out = Vec::new();
    for (id, runs) in h {
        for (n, run) in runs.iter().enumerate() {
            out.push(format!("== {id} run {}", n + 1));
            out.extend(lines(run));
        }
    }
    out
}

/// A line diff (`-` simulator only, `+` owner only), with 3 lines of context; `None` when
/// equal.
pub fn diff(sim: &[String], owner: &[String]) -> Option<String> {
    if sim == owner {
        return None;
    }
    let (n, m) = (sim.len(), owner.len());
    // Longest common subsequence table, from the ends.
    let mut t = vec![vec![0u32; m + 1]; n + 1];
    for i in (0..n).rev() {
        for j in (0..m).rev() {
            t[i][j] =
                if sim[i] == owner[j] { t[i + 1][j + 1] + 1 } else { t[i + 1][j].max(t[i][j + 1]) };
        }
    }
    let mut ops: Vec<(char, &str)> = Vec::new();
    let (mut i, mut j) = (0, 0);
    while i < n || j < m {
        if i < n && j < m && sim[i] == owner[j] {
            ops.push((' ', &sim[i]));
            i += 1;
            j += 1;
        } else if j < m && (i == n || t[i][j + 1] >= t[i + 1][j]) {
            ops.push(('+', &owner[j]));
            j += 1;
        } else {
            ops.push(('-', &sim[i]));
            i += 1;
        }
    }
    let near = |k: usize| {
        let lo = k.saturating_sub(3);
        ops[lo..(k + 4).min(ops.len())].iter().any(|(c, _)| *c != ' ')
    };
    let mut out = String::new();
    let mut skipped = false;
    for (k, (c, l)) in ops.iter().enumerate() {
        if *c != ' ' || near(k) || l.starts_with("== ") {
            if skipped {
                out.push_str("   ...\n");
                skipped = false;
            }
            out.push_str(&format!("{c}  {l}\n"));
        } else {
            skipped = true;
        }
    }
    Some(out)
}

/// A short name for a difference, to group cases that disagree the same way: the first
/// changed line's event type on each side.
pub fn signature(d: &str) -> String {
    let kind = |prefix: char| {
        d.lines()
            .find(|l| l.starts_with(prefix))
            .map(|l| {
                l.split("\"type\":\"")
                    .nth(1)
                    .and_then(|r| r.split('"').next())
                    .unwrap_or("?")
                    .to_string()
            })
            .unwrap_or_else(|| "nothing".into())
    };
    format!("sim {} / owner {}", kind('-'), kind('+'))
}
