//! Long loops continue as new by themselves (issue 29 item 2): a top-level `repeat` under a
//! small `limits.max_history_events` chains runs through `WorkflowContinuedAsNew` with a
//! resume state, each run under the limit, the iterations continuous over the runs, the
//! steps before the loop run once, and the result, compensation and replay the same as an
//! uninterrupted run's. `continue_as_new: false` opts out.

mod common;

use common::*;
use orbit_engine::event::Resume;
use orbit_engine::event::{Event, HistoryEvent, TaskError};
use orbit_engine::sim::{Sim, TaskOutcome};
use orbit_engine::Status;
use serde_json::{json, Value};

const LIMIT: usize = 150;

const LONG: &str = r#"
name: long
version: "1"
limits: { max_history_events: 150 }
tasks: { prepare: null, work: null, finish: null, undo: null }
steps:
  - id: prepare
    task: prepare
    input: "${{ input.base }}"
    compensate: { task: undo, input: "prepare" }
  - id: count
    repeat:
      steps:
        - id: work
          task: work
          input: "${{ {'n': iteration, 'base': steps.prepare.output} }}"
          compensate:
            task: undo
            input: "${{ 'work ' + string(iteration) + ' ' + string(steps.work.output) }}"
      until: "${{ output.n + 1.0 >= input.iterations }}"
      max_iterations: 100
      output: "${{ {'n': iteration, 'sum': (previous == null ? 0.0 : previous.sum) + steps.work.output} }}"
  - id: finish
    task: finish
    input: "${{ steps.count.output }}"
output: "${{ {'prepared': steps.prepare.output, 'count': steps.count.output, 'finish': steps.finish.output} }}"
"#;

/// Runs `yaml` for `iterations` iterations with the finish task's `outcome`; returns the
/// simulator (execution `x`).
fn run(yaml: &str, iterations: u64, finish: TaskOutcome) -> Sim {
    let mut sim = Sim::new();
    sim.register(def(yaml));
    sim.on_task("prepare", |r| TaskOutcome::Complete(json!(format!("prepared {}", r.input))));
    sim.on_task("work", |r| TaskOutcome::Complete(r.input["n"].clone()));
    sim.on_task("finish", move |r| match &finish {
        TaskOutcome::Complete(_) => TaskOutcome::Complete(r.input["sum"].clone()),
        other => other.clone(),
    });
    sim.on_task("undo", |_| TaskOutcome::Complete(Value::Null));
    sim.start("long", "x", json!({"base": 7, "iterations": iterations})).unwrap();
    assert!(sim.run(100_000));
    sim
}

/// Every run of execution `x`, oldest first.
fn runs(sim: &Sim) -> Vec<&Vec<HistoryEvent>> {
    let e = exec(sim, "x");
    e.archived.iter().chain(std::iter::once(&e.history)).collect()
}

fn resume_of(event: &Event) -> Option<&Resume> {
    match event {
        Event::WorkflowContinuedAsNew { resume, .. } | Event::WorkflowCreated { resume, .. } => {
            resume.as_deref()
        }
        _ => None,
    }
}

/// The units of every run's `StepSucceeded` that match `f`, in order.
fn succeeded(sim: &Sim, f: impl Fn(&str) -> bool) -> Vec<String> {
    runs(sim)
        .into_iter()
        .flatten()
        .filter_map(|h| match &h.event {
            Event::StepSucceeded { step, .. } if f(step) => Some(step.clone()),
            _ => None,
        })
        .collect()
}

fn unbounded() -> String {
    LONG.replace("limits: { max_history_events: 150 }\n", "")
}

#[test]
fn a_long_loop_chains_runs_under_the_limit_with_the_same_result() {
    let reference = run(&unbounded(), 80, TaskOutcome::Complete(Value::Null));
    let whole = exec(&reference, "x");
    assert_eq!(whole.state.status(), Status::Completed, "{:?}", whole.state.error);
    assert!(whole.archived.is_empty());
    assert!(whole.history.len() > 2 * LIMIT, "the loop must not fit one run");
    let expected = whole.state.output.clone().unwrap();
    let sum: u64 = (0..80).sum();
    assert_eq!(expected["count"]["sum"].as_f64(), Some(sum as f64), "{expected}");
    assert_eq!(expected["count"]["n"].as_f64(), Some(79.0), "{expected}");
    assert_eq!(expected["prepared"], json!("prepared 7"));

    let sim = run(LONG, 80, TaskOutcome::Complete(Value::Null));
    let e = exec(&sim, "x");
    assert_eq!(e.state.status(), Status::Completed, "{:?}", e.state.error);
    assert_eq!(e.state.output, Some(expected));
    let runs = runs(&sim);
    assert!(runs.len() >= 3, "{} runs", runs.len());
    let mut next = 0;
    for (i, history) in runs.iter().enumerate() {
        assert!(history.len() <= LIMIT, "run {} has {} events", i + 1, history.len());
        assert!(events_of(history, "LimitExceeded").is_empty());
        // Each run but the first starts from the resume the one before it ended with.
        let created = resume_of(&history[0].event);
        if i == 0 {
            assert!(created.is_none());
        } else {
            let ended = resume_of(&runs[i - 1].last().unwrap().event).expect("a resume");
            assert_eq!(created, Some(ended));
            assert_eq!(ended.repeat, "count");
            assert!(ended.iteration > next, "iterations go on: {} after {next}", ended.iteration);
            next = ended.iteration;
            assert_eq!(ended.units["prepare"].output, json!("prepared 7"));
            assert_eq!(ended.previous["n"].as_f64(), Some((next - 1) as f64));
            match &runs[i - 1].last().unwrap().event {
                Event::WorkflowContinuedAsNew { next_run, input, .. } => {
                    assert_eq!(*next_run as usize, i + 1);
                    assert_eq!(input, &json!({"base": 7, "iterations": 80}));
                }
                other => panic!("run {i} ended with {other:?}"),
            }
        }
    }
    // The iterations are continuous over the runs; the steps before the loop ran once.
    let iterations = succeeded(&sim, |s| s.starts_with("count[") && s.ends_with(']'));
    let want: Vec<String> = (0..80).map(|i| format!("count[{i}]")).collect();
    assert_eq!(iterations, want);
    let steps = |name: &str| sim.requests().iter().filter(|r| r.step == name).count();
    assert_eq!(steps("prepare"), 1);
    assert_eq!(steps("finish"), 1);
    assert_eq!(sim.requests().iter().filter(|r| r.task == "work").count(), 80);
    assert_replays(&sim);
}

#[test]
fn a_failure_in_a_later_run_compensates_the_earlier_runs_steps() {
    let failed = TaskOutcome::Fail(TaskError::fatal("BROKEN", "finish broke"));
    let sim = run(LONG, 80, failed);
    let e = exec(&sim, "x");
    assert_eq!(e.state.status(), Status::Failed);
    assert_eq!(e.state.error.as_ref().unwrap().code, "BROKEN");
    assert!(!e.archived.is_empty());
    // Every iteration's work (each seeing its own iteration and output), newest first,
    // then the step before the loop.
    let undone: Vec<String> = sim
        .requests()
        .iter()
        .filter(|r| r.task == "undo")
        .map(|r| r.input.as_str().unwrap_or_default().to_string())
        .collect();
    let mut want: Vec<String> = (0..80).rev().map(|i| format!("work {i} {i}")).collect();
    want.push("prepare".into());
    assert_eq!(undone, want);
    assert_replays(&sim);
}

#[test]
fn continue_as_new_false_keeps_one_run_that_fails_at_the_limit() {
    let yaml = LONG.replace(
        "      max_iterations: 100\n",
        "      max_iterations: 100\n      continue_as_new: false\n",
    );
    let sim = run(&yaml, 80, TaskOutcome::Complete(Value::Null));
    let e = exec(&sim, "x");
    assert!(e.archived.is_empty());
    assert_eq!(e.state.status(), Status::Failed);
    assert_eq!(e.state.error.as_ref().unwrap().code, "LIMIT_EXCEEDED");
    assert_eq!(events_of(&e.history, "LimitExceeded").len(), 1);
    assert_replays(&sim);
}

#[test]
fn the_loop_waits_for_other_open_work_before_it_continues_as_new() {
    // A slow step beside the loop: still running when the threshold is reached.
    let yaml = LONG.replace(
        "  - id: finish\n",
        "  - id: side\n    task: finish\n    input: {sum: side}\n  - id: finish\n",
    );
    let yaml = yaml.replace(
        "'finish': steps.finish.output}",
        "'finish': steps.finish.output, 'side': steps.side.output}",
    );
    let mut sim = Sim::new();
    sim.register(def(&yaml));
    sim.on_task("prepare", |_| TaskOutcome::Complete(json!("p")));
    sim.on_task("work", |r| TaskOutcome::Complete(r.input["n"].clone()));
    sim.on_task("finish", |r| match r.input["sum"].as_str() {
        Some("side") => TaskOutcome::After(5_000, Box::new(TaskOutcome::Complete(json!("slow")))),
        _ => TaskOutcome::Complete(r.input["sum"].clone()),
    });
    sim.on_task("undo", |_| TaskOutcome::Complete(Value::Null));
    sim.start("long", "x", json!({"base": 7, "iterations": 80})).unwrap();
    assert!(sim.run(100_000));
    let e = exec(&sim, "x");
    assert_eq!(e.state.status(), Status::Completed, "{:?}", e.state.error);
    assert_eq!(e.state.output.as_ref().unwrap()["side"], json!("slow"));
    let runs = runs(&sim);
    assert!(runs.len() >= 2);
    for history in &runs {
        assert!(history.len() <= LIMIT, "{} events", history.len());
    }
    // The first run ended only once the side step had succeeded (it is carried).
    let first_end = resume_of(&runs[0].last().unwrap().event).expect("a resume");
    assert_eq!(first_end.units["side"].output, json!("slow"));
    assert_eq!(sim.requests().iter().filter(|r| r.step == "side").count(), 1);
    let iterations = succeeded(&sim, |s| s.starts_with("count[") && s.ends_with(']'));
    assert_eq!(iterations.len(), 80);
    assert_replays(&sim);
}

#[test]
fn the_workflow_timeout_counts_from_the_first_run_over_the_chain() {
    // 100 iterations of 50 ms each would take 5 s; the workflow times out at 2 s, though no
    // run of the chain lasts that long by itself (about 30 iterations, 1.5 s, a run).
    let yaml = r#"
name: timed
version: "1"
timeout: 2s
limits: { max_history_events: 150 }
steps:
  - id: tick
    repeat:
      steps:
        - id: nap
          sleep: 50ms
      until: "${{ iteration >= 99.0 }}"
      max_iterations: 100
"#;
    let mut sim = Sim::new();
    sim.register(def(yaml));
    let t0 = sim.now;
    sim.start("timed", "x", json!({})).unwrap();
    assert!(sim.run(100_000));
    let e = exec(&sim, "x");
    assert_eq!(e.state.status(), Status::TimedOut, "{:?}", e.state.error);
    assert!(!e.archived.is_empty(), "the chain continued as new before the timeout");
    let ran = succeeded(&sim, |s| s.starts_with("tick[") && s.ends_with(']')).len();
    assert!((35..=40).contains(&ran), "{ran} iterations in 2 s of 50 ms naps");
    let ended = e.history.last().unwrap().timestamp_ms - t0;
    assert!((2_000..2_100).contains(&ended), "timed out {ended} ms after the start");
    assert_replays(&sim);
}
