//! One test (at least) per decider rule in SEMANTICS.md; each names its rule.

mod common;

use common::*;
use orbit_engine::event::{CompensationOutcome, Event, TaskError};
use orbit_engine::query::query;
use orbit_engine::sim::{Sim, TaskOutcome};
use orbit_engine::{State, Status};
use serde_json::{json, Value};
use std::cell::RefCell;
use std::rc::Rc;

fn ok(v: Value) -> TaskOutcome {
    TaskOutcome::Complete(v)
}

fn sim_with(yaml: &str) -> Sim {
    let mut sim = Sim::new();
    sim.register(def(yaml));
    sim
}

const DAG: &str = r#"
name: dag
version: "1"
input: { type: object, properties: { big: { type: boolean, default: false } } }
tasks:
  t: { input: { type: object, required: [n], properties: { n: { type: number } } } }
steps:
  - { id: a, task: t, input: { n: 1 } }
  - { id: b, task: t, input: { n: 2 } }
  - { id: c, task: t, input: { n: "${{ steps.a.output.n + steps.b.output.n }}" } }
  - { id: d, when: "${{ input.big }}", compute: "${{ 'big' }}" }
  - { id: e, needs: [d], compute: "${{ steps.d.output }}" }
output: "${{ {'c': steps.c.output.n, 'd': steps.d.output, 'e': steps.e.output} }}"
"#;

#[test]
fn rule1_dag_runs_independent_steps_together_and_skips_on_false_when() {
    let mut sim = sim_with(DAG);
    sim.on_task("t", |r| ok(json!({"n": r.input["n"]})));
    sim.start("dag", "x", json!({})).unwrap();
    assert!(sim.run(100));
    let e = exec(&sim, "x");
    assert_eq!(e.state.status(), Status::Completed);
    assert_eq!(e.state.output, Some(json!({"c": 3, "d": null, "e": null})));
    // a and b are offered before either finishes; c only after both.
    let order: Vec<&str> = sim.requests().iter().map(|r| r.step.as_str()).collect();
    assert_eq!(order, ["a", "b", "c"]);
    let first_two = e.history.iter().filter(
        |h| matches!(&h.event, Event::StepScheduled { step, .. } if step == "a" || step == "b"),
    );
    let stamps: Vec<u64> = first_two.map(|h| h.timestamp_ms).collect();
    assert_eq!(stamps[0], stamps[1], "independent steps are scheduled in the same batch");
    assert!(
        matches!(events_of(&e.history, "StepSkipped")[0], Event::StepSkipped { step, .. } if step == "d")
    );
    assert_replays(&sim);
}

#[test]
fn rule1_input_contract_violation_fails_the_step_before_dispatch() {
    let yaml = DAG.replace("input: { n: 1 }", "input: { m: 1 }");
    let mut sim = sim_with(&yaml);
    sim.on_task("t", |r| ok(json!({"n": r.input["n"]})));
    sim.start("dag", "x", json!({})).unwrap();
    sim.run(100);
    let e = exec(&sim, "x");
    assert_eq!(e.state.status(), Status::Failed);
    assert_eq!(e.state.error.as_ref().unwrap().code, "INPUT_CONTRACT_VIOLATION");
    assert!(sim.requests().iter().all(|r| r.step != "a"), "a was never offered");
}

const FAN: &str = r#"
name: fan
version: "1"
limits: { max_fan_out: 5 }
tasks: { sq: {} }
steps:
  - id: each
    for_each: "${{ input.items }}"
    max_concurrency: 2
    task: sq
    input: { v: "${{ item }}", i: "${{ index }}" }
output: "${{ steps.each.output }}"
"#;

#[test]
fn rule1_for_each_respects_max_concurrency_and_keeps_order() {
    let mut sim = sim_with(FAN);
    sim.on_task("sq", |r| {
        let v = r.input["v"].as_i64().unwrap();
        ok(json!(v * v))
    });
    sim.start("fan", "x", json!({"items": [1, 2, 3, 4]})).unwrap();
    sim.run(100);
    let e = exec(&sim, "x");
    assert_eq!(e.state.output, Some(json!([1, 4, 9, 16])));
    // Never more than two elements in flight: count scheduled minus resolved along history.
    let mut in_flight = 0i32;
    let mut max_in_flight = 0i32;
    for h in &e.history {
        match &h.event {
            Event::StepScheduled { step, .. } if step.starts_with("each[") => in_flight += 1,
            Event::StepSucceeded { step, .. } if step.starts_with("each[") => in_flight -= 1,
            _ => {}
        }
        max_in_flight = max_in_flight.max(in_flight);
    }
    assert_eq!(max_in_flight, 2);
    assert!(
        matches!(events_of(&e.history, "StepFanOut")[0], Event::StepFanOut { items, .. } if items.len() == 4)
    );
    assert_replays(&sim);
}

#[test]
fn rule1_fan_out_over_the_limit_fails_with_limit_exceeded() {
    let mut sim = sim_with(FAN);
    sim.on_task("sq", |_| ok(json!(0)));
    sim.start("fan", "x", json!({"items": [1, 2, 3, 4, 5, 6]})).unwrap();
    sim.run(100);
    let e = exec(&sim, "x");
    assert_eq!(e.state.status(), Status::Failed);
    assert_eq!(e.state.error.as_ref().unwrap().code, "LIMIT_EXCEEDED");
    assert!(sim.requests().is_empty());
}

const RUNAWAY: &str = r#"
name: runaway
version: "1"
queries:
  cube: "${{ input.L.all(a, input.L.all(b, input.L.all(c, true))) }}"
steps:
  - id: a
    compute: "${{ input.L.all(a, input.L.all(b, input.L.all(c, true))) }}"
"#;

#[test]
fn rule1_an_evaluation_over_budget_fails_the_step_with_expression_limit() {
    let mut sim = sim_with(RUNAWAY);
    let l: Vec<Value> = (0..1_000).map(|i| json!(i)).collect();
    sim.start("runaway", "x", json!({"L": l})).unwrap();
    sim.run(100);
    let e = exec(&sim, "x");
    assert_eq!(e.state.status(), Status::Failed);
    let error = e.state.error.as_ref().unwrap();
    assert_eq!(error.code, "EXPRESSION_LIMIT", "{}", error.message);
    let q = query(&e.def, &e.state, "cube").unwrap_err();
    assert_eq!(q.code.as_str(), "EXPRESSION_LIMIT", "{}", q.message);
    assert_replays(&sim);
    // Over a small list the same expression runs.
    let mut sim = sim_with(RUNAWAY);
    sim.start("runaway", "y", json!({"L": [1, 2, 3]})).unwrap();
    sim.run(100);
    assert_eq!(exec(&sim, "y").state.status(), Status::Completed);
}

const TIMED: &str = r#"
name: timed
version: "1"
tasks: { slow: {} }
steps:
  - id: s
    task: slow
    timeout: 2s
    queue_timeout: 1m
    retry: { max_attempts: 2, initial_interval: 1s }
"#;

#[test]
fn rule2_attempt_deadline_fails_the_attempt_with_timeout_and_retries() {
    let mut sim = sim_with(TIMED);
    let calls = Rc::new(RefCell::new(0));
    let c = calls.clone();
    sim.on_task("slow", move |_| {
        *c.borrow_mut() += 1;
        if *c.borrow() == 1 {
            TaskOutcome::Hang
        } else {
            ok(json!("done"))
        }
    });
    sim.start("timed", "x", json!({})).unwrap();
    let t0 = sim.now;
    sim.run(100);
    let e = exec(&sim, "x");
    assert_eq!(e.state.status(), Status::Completed);
    let failed = events_of(&e.history, "StepAttemptFailed");
    assert!(
        matches!(failed[0], Event::StepAttemptFailed { error, attempt: 1, .. } if error.code == "TIMEOUT")
    );
    let when =
        e.history.iter().find(|h| h.event.type_name() == "StepAttemptFailed").unwrap().timestamp_ms;
    assert_eq!(when - t0, 2000, "fails exactly at the deadline");
    assert_eq!(*calls.borrow(), 2);
    assert_replays(&sim);
}

#[test]
fn rule2_queue_timeout_fails_an_attempt_nobody_took() {
    let d = def(TIMED);
    let mut state = State::default();
    let created =
        orbit_engine::start(&d, "x", json!({}), None, None, 1, &no_limits(), None).unwrap();
    let mut events = vec![orbit_engine::HistoryEvent {
        seq: 1,
        timestamp_ms: 0,
        origin: orbit_engine::Origin::Recorded,
        event: created,
    }];
    state.apply(&events[0]);
    events.extend(orbit_engine::advance(&d, &mut state, 0, &no_limits()));
    assert_eq!(orbit_engine::next_timer(&d, &state), Some(60_000));
    let later = orbit_engine::advance(&d, &mut state, 60_000, &no_limits());
    assert!(
        matches!(&later[0].event, Event::StepAttemptFailed { error, .. } if error.code == "QUEUE_TIMEOUT")
    );
    assert!(matches!(&later[1].event, Event::RetryScheduled { next_attempt: 2, .. }));
}

const RETRY: &str = r#"
name: retry
version: "1"
tasks: { flaky: {} }
steps:
  - id: f
    task: flaky
    retry: { max_attempts: 4, initial_interval: 1s, backoff: 2.0, max_interval: 3s, non_retryable: [CARD_DECLINED] }
"#;

#[test]
fn rule3_retries_back_off_exponentially_capped_then_fail() {
    let mut sim = sim_with(RETRY);
    sim.on_task("flaky", |_| TaskOutcome::Fail(TaskError::retryable("BOOM", "again")));
    sim.start("retry", "x", json!({})).unwrap();
    sim.run(100);
    let e = exec(&sim, "x");
    let delays: Vec<u64> = events_of(&e.history, "RetryScheduled")
        .iter()
        .map(|ev| match ev {
            Event::RetryScheduled { delay_ms, .. } => *delay_ms,
            _ => 0,
        })
        .collect();
    assert_eq!(delays.len(), 3, "4 attempts = 3 retries");
    assert!(
        (900..=1000).contains(&delays[0])
            && (1800..=2000).contains(&delays[1])
            && (2700..=3000).contains(&delays[2]),
        "{delays:?}"
    );
    assert_eq!(e.state.status(), Status::Failed);
    assert_eq!(e.state.error.as_ref().unwrap().code, "BOOM");
    let keys: Vec<&str> = sim.requests().iter().map(|r| r.idempotency_key.as_str()).collect();
    assert!(keys.windows(2).all(|w| w[0] == w[1]), "idempotency key is stable across retries");
    assert_replays(&sim);
}

#[test]
fn rule3_non_retryable_codes_fail_at_once() {
    for error in
        [TaskError::retryable("CARD_DECLINED", "no"), TaskError::fatal("ANY", "worker says fatal")]
    {
        let mut sim = sim_with(RETRY);
        let e2 = error.clone();
        sim.on_task("flaky", move |_| TaskOutcome::Fail(e2.clone()));
        sim.start("retry", "x", json!({})).unwrap();
        sim.run(100);
        assert_eq!(sim.requests().len(), 1, "{error:?}");
        assert_eq!(exec(&sim, "x").state.status(), Status::Failed);
    }
}

#[test]
fn rule4_late_success_from_a_lost_attempt_is_accepted_once_then_stale() {
    let yaml = "name: s\nversion: '1'\ntasks: { t: {} }\nsteps: [ { id: a, task: t } ]\noutput: '${{ steps.a.output }}'\n";
    let mut sim = sim_with(yaml);
    let n = Rc::new(RefCell::new(0));
    let n2 = n.clone();
    sim.on_task("t", move |_| {
        *n2.borrow_mut() += 1;
        if *n2.borrow() == 1 {
            TaskOutcome::Lose
        } else {
            TaskOutcome::Hang
        }
    });
    sim.start("s", "x", json!({})).unwrap();
    sim.run(10);
    let reqs = sim.requests().to_vec();
    assert_eq!(reqs.len(), 2);
    assert!(
        reqs[1].redelivery
            && reqs[1].attempt == 1
            && reqs[1].idempotency_key == reqs[0].idempotency_key
    );
    assert!(matches!(
        events_of(&exec(&sim, "x").history, "StepAttemptUncertain")[0],
        Event::StepAttemptUncertain { .. }
    ));
    // The lost worker's late result still counts: the work happened.
    sim.command(
        "x",
        orbit_engine::Command::Complete { token: reqs[0].token.clone(), output: json!("late") },
    )
    .unwrap();
    // The redelivered attempt's result arrives after: stale, not applied twice.
    sim.command(
        "x",
        orbit_engine::Command::Complete { token: reqs[1].token.clone(), output: json!("again") },
    )
    .unwrap();
    sim.command(
        "x",
        orbit_engine::Command::Complete { token: "never-issued".into(), output: json!(1) },
    )
    .unwrap();
    sim.run(10);
    let e = exec(&sim, "x");
    assert_eq!(e.state.output, Some(json!("late")));
    assert_eq!(events_of(&e.history, "StepSucceeded").len(), 1);
    assert_eq!(events_of(&e.history, "StaleResultIgnored").len(), 2);
    assert_replays(&sim);
}

#[test]
fn rule4_a_lost_worker_is_redelivered_up_to_max_redeliveries_then_the_attempt_fails() {
    let yaml = "name: s\nversion: '1'\ntasks: { t: {} }\nsteps: [ { id: a, task: t, retry: { max_attempts: 2, initial_interval: 1s, max_redeliveries: 2 } } ]\n";
    let mut sim = sim_with(yaml);
    sim.on_task("t", |_| TaskOutcome::Lose);
    sim.start("s", "x", json!({})).unwrap();
    assert!(sim.run(100), "comes to rest");
    let reqs = sim.requests().to_vec();
    let shape: Vec<(u32, bool)> = reqs.iter().map(|r| (r.attempt, r.redelivery)).collect();
    // Each attempt: the first offer and two redeliveries; then WORKER_LOST, retried once.
    assert_eq!(
        shape,
        [(1, false), (1, true), (1, true), (2, false), (2, true), (2, true)],
        "{shape:?}"
    );
    let e = exec(&sim, "x");
    let failed = events_of(&e.history, "StepAttemptFailed");
    assert_eq!(failed.len(), 2);
    assert!(
        matches!(failed[0], Event::StepAttemptFailed { error, attempt: 1, .. } if error.code == "WORKER_LOST" && error.retryable),
        "{failed:?}"
    );
    assert_eq!(e.state.status(), Status::Failed);
    assert_eq!(e.state.error.as_ref().map(|e| e.code.as_str()), Some("WORKER_LOST"));
    assert_replays(&sim);
}

#[test]
fn rule4_a_missed_heartbeat_fails_the_attempt_retryably() {
    let yaml = "name: s\nversion: '1'\ntasks: { t: {} }\nsteps: [ { id: a, task: t, heartbeat_timeout: 2s, retry: { max_attempts: 2, initial_interval: 1s } } ]\noutput: '${{ steps.a.output }}'\n";
    let mut sim = sim_with(yaml);
    sim.on_task("t", |_| TaskOutcome::Hang);
    sim.start("s", "x", json!({})).unwrap();
    sim.run(10);
    let first = sim.requests()[0].token.clone();
    // What the frontend sends when the worker named the token in no heartbeat in time.
    let silent = orbit_engine::Command::Uncertain {
        token: first,
        reason: orbit_engine::command::HEARTBEAT_TIMEOUT.into(),
    };
    sim.command("x", silent).unwrap();
    sim.run(10);
    let e = exec(&sim, "x");
    let failed = events_of(&e.history, "StepAttemptFailed");
    assert!(
        matches!(failed[..], [Event::StepAttemptFailed { error, attempt: 1, .. }] if error.code == "HEARTBEAT_TIMEOUT" && error.retryable),
        "{failed:?}"
    );
    assert!(events_of(&e.history, "StepAttemptUncertain").is_empty());
    let reqs = sim.requests();
    assert_eq!(reqs.len(), 2, "retried as attempt 2");
    assert!(reqs[1].attempt == 2 && !reqs[1].redelivery);
    assert_replays(&sim);
}

const SIGNALS: &str = r#"
name: sig
version: "1"
signals:
  go: { type: object, required: [by], properties: { by: { type: string } } }
  note: {}
tasks: { rec: {} }
steps:
  - { id: w1, await: go }
  - { id: w2, await: go, needs: [w1] }
  - { id: timed, await: go, timeout: 5s, needs: [w2] }
output: "${{ [steps.w1.output.by, steps.w2.output.by, steps.timed.output.by] }}"
on_signal:
  note: [ { id: log, task: rec, input: "${{ event }}" } ]
"#;

#[test]
fn rule5_signals_are_buffered_and_delivered_oldest_first() {
    let mut sim = sim_with(SIGNALS);
    sim.on_task("rec", |_| ok(json!(null)));
    sim.start("sig", "x", json!({})).unwrap();
    assert_eq!(
        sim.signal("x", "go", json!({"who": 1})).unwrap_err().code.as_str(),
        "SIGNAL_PAYLOAD_INVALID"
    );
    assert_eq!(sim.signal("x", "nope", json!({})).unwrap_err().code.as_str(), "UNKNOWN_SIGNAL");
    sim.signal("x", "go", json!({"by": "ann"})).unwrap();
    sim.signal("x", "go", json!({"by": "bob"})).unwrap();
    sim.signal("x", "go", json!({"by": "cy"})).unwrap();
    sim.signal("x", "note", json!(1)).unwrap();
    sim.run(100);
    let e = exec(&sim, "x");
    assert_eq!(e.state.status(), Status::Completed);
    assert_eq!(e.state.output, Some(json!(["ann", "bob", "cy"])));
    // `note` has no await but a handler: it started an on_signal handler instance.
    let handler_inputs: Vec<&Value> = sim.requests().iter().map(|r| &r.input).collect();
    assert_eq!(handler_inputs, [&json!(1)]);
    assert_replays(&sim);
}

#[test]
fn rule5_await_timeout_fails_the_step() {
    let mut sim = sim_with(SIGNALS);
    sim.on_task("rec", |_| ok(json!(null)));
    sim.start("sig", "x", json!({})).unwrap();
    sim.run(10);
    sim.signal("x", "go", json!({"by": "a"})).unwrap();
    sim.run(10);
    sim.signal("x", "go", json!({"by": "b"})).unwrap();
    sim.run(100);
    let e = exec(&sim, "x");
    assert_eq!(e.state.status(), Status::Failed);
    assert_eq!(e.state.error.as_ref().unwrap().code, "TIMEOUT");
}

const SAGA: &str = r#"
name: saga
version: "1"
tasks: { do: {}, undo: {}, boom: {}, alert: {} }
steps:
  - { id: a, task: do, input: "a", compensate: { task: undo, input: "${{ 'undo-' + steps.a.output }}" } }
  - { id: b, needs: [a], for_each: "${{ ['x', 'y'] }}", max_concurrency: 1, task: do, input: "${{ item }}", compensate: { task: undo, input: "${{ 'undo-' + item }}" } }
  - { id: c, needs: [b], task: do, input: "c" }
  - { id: d, needs: [c], task: boom, retry: { max_attempts: 1 } }
on:
  failure: [ { id: tell, task: alert, input: "${{ failure.code + ':' + failure.message }}" } ]
"#;

#[test]
fn rule6_failure_compensates_in_reverse_success_order_then_runs_handlers() {
    let mut sim = sim_with(SAGA);
    sim.on_task("do", |r| ok(r.input.clone()));
    sim.on_task("undo", |r| ok(r.input.clone()));
    sim.on_task("boom", |_| TaskOutcome::Fail(TaskError::retryable("BROKEN", "it broke")));
    sim.on_task("alert", |r| ok(r.input.clone()));
    sim.start("saga", "x", json!({})).unwrap();
    sim.run(100);
    let e = exec(&sim, "x");
    assert_eq!(e.state.status(), Status::Failed);
    let undo: Vec<&Value> =
        sim.requests().iter().filter(|r| r.task == "undo").map(|r| &r.input).collect();
    // Success order a, b[0], b[1] (c has no compensation) → undone b[1], b[0], a; each
    // element's compensation sees its own element.
    assert_eq!(undo, [&json!("undo-y"), &json!("undo-x"), &json!("undo-a")]);
    let alert: Vec<&Value> =
        sim.requests().iter().filter(|r| r.task == "alert").map(|r| &r.input).collect();
    assert_eq!(alert, [&json!("BROKEN:it broke")]);
    let last = &e.history.last().unwrap().event;
    assert!(
        matches!(last, Event::WorkflowFailed { compensation: CompensationOutcome::Completed, error } if error.code == "BROKEN")
    );
    assert_eq!(
        types(&e.history)
            .iter()
            .filter(
                |t| ["CompensationStarted", "CompensationCompleted", "HandlersStarted"].contains(t)
            )
            .count(),
        3
    );
    assert_replays(&sim);
}

#[test]
fn rule6_cancel_cancels_in_flight_work_and_compensates() {
    let mut sim = sim_with(SAGA);
    sim.on_task("do", |r| if r.step == "c" { TaskOutcome::Hang } else { ok(r.input.clone()) });
    sim.on_task("undo", |r| ok(r.input.clone()));
    sim.start("saga", "x", json!({})).unwrap();
    sim.run_until(sim.now + 1_000);
    sim.cancel("x", "user asked").unwrap();
    assert_eq!(sim.cancel("x", "again"), Ok(()), "a second cancel is a no-op");
    sim.run(100);
    let e = exec(&sim, "x");
    assert_eq!(e.state.status(), Status::Cancelled);
    assert!(events_of(&e.history, "StepCancelled")
        .iter()
        .any(|ev| matches!(ev, Event::StepCancelled { step } if step == "c")));
    assert_eq!(sim.requests().iter().filter(|r| r.task == "undo").count(), 3);
    assert_eq!(events_of(&e.history, "CancelRequested").len(), 1);
    assert_eq!(sim.cancel("x", "late").unwrap_err().code.as_str(), "EXECUTION_FINISHED");
    assert_replays(&sim);
}

#[test]
fn rule6_compensation_failure_is_recorded_on_the_terminal_event() {
    let mut sim = sim_with(SAGA);
    sim.on_task("do", |r| ok(r.input.clone()));
    sim.on_task("undo", |r| {
        if r.input == json!("undo-x") {
            TaskOutcome::Fail(TaskError::fatal("NOPE", ""))
        } else {
            ok(json!(1))
        }
    });
    sim.on_task("boom", |_| TaskOutcome::Fail(TaskError::fatal("BROKEN", "")));
    sim.on_task("alert", |_| ok(json!(1)));
    sim.start("saga", "x", json!({})).unwrap();
    sim.run(100);
    let e = exec(&sim, "x");
    assert!(matches!(
        &e.history.last().unwrap().event,
        Event::WorkflowFailed { compensation: CompensationOutcome::Failed, .. }
    ));
    assert_eq!(
        sim.requests().iter().filter(|r| r.task == "undo").count(),
        3,
        "the others still ran"
    );
}

#[test]
fn rule6_workflow_timeout_times_out_with_handlers() {
    let yaml = "name: to\nversion: '1'\ntimeout: 10s\ntasks: { t: {}, a: {} }\nsteps: [ { id: s, task: t } ]\non: { timeout: [ { id: h, task: a } ] }\n";
    let mut sim = sim_with(yaml);
    sim.on_task("t", |_| TaskOutcome::Hang);
    sim.on_task("a", |_| ok(json!(null)));
    sim.start("to", "x", json!({})).unwrap();
    let t0 = sim.now;
    sim.run(100);
    let e = exec(&sim, "x");
    assert_eq!(e.state.status(), Status::TimedOut);
    let reached =
        e.history.iter().find(|h| h.event.type_name() == "WorkflowTimeoutReached").unwrap();
    assert_eq!(reached.timestamp_ms - t0, 10_000);
    assert_eq!(sim.requests().iter().filter(|r| r.task == "a").count(), 1);
    assert_replays(&sim);
}

#[test]
fn rule7_history_limit_fails_the_execution_but_compensation_still_runs() {
    let yaml = "name: lim\nversion: '1'\nlimits: { max_history_events: 9 }\ntasks: { t: {}, u: {} }\nsteps:\n  - { id: a, task: t, compensate: { task: u } }\n  - { id: b, needs: [a], task: t }\n  - { id: c, needs: [b], task: t }\n";
    let mut sim = sim_with(yaml);
    sim.on_task("t", |_| ok(json!(1)));
    sim.on_task("u", |_| ok(json!(1)));
    sim.start("lim", "x", json!({})).unwrap();
    sim.run(100);
    let e = exec(&sim, "x");
    assert_eq!(e.state.status(), Status::Failed);
    assert_eq!(e.state.error.as_ref().unwrap().code, "LIMIT_EXCEEDED");
    assert_eq!(events_of(&e.history, "LimitExceeded").len(), 1);
    assert_eq!(sim.requests().iter().filter(|r| r.task == "u").count(), 1);
}

#[test]
fn rule8_continue_as_new_carries_input_and_undelivered_signals() {
    let yaml = r#"
name: loop
version: "1"
signals: { ping: {} }
steps:
  - { id: next, compute: "${{ input.n + 1.0 }}" }
  - { id: again, needs: [next], when: "${{ steps.next.output < 3 }}", continue_as_new: { input: { n: "${{ steps.next.output }}" } } }
  - { id: take, needs: [again], await: ping }
output: "${{ {'n': steps.next.output, 'run': execution.run, 'ping': steps.take.output} }}"
"#;
    let mut sim = sim_with(yaml);
    sim.start("loop", "x", json!({"n": 0})).unwrap();
    sim.signal("x", "ping", json!("carried")).unwrap();
    sim.run(100);
    let e = exec(&sim, "x");
    assert_eq!(e.archived.len(), 2);
    assert_eq!(e.state.status(), Status::Completed);
    assert_eq!(e.state.output, Some(json!({"n": 3, "run": 3, "ping": "carried"})));
    assert!(
        matches!(&e.archived[0].last().unwrap().event, Event::WorkflowContinuedAsNew { next_run: 2, input, resume: None } if input == &json!({"n": 1}))
    );
    assert_replays(&sim);
}

#[test]
fn rule9_children_have_deterministic_ids_and_resolve_the_parent() {
    let parent = "name: p\nversion: '1'\nsteps:\n  - { id: kids, for_each: '${{ [1, 2] }}', workflow: c@1, input: { v: '${{ item }}' } }\noutput: '${{ steps.kids.output }}'\n";
    let child = "name: c\nversion: '1'\ntasks: { dbl: {} }\nsteps: [ { id: d, task: dbl, input: '${{ input.v }}' } ]\noutput: '${{ steps.d.output }}'\n";
    let mut sim = Sim::new();
    sim.register(def(parent)).register(def(child));
    sim.on_task("dbl", |r| ok(json!(r.input.as_i64().unwrap() * 2)));
    sim.start("p", "x", json!({})).unwrap();
    sim.run(100);
    assert_eq!(exec(&sim, "x").state.output, Some(json!([2, 4])));
    assert!(sim.execution("x/kids[0]").is_some() && sim.execution("x/kids[1]").is_some());
    assert_eq!(exec(&sim, "x/kids[0]").state.parent.as_ref().unwrap().step, "kids[0]");
    assert_replays(&sim);
}

#[test]
fn rule9_a_failed_child_fails_the_parent_and_an_aborting_parent_cancels_children() {
    let parent = "name: p\nversion: '1'\ntasks: { boom: {} }\nsteps:\n  - { id: kid, workflow: c }\n  - { id: bad, task: boom, retry: { max_attempts: 1 } }\n";
    let child = "name: c\nversion: '1'\ntasks: { slow: {} }\nsteps: [ { id: s, task: slow } ]\n";
    let mut sim = Sim::new();
    sim.register(def(parent)).register(def(child));
    sim.on_task("slow", |_| TaskOutcome::Hang);
    sim.on_task("boom", |_| TaskOutcome::Fail(TaskError::fatal("BOOM", "")));
    sim.start("p", "x", json!({})).unwrap();
    sim.run(100);
    assert_eq!(exec(&sim, "x").state.status(), Status::Failed);
    assert_eq!(exec(&sim, "x/kid").state.status(), Status::Cancelled);
    assert_replays(&sim);

    let mut sim = Sim::new();
    sim.register(def(parent)).register(def("name: c\nversion: '1'\ntasks: { t: {} }\nsteps: [ { id: s, task: t, retry: { max_attempts: 1 } } ]\n"));
    sim.on_task("t", |_| TaskOutcome::Fail(TaskError::fatal("CHILD_BROKE", "")));
    sim.on_task("boom", |_| TaskOutcome::Hang);
    sim.start("p", "x", json!({})).unwrap();
    sim.run(100);
    let e = exec(&sim, "x");
    assert_eq!(e.state.status(), Status::Failed);
    assert_eq!(e.state.error.as_ref().unwrap().code, "CHILD_FAILED");
}

#[test]
fn queries_read_state_with_the_same_expressions() {
    let yaml = "name: q\nversion: '1'\ntasks: { t: {} }\nqueries: { done: '${{ steps.a.status }}', bad: '${{ steps.a.output.nope.deeper }}' }\nsteps: [ { id: a, task: t } ]\n";
    let mut sim = sim_with(yaml);
    sim.on_task("t", |_| TaskOutcome::Hang);
    sim.start("q", "x", json!({})).unwrap();
    sim.run(2);
    let e = exec(&sim, "x");
    assert_eq!(query(&e.def, &e.state, "done").unwrap(), json!("dispatched"));
    assert_eq!(query(&e.def, &e.state, "nope").unwrap_err().code.as_str(), "UNKNOWN_QUERY");
    assert_eq!(query(&e.def, &e.state, "bad").unwrap_err().code.as_str(), "QUERY_FAILED");
}

#[test]
fn output_contract_violations_fail_without_retry() {
    let yaml = "name: oc\nversion: '1'\ntasks: { t: { output: { type: object, required: [id] } } }\nsteps: [ { id: a, task: t } ]\n";
    let mut sim = sim_with(yaml);
    sim.on_task("t", |_| ok(json!({"no": 1})));
    sim.start("oc", "x", json!({})).unwrap();
    sim.run(100);
    assert_eq!(sim.requests().len(), 1);
    assert_eq!(exec(&sim, "x").state.error.as_ref().unwrap().code, "OUTPUT_CONTRACT_VIOLATION");
}

#[test]
fn invalid_input_is_refused_at_start() {
    let mut sim = sim_with(DAG);
    assert_eq!(
        sim.start("dag", "x", json!({"big": "yes"})).unwrap_err().code.as_str(),
        "INVALID_INPUT"
    );
    assert!(sim.execution("x").is_none());
}

#[test]
fn replay_reports_the_first_divergence() {
    let mut sim = sim_with(DAG);
    sim.on_task("t", |r| ok(json!({"n": r.input["n"]})));
    sim.start("dag", "x", json!({})).unwrap();
    sim.run(100);
    let e = exec(&sim, "x");
    let changed = def(&DAG.replace("input: { n: 2 }", "input: { n: 20 }"));
    let d = orbit_engine::replay::replay(&changed, &e.history, &no_limits()).unwrap_err();
    let at = e.history.iter().position(|h| h.seq == d.seq).unwrap();
    assert!(
        matches!(&e.history[at].event, Event::StepScheduled { step, .. } if step == "b"),
        "{d:?}"
    );
}

#[test]
fn timer_limit_fails_the_step_that_would_start_one_more_including_side_by_side_starts() {
    // Three sleeps start in the same round; with `max_timers: 2` the third fails.
    let yaml = "name: nap\nversion: '1'\nlimits: { max_timers: 2 }\nsteps:\n  - { id: a, sleep: 1s }\n  - { id: b, sleep: 1s }\n  - { id: c, sleep: 1s }\n";
    let mut sim = sim_with(yaml);
    sim.start("nap", "x", json!({})).unwrap();
    sim.run(100);
    let e = exec(&sim, "x");
    assert_eq!(e.state.status(), Status::Failed);
    assert_eq!(events_of(&e.history, "TimerStarted").len(), 2);
    let error = e.state.error.as_ref().unwrap();
    assert_eq!(error.code, "LIMIT_EXCEEDED", "{error:?}");
    assert!(error.message.contains("max_timers 2"), "{error:?}");

    // The server's limit applies when stricter than the workflow's.
    let mut sim = sim_with(yaml);
    sim.limits.max_timers = Some(1);
    sim.start("nap", "y", json!({})).unwrap();
    sim.run(100);
    let e = exec(&sim, "y");
    assert_eq!(events_of(&e.history, "TimerStarted").len(), 1);
    assert!(e.state.error.as_ref().unwrap().message.contains("max_timers 1"));

    // Within the limit the run completes.
    let ok_yaml = yaml.replace("max_timers: 2", "max_timers: 3");
    let mut sim = sim_with(&ok_yaml);
    sim.start("nap", "z", json!({})).unwrap();
    sim.run(100);
    assert_eq!(exec(&sim, "z").state.status(), Status::Completed);
}
