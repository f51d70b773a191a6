//! A batch offers and starts only what it still wants at its end: `derive` looks at events
//! one by one, but a unit scheduled and then cancelled, or left behind by a close or a
//! continue-as-new, in the same batch must reach no worker and start no child. Before, the
//! served owner queued such offers (the simulator's dispatch happened to be refused) and
//! recorded their answers as `StaleResultIgnored` after the terminal event.

mod common;

use common::*;
use orbit_definition::{Definition, Limits};
use orbit_engine::effects::{Capabilities, Effect};
use orbit_engine::event::{Event, HistoryEvent};
use orbit_engine::run::{record, settle, Pass, Run};
use orbit_engine::{start, State, Status};
use serde_json::json;

const NOW: u64 = 1_700_000_000_000;

/// `a` is scheduled, then the http step fails the workflow (no adapter) in the same batch.
const TASK_THEN_FAIL: &str = "name: f\nversion: '1'\ntasks: { t: {} }\nsteps:\n  - { id: a, task: t }\n  - { id: call, http: { method: GET, url: 'https://example.invalid/x' } }\n";
/// The child is started, then the http step fails the workflow in the same batch.
const CHILD_THEN_FAIL: &str = "name: g\nversion: '1'\nsteps:\n  - { id: kid, workflow: w }\n  - { id: call, http: { method: GET, url: 'https://example.invalid/x' } }\n";
/// `a` is scheduled in the same round as the continue-as-new that ends run 1.
const TASK_THEN_CONTINUE: &str = "name: l\nversion: '1'\ntasks: { t: {} }\nsteps:\n  - { id: a, task: t }\n  - { id: again, when: '${{ input.n < 1 }}', continue_as_new: { input: { n: 1 } } }\n";

fn first_pass(yaml: &str) -> (Definition, Vec<Run>) {
    let def = def(yaml);
    let limits = Limits::default();
    let (mut state, mut events) = (State::default(), Vec::<HistoryEvent>::new());
    let first = start(&def, "x", json!({"n": 0}), None, None, 1, &limits, None).unwrap();
    record(&mut state, &mut events, first, NOW);
    let pass = Pass { now: NOW, limits: &limits, caps: Capabilities::default() };
    let runs = settle(&def, &mut state, events, Some(None), &pass);
    (def, runs)
}

fn offers(run: &Run) -> Vec<&str> {
    run.effects
        .iter()
        .filter_map(|e| match e {
            Effect::OfferTask(o) | Effect::RunAdapter { offer: o, .. } => Some(o.unit.as_str()),
            _ => None,
        })
        .collect()
}

#[test]
fn a_unit_scheduled_and_cancelled_in_one_batch_is_not_offered() {
    let (_, runs) = first_pass(TASK_THEN_FAIL);
    let [run] = runs.as_slice() else { panic!("one run: {runs:?}") };
    let t = types(&run.events);
    assert!(t.contains(&"StepScheduled") && t.contains(&"StepCancelled"), "{t:?}");
    assert_eq!(run.status, Status::Failed);
    assert!(offers(run).is_empty(), "nothing offered: {:?}", run.effects);
    assert!(run.effects.contains(&Effect::CancelUnit { unit: "a".into() }));
}

#[test]
fn a_child_started_and_cancelled_in_one_batch_is_neither_started_nor_cancelled() {
    let (_, runs) = first_pass(CHILD_THEN_FAIL);
    let [run] = runs.as_slice() else { panic!("one run: {runs:?}") };
    assert!(events_of(&run.events, "ChildStarted").len() == 1, "{:?}", types(&run.events));
    assert!(events_of(&run.events, "StepCancelled")
        .iter()
        .any(|e| matches!(e, Event::StepCancelled { step } if step == "kid")));
    let children: Vec<_> = run
        .effects
        .iter()
        .filter(|e| matches!(e, Effect::StartChild { .. } | Effect::CancelChild { .. }))
        .collect();
    assert!(children.is_empty(), "no child to start or cancel: {children:?}");
}

#[test]
fn a_run_ended_by_continue_as_new_offers_nothing_and_the_next_run_offers_again() {
    let (_, runs) = first_pass(TASK_THEN_CONTINUE);
    let [first, second] = runs.as_slice() else { panic!("two runs: {runs:?}") };
    assert_eq!(first.status, Status::ContinuedAsNew);
    assert!(types(&first.events).contains(&"StepScheduled"), "{:?}", types(&first.events));
    assert!(offers(first).is_empty(), "the finished run offers nothing: {:?}", first.effects);
    assert!(
        !types(&first.events).contains(&"StepAttemptFailed"),
        "nothing recorded after the run continued"
    );
    assert_eq!(offers(second), ["a"], "run 2 offers its own attempt");
}

#[test]
fn the_simulator_dispatches_nothing_for_a_unit_cancelled_in_its_batch() {
    let mut sim = orbit_engine::sim::Sim::new();
    sim.register(def(TASK_THEN_FAIL));
    sim.on_task("t", |_| orbit_engine::sim::TaskOutcome::Complete(json!(1)));
    sim.start("f", "x", json!({})).unwrap();
    sim.run(10);
    assert_eq!(exec(&sim, "x").state.status(), Status::Failed);
    assert!(sim.requests().is_empty(), "no worker saw `a`");
    assert!(events_of(&exec(&sim, "x").history, "StaleResultIgnored").is_empty());
}

/// Messages between executions arrive the round after they were sent, like the served
/// owner's inbox entries the pass after: a parent's cancel sent in the instant its child's
/// own result arrives lands after the child decided on that result (a retry here), not
/// between the result and the decision.
#[test]
fn the_simulator_delivers_a_parents_cancel_after_the_childs_own_decision_of_that_instant() {
    const PARENT: &str = "name: p\nversion: '1'\ntasks: { t: {} }\nsteps:\n  - { id: kid, workflow: c }\n  - { id: boom, task: t }\n";
    const CHILD: &str = "name: c\nversion: '1'\ntasks: { u: {} }\nsteps:\n  - { id: k, task: u, retry: { max_attempts: 3, initial_interval: 1s } }\n";
    let mut sim = orbit_engine::sim::Sim::new();
    sim.register(def(CHILD)).register(def(PARENT));
    sim.on_task("t", |_| {
        orbit_engine::sim::TaskOutcome::Fail(orbit_engine::TaskError::fatal("BOOM", "no"))
    });
    sim.on_task("u", |_| {
        orbit_engine::sim::TaskOutcome::Fail(orbit_engine::TaskError::retryable("FLAKY", "again"))
    });
    sim.start("p", "p", json!({})).unwrap();
    sim.run(10);
    assert_eq!(exec(&sim, "p").state.status(), Status::Failed);
    let child = types(&exec(&sim, "p/kid").history);
    let at =
        |name: &str| child.iter().position(|t| *t == name).unwrap_or_else(|| panic!("{child:?}"));
    assert!(at("RetryScheduled") < at("CancelRequested"), "the child decided first: {child:?}");
    assert_eq!(exec(&sim, "p/kid").state.status(), Status::Cancelled);
    assert_replays(&sim);
}
