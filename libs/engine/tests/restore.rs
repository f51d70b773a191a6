//! Reset and fork (`orbit_engine::restore`), through the simulator: what a restored run
//! keeps and runs again, the compensation and signal rules, the refusals, a fork's state at
//! its seq, and — over every seq of a run — that a reset to any point the run was running
//! at completes and replays clean.

mod common;

use common::*;
use orbit_definition::Definition;
use orbit_engine::event::Origin;
use orbit_engine::restore::{plan, point, state_at, Point};
use orbit_engine::sim::{Sim, TaskOutcome};
use orbit_engine::{ErrorCode, Event, Status, TaskError, UnitStatus};
use serde_json::json;
use std::cell::Cell;
use std::rc::Rc;

/// `a → b → c`; `b` fails for good while `broken` is set.
fn chain() -> Definition {
    def("name: rs\nversion: '1'\ntasks: { t: {}, flaky: {}, undo: {} }\nsignals: { go: null }\n\
         steps:\n  - { id: a, task: t, input: a, compensate: { task: undo } }\n  \
         - { id: b, needs: [a], task: flaky, input: \"${{ steps.a.output }}\" }\n  \
         - { id: c, needs: [b], task: t, input: c }\n\
         output: \"${{ steps.c.output }}\"\n")
}

fn sim_with(d: &Definition, broken: Rc<Cell<bool>>) -> Sim {
    let mut sim = Sim::new();
    sim.register(d.clone());
    sim.on_task("t", |r| {
        TaskOutcome::Complete(json!(format!("{}-done", r.input.as_str().unwrap_or(""))))
    });
    sim.on_task("undo", |_| TaskOutcome::Complete(json!("undone")));
    sim.on_task("flaky", move |_| {
        if broken.get() {
            TaskOutcome::Fail(TaskError::fatal("BROKEN", "the worker had a bug"))
        } else {
            TaskOutcome::Complete(json!("b-done"))
        }
    });
    sim
}

fn offers(sim: &Sim, unit: &str) -> usize {
    sim.requests().iter().filter(|r| r.step == unit).count()
}

#[test]
fn a_failed_execution_reset_to_its_failing_step_completes_with_the_old_run_archived() {
    let d = chain();
    let broken = Rc::new(Cell::new(true));
    let mut sim = sim_with(&d, broken.clone());
    sim.start("rs", "x", json!({})).unwrap();
    assert!(sim.run(100));
    assert_eq!(exec(&sim, "x").state.status(), Status::Failed);
    assert_eq!(offers(&sim, "compensate:a"), 1, "a was compensated");
    broken.set(false);
    let plan = sim.reset("x", &Point::Step("b".into()), true, None).unwrap();
    // `a` was undone by the failed run's compensation: it runs again.
    assert_eq!(plan.forgotten, vec!["a".to_string()]);
    assert!(sim.run(100));
    let e = exec(&sim, "x");
    assert_eq!(e.state.status(), Status::Completed);
    assert_eq!(e.state.run, 2);
    assert_eq!(e.state.output, Some(json!("c-done")));
    assert_eq!(e.archived.len(), 1);
    let old = &e.archived[0];
    assert!(matches!(old.last().map(|h| &h.event), Some(Event::WorkflowReset { next_run: 2, .. })));
    assert!(old.iter().any(|h| h.event.type_name() == "WorkflowFailed"), "the old run is kept");
    // The new run: WorkflowCreated, the copied prefix, RunRestored.
    let through = plan.through_seq;
    assert_eq!(e.history[0].origin, Origin::Recorded);
    for (i, he) in e.history.iter().enumerate().take(through as usize).skip(1) {
        assert_eq!(he.origin, Origin::Copied);
        assert_eq!(he.event, old[i].event);
    }
    assert!(matches!(e.history[through as usize].event, Event::RunRestored { .. }));
    assert_eq!(offers(&sim, "a"), 2);
    let keys: Vec<_> = sim
        .requests()
        .iter()
        .filter(|r| r.step == "a")
        .map(|r| r.idempotency_key.clone())
        .collect();
    assert_ne!(keys[0], keys[1], "the new run's key differs");
    assert_replays(&sim);
}

#[test]
fn completed_steps_before_the_point_are_kept_and_not_run_again() {
    // No compensation on `a` here: it is kept.
    let d = def("name: rs\nversion: '1'\ntasks: { t: {}, flaky: {} }\nsteps:\n  \
                 - { id: a, task: t, input: a }\n  \
                 - { id: b, needs: [a], task: flaky }\n  - { id: c, needs: [b], task: t, input: c }\n");
    let broken = Rc::new(Cell::new(true));
    let mut sim = sim_with(&d, broken.clone());
    sim.start("rs", "x", json!({})).unwrap();
    assert!(sim.run(100));
    broken.set(false);
    let plan = sim.reset("x", &Point::Step("b".into()), true, None).unwrap();
    assert!(plan.forgotten.is_empty());
    assert_eq!(plan.kept, vec!["a".to_string()]);
    assert!(sim.run(100));
    assert_eq!(exec(&sim, "x").state.status(), Status::Completed);
    assert_eq!(offers(&sim, "a"), 1, "a is not run again");
    assert_eq!(offers(&sim, "b"), 2);
    assert_replays(&sim);
}

#[test]
fn a_running_execution_reset_cancels_its_open_work_and_runs_it_again() {
    let d = chain();
    let mut sim = Sim::new();
    sim.register(d.clone());
    sim.on_task("t", |_| TaskOutcome::Complete(json!("ok")));
    sim.on_task("flaky", |_| TaskOutcome::Hang);
    sim.start("rs", "x", json!({})).unwrap();
    assert!(sim.run(100));
    assert_eq!(exec(&sim, "x").state.unit("b").unwrap().status, UnitStatus::Dispatched);
    let last = exec(&sim, "x").history.last().unwrap().seq;
    let plan = sim.reset("x", &Point::Seq(last), true, None).unwrap();
    assert_eq!(plan.forgotten, vec!["b".to_string()]);
    sim.run(100);
    let e = exec(&sim, "x");
    let old = &e.archived[0];
    assert!(old.iter().any(|h| h.event == Event::StepCancelled { step: "b".into() }));
    assert_eq!(e.state.unit("b").unwrap().status, UnitStatus::Dispatched);
    assert_eq!(e.state.unit("b").unwrap().attempt, 1);
    assert_eq!(offers(&sim, "b"), 2);
    assert_replays(&sim);
}

#[test]
fn signals_after_the_point_are_received_again_unless_dropped() {
    let d = def("name: sg\nversion: '1'\ntasks: { t: {} }\nsignals: { go: null }\nsteps:\n  \
                 - { id: a, task: t }\n  - { id: w, needs: [a], await: go }\n  \
                 - { id: c, needs: [w], task: t }\n");
    for keep in [true, false] {
        let mut sim = Sim::new();
        sim.register(d.clone());
        sim.on_task("t", |_| TaskOutcome::Complete(json!(1)));
        sim.start("sg", "x", json!({})).unwrap();
        assert!(sim.run(100));
        sim.signal("x", "go", json!("first")).unwrap();
        assert!(sim.run(100));
        assert_eq!(exec(&sim, "x").state.status(), Status::Completed);
        let plan = sim.reset("x", &Point::Step("w".into()), keep, None).unwrap();
        assert_eq!(plan.signals_after, 1);
        assert!(sim.run(100));
        let e = exec(&sim, "x");
        if keep {
            assert_eq!(e.state.status(), Status::Completed);
            assert_eq!(e.state.unit("w").unwrap().output, Some(json!("first")));
        } else {
            assert_eq!(e.state.status(), Status::Running);
            assert_eq!(e.state.unit("w").unwrap().status, UnitStatus::Waiting);
        }
        assert_replays(&sim);
    }
}

#[test]
fn a_dependent_of_a_forgotten_step_is_forgotten_with_it() {
    // `a` compensated by the failure of `c` → `a` and `b` (needs a) run again.
    let d = def("name: dp\nversion: '1'\ntasks: { t: {}, flaky: {}, undo: {} }\nsteps:\n  \
                 - { id: a, task: t, compensate: { task: undo } }\n  - { id: b, needs: [a], task: t }\n  \
                 - { id: c, needs: [b], task: flaky }\n");
    let broken = Rc::new(Cell::new(true));
    let mut sim = sim_with(&d, broken.clone());
    sim.start("dp", "x", json!({})).unwrap();
    assert!(sim.run(100));
    broken.set(false);
    let plan = sim.reset("x", &Point::Step("c".into()), true, None).unwrap();
    assert_eq!(plan.forgotten, vec!["a".to_string(), "b".to_string()]);
    assert!(sim.run(100));
    assert_eq!(exec(&sim, "x").state.status(), Status::Completed);
    assert_eq!(offers(&sim, "b"), 2);
    assert_replays(&sim);
}

fn code<T>(r: &Result<T, orbit_engine::CommandError>) -> ErrorCode {
    r.as_ref().map(|_| ()).unwrap_err().code
}

#[test]
fn points_a_run_cannot_go_on_from_are_refused() {
    let d = chain();
    let mut sim = sim_with(&d, Rc::new(Cell::new(true)));
    sim.start("rs", "x", json!({})).unwrap();
    assert!(sim.run(100));
    let history = exec(&sim, "x").history.clone();
    let last = history.last().unwrap().seq;
    assert_eq!(code(&point(&history, &Point::Step("c".into()))), ErrorCode::ResetPointInvalid);
    assert_eq!(
        code(&point(&history, &Point::Step("compensate:a".into()))),
        ErrorCode::InvalidArgument
    );
    assert_eq!(code(&point(&history, &Point::Step("a[1]".into()))), ErrorCode::InvalidArgument);
    assert_eq!(code(&point(&history, &Point::Seq(0))), ErrorCode::InvalidArgument);
    assert_eq!(code(&point(&history, &Point::Seq(last + 1))), ErrorCode::InvalidArgument);
    // The last event: the run had ended; the one before: it was winding down.
    assert_eq!(code(&plan(&d, &history, last)), ErrorCode::ResetPointInvalid);
    let failed_at = history.iter().find(|h| h.event.type_name() == "StepFailed").unwrap().seq;
    assert_eq!(code(&plan(&d, &history, failed_at)), ErrorCode::ResetPointInvalid);
    assert_eq!(code(&sim.reset("x", &Point::Seq(last), true, None)), ErrorCode::ResetPointInvalid);
    // Nothing was recorded by the refusals.
    assert_eq!(exec(&sim, "x").history.len(), history.len());
}

#[test]
fn a_fork_at_seq_n_has_the_state_of_the_original_at_n() {
    let d = chain();
    let mut sim = Sim::new();
    sim.register(d.clone());
    sim.on_task("t", |r| {
        TaskOutcome::Complete(json!(format!("{}-done", r.input.as_str().unwrap_or(""))))
    });
    sim.on_task("flaky", |_| TaskOutcome::Hang);
    sim.start("rs", "x", json!({"k": 1})).unwrap();
    assert!(sim.run(100));
    let original = exec(&sim, "x").history.clone();
    let n = original.iter().find(|h| h.event.type_name() == "StepSucceeded").unwrap().seq;
    let plan = sim.fork("x", n, "y", None).unwrap();
    assert!(plan.forgotten.is_empty(), "nothing is open right after a succeeded");
    let fork = exec(&sim, "y").history.clone();
    let at = state_at(&original, n);
    let forked = state_at(&fork, n);
    assert_eq!(forked.execution_id, "y");
    assert_eq!((forked.input.clone(), forked.units.clone()), (at.input.clone(), at.units.clone()));
    assert_eq!(forked.success_order, at.success_order);
    for i in 1..n as usize {
        assert_eq!(fork[i].event, original[i].event);
        assert_eq!(fork[i].seq, original[i].seq);
    }
    // The original is untouched; the fork goes on by itself.
    assert_eq!(exec(&sim, "x").history, original);
    assert!(sim.run(100));
    assert_eq!(exec(&sim, "y").state.unit("b").unwrap().status, UnitStatus::Dispatched);
    assert!(sim.fork("x", n, "y", None).is_err(), "the new id is taken");
    assert_replays(&sim);
}

#[test]
fn a_reset_to_every_point_the_run_was_running_at_completes_and_replays() {
    let d = def("name: ev\nversion: '1'\ntasks: { t: {}, undo: {} }\nsignals: { go: null }\nsteps:\n  \
                 - { id: a, task: t, compensate: { task: undo } }\n  \
                 - { id: f, needs: [a], for_each: \"${{ [1, 2, 3] }}\", max_concurrency: 2, task: t }\n  \
                 - { id: s, needs: [a], sleep: 5s }\n  - { id: w, needs: [f, s], await: go }\n  \
                 - { id: c, needs: [w], task: t }\n");
    let mut sim = Sim::new();
    sim.register(d.clone());
    sim.on_task("t", |_| TaskOutcome::Complete(json!(1)));
    sim.on_task("undo", |_| TaskOutcome::Complete(json!(0)));
    sim.start("ev", "src", json!({})).unwrap();
    assert!(sim.run(100));
    sim.signal("src", "go", json!("x")).unwrap();
    assert!(sim.run(100));
    let history = exec(&sim, "src").history.clone();
    assert_eq!(exec(&sim, "src").state.status(), Status::Completed);
    let mut tried = 0;
    for seq in 1..=history.last().unwrap().seq {
        let at = state_at(&history, seq);
        if at.status() != Status::Running || at.winding.is_some() {
            continue;
        }
        let id = format!("fork-{seq}");
        sim.fork("src", seq, &id, None).unwrap();
        assert!(sim.run(200), "fork at {seq} came to rest");
        // A fork from before the signal's delivery waits for one of its own.
        if exec(&sim, &id).state.status() == Status::Running {
            sim.signal(&id, "go", json!("again")).unwrap();
            assert!(sim.run(200), "fork at {seq} came to rest");
        }
        assert_eq!(exec(&sim, &id).state.status(), Status::Completed, "fork at {seq}");
        tried += 1;
    }
    assert!(tried > 10, "{tried}");
    let last = history.last().unwrap().seq;
    let step_seq = point(&history, &Point::Step("w".into())).unwrap();
    assert!(step_seq < last);
    assert_replays(&sim);
}

#[test]
fn a_child_running_at_the_reset_is_cancelled_and_the_new_run_starts_its_own() {
    let child =
        def("name: kid\nversion: '1'\ntasks: { slow: {} }\nsteps:\n  - { id: s, task: slow }\n");
    let parent = def("name: par\nversion: '1'\ntasks: { t: {} }\nsteps:\n  \
                      - { id: a, task: t }\n  - { id: k, needs: [a], workflow: kid }\n");
    let mut sim = Sim::new();
    sim.register(child).register(parent);
    sim.on_task("t", |_| TaskOutcome::Complete(json!(1)));
    sim.on_task("slow", |_| TaskOutcome::Hang);
    sim.start("par", "p", json!({})).unwrap();
    assert!(sim.run(100));
    assert_eq!(exec(&sim, "p/k").state.status(), Status::Running);
    sim.reset("p", &Point::Step("k".into()), true, None).unwrap();
    sim.run(100);
    // The old run's child was cancelled (as any cancelled child unit's), and the new run
    // started its own child under the run-scoped id.
    assert_eq!(exec(&sim, "p/k").state.status(), Status::Cancelled);
    assert_eq!(exec(&sim, "p/run2/k").state.status(), Status::Running);
    let unit = exec(&sim, "p").state.unit("k").unwrap().clone();
    assert_eq!(unit.wait, Some(orbit_engine::state::Wait::Child("p/run2/k".into())));
    // The cancelled child's end does not touch the new run's unit.
    assert_eq!(unit.status, UnitStatus::Waiting);
    assert_replays(&sim);
}
