//! Executions that need more decider rounds than one pass runs (issue 30, item 9): a
//! 10,005-element `for_each` with `max_concurrency: 1` and a 9,999-step `needs` chain. A pass
//! stops at its round bound and leaves the execution's wake-up due at once
//! (`Effect::SetTimer` at the pass's time), so the next pass goes on: the run completes,
//! every element and step exactly once, and the history replays.

mod common;

use common::{assert_replays, def, events_of, exec};
use orbit_engine::effects::Effect;
use orbit_engine::run::{settle, Pass, MAX_PASS_ROUNDS};
use orbit_engine::sim::Sim;
use orbit_engine::{Event, HistoryEvent, Origin, State, Status};
use serde_json::{json, Value};
use std::fmt::Write as _;

const FOR_EACH: &str = r#"
name: wide
version: "1"
steps:
  - id: c
    compute: "${{ item }}"
    for_each: "${{ input }}"
    max_concurrency: 1
output: "${{ steps.c.output }}"
"#;

fn chain(n: usize) -> String {
    let mut yaml =
        String::from("name: chain\nversion: \"1\"\nsteps:\n  - id: s0\n    compute: 0\n");
    for i in 1..n {
        let _ = write!(
            yaml,
            "  - id: s{i}\n    needs: [s{p}]\n    compute: \"${{{{ steps.s{p}.output + 1.0 }}}}\"\n",
            p = i - 1
        );
    }
    let _ = writeln!(yaml, "output: \"${{{{ steps.s{}.output }}}}\"", n - 1);
    yaml
}

fn items(n: usize) -> Value {
    Value::Array((0..n).map(|i| json!(i)).collect())
}

#[test]
fn a_for_each_longer_than_one_pass_completes_in_the_simulator() {
    let n = 10_005;
    let mut sim = Sim::new();
    sim.register(def(FOR_EACH));
    sim.start("wide", "w", items(n)).unwrap();
    assert!(sim.run(100), "the simulation settles");
    let e = exec(&sim, "w");
    assert_eq!(e.state.status(), Status::Completed, "the run completes");
    assert_eq!(e.state.output, Some(items(n)), "every element's output, in order");
    let succeeded = events_of(&e.history, "StepSucceeded");
    assert_eq!(succeeded.len(), n + 1, "each element once, then the step");
    assert_replays(&sim);
}

#[test]
fn a_chain_longer_than_one_pass_completes_in_the_simulator() {
    let n = 9_999;
    let mut sim = Sim::new();
    sim.register(def(&chain(n)));
    sim.start("chain", "c", json!({})).unwrap();
    assert!(sim.run(100), "the simulation settles");
    let e = exec(&sim, "c");
    assert_eq!(e.state.status(), Status::Completed);
    assert_eq!(e.state.output, Some(json!(n - 1)));
    assert_eq!(events_of(&e.history, "StepSucceeded").len(), n);
    assert_replays(&sim);
}

/// What the owner sees: a pass that reached its bound ends with its wake-up at `now`, and
/// one that reached the fixpoint with the run's real next timer (none here).
#[test]
fn a_pass_at_its_round_bound_leaves_the_execution_due_now() {
    let d = def(FOR_EACH);
    let n = MAX_PASS_ROUNDS + 10;
    let created = orbit_engine::start(&d, "w", items(n), None, None, 1, &d.limits, None).unwrap();
    let mut state = State::default();
    let first = HistoryEvent { seq: 1, timestamp_ms: 5, origin: Origin::Recorded, event: created };
    state.apply(&first);
    let limits = orbit_definition::Limits::default();
    let pass = |now| Pass { now, limits: &limits, caps: Default::default() };

    let runs = settle(&d, &mut state, vec![first], Some(None), &pass(5));
    assert_eq!(runs.len(), 1);
    assert_eq!(state.status(), Status::Running, "the bound stopped the pass");
    assert!(runs[0].effects.contains(&Effect::SetTimer { at: 5 }), "{:?}", runs[0].effects);
    assert_eq!(runs[0].wake, Some(5));
    let decided = runs[0].events.len() - 1;
    assert!(decided >= MAX_PASS_ROUNDS, "one event a round at least: {decided}");

    // The next pass (the timer fired: no row any more) goes on to the end.
    let runs = settle(&d, &mut state, vec![], Some(None), &pass(9));
    assert_eq!(state.status(), Status::Completed);
    assert_eq!(runs[0].wake, None);
    assert!(!runs[0].effects.iter().any(|e| matches!(e, Effect::SetTimer { .. })));
    let last = runs[0].events.last().map(|h| &h.event);
    assert!(matches!(last, Some(Event::WorkflowCompleted { .. })), "{last:?}");
}
