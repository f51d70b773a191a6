//! Failure branches (`on_failure`) and races (issue 29) in the decider, through the
//! simulator: what runs, what the step's output is, what is cancelled and what is
//! compensated, and that every history replays.

mod common;

use common::*;
use orbit_engine::event::{Event, TaskError};
use orbit_engine::sim::{Sim, TaskOutcome};
use orbit_engine::Status;
use serde_json::{json, Value};

fn sim_with(yaml: &str) -> Sim {
    let mut sim = Sim::new();
    sim.register(def(yaml));
    sim
}

fn steps_of(history: &[orbit_engine::event::HistoryEvent], name: &str) -> Vec<String> {
    events_of(history, name).into_iter().filter_map(|e| e.step().map(str::to_string)).collect()
}

const RECOVER: &str = r#"
name: recover
version: "1"
tasks: { book: null, pay: null, refund: null, notify: null, undo: null, fail_after: null }
steps:
  - id: book
    task: book
    compensate: { task: undo, input: book }
  - id: pay
    needs: [book]
    task: pay
    retry: { max_attempts: 2, initial_interval: 10ms }
    compensate: { task: undo, input: pay }
    on_failure:
      steps:
        - id: note
          task: notify
          input: "${{ failure }}"
          compensate: { task: undo, input: note }
        - id: refund
          needs: [note]
          task: refund
          input: "${{ failure.code + ':' + steps.book.output }}"
      output: "${{ {'refunded': steps.refund.output, 'code': failure.code} }}"
  - id: after
    needs: [pay]
    task: fail_after
    input: "${{ steps.pay.output }}"
output: "${{ steps.pay.output }}"
"#;

fn recover_sim(after_fails: bool) -> Sim {
    let mut sim = sim_with(RECOVER);
    sim.on_task("book", |_| TaskOutcome::Complete(json!("b1")));
    sim.on_task("pay", |_| TaskOutcome::Fail(TaskError::retryable("DECLINED", "card declined")));
    sim.on_task("notify", |r| TaskOutcome::Complete(r.input.clone()));
    sim.on_task("refund", |r| TaskOutcome::Complete(r.input.clone()));
    sim.on_task("undo", |r| TaskOutcome::Complete(r.input.clone()));
    sim.on_task("fail_after", move |r| {
        if after_fails {
            TaskOutcome::Fail(TaskError::fatal("LATE", "later step failed"))
        } else {
            TaskOutcome::Complete(r.input.clone())
        }
    });
    sim
}

#[test]
fn a_failure_branch_runs_with_the_failure_and_its_output_becomes_the_steps() {
    let mut sim = recover_sim(false);
    sim.start("recover", "x", json!({})).unwrap();
    assert!(sim.run(1_000));
    let e = exec(&sim, "x");
    assert_eq!(e.state.status(), Status::Completed, "{:?}", types(&e.history));
    // The last attempt's failure starts the branch instead of failing the run.
    let branched = events_of(&e.history, "StepFailureBranched");
    assert_eq!(branched.len(), 1);
    let Event::StepFailureBranched { step, error } = branched[0] else { unreachable!() };
    assert_eq!((step.as_str(), error.code.as_str()), ("pay", "DECLINED"));
    assert_eq!(steps_of(&e.history, "StepFailed"), Vec::<String>::new());
    // Its units, and `failure` in their input.
    let scheduled = steps_of(&e.history, "StepScheduled");
    assert!(scheduled.contains(&"pay.on_failure.note".to_string()), "{scheduled:?}");
    let note = sim.requests().iter().find(|r| r.step == "pay.on_failure.note").unwrap();
    assert_eq!(note.input["code"], json!("DECLINED"));
    assert_eq!(note.input["step"], json!("pay"));
    assert_eq!(note.input["message"], json!("card declined"));
    // The step ends caught, with the branch's output, which later steps read.
    let caught = events_of(&e.history, "StepFailureCaught");
    let Event::StepFailureCaught { step, output, .. } = caught[0] else { unreachable!() };
    assert_eq!(step, "pay");
    let want = json!({"refunded": "DECLINED:b1", "code": "DECLINED"});
    assert_eq!(output, &want);
    assert_eq!(e.state.output, Some(want));
    assert!(events_of(&e.history, "CompensationStarted").is_empty());
    assert_replays(&sim);
}

#[test]
fn after_a_caught_failure_the_failed_step_is_not_compensated_but_its_branch_is() {
    let mut sim = recover_sim(true);
    sim.start("recover", "x", json!({})).unwrap();
    assert!(sim.run(1_000));
    let e = exec(&sim, "x");
    assert_eq!(e.state.status(), Status::Failed);
    let undone: Vec<Value> = sim
        .requests()
        .iter()
        .filter(|r| r.step.starts_with("compensate:"))
        .map(|r| r.input.clone())
        .collect();
    // Reverse success order: the branch's `note`, then `book`; never `pay`.
    assert_eq!(undone, [json!("note"), json!("book")]);
    assert_replays(&sim);
}

#[test]
fn a_failing_branch_fails_the_step_with_the_branchs_error() {
    let mut sim = recover_sim(false);
    sim.on_task("refund", |_| TaskOutcome::Fail(TaskError::fatal("NO_REFUND", "refund refused")));
    sim.start("recover", "x", json!({})).unwrap();
    assert!(sim.run(1_000));
    let e = exec(&sim, "x");
    assert_eq!(e.state.status(), Status::Failed);
    assert_eq!(steps_of(&e.history, "StepFailed"), ["pay.on_failure.refund", "pay"]);
    let error = e.state.error.as_ref().unwrap();
    assert_eq!(error.code, "NO_REFUND");
    assert!(error.message.contains("pay.on_failure.refund"), "{}", error.message);
    // The branch's own failure is not caught again: one `StepFailureBranched` only.
    assert_eq!(events_of(&e.history, "StepFailureBranched").len(), 1);
    assert_replays(&sim);
}

#[test]
fn a_succeeding_step_never_runs_its_branch() {
    let mut sim = recover_sim(false);
    sim.on_task("pay", |_| TaskOutcome::Complete(json!("paid")));
    sim.start("recover", "x", json!({})).unwrap();
    assert!(sim.run(1_000));
    let e = exec(&sim, "x");
    assert_eq!(e.state.output, Some(json!("paid")));
    assert!(sim.requests().iter().all(|r| !r.step.contains("on_failure")));
}

const RACE: &str = r#"
name: racer
version: "1"
tasks: { slow: null, fast: null, undo: null }
signals: { approve: null }
steps:
  - id: r
    race:
      - steps:
          - { id: ok, await: approve, timeout: 1h }
        output: "${{ {'approved': steps.ok.output} }}"
      - steps:
          - { id: deadline, sleep: 10m }
          - { id: late, needs: [deadline], compute: "expired" }
      - steps:
          - { id: work, task: slow, compensate: { task: undo, input: work } }
          - { id: more, needs: [work], task: slow }
  - id: after
    needs: [r]
    compute: "${{ steps.r.output }}"
output: "${{ steps.after.output }}"
"#;

#[test]
fn a_signal_wins_the_race_and_the_others_are_cancelled() {
    let mut sim = sim_with(RACE);
    sim.on_task("slow", |_| TaskOutcome::Hang);
    sim.start("racer", "x", json!({})).unwrap();
    sim.run_until(sim_now(&sim) + 60_000);
    sim.signal("x", "approve", json!({"by": "ann"})).unwrap();
    assert!(sim.run(1_000));
    let e = exec(&sim, "x");
    assert_eq!(e.state.status(), Status::Completed, "{:?}", types(&e.history));
    assert_eq!(e.state.output, Some(json!({"winner": 0, "output": {"approved": {"by": "ann"}}})));
    let mut cancelled = steps_of(&e.history, "StepCancelled");
    cancelled.sort();
    assert_eq!(cancelled, ["r.1.deadline", "r.2.work"]);
    // The sleep never fired, and nothing was compensated (nothing of a loser succeeded).
    assert!(events_of(&e.history, "TimerFired").is_empty());
    assert!(events_of(&e.history, "CompensationStarted").is_empty());
    assert_replays(&sim);
}

#[test]
fn a_deadline_wins_the_race_when_no_signal_comes() {
    let mut sim = sim_with(RACE);
    sim.on_task("slow", |_| TaskOutcome::Hang);
    sim.start("racer", "x", json!({})).unwrap();
    assert!(sim.run(1_000));
    let e = exec(&sim, "x");
    assert_eq!(e.state.output, Some(json!({"winner": 1, "output": "expired"})));
    let mut cancelled = steps_of(&e.history, "StepCancelled");
    cancelled.sort();
    assert_eq!(cancelled, ["r.0.ok", "r.2.work"]);
    // A signal after the race finds no waiter any more.
    assert_replays(&sim);
}

#[test]
fn a_losing_branchs_succeeded_steps_keep_their_compensation() {
    let yaml = RACE.replace("compute: \"${{ steps.r.output }}\"", "task: slow");
    let mut sim = sim_with(&yaml);
    // `work` succeeds at once; `more` (and later `after`) fail: the run winds down.
    sim.on_task("slow", |r| {
        if r.step == "r.2.work" {
            TaskOutcome::Complete(json!("w"))
        } else if r.step == "after" {
            TaskOutcome::Fail(TaskError::fatal("AFTER", "after failed"))
        } else {
            TaskOutcome::Hang
        }
    });
    sim.on_task("undo", |r| TaskOutcome::Complete(r.input.clone()));
    sim.start("racer", "x", json!({})).unwrap();
    assert!(sim.run(1_000));
    let e = exec(&sim, "x");
    assert_eq!(e.state.status(), Status::Failed);
    assert_eq!(e.state.units["r"].output, Some(json!({"winner": 1, "output": "expired"})));
    assert!(steps_of(&e.history, "StepCancelled").contains(&"r.2.more".to_string()));
    let undone: Vec<&str> = sim
        .requests()
        .iter()
        .filter(|r| r.step.starts_with("compensate:"))
        .map(|r| r.step.as_str())
        .collect();
    assert_eq!(undone, ["compensate:r.2.work"]);
    assert_replays(&sim);
}

#[test]
fn when_every_branch_fails_the_race_fails_with_branch_zeros_error() {
    let yaml = r#"
name: lost
version: "1"
tasks: { a: null, b: null }
steps:
  - id: r
    race:
      - steps: [{ id: x, task: a, retry: { max_attempts: 1 } }]
      - steps: [{ id: y, task: b, retry: { max_attempts: 1 } }]
"#;
    let mut sim = sim_with(yaml);
    sim.on_task("a", |_| {
        TaskOutcome::After(500, Box::new(TaskOutcome::Fail(TaskError::fatal("A", "a failed"))))
    });
    sim.on_task("b", |_| TaskOutcome::Fail(TaskError::fatal("B", "b failed")));
    sim.start("lost", "x", json!({})).unwrap();
    assert!(sim.run(1_000));
    let e = exec(&sim, "x");
    assert_eq!(e.state.status(), Status::Failed);
    assert_eq!(steps_of(&e.history, "StepFailed"), ["r.1.y", "r.0.x", "r"]);
    let error = e.state.error.as_ref().unwrap();
    assert_eq!(error.code, "A");
    assert!(
        error.message.starts_with("every branch of the race failed; branch 0:"),
        "{}",
        error.message
    );
    assert_replays(&sim);
}

fn sim_now(sim: &Sim) -> u64 {
    exec(sim, "x").state.created_at
}

#[test]
fn a_cancel_while_the_branch_runs_cancels_the_step_and_its_branch() {
    let mut sim = recover_sim(false);
    sim.on_task("refund", |_| TaskOutcome::Hang);
    sim.start("recover", "x", json!({})).unwrap();
    assert!(sim.run(1_000));
    assert!(exec(&sim, "x").state.unit("pay.on_failure.refund").is_some());
    sim.cancel("x", "enough").unwrap();
    assert!(sim.run(1_000));
    let e = exec(&sim, "x");
    assert_eq!(e.state.status(), Status::Cancelled);
    let mut cancelled = steps_of(&e.history, "StepCancelled");
    cancelled.sort();
    assert_eq!(cancelled, ["pay", "pay.on_failure.refund"]);
    // The branch's `note` succeeded and is compensated with `book`; `pay` never is.
    let undone: Vec<&str> = sim
        .requests()
        .iter()
        .filter(|r| r.step.starts_with("compensate:"))
        .map(|r| r.step.as_str())
        .collect();
    assert_eq!(undone, ["compensate:pay.on_failure.note", "compensate:book"]);
    assert_replays(&sim);
}

#[test]
fn a_changed_branch_migrates_only_before_its_step_started() {
    // `book` answering or not: `pay` failed and its branch runs, or `pay` has no unit yet.
    let plan_for = |v2: &str, book_answers: bool| {
        let mut sim = recover_sim(false);
        if !book_answers {
            sim.on_task("book", |_| TaskOutcome::Hang);
        }
        sim.on_task("refund", |_| TaskOutcome::Hang);
        sim.start("recover", "x", json!({})).unwrap();
        sim.run(100);
        let e = exec(&sim, "x");
        let branching = e.state.unit("pay.on_failure.refund").is_some();
        assert_eq!(branching, book_answers);
        orbit_engine::migrate::plan(&e.def, &def(v2), &e.state)
    };
    let v2 = RECOVER
        .replace("version: \"1\"", "version: \"2\"")
        .replace("input: \"${{ failure }}\"", "input: \"${{ failure.code }}\"");
    assert_ne!(v2, RECOVER);
    assert!(plan_for(&v2, false).is_safe());
    let plan = plan_for(&v2, true);
    assert!(!plan.is_safe(), "{plan:?}");
    let race = RACE.replace("version: \"1\"", "version: \"2\"").replace("sleep: 10m", "sleep: 5m");
    // A race that changed while it runs is not safe.
    let mut sim = sim_with(RACE);
    sim.on_task("slow", |_| TaskOutcome::Hang);
    sim.start("racer", "x", json!({})).unwrap();
    sim.run_until(sim_now(&sim) + 1_000);
    let e = exec(&sim, "x");
    let plan = orbit_engine::migrate::plan(&e.def, &def(&race), &e.state);
    assert!(!plan.is_safe(), "{plan:?}");
}
