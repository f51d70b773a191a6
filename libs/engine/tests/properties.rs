//! Property tests over the pure core: the fold is total, the decider reaches a fixpoint,
//! random DAGs with random task outcomes always end and replay (also round by round with
//! fresh rounds, as before rounds remembered anything), compensation runs in the reverse of
//! success order, and no step is offered without end.

mod common;

use common::*;
use orbit_engine::event::{Event, HistoryEvent, Origin, TaskError};
use orbit_engine::sim::{Sim, TaskOutcome};
use orbit_engine::{decide, State};
use proptest::prelude::*;
use serde_json::json;
use std::cell::RefCell;
use std::rc::Rc;

const KEYS: &[&str] =
    &["a", "b", "b[0]", "b[7]", "compensate:a", "on:failure:h", "on_signal:s@3:x", "zz", ""];

fn key() -> impl Strategy<Value = String> {
    prop::sample::select(KEYS).prop_map(str::to_string)
}

fn event() -> impl Strategy<Value = Event> {
    let err = (prop::sample::select(&["BOOM", "TIMEOUT", "CANCELLED"][..]), any::<bool>())
        .prop_map(|(c, r)| TaskError {
            code: c.into(),
            message: String::new(),
            retryable: r,
            details: None,
        });
    prop_oneof![
        Just(Event::WorkflowCreated {
            execution_id: "x".into(),
            workflow: "w".into(),
            version: "1".into(),
            definition_hash: String::new(),
            input: json!({}),
            parent: None,
            schedule_id: None,
            run: 1,
            update_ids: vec![],
            priority: None,
            memo: None,
            resume: None,
        }),
        Just(Event::WorkflowStarted {}),
        (key(), 0u32..4, any::<bool>()).prop_map(|(step, attempt, redelivery)| {
            Event::StepScheduled {
                step,
                attempt,
                input: json!(1),
                idempotency_key: "k".into(),
                redelivery,
                flow: None,
            }
        }),
        (key(), 0u32..4, prop::sample::select(&["t1", "t2"][..])).prop_map(|(step, attempt, t)| {
            Event::StepDispatched {
                step,
                attempt,
                token: t.into(),
                worker_id: "w".into(),
                session: "s".into(),
                deadline: Some(5),
            }
        }),
        key().prop_map(|step| Event::StepSucceeded { step, attempt: None, output: json!(2) }),
        (key(), err.clone()).prop_map(|(step, error)| Event::StepAttemptFailed {
            step,
            attempt: 1,
            error
        }),
        key().prop_map(|step| Event::StepAttemptUncertain { step, attempt: 1, reason: "x".into() }),
        (key(), 0u64..100).prop_map(|(step, fire_at)| Event::RetryScheduled {
            step,
            next_attempt: 2,
            delay_ms: 1,
            fire_at
        }),
        (key(), err.clone()).prop_map(|(step, error)| Event::StepFailed { step, error }),
        key().prop_map(|step| Event::StepSkipped { step, reason: String::new() }),
        key().prop_map(|step| Event::StepFanOut { step, items: vec![json!(1), json!(2)] }),
        key().prop_map(|step| Event::StepCancelled { step }),
        (key(), 0u64..100).prop_map(|(step, fire_at)| Event::TimerStarted { step, fire_at }),
        key().prop_map(|step| Event::TimerFired { step }),
        key().prop_map(|step| Event::AwaitStarted {
            step,
            signal: "s".into(),
            timeout_at: Some(9)
        }),
        Just(Event::SignalReceived { name: "s".into(), payload: json!(1) }),
        (key(), 0u64..8).prop_map(|(step, seq)| Event::SignalDelivered {
            name: "s".into(),
            seq,
            step
        }),
        Just(Event::CancelRequested { reason: "r".into() }),
        key().prop_map(|step| Event::ChildStarted {
            child_id: format!("x/{step}"),
            step,
            workflow: "c".into(),
            version: None,
            input: json!(null)
        }),
        Just(Event::WorkflowTimeoutReached {}),
        Just(Event::LimitExceeded { limit: "l".into(), message: String::new() }),
        Just(Event::CompensationStarted {
            reason: "failure".into(),
            steps: vec!["a".into(), "zz".into()]
        }),
        Just(Event::CompensationCompleted {}),
        Just(Event::HandlersStarted { outcome: "failure".into() }),
        Just(Event::WorkflowCompleted { output: json!(1) }),
        Just(Event::WorkflowContinuedAsNew { next_run: 2, input: json!(1), resume: None }),
        (
            prop::collection::vec((key(), key()), 0..3),
            prop::collection::vec(key(), 0..3),
            prop::collection::vec(key(), 0..2)
        )
            .prop_map(|(renames, cancelled, mapped)| Event::DefinitionMigrated {
                from_version: "1".into(),
                to_version: "2".into(),
                from_hash: String::new(),
                to_hash: String::new(),
                renames: renames.into_iter().collect(),
                cancelled,
                changes: vec![],
                outputs: mapped.into_iter().map(|k| (k, json!({"mapped": true}))).collect(),
            }),
    ]
}

const ANY_DEF: &str = r#"
name: w
version: "1"
timeout: 1h
signals: { s: {} }
tasks: { t: {}, u: {}, h: {} }
steps:
  - { id: a, task: t, compensate: { task: u } }
  - { id: b, for_each: "${{ [1, 2] }}", task: t, needs: [a] }
  - { id: zz, await: s }
on: { failure: [ { id: h, task: h } ] }
on_signal: { s: [ { id: x, task: t } ] }
"#;

proptest! {
    #![proptest_config(ProptestConfig { cases: 256, ..ProptestConfig::default() })]

    /// `apply` is total: any sequence of events folds without panicking, and deciding
    /// over whatever state results does not panic either.
    #[test]
    fn apply_never_panics_on_arbitrary_events(events in prop::collection::vec(event(), 0..40), now in 0u64..200) {
        let d = def(ANY_DEF);
        let mut state = State::default();
        for (i, event) in events.into_iter().enumerate() {
            state.apply(&HistoryEvent { seq: i as u64 + 1, timestamp_ms: i as u64, origin: Origin::Recorded, event });
            let _ = decide(&d, &state, now);
        }
        prop_assert!(state.event_count <= 40);
    }
}

/// A random step of a random DAG.
#[derive(Debug, Clone)]
struct GenStep {
    task: bool,
    deps: Vec<usize>,
    compensate: bool,
    attempts: u32,
    fan_out: usize,
    /// `continue_on_failure: true` (about one step in four).
    catch: bool,
    /// `on_failure` with a task step in the branch (about one step without `for_each` in
    /// four).
    branch: bool,
}

fn gen_steps() -> impl Strategy<Value = Vec<GenStep>> {
    prop::collection::vec(
        (
            any::<bool>(),
            prop::collection::vec(0usize..8, 0..3),
            any::<bool>(),
            1u32..4,
            0usize..3,
            0u8..4,
        ),
        1..7,
    )
    .prop_map(|raw| {
        raw.into_iter()
            .enumerate()
            .map(|(i, (task, deps, compensate, attempts, fan_out, catch))| GenStep {
                task,
                deps: if i == 0 {
                    vec![]
                } else {
                    let mut d: Vec<usize> = deps.into_iter().map(|d| d % i).collect();
                    d.sort_unstable();
                    d.dedup();
                    d
                },
                compensate,
                attempts,
                fan_out,
                catch: catch == 0,
                branch: catch == 1 && fan_out == 0,
            })
            .collect()
    })
}

/// The steps, then (with `race`) a race of a task against a sleep after them.
fn render(steps: &[GenStep], race: bool) -> String {
    let mut y = String::from("name: rnd\nversion: '1'\ntasks: { t: {}, undo: {} }\nsteps:\n");
    for (i, s) in steps.iter().enumerate() {
        let needs: Vec<String> = s.deps.iter().map(|d| format!("s{d}")).collect();
        y.push_str(&format!("  - id: s{i}\n    needs: [{}]\n", needs.join(", ")));
        if s.fan_out > 0 {
            let items: Vec<String> = (0..s.fan_out).map(|k| k.to_string()).collect();
            y.push_str(&format!("    for_each: \"${{{{ [{}] }}}}\"\n", items.join(", ")));
        }
        if s.catch {
            y.push_str("    continue_on_failure: true\n");
        }
        if s.task {
            y.push_str(&format!("    task: t\n    input: \"s{i}\"\n    timeout: 1s\n    retry: {{ max_attempts: {}, initial_interval: 100ms }}\n", s.attempts));
            if s.compensate {
                y.push_str(&format!("    compensate: {{ task: undo, input: \"s{i}\" }}\n"));
            }
        } else {
            y.push_str(&format!("    compute: \"${{{{ 'c{i}' }}}}\"\n"));
        }
        if s.branch {
            y.push_str(&format!("    on_failure: {{ steps: [ {{ id: f, task: t, input: \"f{i}\", timeout: 1s, retry: {{ max_attempts: 1 }} }} ] }}\n"));
        }
    }
    if race {
        y.push_str("  - id: r\n    race:\n      - steps: [ { id: a, task: t, input: ra, timeout: 1s, retry: { max_attempts: 2, initial_interval: 100ms } } ]\n      - steps: [ { id: b, sleep: 1500ms } ]\n");
    }
    y
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 96, ..ProptestConfig::default() })]

    /// Random DAGs with random outcomes (success, retryable and fatal failures, lost
    /// workers, hung attempts, a cancel) always end in a terminal status; every history
    /// replays; at rest the decider has nothing more to say (fixpoint); compensation runs
    /// in the reverse of success order (a step whose failure `continue_on_failure` caught is
    /// never compensated, nor is a step whose failure branch ran; a race's losing task or
    /// sleep is cancelled).
    #[test]
    fn random_dags_terminate_replay_and_compensate_in_reverse(
        steps in gen_steps(),
        outcomes in prop::collection::vec(0u8..5, 0..16),
        cancel_after in prop::option::of(0u64..3_000),
        race in any::<bool>(),
    ) {
        let mut sim = Sim::new();
        sim.register(def(&render(&steps, race)));
        let script = Rc::new(RefCell::new(outcomes.into_iter()));
        sim.on_task("t", move |r| match script.borrow_mut().next() {
            Some(1) => TaskOutcome::Fail(TaskError::retryable("FLAKY", "")),
            Some(2) => TaskOutcome::Fail(TaskError::fatal("FATAL", "")),
            Some(3) => TaskOutcome::Lose,
            Some(4) => TaskOutcome::Hang,
            _ => TaskOutcome::Complete(r.input.clone()),
        });
        sim.on_task("undo", |_| TaskOutcome::Complete(json!(null)));
        sim.start("rnd", "x", json!({})).unwrap();
        if let Some(after) = cancel_after {
            sim.run_until(sim.now + after);
            let _ = sim.cancel("x", "test");
        }
        prop_assert!(sim.run(10_000), "came to rest");
        let e = exec(&sim, "x");
        prop_assert!(e.state.status().is_closed(), "status {:?}", e.state.status());
        prop_assert!(decide(&e.def, &e.state, sim.now).is_empty(), "fixpoint");
        assert_replays(&sim);
        // The passes' remembering rounds decided what fresh rounds decide.
        replay_round_by_round(&e.def, &e.history);

        let succeeded: Vec<String> = e.history.iter().filter_map(|h| match &h.event {
            Event::StepSucceeded { step, .. } if steps.iter().enumerate().any(|(i, s)| s.compensate && s.task && (step == &format!("s{i}") && s.fan_out == 0 || step.starts_with(&format!("s{i}[")))) => Some(step.clone()),
            _ => None,
        }).collect();
        let compensated: Vec<String> = e.history.iter().filter_map(|h| match &h.event {
            Event::StepScheduled { step, attempt: 1, redelivery: false, .. } => step.strip_prefix("compensate:").map(str::to_string),
            _ => None,
        }).collect();
        if compensated.is_empty() {
            prop_assert!(succeeded.is_empty() || e.state.status() == orbit_engine::Status::Completed);
        } else {
            let mut expected = succeeded.clone();
            expected.reverse();
            prop_assert_eq!(compensated, expected);
        }
    }
}

/// The replay check as it was before rounds remembered anything (`decide_with`, one fresh
/// round at each decided event): the memo of `advance_within` must not change a single
/// decision.
fn replay_round_by_round(d: &orbit_definition::Definition, history: &[HistoryEvent]) {
    let mut state = State::default();
    let mut i = 0;
    while i < history.len() {
        if history[i].origin == Origin::Recorded {
            state.apply(&history[i]);
            i += 1;
            continue;
        }
        let round = orbit_engine::decide_with(d, &state, history[i].timestamp_ms, &no_limits());
        assert!(!round.is_empty(), "seq {}: nothing decided, history has more", history[i].seq);
        for expected in round {
            assert_eq!(history[i].event, expected, "seq {}", history[i].seq);
            state.apply(&history[i]);
            i += 1;
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 64, ..ProptestConfig::default() })]

    /// No step cycles without end: a worker that is always lost, always hangs (under an
    /// attempt timeout) or always fails retryably exhausts the step's redeliveries and
    /// attempts, and the run closes; a step is offered at most
    /// `max_attempts × (max_redeliveries + 1)` times.
    #[test]
    fn no_step_is_offered_without_end(
        max_attempts in 1u32..4,
        max_redeliveries in 0u32..4,
        script in prop::collection::vec(0u8..3, 1..6),
    ) {
        let yaml = format!(
            "name: loop\nversion: '1'\ntasks: {{ t: {{}} }}\nsteps:\n  - id: s\n    task: t\n    timeout: 1s\n    retry: {{ max_attempts: {max_attempts}, initial_interval: 100ms, max_redeliveries: {max_redeliveries} }}\n"
        );
        let mut sim = Sim::new();
        sim.register(def(&yaml));
        let offers = Rc::new(RefCell::new(0u32));
        let seen = offers.clone();
        let mut forever = script.into_iter().cycle();
        sim.on_task("t", move |_| {
            *seen.borrow_mut() += 1;
            match forever.next() {
                Some(0) => TaskOutcome::Lose,
                Some(1) => TaskOutcome::Hang,
                _ => TaskOutcome::Fail(TaskError::retryable("FLAKY", "")),
            }
        });
        sim.start("loop", "x", json!({})).unwrap();
        prop_assert!(sim.run(10_000), "came to rest");
        let e = exec(&sim, "x");
        prop_assert_eq!(e.state.status(), orbit_engine::Status::Failed);
        let offered = *offers.borrow();
        prop_assert!(offered <= max_attempts * (max_redeliveries + 1), "{offered} offers");
        assert_replays(&sim);
    }
}
