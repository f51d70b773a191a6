//! Runs one definition in the engine's simulator ([`orbit_engine::sim::Sim`]) as the
//! fixtures script it: the same pure decider and effects the server runs, with a manual
//! clock, so a test of a day-long workflow takes milliseconds and needs no server or worker.

use super::fixtures::{Answer, Fixtures, Input, Outcome};
use orbit_definition::Definition;
use orbit_engine::sim::{Sim, TaskOutcome, TaskRequest};
use orbit_engine::{CommandError, TaskError};
use std::cell::RefCell;
use std::collections::BTreeMap;
use std::rc::Rc;

/// Clock moves the simulator may make before the run counts as endless (a workflow that
/// keeps setting timers forever).
const MAX_CLOCK_MOVES: usize = 100_000;

/// What the simulation did.
pub struct Simulated {
    /// The simulator after the run: every execution (the tested one and its children).
    pub sim: Sim,
    /// The start time, epoch milliseconds (times are printed relative to it).
    pub started_at: u64,
    /// The start's refusal, if it was refused.
    pub start_error: Option<CommandError>,
    /// Inputs the execution refused (`signal approve at +5s: EXECUTION_FINISHED: ...`).
    pub notes: Vec<String>,
    /// Whether the simulation came to rest (nothing more could happen without input).
    pub rested: bool,
}

/// The per-task and per-step scripts with their counters, shared by every task handler.
struct Script {
    tasks: BTreeMap<String, Vec<Outcome>>,
    steps: BTreeMap<String, Vec<Outcome>>,
    calls: BTreeMap<String, usize>,
}

impl Script {
    /// The answer for one attempt: the step's list by attempt number, else the task's list
    /// in call order; the last entry of a list repeats.
    fn answer(&mut self, req: &TaskRequest) -> TaskOutcome {
        let by_step = step_keys(&req.step).into_iter().find_map(|k| self.steps.get(&k));
        let outcome = if let Some(list) = by_step {
            pick(list, req.attempt.saturating_sub(1) as usize)
        } else if let Some(list) = self.tasks.get(&req.task) {
            let n = self.calls.entry(req.task.clone()).or_default();
            *n += 1;
            pick(list, *n - 1)
        } else {
            let message = format!(
                "no fixture for task `{}` (unit `{}`): add it under `tasks:` or `steps:`",
                req.task, req.step
            );
            return TaskOutcome::Fail(TaskError::fatal("NO_FIXTURE", message));
        };
        let answer = match outcome.answer.clone() {
            Answer::Output(v) => TaskOutcome::Complete(v),
            Answer::Fail { code, message, retryable, details } => {
                TaskOutcome::Fail(TaskError { code, message, retryable, details })
            }
            Answer::Hang => TaskOutcome::Hang,
        };
        match outcome.delay_ms {
            Some(ms) => TaskOutcome::After(ms, Box::new(answer)),
            None => answer,
        }
    }
}

fn pick(list: &[Outcome], i: usize) -> &Outcome {
    &list[i.min(list.len() - 1)]
}

/// The `steps:` keys a unit answers to, most specific first: the unit key
/// (`compensate:reserve[1]`), without its element index (`compensate:reserve`), and for a
/// signal handler instance without its sequence number (`on_signal:note:record_note`).
pub fn step_keys(unit: &str) -> Vec<String> {
    let mut keys = vec![unit.to_owned()];
    let mut push = |k: String| {
        if !keys.contains(&k) {
            keys.push(k);
        }
    };
    let no_index = match (unit.rfind('['), unit.ends_with(']')) {
        (Some(i), true) => unit[..i].to_owned(),
        _ => unit.to_owned(),
    };
    push(no_index.clone());
    if let Some(rest) = no_index.strip_prefix("on_signal:") {
        if let (Some(at), Some(colon)) = (rest.find('@'), rest.find(':')) {
            if at < colon {
                push(format!("on_signal:{}{}", &rest[..at], &rest[colon..]));
            }
        }
    }
    keys
}

/// Runs `main` (with `others` registered for child steps) as `fixtures` script it.
#[must_use]
pub fn simulate(main: &Definition, others: Vec<Definition>, fixtures: &Fixtures) -> Simulated {
    let mut sim = Sim::new();
    let script = Rc::new(RefCell::new(Script {
        tasks: fixtures.tasks.clone(),
        steps: fixtures.steps.clone(),
        calls: BTreeMap::new(),
    }));
    let mut names: Vec<String> = main.tasks.keys().cloned().collect();
    for def in &others {
        names.extend(def.tasks.keys().cloned());
    }
    names.extend(fixtures.tasks.keys().cloned());
    for name in names {
        let script = Rc::clone(&script);
        sim.on_task(&name, move |req| script.borrow_mut().answer(req));
    }
    for def in others {
        sim.register(def);
    }
    sim.register(main.clone());
    let started_at = sim.now;
    let id = fixtures.execution_id.clone();
    if let Err(e) = sim.start(&main.name, &id, fixtures.input.clone()) {
        return Simulated {
            sim,
            started_at,
            start_error: Some(e),
            notes: Vec::new(),
            rested: true,
        };
    }
    let mut inputs = fixtures.inputs.clone();
    inputs.sort_by_key(|(at, _)| *at);
    let mut notes = Vec::new();
    for (at, input) in inputs {
        sim.run_until(started_at + at);
        let (what, sent) = match input {
            Input::Signal { name, payload } => {
                (format!("signal `{name}`"), sim.signal(&id, &name, payload))
            }
            Input::Update { name, args, update_id } => {
                let update = orbit_engine::Command::Update { name: name.clone(), args, update_id };
                (format!("update `{name}`"), sim.command(&id, update))
            }
            Input::Cancel { reason } => ("cancel".to_owned(), sim.cancel(&id, &reason)),
        };
        if let Err(e) = sent {
            let at = orbit_definition::format_duration(at);
            notes.push(format!("{what} at +{at} refused: {}: {}", e.code.as_str(), e.message));
        }
    }
    let rested = sim.run(MAX_CLOCK_MOVES);
    Simulated { sim, started_at, start_error: None, notes, rested }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn units_answer_to_their_step_keys() {
        assert_eq!(step_keys("charge"), ["charge"]);
        assert_eq!(step_keys("reserve[2]"), ["reserve[2]", "reserve"]);
        assert_eq!(
            step_keys("compensate:reserve[0]"),
            ["compensate:reserve[0]", "compensate:reserve"]
        );
        assert_eq!(
            step_keys("on_signal:note@4:record_note"),
            ["on_signal:note@4:record_note", "on_signal:note:record_note"]
        );
    }
}
