//! Runs a case through the simulator (`orbit_engine::sim::Sim`, public API only) and
//! collects every execution's runs.

use super::gen::{outcome, Action, Case, Outcome, T0};
use super::{task_names, Histories, HORIZON_MS, ROOT};
use orbit_definition::{Definition, Limits};
use orbit_engine::sim::{Sim, TaskOutcome};
use orbit_engine::TaskError;

fn to_sim(o: Outcome) -> TaskOutcome {
    match o {
        Outcome::Complete(v) => TaskOutcome::Complete(v),
        Outcome::Fail { code, retryable: true } => {
            TaskOutcome::Fail(TaskError::retryable(&code, "scripted failure"))
        }
        Outcome::Fail { code, retryable: false } => {
            TaskOutcome::Fail(TaskError::fatal(&code, "scripted failure"))
        }
        Outcome::Hang => TaskOutcome::Hang,
    }
}

/// Every run of every execution the simulator made for `case`.
pub fn run(case: &Case, defs: &[Definition], limits: &Limits) -> Result<Histories, String> {
    let mut sim = Sim::new();
    sim.now = T0;
    sim.limits = limits.clone();
    for d in defs {
        sim.register(d.clone());
    }
    for name in task_names(defs) {
        let mode = case.mode;
        sim.on_task(&name, move |req| to_sim(outcome(mode, &req.task, req.attempt, &req.input)));
    }
    sim.start(&case.workflow, ROOT, case.input.clone()).map_err(|e| format!("sim start: {e:?}"))?;
    for action in &case.script {
        sim.run_until(T0 + action.at());
        // A command the execution refuses (it closed, say) changes nothing on either side.
        let _ = match action {
            Action::Signal { name, payload, .. } => sim.signal(ROOT, name, payload.clone()),
            Action::Cancel { reason, .. } => sim.cancel(ROOT, reason),
        };
    }
    sim.run_until(T0 + HORIZON_MS);
    Ok(sim
        .executions()
        .iter()
        .map(|(id, e)| {
            let mut runs = e.archived.clone();
            runs.push(e.history.clone());
            (id.clone(), runs)
        })
        .collect())
}
