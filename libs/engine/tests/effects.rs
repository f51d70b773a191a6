//! `run::settle` returns, per run touched, the new events and every kind of effect they
//! cause; the simulator carries the same effects out (http steps included).

mod common;

use common::*;
use orbit_definition::{Definition, Limits};
use orbit_engine::effects::{Adapter, Capabilities, Effect, ADAPTER_DISABLED, HTTP_TASK};
use orbit_engine::event::{Event, HistoryEvent, ParentRef};
use orbit_engine::run::{effects_of, record, settle, Pass, Run};
use orbit_engine::sim::{Sim, TaskOutcome};
use orbit_engine::{accept, start, Command, State, Status};
use serde_json::{json, Value};

const NOW: u64 = 1_700_000_000_000;

const TASK: &str = "name: w\nversion: '1'\ntasks: { t: { version: '3' } }\nsteps:\n  - { id: a, task: t, input: { n: 1 } }\noutput: ${{ steps.a.output }}\n";
const HTTP: &str = "name: h\nversion: '1'\nsteps: [ { id: call, http: { method: GET, url: 'https://example.invalid/x' } } ]\n";
const SLEEP: &str = "name: s\nversion: '1'\nsteps: [ { id: nap, sleep: 5s } ]\n";
const PARENT: &str = "name: p\nversion: '1'\nsteps: [ { id: kid, workflow: w } ]\n";
const LOOP: &str = "name: l\nversion: '1'\nsteps:\n  - { id: again, when: '${{ input.n < 1 }}', continue_as_new: { input: { n: 1 } } }\n";

/// An execution of `def` created (not yet decided) with `parent`.
fn created(def: &Definition, id: &str, parent: Option<ParentRef>) -> (State, Vec<HistoryEvent>) {
    let (mut state, mut events) = (State::default(), Vec::new());
    let first = start(def, id, json!({"n": 0}), parent, None, 1, &Limits::default(), None).unwrap();
    record(&mut state, &mut events, first, NOW);
    (state, events)
}

fn pass(limits: &Limits, caps: Capabilities, now: u64) -> Pass<'_> {
    Pass { now, limits, caps }
}

/// Starts `yaml` and settles its first pass (no timer stored yet).
fn first_pass(yaml: &str, caps: Capabilities) -> (Definition, State, Vec<Run>) {
    let def = def(yaml);
    let (mut state, events) = created(&def, "x", None);
    let limits = Limits::default();
    let runs = settle(&def, &mut state, events, Some(None), &pass(&limits, caps, NOW));
    (def, state, runs)
}

/// Applies `command` and settles.
fn command(def: &Definition, state: &mut State, cmd: Command, before: Option<u64>) -> Vec<Run> {
    let limits = Limits::default();
    let (mut events, accepted) = (Vec::new(), accept(def, state, cmd, NOW, &limits).unwrap());
    for e in accepted {
        record(state, &mut events, e, NOW);
    }
    settle(def, state, events, Some(before), &pass(&limits, Capabilities::default(), NOW))
}

fn token_of(state: &State, unit: &str) -> String {
    state.unit(unit).and_then(|u| u.token.clone()).expect("dispatched unit has a token")
}

#[test]
fn a_scheduled_task_is_offered_with_its_unit_attempt_offer_task_version_and_key() {
    let (_, state, runs) = first_pass(TASK, Capabilities::default());
    assert_eq!(runs.len(), 1);
    assert_eq!(types(&runs[0].events)[0], "WorkflowCreated", "the recorded events come first");
    let [Effect::OfferTask(offer)] = runs[0].effects.as_slice() else {
        panic!("one offer and nothing else: {:?}", runs[0].effects)
    };
    assert_eq!((offer.unit.as_str(), offer.attempt, offer.offer), ("a", 1, 1));
    assert_eq!((offer.task.as_str(), offer.task_version.as_str()), ("t", "3"));
    assert_eq!(offer.input, json!({"n": 1}));
    assert_eq!(Some(&offer.idempotency_key), state.unit("a").unwrap().idempotency_key.as_ref());
}

#[test]
fn an_offer_carries_its_tasks_language_lower_case_and_any_routes_to_every_worker() {
    assert_eq!(first_offer(TASK).language, None, "no language: any worker");
    let py = "name: w\nversion: '1'\ntasks: { t: { language: Python } }\nsteps: [ { id: a, task: t } ]\n";
    assert_eq!(first_offer(py).language.as_deref(), Some("python"));
    let any =
        "name: w\nversion: '1'\ntasks: { t: { language: ANY } }\nsteps: [ { id: a, task: t } ]\n";
    assert_eq!(first_offer(any).language, None, "`any` is the same as none");
}

fn first_offer(yaml: &str) -> orbit_engine::TaskOffer {
    let (_, _, runs) = first_pass(yaml, Capabilities::default());
    match runs[0].effects.as_slice() {
        [Effect::OfferTask(offer)] => offer.clone(),
        other => panic!("one offer: {other:?}"),
    }
}

#[test]
fn a_result_withdraws_the_units_offers_and_closing_clears_nothing_never_set() {
    let (def, mut state, _) = first_pass(TASK, Capabilities::default());
    let dispatched = Command::Dispatched {
        step: "a".into(),
        token: "tk".into(),
        worker_id: "w".into(),
        session: "s".into(),
    };
    let runs = command(&def, &mut state, dispatched, None);
    assert!(runs[0].effects.is_empty(), "a dispatch causes nothing: {:?}", runs[0].effects);
    let done = Command::Complete { token: token_of(&state, "a"), output: json!(7) };
    let runs = command(&def, &mut state, done, None);
    assert_eq!(runs[0].status, Status::Completed);
    assert_eq!(runs[0].effects, vec![Effect::CancelUnit { unit: "a".into() }]);
}

#[test]
fn a_disabled_http_adapter_fails_the_attempt_as_the_owner_always_did() {
    let (_, state, runs) = first_pass(HTTP, Capabilities::default());
    let failed = events_of(&runs[0].events, "StepAttemptFailed");
    let [Event::StepAttemptFailed { step, attempt: 1, error }] = failed.as_slice() else {
        panic!("one failed attempt: {failed:?}")
    };
    assert_eq!(
        (step.as_str(), error.code.as_str(), error.retryable),
        ("call", ADAPTER_DISABLED, false)
    );
    assert_eq!(state.status(), Status::Failed);
    assert!(
        !runs[0]
            .effects
            .iter()
            .any(|e| matches!(e, Effect::OfferTask(_) | Effect::RunAdapter { .. })),
        "nothing is offered: {:?}",
        runs[0].effects
    );
    assert!(runs[0].effects.contains(&Effect::CancelUnit { unit: "call".into() }));
}

#[test]
fn an_enabled_http_adapter_gets_the_attempt_to_run() {
    let (_, state, runs) = first_pass(HTTP, Capabilities { http: true });
    assert_eq!(state.status(), Status::Running);
    assert!(events_of(&runs[0].events, "StepAttemptFailed").is_empty());
    let [Effect::RunAdapter { adapter: Adapter::Http, offer }] = runs[0].effects.as_slice() else {
        panic!("one adapter run: {:?}", runs[0].effects)
    };
    assert_eq!((offer.unit.as_str(), offer.task.as_str(), offer.attempt), ("call", HTTP_TASK, 1));
}

#[test]
fn a_child_step_starts_the_child_and_cancelling_the_parent_cancels_it() {
    let (def, mut state, runs) = first_pass(PARENT, Capabilities::default());
    let [Effect::StartChild { child_id, workflow, version: None, input, parent }] =
        runs[0].effects.as_slice()
    else {
        panic!("one child start: {:?}", runs[0].effects)
    };
    assert_eq!(workflow, "w");
    assert_eq!(input, &Value::Null);
    assert_eq!(parent, &ParentRef { execution_id: "x".into(), step: "kid".into() });
    let child_id = child_id.clone();
    let runs = command(&def, &mut state, Command::Cancel { reason: "stop".into() }, None);
    assert!(
        runs[0].effects.contains(&Effect::CancelChild {
            child_id,
            reason: "the parent is winding down".into()
        }),
        "{:?}",
        runs[0].effects
    );
    assert!(runs[0].effects.contains(&Effect::CancelUnit { unit: "kid".into() }));
}

#[test]
fn a_closing_child_notifies_its_parent_once() {
    let def = def(TASK);
    let parent = ParentRef { execution_id: "p".into(), step: "kid".into() };
    let (mut state, events) = created(&def, "c", Some(parent.clone()));
    let limits = Limits::default();
    settle(&def, &mut state, events, Some(None), &pass(&limits, Capabilities::default(), NOW));
    let dispatched = Command::Dispatched {
        step: "a".into(),
        token: "tk".into(),
        worker_id: "w".into(),
        session: "s".into(),
    };
    command(&def, &mut state, dispatched, None);
    let runs =
        command(&def, &mut state, Command::Complete { token: "tk".into(), output: json!(5) }, None);
    let notify = Effect::NotifyParent {
        parent,
        child_id: "c".into(),
        status: Status::Completed,
        output: Some(json!(5)),
        error: None,
    };
    assert_eq!(runs[0].effects.last(), Some(&notify));
    // Touching the closed child again tells the parent nothing more.
    let again = effects_of(&def, &state, Vec::new(), Some(None), Capabilities::default());
    assert!(again.effects.is_empty(), "{:?}", again.effects);
}

#[test]
fn the_timer_is_set_when_it_moves_and_cleared_when_nothing_waits() {
    let (def, mut state, runs) = first_pass(SLEEP, Capabilities::default());
    let at = NOW + 5_000;
    assert_eq!(runs[0].effects, vec![Effect::SetTimer { at }]);
    let limits = Limits::default();
    let idle = settle(
        &def,
        &mut state,
        Vec::new(),
        Some(Some(at)),
        &pass(&limits, Capabilities::default(), NOW + 1),
    );
    assert!(idle[0].effects.is_empty() && idle[0].events.is_empty(), "no change, no effect");
    let fired = settle(
        &def,
        &mut state,
        Vec::new(),
        Some(Some(at)),
        &pass(&limits, Capabilities::default(), at),
    );
    assert_eq!(fired[0].status, Status::Completed);
    // Any resolved unit withdraws its rows (none for a sleep: the store's no-op).
    assert_eq!(
        fired[0].effects,
        vec![Effect::CancelUnit { unit: "nap".into() }, Effect::ClearTimer]
    );
}

#[test]
fn continue_as_new_ends_the_run_and_opens_the_next_in_the_same_pass() {
    let (_, state, runs) = first_pass(LOOP, Capabilities::default());
    assert_eq!(runs.len(), 2);
    assert_eq!(runs[0].status, Status::ContinuedAsNew);
    assert!(runs[0].effects.contains(&Effect::ContinueAsNew { finished_run: 1, next_run: 2 }));
    assert!(matches!(
        &runs[1].events[0].event,
        Event::WorkflowCreated { run: 2, input, .. } if input == &json!({"n": 1})
    ));
    assert_eq!(runs[1].events[0].seq, 1, "the next run numbers its events afresh");
    assert_eq!((runs[1].run, runs[1].status, state.run), (2, Status::Completed, 2));
}

#[test]
fn the_simulator_refuses_http_steps_like_the_server_unless_enabled() {
    let mut sim = Sim::new();
    sim.register(def(HTTP));
    sim.on_task(HTTP_TASK, |_| TaskOutcome::Complete(json!({"status": 200})));
    sim.start("h", "off", json!({})).unwrap();
    sim.run(10);
    let e = exec(&sim, "off");
    assert_eq!(e.state.status(), Status::Failed);
    assert_eq!(e.state.units["call"].error.as_ref().unwrap().code, ADAPTER_DISABLED);
    assert!(sim.requests().is_empty(), "nothing was offered");

    sim.capabilities.http = true;
    sim.start("h", "on", json!({})).unwrap();
    sim.run(10);
    assert_eq!(exec(&sim, "on").state.status(), Status::Completed);
    let tasks: Vec<&str> = sim.requests().iter().map(|r| r.task.as_str()).collect();
    assert_eq!(tasks, [HTTP_TASK]);
    assert_replays(&sim);
}

/// Task hand-off (issue 25): the attempt offered by a pass is recorded dispatched in the
/// same run, its deadline starting now; the offer stays, and the run's timer moves to the
/// attempt's deadline. An attempt that is not waiting for a worker is not recorded.
#[test]
fn a_handed_off_offer_is_recorded_dispatched_in_its_own_run_with_the_deadline_as_timer() {
    use orbit_engine::run::{hand_off, HandedOff};
    let timed = TASK.replace("input: { n: 1 } }", "input: { n: 1 }, timeout: 30s }");
    let (def, mut state, mut runs) = first_pass(&timed, Capabilities::default());
    let limits = Limits::default();
    let run = runs.last_mut().expect("a run");
    assert_eq!(run.wake, None, "nothing is due before the attempt is dispatched");
    let offers = run.effects.iter().filter(|e| matches!(e, Effect::OfferTask(_))).count();
    let handed = |step: &str| HandedOff {
        step: step.into(),
        token: "tok-1".into(),
        worker_id: "w-1".into(),
        session: "s-1".into(),
    };
    let later = NOW + 7;
    let recorded = hand_off(
        &def,
        &mut state,
        run,
        Some(None),
        &[handed("a"), handed("nope")],
        &pass(&limits, Capabilities::default(), later),
    );
    assert_eq!(recorded, [true, false]);
    let last = run.events.last().expect("events");
    assert_eq!(last.seq, state.last_seq);
    match &last.event {
        Event::StepDispatched { step, token, worker_id, session, deadline, attempt } => {
            assert_eq!((step.as_str(), token.as_str(), *attempt), ("a", "tok-1", 1));
            assert_eq!((worker_id.as_str(), session.as_str()), ("w-1", "s-1"));
            assert_eq!(*deadline, Some(later + 30_000));
        }
        other => panic!("expected StepDispatched, got {other:?}"),
    }
    assert_eq!(state.unit("a").and_then(|u| u.worker_id.clone()).as_deref(), Some("w-1"));
    // The offer is still there (its row is queued claimed); the timer is the deadline.
    let kept = run.effects.iter().filter(|e| matches!(e, Effect::OfferTask(_))).count();
    assert_eq!(kept, offers);
    assert_eq!(run.wake, Some(later + 30_000));
    let timers: Vec<&Effect> =
        run.effects.iter().filter(|e| matches!(e, Effect::SetTimer { .. })).collect();
    assert_eq!(timers, [&Effect::SetTimer { at: later + 30_000 }]);
    // What the history says replays to the same state.
    let mut history = Vec::new();
    for r in &runs {
        history.extend(r.events.iter().cloned());
    }
    let mut all = created(&def, "x", None).1;
    all.extend(history);
    assert_eq!(State::from_history(&all).unit("a"), state.unit("a"));
}
